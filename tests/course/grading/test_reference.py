"""course.grading.reference: each assignment's reference runs here and every grade cell declares checks."""

import pytest

from hwopt.course.grading import judge
from hwopt.course.grading.course import ASSIGNMENTS, ROOT
from hwopt.course.grading.reference import Reference

STUDENTS = ("ada", "grace", "alan")


def drawn(ref, assignment, gid, student):
    return [judge.draw(c, judge.case_rng(b"test", assignment=assignment, notebook=assignment, grade_id=gid,
                                         student=student, index=i)) for i, c in enumerate(ref.checks[gid])]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_grade_cell_has_checks_and_the_reference_answers_every_case(assignment):
    ref = Reference.load(ROOT / "source" / assignment / f"{assignment}.ipynb")
    assert ref.checks and all(ref.checks.values()), "every grade cell declares at least one check"
    for gid, checks in ref.checks.items():
        for student in STUDENTS:
            for check, cases in zip(checks, drawn(ref, assignment, gid, student), strict=True):
                for one, outcome in zip(cases, ref.expected(check, cases), strict=True):
                    # an error is expected only where the case says which argument it must name
                    assert ("value" in outcome) != bool(one.must_name), (gid, one.about, outcome)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_hidden_cases_differ_between_students_and_repeat_for_one(assignment):
    ref = Reference.load(ROOT / "source" / assignment / f"{assignment}.ipynb")
    for gid in ref.checks:
        ada = [[c.variables for c in cases] for cases in drawn(ref, assignment, gid, "ada")]
        assert ada == [[c.variables for c in cases] for cases in drawn(ref, assignment, gid, "ada")]
        assert ada != [[c.variables for c in cases] for cases in drawn(ref, assignment, gid, "grace")], gid
