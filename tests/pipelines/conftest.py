"""The graded sample class that the grading pipeline tests share: graded once per test session."""

from types import SimpleNamespace

import pytest

from hwopt.course.grading import samples
from tests.pipelines.support import grade_elsewhere, grade_samples, graded_elsewhere

# The samples graded by a second process, beside the others (two serial graders, each with a course folder and
# SQLite gradebook of its own, each about half the time): the ones that wait out cell timeouts and the
# heaviest attacks. signal and signal_next stay together (graded one after the other).
SECOND = ("sigint_loop", "infinite_loop", "toolkit", "read_source", "equals_anything", "transformer")


@pytest.fixture(scope="session")
def graded_samples(tmp_path_factory, grading_sandbox):
    """The sample students, each submitting what it is about (samples.TARGETS), graded serially into SQLite
    by the demo: rows {(student, assignment): Row}, cells {(student, assignment, notebook, cell): scores} as
    graded (before any test changes a gradebook), folders, folder_of {student: its course folder}."""
    first = [name for name in samples.STUDENTS if name not in SECOND]
    folders = [tmp_path_factory.mktemp(f"class{i}") / "course" for i in (1, 2)]
    second = grade_elsewhere(folders[1], SECOND)
    try:
        graded = [grade_samples(folders[0], first), graded_elsewhere(second)]
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    return SimpleNamespace(
        rows={(r.student, r.assignment): r for rows, _ in graded for r in rows},
        cells={key: scores for _, cells in graded for key, scores in cells.items()}, folders=folders,
        folder_of={**dict.fromkeys(first, folders[0]), **dict.fromkeys(SECOND, folders[1])})
