"""Grade a class: every submission gets a score or an explicit, logged failure; one never stops the others.

Runs nbgrader's own steps (generate_assignment, autograde, generate_feedback, export) through its Python
API with the repository's nbgrader_config.py, each student's assignment a task for a grading worker:

    python autograder/grade_class.py grade [--course .]        # a real class: submitted/ -> grades_report.csv
    python autograder/grade_class.py demo [--students 20]      # sample submissions, graded in artifacts/

One worker grades the tasks in order (gradebook: SQLite, the course's gradebook.db). With a gradebook server
(--db-url postgresql://..., or HWOPT_GRADER_DB_URL) the class is graded by --workers processes (default: one
per core) of a Dask cluster: a local one, or an existing one (--scheduler tcp://host:8786) whose workers
reach the course folder and the gradebook. Each worker keeps its nbgrader and the assignments' references
across tasks; every submission still gets a fresh sandboxed kernel, under that worker's own uid.

Before nbgrader sees a submission it is checked (notebook missing, not valid JSON/nbformat): such a
submission is recorded as 0 with its reason instead of failing silently. After autograde the graded copy
must exist (nbgrader deletes it on failure), and every feedback page is searched for hidden test lines.
grades_report.csv has one row per student and assignment: score, max_score, status, notes.
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import os
import re
import shutil
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import samples  # noqa: E402

from hwopt.course.grading import judge, kernel, sandbox  # noqa: E402
from hwopt.course.grading.notebooks import HIDDEN_BEGIN, HIDDEN_END  # noqa: E402

# nbgrader log lines worth a note in the report: (pattern, note)
LOG_NOTES = (
    (r"Attribute '(points|locked|cell_type)' for cell", "edited cell metadata reset"),
    (r"Restoring nbgrader metadata", "missing cell metadata restored"),
    (r"restarting the kernel", "a cell ignored the interrupt: kernel restarted"),
    (r"Timeout waiting for execute reply", "a cell timed out"),
    (r"Output capped", "output beyond the byte cap dropped"),
    (r"Kernel died|kernel died", "the kernel died"),
)
DEMO_SECRET = "grade-demo: not a secret"  # the demo's cases; a real class uses the instructor's secret
DB_URL_ENV = "HWOPT_GRADER_DB_URL"  # the gradebook's SQLAlchemy URL (nbgrader_config.py reads it too)
DASK_CONFIG = Path(__file__).resolve().parent / "dask.yaml"  # a grading cluster's Dask settings


@dataclass
class Row:
    """One student's result for one assignment."""

    student: str
    assignment: str
    score: float = 0.0
    max_score: float = 0.0
    status: str = "ok"  # ok | not submitted | missing notebook | invalid notebook | autograde failed | ...
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def gradebook_url(course: Path, db_url: str | None = None) -> str:
    """The gradebook's SQLAlchemy URL: db_url, else $HWOPT_GRADER_DB_URL, else SQLite in the course folder."""
    return db_url or os.environ.get(DB_URL_ENV) or f"sqlite:///{course / 'gradebook.db'}"


def load_config(course: Path, timeout_s: int | None = None, db_url: str | None = None):
    """The repository's nbgrader_config.py, pointed at another course folder (cell timeout, gradebook)."""
    from traitlets.config.loader import PyFileConfigLoader

    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    cfg.CourseDirectory.root = str(course)
    cfg.CourseDirectory.db_url = gradebook_url(course, db_url)
    if timeout_s is not None:
        cfg.Execute.timeout = timeout_s
    return cfg


def make_api(course: Path, timeout_s: int | None = None, db_url: str | None = None):
    """nbgrader's API object for the course folder."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    bin_dir = str(Path(sys.executable).parent)  # nbgrader creates a gradebook by running `alembic`
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    cfg = load_config(course, timeout_s, db_url)
    return NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg)


def prepare_course(course: Path, root: Path = ROOT) -> Path:
    """A course folder whose source/ is the repository's (linked); nbgrader's working folders go there."""
    course.mkdir(parents=True, exist_ok=True)
    link = course / "source"
    if course.resolve() != root.resolve() and not link.exists():
        link.symlink_to((root / "source").resolve(), target_is_directory=True)
    return course


def hidden_lines(assignment: str, root: Path = ROOT) -> set[str]:
    """Every non-trivial line inside a hidden-test region of the assignment's source notebook."""
    lines, hidden = set(), False
    for cell in samples.load("source", assignment, root).cells:
        for line in cell.source.split("\n"):
            if HIDDEN_BEGIN in line:
                hidden = True
            elif HIDDEN_END in line:
                hidden = False
            elif hidden and len(line.strip()) > 12:
                lines.add(line.strip())
    return lines


def feedback_leaks(html_text: str, secret_lines: set[str]) -> list[str]:
    """Hidden test lines that appear in a feedback page (tags stripped, entities decoded)."""
    text = html.unescape(re.sub(r"<[^>]+>", "", html_text))
    return sorted(line for line in secret_lines if line in text)


def check_notebook(path: Path) -> str | None:
    """Why a submitted notebook cannot be graded (missing, not JSON, not a notebook), or None if it can."""
    if not path.exists():
        return "missing notebook"
    try:
        nbformat.validate(nbformat.read(path, as_version=4))
    except Exception as err:  # not JSON, not UTF-8, not a notebook, an unknown nbformat version, ...
        return f"invalid notebook ({type(err).__name__}: {str(err).splitlines()[0][:80]})"
    return None


def tampering(submitted: Path, released: Path) -> list[str]:
    """Notes on locked cells a student edited or deleted (the grader restores them; the report says so)."""
    def cells(path):
        nb = nbformat.read(path, as_version=4)
        return {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}, nb

    (mine, nb), (theirs, _) = cells(submitted), cells(released)
    sources = {c.source.strip() for c in nb.cells}
    locked = {gid: c for gid, c in theirs.items() if gid and c.metadata["nbgrader"].get("locked")}
    edited = [gid for gid, c in locked.items() if gid in mine and mine[gid].source.strip() != c.source.strip()
              and c.source.strip() not in sources]
    deleted = [gid for gid, c in locked.items() if gid not in mine and c.source.strip() not in sources]
    notes = [f"edited locked cells restored: {', '.join(edited)}"] if edited else []
    return notes + ([f"deleted locked cells restored: {', '.join(deleted)}"] if deleted else [])


def record_zero(api, assignment: str, student: str) -> None:
    """A gradebook submission with no credit, so exports show the student (with 0, as the report explains)."""
    from nbgrader.api import Gradebook

    with warnings.catch_warnings(), Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        warnings.simplefilter("ignore")  # SQLAlchemy autoflush chatter inside nbgrader's add_submission
        gb.update_or_create_student(student)
        gb.update_or_create_submission(assignment, student)
        for notebook in gb.find_submission(assignment, student).notebooks:
            for grade in notebook.grades:
                grade.auto_score = 0.0
                grade.needs_manual_grade = False
        gb.db.commit()


def read_score(api, assignment: str, student: str) -> tuple[float, float]:
    """(score, max_score) of a submission from the gradebook (manual grades included)."""
    from nbgrader.api import Gradebook

    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        sub = gb.find_submission(assignment, student)
        return float(sub.score), float(sub.max_score)


def grade_one(api, course: Path, assignment: str, student: str, force: bool = True) -> Row:
    """Autograde and give feedback for one student's assignment; never raises for a bad submission."""
    row, start = Row(student, assignment), time.perf_counter()
    notebook = samples.notebook_name(assignment)
    folder = course / "submitted" / student / assignment
    log_path = course / "grading-logs" / f"{student}.{assignment}.log"
    log_path.parent.mkdir(exist_ok=True)
    problem = check_notebook(folder / f"{notebook}.ipynb") if folder.is_dir() else "not submitted"
    if problem == "not submitted":
        row.status = problem
    elif problem:
        row.status = problem.split(" (")[0]
        row.notes.append(problem)
        record_zero(api, assignment, student)
        log_path.write_text(f"not graded: {problem}\n")
    else:
        graded = course / "autograded" / student / assignment / f"{notebook}.ipynb"
        row.notes += tampering(folder / f"{notebook}.ipynb", course / "release" / assignment / graded.name)
        if force or not graded.exists():
            result = api.autograde(assignment, student, force=True, create=True)
            log_path.write_text(result.get("log", "") + result.get("error", ""))
            row.notes += [note for pattern, note in LOG_NOTES if re.search(pattern, result.get("log", ""))]
            if not (result["success"] and graded.exists()):
                row.status = "autograde failed"
                last = (result.get("error") or result.get("log") or "").strip().splitlines()[-1:]
                row.notes.append(f"see {log_path.relative_to(course)}: {' '.join(last)[:120]}")
                record_zero(api, assignment, student)
        if row.status == "ok":
            row.status = give_feedback(api, course, assignment, student, row)
    try:
        row.score, row.max_score = read_score(api, assignment, student)
    except Exception:  # not submitted: no gradebook entry
        row.max_score = max_score(api, assignment)
    row.seconds = time.perf_counter() - start
    return row


def give_feedback(api, course: Path, assignment: str, student: str, row: Row) -> str:
    """Generate the student's feedback page; delete it (and say so) if it shows any hidden test line."""
    result = api.generate_feedback(assignment, student, force=True)
    page = course / "feedback" / student / assignment / f"{samples.notebook_name(assignment)}.html"
    if not (result["success"] and page.exists()):
        row.notes.append("feedback failed")
        return "ok"
    leaks = feedback_leaks(page.read_text(), hidden_lines(assignment))
    if leaks:
        page.unlink()
        row.notes.append(f"feedback withheld: it showed hidden tests ({leaks[0][:40]}...)")
        return "feedback leak"
    return "ok"


def max_score(api, assignment: str) -> float:
    """Points available in an assignment."""
    from nbgrader.api import Gradebook

    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        return float(gb.find_assignment(assignment).max_score)


def release(api, course: Path, assignments) -> None:
    """generate_assignment for each assignment the gradebook or release/ lacks (autograde needs both)."""
    from nbgrader.api import Gradebook, MissingEntry

    for assignment in assignments:
        with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
            try:
                known = bool(gb.find_assignment(assignment).notebooks)
            except MissingEntry:
                known = False
        if not known or not (course / "release" / assignment).exists():
            result = api.generate_assignment(assignment, force=True, create=True)
            if not result["success"]:
                raise RuntimeError(f"generate_assignment {assignment} failed:\n{result.get('error')}")


def export(api, course: Path) -> Path:
    """nbgrader's standard grades.csv (what `nbgrader export` writes)."""
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin

    dest = course / "grades.csv"
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        CsvExportPlugin(to=str(dest)).export(gb)
    return dest


def write_report(rows: list[Row], path: Path) -> Path:
    """grades_report.csv: student, assignment, score, max_score, status, notes, seconds."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(rows[0])) if rows else ["student"])
        writer.writeheader()
        for row in rows:
            writer.writerow({**asdict(row), "notes": "; ".join(row.notes), "seconds": f"{row.seconds:.2f}"})
    return path


def ready_to_grade() -> str | None:
    """Stop (SystemExit naming what is missing or wrong) without a secret or a sandbox, or with a kernel
    setting (limits, threads) that is not valid; a note when unsandboxed."""
    try:
        judge.load_secret()
    except judge.MissingSecret as err:
        raise SystemExit(str(err)) from None
    try:
        kernel.check_environment()
    except ValueError as err:
        raise SystemExit(str(err)) from None
    reason = sandbox.why_unavailable()
    if reason and not sandbox.unsandboxed_allowed():
        raise SystemExit(f"{reason}. To grade without a sandbox anyway (student code then runs with your "
                         f"rights), set {sandbox.UNSANDBOXED_ENV}=1.")
    return reason


def register_students(api, students) -> None:
    """Put every student in the gradebook before grading, so that parallel workers never create one twice."""
    from nbgrader.api import Gradebook

    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        for student in students:
            gb.update_or_create_student(student)


def plan_workers(workers: int | None, db_url: str, scheduler: str | None, log=print) -> int:
    """How many grading workers: workers, default one per core; one where the gradebook takes one writer."""
    from hwopt.course.grading import gradebook

    parallel_ok = gradebook.takes_parallel_writers(db_url)
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise ValueError(f"workers must be a positive integer (or None: one per core); got {workers!r}")
    if scheduler and not parallel_ok:
        raise ValueError(f"scheduler: a cluster's workers need a gradebook server (db_url postgresql://...), "
                         f"got db_url {db_url!r}")
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        if not parallel_ok and workers > 1:
            log(f"one grading worker: the SQLite gradebook takes one writer at a time (for {workers}, "
                f"grade into a PostgreSQL server: --db-url or {DB_URL_ENV})")
            workers = 1
    elif workers > 1 and not parallel_ok:
        raise ValueError(f"workers: {workers} workers need a gradebook that takes parallel writers "
                         f"(db_url postgresql://...); SQLite does not, got db_url {db_url!r}")
    return workers


_worker_apis: dict = {}  # per worker process: the nbgrader API of each course it grades (kept across tasks)


def grade_task(course: Path, assignment: str, student: str, timeout_s: int | None, force: bool,
               db_url: str) -> Row:
    """One task of a grading worker: one student's assignment; never raises (a grader error is a row)."""
    from hwopt.course.grading import gradebook

    try:
        key = (str(course), timeout_s, db_url)
        if key not in _worker_apis:  # a worker process's first task of this course
            _worker_apis[key] = make_api(course, timeout_s, db_url)
        with gradebook.kept_connections():
            return grade_one(_worker_apis[key], course, assignment, student, force=force)
    except Exception as err:  # a bug of ours or nbgrader's: report it, grade the others
        return Row(student, assignment, status="grader error", notes=[f"{type(err).__name__}: {err}"])


def cluster_config() -> dict:
    """The Dask settings of a grading cluster (autograder/dask.yaml), dotted as dask.config.set takes them."""
    import yaml

    def dotted(tree: dict, prefix: str = ""):
        for key, value in tree.items():
            if isinstance(value, dict):
                yield from dotted(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", value

    return dict(dotted(yaml.safe_load(DASK_CONFIG.read_text())))


def local_cluster(workers: int):
    """A Dask cluster on this machine for grading: `workers` processes of one thread each."""
    import dask
    from distributed import LocalCluster

    with dask.config.set(cluster_config()):  # the workers start here and take the settings along
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                            memory_limit=0,  # kernels' memory is the sandbox's to limit
                            silence_logs=40)  # errors only


def grade_on_cluster(tasks: list[tuple[str, str]], workers: int, scheduler: str | None, done, **task):
    """Run grade_task on each (student, assignment) on a Dask cluster; done(row) as each one finishes.

    scheduler: an existing cluster's address (its scheduler and workers must import this module: run them
    with autograder/ on PYTHONPATH, workers with --nthreads 1); None starts a local one of `workers`.
    """
    import contextlib

    from distributed import Client, as_completed

    with contextlib.ExitStack() as stack:
        cluster = scheduler or stack.enter_context(local_cluster(workers))
        client = stack.enter_context(Client(cluster))
        futures = {client.submit(grade_task, assignment=a, student=s, pure=False, **task): (s, a)
                   for s, a in tasks}
        for future in as_completed(futures):
            student, assignment = futures[future]
            try:
                done(future.result())
            except Exception as err:  # the worker died under the task (Dask gave up retrying it)
                done(Row(student, assignment, status="grader error", notes=[f"{type(err).__name__}: {err}"]))


def grade_class(course: Path, assignments=samples.ASSIGNMENTS, timeout_s: int | None = None,
                force: bool = True, log=print, workers: int | None = None, db_url: str | None = None,
                scheduler: str | None = None) -> list[Row]:
    """Grade every student folder in course/submitted for each assignment; write the report and grades.csv.

    workers: grading processes (default: one per core where the gradebook takes parallel writers, else 1);
    db_url: the gradebook (default gradebook_url's); scheduler: an existing Dask cluster's address.
    """
    from hwopt.course.grading import gradebook

    unsandboxed = ready_to_grade()
    db_url = gradebook_url(course, db_url)
    workers = plan_workers(workers, db_url, scheduler, log)
    with gradebook.kept_connections():  # one engine per gradebook for the whole class
        api = make_api(course, timeout_s, db_url)
        release(api, course, assignments)
        submitted = course / "submitted"
        students = sorted(p.name for p in submitted.iterdir() if p.is_dir()) if submitted.is_dir() else []
        if not students:
            log(f"no submissions in {submitted} (run nbgrader zip_collect or collect first)")
        register_students(api, students)
        tasks = [(student, assignment) for student in students for assignment in assignments]
        graded: dict[tuple[str, str], Row] = {}

        def done(row: Row) -> None:
            if unsandboxed and row.status != "not submitted":
                row.notes.append(f"graded WITHOUT a sandbox ({unsandboxed})")
            graded[row.student, row.assignment] = row
            log(f"{row.student:>14} {row.assignment:<20} {row.score:5.1f}/{row.max_score:<5.1f} "
                f"{row.status:<17} {'; '.join(row.notes)}")

        task = {"course": course, "timeout_s": timeout_s, "force": force, "db_url": db_url}
        if workers == 1 and not scheduler:
            _worker_apis[str(course), timeout_s, db_url] = api  # this process is the one worker
            for student, assignment in tasks:
                done(grade_task(assignment=assignment, student=student, **task))
        elif tasks:
            grade_on_cluster(tasks, workers, scheduler, done, **task)
        rows = [graded[t] for t in tasks]  # the report's order, whoever graded what first
        write_report(rows, course / "grades_report.csv")
        export(api, course)
        return rows


def cpu_seconds() -> float:
    """CPU time of this process and its reaped children (sandboxed kernels are not among them)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def demo(course: Path, n_students: int | None = None, timeout_s: int | None = None,
         targets_only: bool = False, log=print, workers: int | None = None,
         db_url: str | None = None) -> dict:
    """Grade the sample students (or a class of n_students cycling through them); return timing figures.

    Every student submits every assignment unless targets_only (each sample only what it is about).
    """
    demo_secret = judge.SECRET_ENV not in os.environ
    if demo_secret:  # for this run only: a real class graded later in this process uses the real secret
        os.environ[judge.SECRET_ENV] = DEMO_SECRET
    try:
        return _demo(course, n_students, timeout_s, targets_only, log, workers, db_url)
    finally:
        if demo_secret:
            os.environ.pop(judge.SECRET_ENV, None)


def _demo(course: Path, n_students: int | None, timeout_s: int | None, targets_only: bool, log,
          workers: int | None, db_url: str | None) -> dict:
    if course.exists():
        shutil.rmtree(course)
    prepare_course(course)
    api = make_api(course, timeout_s, db_url)
    release(api, course, samples.ASSIGNMENTS)
    students = samples.class_of(n_students) if n_students else None
    written = samples.write_submissions(course / "submitted", students, targets_only, root=ROOT)
    start, cpu_start = time.perf_counter(), cpu_seconds()
    rows = grade_class(course, timeout_s=timeout_s, log=log, workers=workers, db_url=db_url)
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
    n = max(1, len(written))
    figures = {"students": len({r.student for r in rows}), "notebooks_submitted": len(written), "rows": rows,
               "seconds": round(seconds, 1), "seconds_per_notebook": round(seconds / n, 2),
               "cpu_seconds_per_notebook": round(cpu / n, 2), "report": str(course / "grades_report.csv")}
    log(json.dumps({k: v for k, v in figures.items() if k != "rows"}))
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade course/submitted (a real class)")
    g.add_argument("--course", type=Path, default=ROOT)
    g.add_argument("--no-force", action="store_true", help="skip submissions already autograded")
    d = sub.add_parser("demo", help="grade the sample submissions in a scratch course folder")
    d.add_argument("--course", type=Path, default=ROOT / "artifacts" / "grading-demo")
    d.add_argument("--students", type=int, default=None, help="class size (cycles through the samples)")
    g.add_argument("--scheduler", default=None, help="an existing Dask cluster's address (tcp://host:8786)")
    for p in (g, d):
        p.add_argument("--timeout", type=int, default=None, help="seconds per cell (default: config)")
        p.add_argument("--workers", type=int, default=None,
                       help="grading processes (default: one per core with a gradebook server, else 1)")
        p.add_argument("--db-url", default=None, help=f"the gradebook's SQLAlchemy URL (default: "
                       f"${DB_URL_ENV}, else SQLite in the course folder; parallel workers need postgresql://)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo(args.course.resolve(), args.students, args.timeout, workers=args.workers, db_url=args.db_url)
        return 0
    rows = grade_class(args.course.resolve(), timeout_s=args.timeout, force=not args.no_force,
                       workers=args.workers, db_url=args.db_url, scheduler=args.scheduler)
    return 0 if all(r.status in ("ok", "not submitted") for r in rows) else 1


if __name__ == "__main__":
    import grade_class  # this file as a module of its name, so that cluster workers find grade_task in it

    raise SystemExit(grade_class.main())
