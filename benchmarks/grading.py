"""Course cost of grading: seconds per submission-notebook, for an honest class and for the sample mix.

Both use the course's grading (hwopt.course.grading: nbgrader autograde and feedback, one student and
assignment at a time, every kernel in the sandbox, points from the judge) in scratch course folders; the
honest classes each in a copy of one where the assignments were released once, before any clock starts:

- the honest class: N students who all submit the correct solution of every assignment; its mean seconds
  per notebook is the report's grading goal (what grading costs per submission, not per timeout);
- the sample mix: the grading demo with a class cycling through every sample student (broken ones, ones whose
  cells hang until the cell timeout, the attack samples), each submitting the assignments its mistake or
  attack is about; its time-vs-class-size series is the grading plot;
- the honest class again, graded in rounds: serially, then by one Dask worker per core on a private
  PostgreSQL gradebook; the parallel grading goal is the median speedup of the rounds, with the same scores.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import resource
import shutil
import tempfile
import threading
import time
import traceback
from pathlib import Path

from benchmarks import postgres, report
from hwopt.course.grading import cluster, course, demo, grade, samples, sandbox, settings

CELL_TIMEOUT_S = 10  # per cell in the sample mix: the samples whose loops never end cost this (default 60)
HONEST_STUDENTS = {True: 2, False: 5}  # quick, full: students in the honest class (a notebook per assignment)
# quick, full: (students per class, rounds) of the parallel goal. Full: 30 notebooks a round, so that the
# class's end (one worker finishing its last task while another has nothing left, about half a task) is a
# small share of the round, as in a real class of hundreds.
PARALLEL_ROUNDS = {True: (1, 1), False: (3, 5)}
DEMO = {settings.SECRET.name: demo.DEMO_SECRET}  # the environment of a class graded with the demo's secret


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
    """(why the grading sandbox cannot start here, None if it can; whether unsandboxed grading is allowed)."""
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


def released_course(folder: Path, db_url: str | None = None) -> Path:
    """A course folder in which every assignment is released (release/ and the gradebook, SQLite in the
    folder unless db_url): each class graded here starts from a copy of it (copy_course)."""
    course.prepare_course(folder)
    with contextlib.redirect_stdout(io.StringIO()):
        course.release(course.make_api(folder, db_url=db_url), folder, course.ASSIGNMENTS)
    return folder


def copy_course(released: Path, folder: Path) -> Path:
    """A copy of a released course folder (its SQLite gradebook included), to grade a class in."""
    return Path(shutil.copytree(released, folder, symlinks=True))


def grade_honest_class(released: Path, n: int, *, sandbox_reason: str | None = None, count_cpu: bool = True,
                       **options):
    """Grade n students who submit the correct solution of every assignment, in a copy of the released course
    folder: (rows, written, wall s, CPU s).

    options go to grade.grade_class (workers, db_url: a gradebook where the assignments are released too,
    scheduler). count_cpu=False: no CPU sampler beside the run (its /proc scans take CPU the graders would
    use), CPU s None.
    """
    folder = copy_course(released, Path(tempfile.mkdtemp(prefix="bench-grading-honest-")) / "course")
    try:
        with environment(**DEMO, **{settings.UNSANDBOXED.name: "1" if sandbox_reason else None}), \
                contextlib.redirect_stdout(io.StringIO()):
            written = samples.write_submissions(folder / "submitted",
                                                {f"student{i + 1:02d}": "correct" for i in range(n)})
            with TreeCPU() if count_cpu else contextlib.nullcontext() as cpu:
                start = time.perf_counter()
                rows = grade.grade_class(folder, log=lambda *a, **k: None, **options)
                wall_s = time.perf_counter() - start
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
    return rows, written, wall_s, cpu.seconds if count_cpu else None


def measure_honest(released: Path, *, quick: bool, n_students: int | None = None,
                   sandbox_reason: str | None = None) -> dict:
    """The grading goal's figures (report.grading_row) for a class that submits only correct solutions.

    sandbox_reason: why the sandbox cannot start here; the class (the course's own solutions, nothing
    hostile) is then graded without it and the row says so instead of claiming the sandboxed goal.
    """
    n = n_students or HONEST_STUDENTS[quick]
    if n < 1:
        raise ValueError(f"n_students must be a positive integer, got {n}")
    try:
        rows, written, wall_s, cpu_s = grade_honest_class(released, n, sandbox_reason=sandbox_reason)
    except (Exception, SystemExit) as exc:  # grading's failure is reported, not fatal (SystemExit: not ready)
        return report.grading_unavailable(_failure(exc, "the honest class run"))
    if len(rows) != len(written):
        return report.grading_unavailable(f"{len(written)} notebooks submitted, {len(rows)} graded")
    # full marks: every automatic point (written answers wait for people: no autograde gives them)
    short = [r for r in rows if r.status != "ok" or r.max_score <= 0
             or r.score != samples.FULL.get(r.assignment, r.max_score)]
    return report.grading_row([r.seconds for r in rows], wall_s, cpu_s, students=n,
                              sandbox_reason=sandbox_reason, not_full_marks=len(short))


def grading_workers() -> int:
    """The parallel run's workers: one per core this process may use."""
    return cluster.cores()


def scores(rows) -> list[tuple]:
    """What must not depend on how a class is graded: each row's student, assignment, score, status."""
    return [(r.student, r.assignment, r.score, r.max_score, r.status) for r in rows]


def measure_parallel(released: Path, serial: dict, *, quick: bool, workers: int | None = None) -> dict:
    """The parallel grading goal: an honest class graded serially (SQLite), then by `workers` Dask workers
    (default: one per core) on a private PostgreSQL gradebook, in PARALLEL_ROUNDS[quick] alternating rounds;
    the speedup is the median over rounds of serial wall time / parallel wall time.

    The cluster is started, and warmed by grading one student's class, before the first round: an
    instructor's cluster is started once per class, and the note says what that took. Every round's
    gradebook is a fresh copy of one where the assignments were released (a template database).
    released: a course folder with the assignments released (released_course); serial: the serial goal's
    row (without a verdict there, the sandbox or grading failed: no rounds).
    """
    workers = workers or grading_workers()
    if workers < 2:
        return report.parallel_grading_unavailable("one core here: nothing runs in parallel", workers)
    if serial.get("verdict") not in (report.MEETS, report.BELOW):
        why = serial.get("reason") or serial.get("note") or "no verdict"
        return report.parallel_grading_unavailable(f"the serial run it compares with has no verdict ({why})",
                                                   workers)
    reason = postgres.why_no_server()
    if reason:
        return report.parallel_grading_unavailable(reason, workers)
    students, rounds = PARALLEL_ROUNDS[quick]
    load_1min = os.getloadavg()[0]
    pairs, same = [], True
    try:
        with postgres.LocalServer() as server:
            released_course(released, server.create_database("released"))  # the rounds' template
            start = time.perf_counter()
            with environment(**DEMO), cluster.local_cluster(workers) as dask:
                on_cluster = {"db_url": server.create_database("warmup", template="released"),
                              "scheduler": dask.scheduler_address}
                problem = not_all_graded(grade_honest_class(released, 1, count_cpu=False, **on_cluster)[0])
                startup_s = time.perf_counter() - start
                for i in range(rounds):
                    if problem:
                        break
                    serial_rows, written, serial_s, _ = grade_honest_class(released, students,
                                                                           count_cpu=False)
                    on_cluster["db_url"] = server.create_database(f"round{i + 1}", template="released")
                    rows, _, parallel_s, _ = grade_honest_class(released, students, count_cpu=False,
                                                                **on_cluster)
                    pairs.append((serial_s, parallel_s))
                    same = same and scores(rows) == scores(serial_rows)
                    problem = problem or not_all_graded(rows)
    except (Exception, SystemExit) as exc:
        return report.parallel_grading_unavailable(_failure(exc, "the parallel run"), workers)
    if problem:
        return report.parallel_grading_unavailable(f"the parallel run {problem}", workers)
    note = (f"{rounds} round(s), each an honest class of {report.students_text(students)} "
            f"({len(written)} notebooks) graded serially into SQLite, then by {workers} workers of a local "
            f"Dask cluster into a private PostgreSQL gradebook; the cluster was started and warmed (one "
            f"student's class graded) before the first round, in {startup_s:.1f} s, once per class; load "
            f"average before the rounds {load_1min:.1f} on {os.cpu_count()} cores (other work on them lowers "
            f"the speedup)")
    return report.parallel_grading_row(pairs, workers=workers, notebooks=len(written), same_scores=same,
                                       note=note)


def not_all_graded(rows) -> str | None:
    """What went wrong when a graded honest class has a notebook whose status is not ok, else None."""
    failed = [r for r in rows if r.status != "ok"]
    if not failed:
        return None
    return (f"graded {len(failed)} of {len(rows)} notebooks '{failed[0].status}' "
            f"({'; '.join(failed[0].notes)[:200] or 'no note'})")


def measure_samples(*, quick: bool, class_size: int | None = None) -> tuple[dict, list[dict], list[str]]:
    """The sample mix: summary, time-vs-class-size series, notes (summary says 'not available' and why).

    Each student submits what its sample is about (samples.TARGETS: the correct and blank samples every
    assignment, the others the assignments of their mistake or attack): their other assignments would be the
    correct solution, which the honest class prices already.
    """
    every = list(samples.STUDENTS)
    n = class_size or (1 if quick else len(every))  # full: every sample student once
    folder = Path(tempfile.mkdtemp(prefix="bench-grading-samples-")) / "course"
    try:
        with environment(**DEMO), contextlib.redirect_stdout(io.StringIO()), TreeCPU() as cpu, \
                patched(demo, "cpu_seconds", cpu.now):  # getrusage misses sandboxed kernels
            figures = demo.demo(folder, n, CELL_TIMEOUT_S, targets_only=True, log=lambda *a, **k: None)
        with (folder / "grades_report.csv").open() as f:
            rows = list(csv.DictReader(f))
    except (Exception, SystemExit) as exc:
        return {"available": False, "reason": _failure(exc, "the class run")}, [], []
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
    statuses = status_counts(rows)
    summary = {
        "available": True, "class_size": figures["students"], "notebooks": figures["notebooks_submitted"],
        "total_s": figures["seconds"], "s_per_notebook": figures["seconds_per_notebook"],
        "cpu_s_per_notebook": figures.get("cpu_seconds_per_notebook"), "statuses": statuses,
        "cell_timeout_s": CELL_TIMEOUT_S, "samples_covered": len(set(samples.class_of(n).values())),
        "samples_total": len(every), "targets_only": True,
    }
    notes = [f"sample mix: `python -m hwopt.course.grading demo`, a class of {n} (student01, ...) cycling "
             f"through the {len(every)} sample students, each submitting the assignments its sample is "
             f"about, cell timeout {CELL_TIMEOUT_S} s; statuses: "
             + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))]
    if figures.get("unexpected"):
        notes.append(f"{len(figures['unexpected'])} sample notebooks NOT graded as expected, e.g. "
                     f"{figures['unexpected'][0]}")
    return summary, cumulative_by_student(rows), notes


def measure(*, quick: bool, class_size: int | None = None) -> tuple[dict, dict, list[dict], list[str], dict]:
    """(honest-class goal row, sample-mix summary, the sample mix's time-vs-class-size series, notes,
    parallel grading goal row).

    class_size: students in the sample mix (the honest class has HONEST_STUDENTS[quick]).
    """
    reason, allowed = sandbox_state()
    with tempfile.TemporaryDirectory(prefix="bench-grading-released-") as scratch:
        try:
            released = released_course(Path(scratch) / "course")
        except Exception as exc:
            why = _failure(exc, "releasing the assignments")
            return (report.grading_unavailable(why), {"available": False, "reason": why}, [], [],
                    report.parallel_grading_unavailable(why, grading_workers()))
        honest = measure_honest(released, quick=quick, sandbox_reason=reason)
        parallel = measure_parallel(released, honest, quick=quick)
    if reason and not allowed:
        why = (f"the sample mix includes attack samples and is graded only in the sandbox, which cannot "
               f"start here ({reason}); {settings.UNSANDBOXED.name}=1 grades it anyway")
        mix = {"available": False, "reason": why}
        series, notes = [], []
    else:
        mix, series, notes = measure_samples(quick=quick, class_size=class_size)
        if reason:
            notes.append(f"sample mix graded WITHOUT the sandbox ({settings.UNSANDBOXED.name}=1): {reason}")
    if honest["available"]:
        notes.insert(0, "honest class: " + honest["note"])
    if honest["available"] or mix.get("available"):
        notes.append("CPU seconds: the grader and every process it starts, sampled from /proc every "
                     "0.05 s (getrusage misses the sandboxed kernels: bubblewrap does not reap them); a "
                     "lower bound: the kernel's own work for the sandbox's namespaces belongs to no process")
    return honest, mix, series, notes, parallel
