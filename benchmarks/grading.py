"""Course cost of grading: seconds per submission-notebook, for an honest class and for the sample mix.

Both use the grading kit (autograder/grade_class.py: nbgrader autograde and feedback, one student and
assignment at a time, every kernel in the kit's sandbox, points from the judge) in scratch course folders:

- the honest class: N students who all submit the correct solution of every assignment; its mean seconds
  per notebook is the report's grading goal (what grading costs per submission, not per timeout);
- the sample mix: the kit's `demo` with a class cycling through every sample student (broken ones, ones whose
  cells hang until the cell timeout, the attack samples); its time-vs-class-size series is the grading plot;
- the honest class again, graded in parallel by one Dask worker per core on a private PostgreSQL gradebook:
  the parallel grading goal is its speedup over the serial run, with the same scores.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import io
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from benchmarks import report

ROOT = Path(__file__).resolve().parents[1]
GRADE_CLASS = ROOT / "autograder" / "grade_class.py"
CELL_TIMEOUT_S = 10  # per cell in the sample mix: the samples whose loops never end cost this (the kit's: 60)
HONEST_STUDENTS = {True: 2, False: 5}  # quick, full: students in the honest class (4 notebooks each)
SECRET_ENV = "HWOPT_GRADER_SECRET"  # the kit's judge.SECRET_ENV, for when the kit is not importable
UNSANDBOXED_ENV = "HWOPT_GRADER_UNSANDBOXED"  # the kit's sandbox.UNSANDBOXED_ENV
KIT_NEEDS = ("demo", "grade_class", "prepare_course", "make_api", "release", "samples", "DEMO_SECRET")


def load_grade_class(path: Path | None = None):
    """The grading kit's grade_class module, imported from its file; ImportError when it is not there."""
    path = Path(path or GRADE_CLASS)
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    if not path.is_file():
        raise ImportError(f"{shown} is not in the repository")
    spec = importlib.util.spec_from_file_location("grade_class", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    missing = [name for name in KIT_NEEDS if not hasattr(module, name)]
    if missing:
        raise ImportError(f"{shown} has no {', '.join(missing)}")
    return module


@contextlib.contextmanager
def environment(**values: str | None):
    """Set each variable whose value is not None for the block, only where it is unset; restore afterwards."""
    added = [k for k, v in values.items() if v is not None and k not in os.environ]
    for k in added:
        os.environ[k] = values[k]
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


@contextlib.contextmanager
def patched(owner, name: str, value):
    """owner.name = value for the block (where owner has such an attribute), restored afterwards."""
    if not hasattr(owner, name):
        yield
        return
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


def sandbox_state() -> tuple[str | None, bool]:
    """(why the kit's sandbox cannot start here, None if it can; whether unsandboxed grading is allowed)."""
    try:
        from hwopt.course.grading import sandbox
    except ImportError as exc:
        return f"hwopt.course.grading.sandbox is not importable ({exc})", False
    return sandbox.why_unavailable(), sandbox.unsandboxed_allowed()


def parse_proc_stat(text: str) -> tuple[int, int, int, int]:
    """(pid, ppid, utime + stime in clock ticks, start time in ticks) from a /proc/<pid>/stat line."""
    head, _, rest = text.rpartition(")")  # the command name may hold spaces and brackets
    fields = rest.split()
    if not head or len(fields) < 20:
        raise ValueError(f"not a /proc/<pid>/stat line: {text[:80]!r}")
    return int(head.split(" (", 1)[0]), int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19])


def grow_tree(known: dict[tuple[int, int], int], procs: list[tuple[int, int, int, int]],
              root: int) -> dict[tuple[int, int], int]:
    """Add to known ({(pid, start): cpu ticks}) every process in procs descending from root or from known.

    A process stays known after its parent dies and it is reparented (bubblewrap's inner init is).
    """
    parent = {(pid, start): ppid for pid, ppid, _, start in procs}
    cpu = {(pid, start): ticks for pid, _, ticks, start in procs}
    alive = {pid for pid, start in known if (pid, start) in parent}  # a reused pid is another process
    changed = True
    while changed:  # children before parents in the listing: repeat until nothing new joins
        changed = False
        for key in parent.keys() - known.keys():
            if parent[key] == root or parent[key] in alive:
                known[key] = cpu[key]
                alive.add(key[0])
                changed = True
    for key in known.keys() & cpu.keys():
        known[key] = max(known[key], cpu[key])
    return known


class TreeCPU:
    """CPU seconds of this process and every process it starts, sandboxed kernels included.

    getrusage(RUSAGE_CHILDREN) misses a sandboxed kernel: bubblewrap's outer process exits without reaping
    its inner init, so the kernel's time never reaches the grader. So the descendants are sampled from
    /proc every interval_s (a process's last interval before it exits is missed); the sampler thread's own
    CPU is not counted. `now()` is the running total since the block began; `seconds` the final one.
    """

    def __init__(self, interval_s: float = 0.05):
        self.interval_s, self.known = interval_s, {}
        self._lock, self._stop, self._thread = threading.Lock(), threading.Event(), None
        self._sampler_s, self._self0, self.seconds = 0.0, 0.0, None
        self._tick, self._root = os.sysconf("SC_CLK_TCK"), os.getpid()

    def _scan(self) -> None:
        procs = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    with open(f"/proc/{entry.name}/stat") as f:
                        procs.append(parse_proc_stat(f.read()))
                except (OSError, ValueError):  # gone meanwhile
                    pass
        with self._lock:
            grow_tree(self.known, procs, self._root)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._scan()
        self._sampler_s = time.thread_time()

    @staticmethod
    def _self_s() -> float:
        import resource

        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def now(self) -> float:
        """CPU seconds so far: this process (less the sampler thread) and its descendants."""
        self._scan()
        thread = self._thread
        sampler = (time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
                   if thread is not None and thread.is_alive() else self._sampler_s)
        with self._lock:
            children = sum(self.known.values()) / self._tick
        return self._self_s() - self._self0 - sampler + children

    def __enter__(self):
        self._self0 = self._self_s()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.seconds = self.now()


def cumulative_by_student(rows: list[dict]) -> list[dict]:
    """Grading time of the first k students, k = 1..n, from grades_report.csv rows (student, seconds)."""
    per_student: dict[str, list[float]] = {}
    for r in rows:
        per_student.setdefault(r["student"], []).append(float(r["seconds"]))
    series, total, notebooks = [], 0.0, 0
    for k, (_, seconds) in enumerate(per_student.items(), start=1):
        total += sum(seconds)
        notebooks += len(seconds)
        series.append({"class_size": k, "notebooks": notebooks, "total_s": total,
                       "s_per_notebook": total / notebooks})
    return series


def status_counts(rows: list[dict]) -> dict[str, int]:
    """How many rows have each status."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return counts


def _failure(exc: BaseException, what: str) -> str:
    last = traceback.format_exception_only(exc)[-1].strip() if isinstance(exc, Exception) else str(exc)
    return f"{what} failed: {last[:200]}"


def grade_honest_class(kit, n: int, *, sandbox_reason: str | None = None, **options):
    """Grade n students who submit the correct solution of every assignment: (rows, written, wall s, CPU s).

    options go to the kit's grade_class (workers, db_url); generate_assignment runs before the clock starts.
    """
    course = Path(tempfile.mkdtemp(prefix="bench-grading-honest-")) / "course"
    try:
        with environment(**{SECRET_ENV: kit.DEMO_SECRET, UNSANDBOXED_ENV: "1" if sandbox_reason else None}), \
                contextlib.redirect_stdout(io.StringIO()):
            kit.prepare_course(course)
            server = {"db_url": options["db_url"]} if "db_url" in options else {}
            api = kit.make_api(course, **server)
            kit.release(api, course, kit.samples.ASSIGNMENTS)
            written = kit.samples.write_submissions(
                course / "submitted", {f"student{i + 1:02d}": "correct" for i in range(n)}, root=kit.ROOT)
            with TreeCPU() as cpu:
                start = time.perf_counter()
                rows = kit.grade_class(course, log=lambda *a, **k: None, **options)
                wall_s = time.perf_counter() - start
    finally:
        shutil.rmtree(course.parent, ignore_errors=True)
    return rows, written, wall_s, cpu.seconds


def measure_honest(kit, *, quick: bool, n_students: int | None = None,
                   sandbox_reason: str | None = None, graded: list | None = None) -> dict:
    """The grading goal's figures (report.grading_row) for a class that submits only correct solutions.

    sandbox_reason: why the sandbox cannot start here; the class (the course's own solutions, nothing
    hostile) is then graded without it and the row says so instead of claiming the sandboxed goal.
    graded: a list that receives the graded rows (the parallel run compares its scores with them).
    """
    n = n_students or HONEST_STUDENTS[quick]
    if n < 1:
        raise ValueError(f"n_students must be a positive integer, got {n}")
    try:
        rows, written, wall_s, cpu_s = grade_honest_class(kit, n, sandbox_reason=sandbox_reason)
    except (Exception, SystemExit) as exc:  # the kit's failure is reported, not fatal (SystemExit: not ready)
        return report.grading_unavailable(_failure(exc, "the honest class run"))
    if len(rows) != len(written):
        return report.grading_unavailable(f"{len(written)} notebooks submitted, {len(rows)} graded")
    if graded is not None:
        graded.extend(rows)
    short = [r for r in rows if r.status != "ok" or r.score != r.max_score or r.max_score <= 0]
    return report.grading_row([r.seconds for r in rows], wall_s, cpu_s, students=n,
                              sandbox_reason=sandbox_reason, not_full_marks=len(short))


def grading_workers() -> int:
    """The parallel run's workers: one per core this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def scores(rows) -> list[tuple]:
    """What must not depend on how a class is graded: each row's student, assignment, score, status."""
    return [(r.student, r.assignment, r.score, r.max_score, r.status) for r in rows]


def measure_parallel(kit, serial: dict, serial_rows: list, *, workers: int | None = None) -> dict:
    """The parallel grading goal: the serial run's honest class graded by `workers` Dask workers (default:
    one per core) on a private PostgreSQL gradebook; speedup = serial wall time / parallel wall time."""
    workers = workers or grading_workers()
    if workers < 2:
        return report.parallel_grading_unavailable("one core here: nothing runs in parallel", workers)
    if serial.get("verdict") not in (report.MEETS, report.BELOW):
        why = serial.get("reason") or serial.get("note") or "no verdict"
        return report.parallel_grading_unavailable(f"the serial run it compares with has no verdict ({why})",
                                                   workers)
    try:
        from hwopt.course.grading import gradebook
    except ImportError as exc:
        return report.parallel_grading_unavailable(f"hwopt.course.grading is not importable ({exc})", workers)
    reason = gradebook.why_no_server()
    if reason:
        return report.parallel_grading_unavailable(reason, workers)
    load_1min = os.getloadavg()[0]
    try:
        with gradebook.LocalServer() as server:
            rows, written, wall_s, cpu_s = grade_honest_class(kit, serial["students"], workers=workers,
                                                              db_url=server.url)
    except (Exception, SystemExit) as exc:
        return report.parallel_grading_unavailable(_failure(exc, "the parallel run"), workers)
    cpu_per_nb = cpu_s / len(written)
    note = (f"the honest class above ({serial['students']} students, {len(written)} notebooks) graded "
            f"again by {workers} workers of a local Dask cluster (started inside the timed run) into a "
            f"private PostgreSQL gradebook, against the serial run into SQLite; CPU {cpu_per_nb:.2f} s "
            f"per notebook; one pair of runs, not interleaved; load average before the run {load_1min:.1f} "
            f"on {os.cpu_count()} cores (other work on them lowers the speedup)")
    return report.parallel_grading_row(serial["total_s"], wall_s, workers=workers, notebooks=len(written),
                                       same_scores=scores(rows) == scores(serial_rows), note=note)


def measure_samples(kit, *, quick: bool, class_size: int | None = None) -> tuple[dict, list[dict], list[str]]:
    """The sample mix: summary, time-vs-class-size series, notes (summary says 'not available' and why)."""
    every = list(kit.samples.STUDENTS)
    n = class_size or (1 if quick else len(every))  # full: every sample student once
    course = Path(tempfile.mkdtemp(prefix="bench-grading-samples-")) / "course"
    try:
        with environment(**{SECRET_ENV: kit.DEMO_SECRET}), contextlib.redirect_stdout(io.StringIO()), \
                TreeCPU() as cpu, patched(kit, "cpu_seconds", cpu.now):  # the kit's misses sandboxed kernels
            figures = kit.demo(course, n, CELL_TIMEOUT_S, log=lambda *a, **k: None)
        with (course / "grades_report.csv").open() as f:
            rows = list(csv.DictReader(f))
    except (Exception, SystemExit) as exc:
        return {"available": False, "reason": _failure(exc, "the class run")}, [], []
    finally:
        shutil.rmtree(course.parent, ignore_errors=True)
    statuses = status_counts(rows)
    summary = {
        "available": True, "class_size": figures["students"], "notebooks": figures["notebooks_submitted"],
        "total_s": figures["seconds"], "s_per_notebook": figures["seconds_per_notebook"],
        "cpu_s_per_notebook": figures.get("cpu_seconds_per_notebook"), "statuses": statuses,
        "cell_timeout_s": CELL_TIMEOUT_S, "samples_covered": len(set(kit.samples.class_of(n).values())),
        "samples_total": len(every),
    }
    notes = [f"sample mix: autograder/grade_class.py demo, a class of {n} (student01, ...) cycling through "
             f"the {len(every)} sample students, cell timeout {CELL_TIMEOUT_S} s; statuses: "
             + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))]
    return summary, cumulative_by_student(rows), notes


def measure(*, quick: bool, class_size: int | None = None) -> tuple[dict, dict, list[dict], list[str], dict]:
    """(honest-class goal row, sample-mix summary, the sample mix's time-vs-class-size series, notes,
    parallel grading goal row).

    class_size: students in the sample mix (the honest class has HONEST_STUDENTS[quick]).
    """
    try:
        kit = load_grade_class()
    except ImportError as exc:
        return (report.grading_unavailable(str(exc)), {"available": False, "reason": str(exc)}, [], [],
                report.parallel_grading_unavailable(str(exc), grading_workers()))
    reason, allowed = sandbox_state()
    serial_rows: list = []
    honest = measure_honest(kit, quick=quick, sandbox_reason=reason, graded=serial_rows)
    parallel = measure_parallel(kit, honest, serial_rows)
    if reason and not allowed:
        why = (f"the sample mix includes attack samples and is graded only in the sandbox, which cannot "
               f"start here ({reason}); {UNSANDBOXED_ENV}=1 grades it anyway")
        samples = {"available": False, "reason": why}
        series, notes = [], []
    else:
        samples, series, notes = measure_samples(kit, quick=quick, class_size=class_size)
        if reason:
            notes.append(f"sample mix graded WITHOUT the sandbox ({UNSANDBOXED_ENV}=1): {reason}")
    if honest["available"]:
        notes.insert(0, "honest class: " + honest["note"])
    if honest["available"] or samples.get("available"):
        notes.append("CPU seconds: the grader and every process it starts, sampled from /proc every "
                     "0.05 s (getrusage misses the sandboxed kernels: bubblewrap does not reap them); a "
                     "lower bound: the kernel's own work for the sandbox's namespaces belongs to no process")
    return honest, samples, series, notes, parallel
