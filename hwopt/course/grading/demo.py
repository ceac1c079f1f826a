"""The grading demo: the sample submissions (grading.samples) graded end to end in a scratch course folder.

`python -m hwopt.course.grading demo` (`make grade-demo`) grades every sample student (or a class cycling
through them) under a demo secret, writes grades_report.csv there, prints timing figures and names every
sample whose score or status is not the one it must get (samples.EXPECTED).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import time
from pathlib import Path

from hwopt.course.grading import course, grade, samples, settings

DEMO_SECRET = "grade-demo: not a secret"  # the demo's cases; a real class uses the instructor's secret
DEMO_COURSE = course.ROOT / "artifacts" / "grading-demo"


def cpu_seconds() -> float:
    """CPU time of this process and its reaped children (sandboxed kernels are not among them)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def demo(folder: Path = DEMO_COURSE, n_students: int | None = None, timeout_s: int | None = None,
         targets_only: bool = False, log=print, workers: int | None = None, db_url: str | None = None,
         students: dict[str, str] | None = None, assignments=course.ASSIGNMENTS) -> dict:
    """Grade the sample students (or a class of n_students cycling through them, or `students`: id -> sample
    name) on `assignments`; return timing figures and the rows.

    Every student submits every one of `assignments` unless targets_only (each sample only what it is about).
    The folder is emptied first.
    """
    unknown = sorted(set(assignments) - set(course.ASSIGNMENTS))
    if unknown or not assignments:
        raise ValueError(f"assignments must be some of {', '.join(course.ASSIGNMENTS)}; "
                         f"got {unknown or 'none'}")
    if students is None:
        students = samples.class_of(n_students) if n_students else {name: name for name in samples.STUDENTS}
    unknown = sorted(set(students.values()) - set(samples.STUDENTS))
    if unknown:
        raise ValueError(f"students must map ids to the names of samples.STUDENTS; got {unknown}")
    demo_secret = settings.SECRET.name not in os.environ
    if demo_secret:  # for this run only: a real class graded later in this process uses the real secret
        os.environ[settings.SECRET.name] = DEMO_SECRET
    try:
        return _demo(folder, students, timeout_s, targets_only, log, workers, db_url, tuple(assignments))
    finally:
        if demo_secret:
            os.environ.pop(settings.SECRET.name, None)


def _demo(folder: Path, students: dict[str, str], timeout_s: int | None, targets_only: bool, log,
          workers: int | None, db_url: str | None, assignments: tuple[str, ...]) -> dict:
    if folder.exists():
        shutil.rmtree(folder)
    course.prepare_course(folder)
    api = course.make_api(folder, timeout_s, db_url)
    course.release(api, folder, assignments)
    written = samples.write_submissions(folder / "submitted", students, targets_only, assignments=assignments)
    start, cpu_start = time.perf_counter(), cpu_seconds()
    rows = grade.grade_class(folder, assignments, timeout_s=timeout_s, log=log, workers=workers,
                             db_url=db_url)
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
    n = max(1, len(written))
    figures = {"students": len({r.student for r in rows}), "notebooks_submitted": len(written), "rows": rows,
               "seconds": round(seconds, 1), "seconds_per_notebook": round(seconds / n, 2),
               "cpu_seconds_per_notebook": round(cpu / n, 2), "report": str(folder / "grades_report.csv"),
               "unexpected": unexpected(rows, students)}
    for line in figures["unexpected"]:
        log(f"NOT AS EXPECTED: {line}")
    log(json.dumps({k: v for k, v in figures.items() if k != "rows"}))
    return figures


def unexpected(rows, students: dict[str, str]) -> list[str]:
    """Each graded row of a sample (students: id -> sample name) whose (score, status) is not EXPECTED's.

    A sample of samples.ID_DEPENDENT is checked only under its own name (its score is chance, id by id).
    """
    found = []
    for row in rows:
        sample = students.get(row.student)
        if sample in samples.ID_DEPENDENT and row.student != sample:
            continue
        want = samples.EXPECTED.get((sample, row.assignment))
        if want is not None and (row.score, row.status) != want:
            found.append(f"{row.student} ({students[row.student]}) {row.assignment}: got {row.score:g} "
                         f"({row.status}), expected {want[0]:g} ({want[1]})")
    return found
