"""Grade a class: every submission gets a score or an explicit, logged failure; one never stops the others.

nbgrader's own steps (generate_assignment, autograde, generate_feedback, export) run through its Python API
with the repository's nbgrader_config.py, each student's assignment a task for a grading worker. One worker
grades the tasks in order (gradebook: SQLite, the course's gradebook.db). With a gradebook server (a
postgresql:// db_url, or the DB_URL setting) the class is graded by several worker processes of a Dask
cluster (grading.cluster). Each worker keeps its nbgrader and the assignments' references across tasks;
every submission still gets a fresh sandboxed kernel, under that worker's own uid.

Around nbgrader, each submission is checked first (grading.intake: only folders and regular files;
grading.submission: a valid notebook) and its feedback after; after autograde the graded copy must exist
(nbgrader deletes it on failure). grades_report.csv has one row per student and assignment: score (late
penalty taken), max_score, status, notes, the lateness columns (grading.deadlines) and the written answers
left for people to grade in formgrader; the LMS exports (grading.lms) are written beside nbgrader's
grades.csv. After grading by hand, `grade --no-force` gives feedback and exports again without regrading.
"""

from __future__ import annotations

import csv
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hwopt.course.grading import (
    cluster,
    course,
    deadlines,
    gradebook,
    intake,
    judge,
    kernel,
    lms,
    sandbox,
    settings,
    submission,
)

# nbgrader log lines worth a note in the report: (pattern, note)
LOG_NOTES = (
    (r"Attribute '(points|locked|cell_type)' for cell", "edited cell metadata reset"),
    (r"Restoring nbgrader metadata", "missing cell metadata restored"),
    (r"Restoring deleted written answer", "a deleted written answer restored, unanswered"),
    (r"restarting the kernel", "a cell ignored the interrupt: kernel restarted"),
    (r"Timeout waiting for execute reply", "a cell timed out"),
    (r"Output capped", "output beyond the byte cap dropped"),
    (r"Kernel died|kernel died", "the kernel died"),
    (r"Notebook time limit reached", "the notebook's time cap was reached: the parts after it were not run"),
)
FINE = ("ok", "not submitted")  # statuses of a class graded without trouble


@dataclass
class Row:
    """One student's result for one assignment."""

    student: str
    assignment: str
    score: float = 0.0
    max_score: float = 0.0
    status: str = "ok"  # ok | not submitted | refused | missing/invalid notebook | autograde failed | ...
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    raw_score: float = 0.0  # before the late penalty (score = raw_score - late_penalty, at least 0)
    late_penalty: float = 0.0
    submitted_at: str = ""  # UTC, as the exchange or the LMS recorded it
    due_at: str = ""  # UTC, the student's extension included
    # cells a person grades in formgrader (written answers), not yet graded or to review: not in the score yet
    needs_manual_grading: list[str] = field(default_factory=list)


def grade_one(api, folder: Path, assignment: str, student: str, force: bool = True) -> Row:
    """Autograde and give feedback for one student's assignment in the course folder; never raises for a bad
    submission."""
    row, start = Row(student, assignment), time.perf_counter()
    notebook = course.notebook_name(assignment)
    submitted = folder / "submitted" / student / assignment
    log_path = folder / "grading-logs" / f"{student}.{assignment}.log"
    log_path.parent.mkdir(exist_ok=True)
    refused = intake.refusal(submitted, folder) if os.path.lexists(submitted) else None
    if refused:
        problem = f"refused ({refused})"
    elif submitted.is_dir():
        problem = submission.check_notebook(submitted / f"{notebook}.ipynb")
    else:
        problem = "not submitted"
    if problem == "not submitted":
        row.status = problem
    elif problem:
        row.status = problem.split(" (")[0]
        row.notes.append(refused or problem)
        gradebook.record_zero(api, assignment, student)
        log_path.write_text(f"not graded: {problem}\n")
    else:
        graded = folder / "autograded" / student / assignment / f"{notebook}.ipynb"
        row.notes += submission.tampering(submitted / f"{notebook}.ipynb",
                                          folder / "release" / assignment / graded.name)
        if force or not graded.exists():
            result = api.autograde(assignment, student, force=True, create=True)
            log_path.write_text(result.get("log", "") + result.get("error", ""))
            row.notes += [note for pattern, note in LOG_NOTES if re.search(pattern, result.get("log", ""))]
            if not (result["success"] and graded.exists()):
                row.status = "autograde failed"
                last = (result.get("error") or result.get("log") or "").strip().splitlines()[-1:]
                row.notes.append(f"see {log_path.relative_to(folder)}: {' '.join(last)[:120]}")
                gradebook.record_zero(api, assignment, student)
        if row.status == "ok":
            row.status = give_feedback(api, folder, assignment, student, row)
    try:
        row.raw_score, row.max_score = gradebook.read_score(api, assignment, student)
    except Exception:  # not submitted: no gradebook entry
        row.max_score = gradebook.max_score(api, assignment)
    else:
        row.late_penalty, row.submitted_at, row.due_at, why = deadlines.reported(api, assignment, student)
        row.needs_manual_grading = gradebook.awaiting_people(api, assignment, student)
        row.score = max(0.0, row.raw_score - row.late_penalty)
        row.notes += [why] if why else []
    row.seconds = time.perf_counter() - start
    return row


def give_feedback(api, folder: Path, assignment: str, student: str, row: Row) -> str:
    """Generate the student's feedback page; delete it (and say so) if it shows any hidden test line."""
    result = api.generate_feedback(assignment, student, force=True)
    page = folder / "feedback" / student / assignment / f"{course.notebook_name(assignment)}.html"
    if not (result["success"] and page.exists()):
        row.notes.append("feedback failed")
        return "ok"
    leaks = submission.feedback_leaks(page.read_text(), submission.hidden_lines(assignment))
    if leaks:
        page.unlink()
        row.notes.append(f"feedback withheld: it showed hidden tests ({leaks[0][:40]}...)")
        return "feedback leak"
    return "ok"


def write_report(rows: list[Row], path: Path) -> Path:
    """grades_report.csv: student, assignment, score, max_score, status, notes, seconds, the lateness
    columns raw_score, late_penalty, submitted_at, due_at, and needs_manual_grading (the written answers
    left to grade in formgrader: the score has their points once they are graded)."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(rows[0])) if rows else ["student"])
        writer.writeheader()
        for row in rows:
            writer.writerow({**asdict(row), "notes": "; ".join(row.notes), "seconds": f"{row.seconds:.2f}",
                             "needs_manual_grading": "; ".join(row.needs_manual_grading)})
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
                         f"rights), set {settings.UNSANDBOXED.name}=1.")
    return reason


_worker_apis: dict = {}  # per worker process: the nbgrader API of each course it grades (kept across tasks)


def grade_task(folder: Path, assignment: str, student: str, timeout_s: int | None, force: bool,
               db_url: str) -> Row:
    """One task of a grading worker: one student's assignment; never raises (a grader error is a row)."""
    try:
        key = (str(folder), timeout_s, db_url)
        if key not in _worker_apis:  # a worker process's first task of this course
            _worker_apis[key] = course.make_api(folder, timeout_s, db_url)
        with gradebook.kept_connections():
            return grade_one(_worker_apis[key], folder, assignment, student, force=force)
    except Exception as err:  # a bug of ours or nbgrader's: report it, grade the others
        return Row(student, assignment, status="grader error", notes=[f"{type(err).__name__}: {err}"])


def grade_class(folder: Path, assignments=course.ASSIGNMENTS, timeout_s: int | None = None,
                force: bool = True, log=print, workers: int | None = None, db_url: str | None = None,
                scheduler: str | None = None) -> list[Row]:
    """Grade every student folder in folder/submitted for each assignment; write the report and grades.csv.

    workers: grading processes (default: one per core where the gradebook takes parallel writers, else 1);
    db_url: the gradebook (default course.gradebook_url's); scheduler: an existing Dask cluster's address.
    """
    unsandboxed = ready_to_grade()
    try:
        deadlines.read_extensions(folder / deadlines.EXTENSIONS)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    db_url = course.gradebook_url(folder, db_url)
    workers = cluster.plan_workers(workers, db_url, scheduler, log)
    with gradebook.kept_connections():  # one engine per gradebook for the whole class
        api = course.make_api(folder, timeout_s, db_url)
        course.release(api, folder, assignments)
        submitted = folder / "submitted"
        students = sorted(p.name for p in submitted.iterdir() if p.is_dir()) if submitted.is_dir() else []
        if not students:
            log(f"no submissions in {submitted} (run nbgrader zip_collect or collect first)")
        gradebook.register_students(api, students)
        tasks = [(student, assignment) for student in students for assignment in assignments]
        graded: dict[tuple[str, str], Row] = {}

        def done(row: Row) -> None:
            if unsandboxed and row.status != "not submitted":
                row.notes.append(f"graded WITHOUT a sandbox ({unsandboxed})")
            graded[row.student, row.assignment] = row
            notes = row.notes + ([f"to grade by hand: {', '.join(row.needs_manual_grading)}"]
                                 if row.needs_manual_grading else [])
            log(f"{row.student:>14} {row.assignment:<20} {row.score:5.1f}/{row.max_score:<5.1f} "
                f"{row.status:<17} {'; '.join(notes)}")

        task = {"folder": folder, "timeout_s": timeout_s, "force": force, "db_url": db_url}
        if workers == 1 and not scheduler:
            _worker_apis[str(folder), timeout_s, db_url] = api  # this process is the one worker
            for student, assignment in tasks:
                done(grade_task(assignment=assignment, student=student, **task))
        elif tasks:
            cluster.run(grade_task, tasks, workers, scheduler, done,
                        failed=lambda s, a, why: Row(s, a, status="grader error", notes=[why]), **task)
        rows = [graded[t] for t in tasks]  # the report's order, whoever graded what first
        write_report(rows, folder / "grades_report.csv")
        course.export(api, folder)
        lms.export(api, folder, assignments=course.ASSIGNMENTS)
        return rows
