"""Grading kernel launcher: limits, then ipykernel (`python -P -m hwopt.course.grading.kernel -f CONN`).

It runs inside the sandbox (grading.sandbox) and lowers its own limits before it becomes the kernel,
so nothing the student's code does can raise them again (raising a hard limit needs a capability the
sandbox does not have). The kernelspec starts it with -P: the kernel's working folder is the student's, and
without -P a student's own hwopt/course/grading/kernel.py there would be imported in this one's place and
skip the limits. The folder joins sys.path once the limits are set and ipykernel is imported, as in any
kernel. Each limit comes from an environment variable the grader sets:
HWOPT_GRADER_MEMORY_GB (address space, GiB), HWOPT_GRADER_CPU_S (CPU seconds per process) and
HWOPT_GRADER_MAX_PROCESSES (processes and threads of the sandbox's user). An operating system that refuses a
limit (macOS refuses RLIMIT_AS) gets a line on stderr and the other limits.

HWOPT_GRADER_THREADS (default 1) sets the thread pools of the numeric libraries (OpenMP: torch; OpenBLAS:
numpy; MKL) before any of them loads. Every kernel computes with the same number of threads however the
class is graded (serially, or by workers whose environment Dask sets to one thread), so a submission's
values do not depend on it; and one thread per kernel is what a core per grading worker gives anyway.
"""

from __future__ import annotations

import math
import os
import sys

DEFAULT_MEMORY_GB = 4.0
DEFAULT_CPU_S = 600
DEFAULT_MAX_PROCESSES = 256

# limit name -> (environment variable, default, bytes per unit)
LIMITS = {
    "RLIMIT_AS": ("HWOPT_GRADER_MEMORY_GB", DEFAULT_MEMORY_GB, 2**30),
    "RLIMIT_CPU": ("HWOPT_GRADER_CPU_S", DEFAULT_CPU_S, 1),
    "RLIMIT_NPROC": ("HWOPT_GRADER_MAX_PROCESSES", DEFAULT_MAX_PROCESSES, 1),
}
THREADS_ENV = "HWOPT_GRADER_THREADS"
DEFAULT_THREADS = 1
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")  # read when a library loads


def limit_value(name: str, environ=os.environ) -> int:
    """One of LIMITS in the kernel's units (bytes, seconds, processes), read from the environment."""
    if name not in LIMITS:
        raise ValueError(f"name must be one of {sorted(LIMITS)}; got {name!r}")
    variable, default, unit = LIMITS[name]
    text = environ.get(variable, "")
    try:
        value = float(text) if text else float(default)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{variable} must be a positive finite number; got {text!r}")
    return int(value * unit)


def thread_environment(environ=os.environ) -> dict[str, str]:
    """THREAD_VARIABLES, each set to HWOPT_GRADER_THREADS (default 1): the kernel's threads per library."""
    text = environ.get(THREADS_ENV, "").strip()
    if not text:
        count = DEFAULT_THREADS
    elif text.isascii() and text.isdigit() and int(text) > 0:  # not "²", which int() refuses
        count = int(text)
    else:
        raise ValueError(f"{THREADS_ENV} must be a positive whole number of threads; got {text!r}")
    return {name: str(count) for name in THREAD_VARIABLES}


def check_environment(environ=os.environ) -> None:
    """Raise ValueError naming the first grading-kernel variable (limits, threads) that is not valid."""
    for name in LIMITS:
        limit_value(name, environ)
    thread_environment(environ)


def set_limits(environ=os.environ) -> list[str]:
    """Lower this process's soft and hard limits to LIMITS; returns a note for each one the OS refused."""
    try:
        import resource
    except ImportError:  # Windows
        return ["no resource limits on this operating system"]
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
# Together they cut a sandboxed kernel's start from about 0.46 s of CPU to 0.33 s (exec-ing a second
# interpreter, with debugpy and the history, as before). parent_handle=1: no "connect with --existing"
# banner; the sandbox ends the kernel with its grader.
KERNEL_OPTIONS = ("--IPKernelApp.parent_handle=1", "--HistoryManager.enabled=False")
BLOCKED_IMPORTS = ("debugpy",)


def launch(argv: list[str]) -> None:
    """Set the limits and threads, then become an ipykernel in this process (one interpreter start)."""
    for note in set_limits():
        print(f"hwopt grading kernel: {note}", file=sys.stderr)
    os.environ.update(thread_environment())  # before ipykernel, or a student's code, loads any of them
    for name in BLOCKED_IMPORTS:
        sys.modules[name] = None  # `import debugpy` raises ImportError: ipykernel then runs without it
    from ipykernel import kernelapp

    if sys.flags.safe_path:  # python -P kept the student's folder out until now (IPython then leaves it out)
        sys.path.insert(0, "")
    kernelapp.launch_new_instance([*KERNEL_OPTIONS, *argv])


if __name__ == "__main__":
    launch(sys.argv[1:])
