"""What the grader reads in a notebook: hidden-test regions of grade cells, written answers and their rubrics,
and LMS/Colab file names."""

from __future__ import annotations

import os
import re

HIDDEN_BEGIN, HIDDEN_END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"


def _split(source: str) -> tuple[list[str], list[str]]:
    """(visible lines, hidden lines) of a cell: the hidden-test delimiters themselves belong to neither."""
    visible, hidden, inside = [], [], False
    for line in source.split("\n"):
        if HIDDEN_BEGIN in line:
            inside = True
        elif HIDDEN_END in line:
            inside = False
        else:
            (hidden if inside else visible).append(line)
    return visible, hidden


def strip_hidden_tests(source: str) -> str:
    """The source as students see it (and as the student's kernel runs it): the hidden region removed."""
    return "\n".join(_split(source)[0])


def hidden_region(source: str) -> str:
    """The lines between the hidden-test delimiters (the grade cell's checks), or '' when there are none."""
    return "\n".join(_split(source)[1])


def written_answers(nb) -> list[dict]:
    """The answers people grade (markdown grade cells, each after its question): grade_id, points, question
    and the cell's text (in source/: the model answer and the rubric)."""
    found = []
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "markdown" and meta.get("grade"):
            question = nb.cells[i - 1].source if i else ""
            found.append({"grade_id": meta.get("grade_id"), "points": float(meta.get("points", 0)),
                          "question": question, "answer": cell.source})
    return found


def normalise_source(source: str) -> str:
    """Source without trailing spaces and blank edges (to match cells whose metadata was lost)."""
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def normalise_notebook_name(filename: str, released: list[str]) -> str | None:
    """Released notebook name (without .ipynb) that an LMS/Colab file name refers to, or None."""
    stem = os.path.splitext(os.path.basename(filename))[0].lower()
    stem = re.sub(r"^(copy of |copy_of_)+", "", stem)  # Colab "Save a copy in Drive"
    stem = re.sub(r"([ _-]*(\(\d+\)|-\d+))+$", "", stem)  # browser/LMS duplicates: " (1)", "-1"
    stem = re.sub(r"[\s-]+", "_", stem)
    names = {os.path.splitext(name)[0].lower(): os.path.splitext(name)[0] for name in released}
    for candidate in (stem, *(name for name in names if stem.endswith("_" + name))):
        if candidate in names:
            return names[candidate]
    return None
