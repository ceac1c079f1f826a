"""What the grader checks around nbgrader: a submitted notebook before it is graded, its feedback after.

Before nbgrader sees a submission it is checked (notebook missing, not valid JSON/nbformat), so that such a
submission is recorded as 0 with its reason instead of failing silently; locked cells a student edited or
deleted are noted (nbgrader restores them). Every feedback page is searched for hidden test lines.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

import nbformat

from hwopt.course.grading import course, intake
from hwopt.course.grading.notebooks import hidden_region

MIN_HIDDEN_LINE_CHARS = 13  # shorter hidden lines ("return [", "])") say nothing and appear anywhere


def check_notebook(path: Path) -> str | None:
    """Why a submitted notebook cannot be graded (missing, not JSON, not a notebook), or None if it can.

    It is read without following a link (grading.intake.read_regular; the intake refuses links first anyway).
    """
    if not os.path.lexists(path):
        return "missing notebook"
    try:
        nbformat.validate(nbformat.reads(intake.read_regular(path).decode(), as_version=4))
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


def hidden_lines(assignment: str, root: Path = course.ROOT) -> set[str]:
    """Every non-trivial line inside a hidden-test region of the assignment's source notebook."""
    return {line.strip() for cell in course.load_notebook("source", assignment, root).cells
            for line in hidden_region(cell.source).split("\n") if len(line.strip()) >= MIN_HIDDEN_LINE_CHARS}


def feedback_leaks(html_text: str, secret_lines: set[str]) -> list[str]:
    """Hidden test lines that appear in a feedback page (tags stripped, entities decoded)."""
    text = html.unescape(re.sub(r"<[^>]+>", "", html_text))
    return sorted(line for line in secret_lines if line in text)
