"""Grading kernel launcher: limits, then ipykernel (`python -P -m hwopt.course.grading.kernel -f CONN`).

It runs inside the sandbox (grading.sandbox) and lowers its own limits before it becomes the kernel,
so nothing the student's code does can raise them again (raising a hard limit needs a capability the
sandbox does not have). The kernelspec starts it with -P: the kernel's working folder is the student's, and
without -P a student's own hwopt/course/grading/kernel.py there would be imported in this one's place and
skip the limits. The folder joins sys.path once the limits are set and ipykernel is imported, as in any
kernel. Each limit comes from a setting the grader passes in (grading.settings: MEMORY_GB, address space;
CPU_S, CPU seconds per process; MAX_PROCESSES, processes and threads of the sandbox's user; SCRATCH_MB, the
largest file it may write). An operating system that refuses a limit (macOS refuses RLIMIT_AS) gets a line on
stderr and the other limits. In the sandbox, the submission is read-only at SUBMISSION: the launcher copies it
into its working folder (a tmpfs) once the limits hold.

The THREADS setting sets the thread pools of the numeric libraries (OpenMP: torch; OpenBLAS: numpy; MKL)
before any of them loads. Every kernel computes with the same number of threads however the class is
graded (serially, or by workers whose environment Dask sets to one thread), so a submission's values do not
depend on it; and one thread per kernel is what a core per grading worker gives anyway.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys

from hwopt.course.grading import settings

# limit name -> (its setting, the kernel's units per setting unit)
LIMITS = {
    "RLIMIT_AS": (settings.MEMORY_GB, 2**30),  # GiB -> bytes
    "RLIMIT_CPU": (settings.CPU_S, 1),
    "RLIMIT_NPROC": (settings.MAX_PROCESSES, 1),
    "RLIMIT_FSIZE": (settings.SCRATCH_MB, 2**20),  # MiB -> bytes
}
SUBMISSION = "/run/hwopt/submission"  # the submission folder inside the sandbox, read-only (grading.sandbox)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")  # read when a library loads


def limit_value(name: str, environ=os.environ) -> int:
    """One of LIMITS in the kernel's units (bytes, seconds, processes), read from the environment."""
    if name not in LIMITS:
        raise ValueError(f"name must be one of {sorted(LIMITS)}; got {name!r}")
    setting, unit = LIMITS[name]
    return int(settings.positive_number(setting, environ) * unit)


def thread_environment(environ=os.environ) -> dict[str, str]:
    """THREAD_VARIABLES, each set to the THREADS setting: the kernel's threads per library."""
    count = settings.positive_whole_number(settings.THREADS, "threads", environ)
    return {name: str(count) for name in THREAD_VARIABLES}


def check_environment(environ=os.environ) -> None:
    """Raise ValueError naming the first grading-kernel variable (limits, threads) that is not valid."""
    for name in LIMITS:
        limit_value(name, environ)
    thread_environment(environ)


def set_limits(environ=os.environ) -> list[str]:
    """Lower this process's soft and hard limits to LIMITS; returns a note for each one the OS refused."""
    refused = []
    for name in LIMITS:
        value = limit_value(name, environ)
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (ValueError, OSError, AttributeError) as err:
            refused.append(f"{name} not set ({err})")
    return refused


# A grading kernel starts in one interpreter (the launcher's), without what grading never uses:
# - debugpy: a third of ipykernel's imports; the kernelspec turns the debugger off;
# - the command history, an SQLite file in the kernel's scratch HOME, thrown away with the sandbox.
# parent_handle=1: no "connect with --existing" banner; the sandbox ends the kernel with its grader.
KERNEL_OPTIONS = ("--IPKernelApp.parent_handle=1", "--HistoryManager.enabled=False")
BLOCKED_IMPORTS = ("debugpy",)


def launch(argv: list[str]) -> None:
    """Set the limits and threads, then become an ipykernel in this process (one interpreter start)."""
    for note in set_limits():
        print(f"hwopt grading kernel: {note}", file=sys.stderr)
    if os.path.isdir(SUBMISSION):  # sandboxed: the working folder starts as a copy of the submission
        try:
            shutil.copytree(SUBMISSION, os.getcwd(), symlinks=True, dirs_exist_ok=True)
        except (OSError, shutil.Error) as err:  # too big for the scratch space: the kernel starts without it
            print(f"hwopt grading kernel: the submission was not copied whole ({err})", file=sys.stderr)
    os.environ.update(thread_environment())  # before ipykernel, or a student's code, loads any of them
    for name in BLOCKED_IMPORTS:
        sys.modules[name] = None  # `import debugpy` raises ImportError: ipykernel then runs without it
    from ipykernel import kernelapp  # noqa: PLC0415 (only once the limits hold, as its imports run)

    # Allowed exception to "no sys.path edits": python -P kept the student's folder off the import path
    # until the limits were set (so a module of the toolkit's name there cannot replace this launcher);
    # now it joins, as in any kernel (IPython leaves it out otherwise).
    if sys.flags.safe_path:
        sys.path.insert(0, "")
    kernelapp.launch_new_instance([*KERNEL_OPTIONS, *argv])


if __name__ == "__main__":
    launch(sys.argv[1:])
