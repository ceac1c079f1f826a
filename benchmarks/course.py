"""Section 3 and the grading scaling curve: what running and grading the course costs on this machine."""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks import report

ROOT = Path(__file__).resolve().parents[1]


def course_notebooks(root: Path = ROOT) -> list[Path]:
    """Every lesson (notebooks/*.ipynb) and assignment source notebook (source/*/*.ipynb), sorted."""
    return sorted(root.glob("notebooks/*.ipynb")) + sorted(root.glob("source/*/*.ipynb"))


def execute_notebook(path: Path, *, cell_timeout_s: int = 300) -> dict:
    """Run a notebook headless (nbclient, fresh kernel, cell_timeout_s per cell): its notebook row."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    full = Path(path).resolve()
    rel = str(full.relative_to(ROOT)) if full.is_relative_to(ROOT) else str(path)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=cell_timeout_s, kernel_name="python3",
                            resources={"metadata": {"path": str(Path(path).parent)}})
    start = time.perf_counter()
    try:
        client.execute()
    except CellTimeoutError:
        return report.notebook_row(rel, time.perf_counter() - start, "timeout",
                                   f"a cell ran past {cell_timeout_s} s")
    except (CellExecutionError, DeadKernelError) as exc:
        last = str(exc).strip().splitlines()[-1:] or ["error"]
        return report.notebook_row(rel, time.perf_counter() - start, "error", last[0][:200])
    return report.notebook_row(rel, time.perf_counter() - start, "ok")


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
