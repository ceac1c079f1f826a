"""Helpers of the grading pipeline tests (`tests.pipelines.support`).

`python -m tests.pipelines.support FOLDER SAMPLE...` grades these samples as grade_samples does, in a process
of its own, and prints its result as JSON (read back with graded_elsewhere).
"""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from nbgrader.api import Gradebook

from hwopt.course.grading import course, demo, grade

TIMEOUT_S = 4  # per cell while testing: each endless loop costs about this plus a restart


def grade_cells(folder, db_url: str | None = None) -> dict:
    """Every grade cell in the course folder's gradebook: (student, assignment, notebook, cell) -> (auto
    score, manual score, max score)."""
    api = course.make_api(folder, db_url=db_url)
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        return {(sub.student.id, a.name, nb.name, g.name): (g.auto_score, g.manual_score, g.max_score)
                for a in gb.assignments for sub in a.submissions for nb in sub.notebooks for g in nb.grades}


def grade_samples(folder, names) -> tuple[list, dict]:
    """These sample students, each submitting what it is about, graded serially into SQLite by the demo in
    the course folder: (rows, grade_cells as graded)."""
    folder = Path(folder)
    figures = demo.demo(folder, timeout_s=TIMEOUT_S, targets_only=True, log=lambda *_: None,
                        students={name: name for name in names})
    return figures["rows"], grade_cells(folder)


def grade_elsewhere(folder, names) -> subprocess.Popen:
    """grade_samples in a process of its own (started here, running on); its result: graded_elsewhere."""
    return subprocess.Popen([sys.executable, "-m", "tests.pipelines.support", str(folder), *names],
                            cwd=course.ROOT, stdout=subprocess.PIPE, text=True)


def graded_elsewhere(process: subprocess.Popen, timeout_s: float = 1200) -> tuple[list, dict]:
    """What grade_elsewhere's process graded: (rows, grade cells), as grade_samples returns them."""
    out, _ = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, f"grading the samples elsewhere failed (exit {process.returncode})"
    result = json.loads(out.strip().splitlines()[-1])
    return ([grade.Row(**row) for row in result["rows"]],
            {tuple(key): tuple(scores) for key, scores in result["cells"]})


if __name__ == "__main__":
    rows, cells = grade_samples(sys.argv[1], sys.argv[2:])
    print(json.dumps({"rows": [dataclasses.asdict(r) for r in rows], "cells": [[list(k), list(v)]
                                                                                for k, v in cells.items()]}))
