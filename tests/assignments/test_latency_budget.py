"""Assignment latency_budget: the reference passes its own checks, students draw their own tables, and no
grade cell scores an error alone."""

from hwopt.course.grading import samples
from hwopt.course.grading.course import load_notebook
from tests import support

ASSIGNMENT = "latency_budget"


def test_the_reference_passes_its_own_checks_and_students_draw_their_own_cases(reference):
    support.check_reference_and_draws(reference, ASSIGNMENT)


def test_errors_are_checked_only_beside_values_and_weigh_little(reference):
    """A grade cell with bad-input cases also checks values; those cells hold at most 2 of the 11 points."""
    graded = [c.metadata["nbgrader"] for c in load_notebook("source", ASSIGNMENT).cells
              if c.metadata.get("nbgrader", {}).get("grade")]
    points = {meta["grade_id"]: meta["points"] for meta in graded}
    cases = {grade_id: [one for _, drawn in support.drawn(reference, ASSIGNMENT, grade_id, "ada")
                        for one in drawn] for grade_id in reference.checks}
    with_errors = [grade_id for grade_id, drawn in cases.items() if any(one.must_name for one in drawn)]
    for grade_id in with_errors:
        assert any(not one.must_name for one in cases[grade_id]), grade_id
    assert sum(points[grade_id] for grade_id in with_errors) <= 2 and samples.FULL[ASSIGNMENT] == 11
