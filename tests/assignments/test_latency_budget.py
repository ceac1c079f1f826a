"""Assignment latency_budget: the reference passes its own checks, students draw their own tables, and no
grade cell scores an error alone."""

import pytest

from hwopt.course.grading import judge, samples
from hwopt.course.grading.course import ROOT, load_notebook
from hwopt.course.grading.plugins import load_reference

ASSIGNMENT = "latency_budget"
STUDENTS = ("ada", "grace")


@pytest.fixture(scope="module")
def reference():
    return load_reference(ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")


def drawn(reference, grade_id: str, student: str) -> list[judge.Case]:
    """The cases a student draws for a grade cell (a fixed secret), all its checks together."""
    return [one for i, check in enumerate(reference.checks[grade_id])
            for one in judge.draw(check, rng(grade_id, student, i))]


def rng(grade_id: str, student: str, index: int):
    return judge.case_rng(b"test secret", assignment=ASSIGNMENT, notebook=ASSIGNMENT, grade_id=grade_id,
                          student=student, index=index)


def test_the_reference_passes_its_own_checks_for_two_students(reference):
    for grade_id, checks in reference.checks.items():
        for student in STUDENTS:
            for i, check in enumerate(checks):
                cases = judge.draw(check, rng(grade_id, student, i))
                for one, want in zip(cases, reference.expected(check, cases), strict=True):
                    assert judge.judge_case(check, one, want, want) is None, (grade_id, one.about)
                    assert ("raised" in want) == bool(one.must_name), (grade_id, one.about, want)


def test_hidden_cases_differ_between_students(reference):
    for grade_id in reference.checks:
        assert ([c.variables for c in drawn(reference, grade_id, STUDENTS[0])]
                != [c.variables for c in drawn(reference, grade_id, STUDENTS[1])]), grade_id


def test_errors_are_checked_only_beside_values_and_weigh_little(reference):
    """A grade cell with bad-input cases also checks values; those cells hold at most 2 of the 11 points."""
    graded = [c.metadata["nbgrader"] for c in load_notebook("source", ASSIGNMENT).cells
              if c.metadata.get("nbgrader", {}).get("grade")]
    points = {meta["grade_id"]: meta["points"] for meta in graded}
    with_errors = [g for g in reference.checks
                   if any(c.must_name for c in drawn(reference, g, STUDENTS[0]))]
    for grade_id in with_errors:
        assert any(not c.must_name for c in drawn(reference, grade_id, STUDENTS[0])), grade_id
    assert sum(points[g] for g in with_errors) <= 2 and samples.FULL[ASSIGNMENT] == 11
