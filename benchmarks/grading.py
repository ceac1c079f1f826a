"""Course cost of grading: autograde seconds per submission-notebook for a class of sample students.

Uses the grading kit's own class run (autograder/grade_class.py `demo`: sample submissions, nbgrader autograde
and feedback, one student at a time) in a scratch course folder, and reads its per-submission seconds.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import io
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRADE_CLASS = ROOT / "autograder" / "grade_class.py"
CELL_TIMEOUT_S = 10  # per cell: the sample students whose loops never end cost this (the kit's default: 60)


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
    for name in ("demo",):
        if not hasattr(module, name):
            raise ImportError(f"{shown} has no {name}()")
    return module


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


def measure(*, quick: bool, class_size: int | None = None) -> tuple[dict, list[dict], list[str]]:
    """Grading summary, the time-vs-class-size series, notes (summary says 'not available' and why if so)."""
    n = class_size or (1 if quick else 20)
    try:
        kit = load_grade_class()
    except ImportError as exc:
        return {"available": False, "reason": str(exc)}, [], []
    course = Path(tempfile.mkdtemp(prefix="bench-grading-")) / "course"
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            figures = kit.demo(course, n, CELL_TIMEOUT_S, log=lambda *a, **k: None)
        with (course / "grades_report.csv").open() as f:
            rows = list(csv.DictReader(f))
    except Exception as exc:  # the kit's failure is reported, not fatal
        last = traceback.format_exception_only(exc)[-1].strip()
        return {"available": False, "reason": f"the class run failed: {last[:200]}"}, [], []
    finally:
        shutil.rmtree(course.parent, ignore_errors=True)
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    summary = {
        "available": True, "class_size": figures["students"], "notebooks": figures["notebooks_submitted"],
        "total_s": figures["seconds"], "s_per_notebook": figures["seconds_per_notebook"],
        "cpu_s_per_notebook": figures.get("cpu_seconds_per_notebook"), "statuses": statuses,
    }
    notes = [f"autograder/grade_class.py demo with a class of {n} sample students (cycling through every "
             f"sample, broken ones included), cell timeout {CELL_TIMEOUT_S} s; statuses: "
             + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))]
    return summary, cumulative_by_student(rows), notes
