"""Notebooks are committed without outputs: find (`--check`, exit 1) or clear the outputs of the notebooks.

`python -m hwopt.course.notebook_outputs --check [PATH ...]` lists every notebook with an output or an
execution count (default: notebooks/, source/, release/); without `--check` it clears them (the pre-commit
hook runs `--check`, so a commit never carries a learner's or instructor's run).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = ("notebooks/*.ipynb", "source/*/*.ipynb", "release/*/*.ipynb")


def course_notebooks(root: Path = ROOT) -> list[Path]:
    """The committed notebooks: lessons, nbgrader sources and releases."""
    return sorted(path for pattern in PATTERNS for path in Path(root).glob(pattern))


def cells_with_outputs(nb) -> list[int]:
    """Indices of the code cells that hold outputs or an execution count."""
    return [i for i, cell in enumerate(nb.cells)
            if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)]


def clear_outputs(path: Path) -> bool:
    """Clear the outputs and execution counts of the notebook at path; True when it changed."""
    nb = nbformat.read(path, as_version=4)
    dirty = cells_with_outputs(nb)
    for i in dirty:
        nb.cells[i].outputs, nb.cells[i].execution_count = [], None
    if dirty:
        nbformat.write(nb, path)
    return bool(dirty)


def main(argv: list[str] | None = None) -> int:
    """Command line: [--check] [PATH ...]; exit 1 when --check finds outputs."""
    parser = argparse.ArgumentParser(prog="python -m hwopt.course.notebook_outputs",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only list notebooks with outputs (exit 1)")
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: the course's)")
    args = parser.parse_args(argv)
    paths = [p for p in args.paths if p.suffix == ".ipynb"] if args.paths else course_notebooks()
    found = []
    for path in paths:
        if args.check:
            dirty = cells_with_outputs(nbformat.read(path, as_version=4))
            if dirty:
                found.append(path)
                print(f"{path}: outputs in cells {dirty}")
        elif clear_outputs(path):
            print(f"cleared: {path}")
    if found:
        print("clear them: python -m hwopt.course.notebook_outputs " + " ".join(map(str, found)))
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
