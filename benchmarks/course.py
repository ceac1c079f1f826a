"""Section 3 and the grading scaling curve: what running and grading the course costs on this machine."""

from __future__ import annotations

from pathlib import Path

from benchmarks import report
from hwopt.course import record

ROOT = Path(__file__).resolve().parents[1]


def course_notebooks(root: Path = ROOT) -> list[Path]:
    """Every lesson (notebooks/*.ipynb) and assignment source notebook (source/*/*.ipynb), sorted."""
    return sorted(root.glob("notebooks/*.ipynb")) + sorted(root.glob("source/*/*.ipynb"))


def execute_notebook(path: Path, *, cell_timeout_s: int = 300) -> dict:
    """Run a notebook headless (hwopt.course.record's executor, cell_timeout_s per cell): its notebook row."""
    run = record.run_notebook(path, cell_timeout_s=cell_timeout_s, headlines=False)
    if run.status == "timeout":
        return report.notebook_row(run.path, run.seconds, "timeout", f"a cell ran past {cell_timeout_s} s")
    if run.status == "error":
        last = run.error.strip().splitlines()[-1:] or ["error"]
        return report.notebook_row(run.path, run.seconds, "error", last[0][:200])
    return report.notebook_row(run.path, run.seconds, "ok")


def measure_notebooks(*, quick: bool, cell_timeout_s: int = 300,
                      progress=None) -> tuple[list[dict], list[str]]:
    """Execution cost of every course notebook (quick mode: the assignments only); rows and notes."""
    paths = course_notebooks()
    if not paths:
        return [], ["no lesson or assignment notebooks found"]
    rows, notes = [], ["seconds include starting a fresh kernel; cell timeout "
                       f"{cell_timeout_s} s; goal {report.NOTEBOOK_GOAL_S:g} s per notebook on a 2-core CPU"]
    for p in paths:
        if quick and p.parent.name == "notebooks":
            rows.append(report.notebook_row(str(p.relative_to(ROOT)), None, "skipped", "quick mode"))
        else:
            rows.append(execute_notebook(p, cell_timeout_s=cell_timeout_s))
        if progress:
            progress.update(1)
    if quick:
        notes.append("quick mode runs the assignments only; the lessons run in the full report")
    return rows, notes
