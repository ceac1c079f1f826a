"""The reference solution of an assignment notebook (source/), run in the grading process, and its checks.

The instructor's notebook runs here top to bottom, hidden regions left out, exactly as a student's kernel
runs it; each grade cell's hidden region then declares its checks (grading.judge). Expected outcomes
are the reference's answers to the same calls, through the same JSON conversion the student's kernel uses.
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from pathlib import Path

import nbformat

from hwopt.course.grading import collect, judge
from hwopt.course.grading.notebooks import hidden_region, strip_hidden_tests


def grade_id(cell) -> str | None:
    """The nbgrader grade_id of a grade cell, else None."""
    meta = cell.metadata.get("nbgrader", {})
    return meta.get("grade_id") if meta.get("grade") else None


@dataclass
class Reference:
    """An assignment notebook's reference namespace and the checks of each grade cell (by grade_id)."""

    path: Path
    namespace: dict
    checks: dict[str, list[judge.Check]]

    @classmethod
    def load(cls, path: str | Path) -> Reference:
        """Run the source notebook at path (in its folder, output swallowed) and read its checks."""
        path = Path(path).resolve()
        nb = nbformat.read(path, as_version=4)
        namespace: dict = {"__name__": "__reference__"}
        here = os.getcwd()
        try:
            os.chdir(path.parent)
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                for cell in nb.cells:
                    if cell.cell_type == "code":
                        exec(compile(strip_hidden_tests(cell.source), str(path), "exec"), namespace)  # noqa: S102
        finally:
            os.chdir(here)
        specs = dict(namespace)  # hidden regions run in order and share their helpers, as hidden tests do
        checks = {grade_id(c): judge.read_checks(hidden_region(c.source), specs)
                  for c in nb.cells if c.cell_type == "code" and grade_id(c)}
        return cls(path, namespace, checks)

    def expected(self, check: judge.Check, cases: list[judge.Case]) -> list[dict]:
        """The reference's outcome of check.call on each case."""
        return [collect.outcome(check.call, c.variables, self.namespace) for c in cases]
