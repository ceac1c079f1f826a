"""Assignment serving_queue: the reference passes its own checks, students draw their own servers and loads,
and the loads show what each grade cell is about (capacity needs every lighter load met, not only its own)."""

import matplotlib
import pytest

from hwopt.course.grading import judge
from hwopt.course.grading.course import ROOT
from hwopt.course.grading.plugins import load_reference

ASSIGNMENT = "serving_queue"
STUDENTS = ("ada", "grace")


@pytest.fixture(scope="module")
def reference():
    matplotlib.use("Agg")  # the "See it" cell plots
    return load_reference(ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")


def drawn(reference, grade_id: str, student: str) -> list[tuple[judge.Check, list[judge.Case]]]:
    """Each check of a grade cell with the cases a student draws (a fixed secret)."""
    def rng(i):
        return judge.case_rng(b"test secret", assignment=ASSIGNMENT, notebook=ASSIGNMENT, grade_id=grade_id,
                              student=student, index=i)

    return [(check, judge.draw(check, rng(i))) for i, check in enumerate(reference.checks[grade_id])]


def test_the_reference_passes_its_own_checks_for_two_students(reference):
    for grade_id in reference.checks:
        for student in STUDENTS:
            for check, cases in drawn(reference, grade_id, student):
                for one, want in zip(cases, reference.expected(check, cases), strict=True):
                    assert judge.judge_case(check, one, want, want) is None, (grade_id, one.about)
                    assert ("raised" in want) == bool(one.must_name), (grade_id, one.about, want)


def test_hidden_cases_differ_between_students(reference):
    for grade_id in reference.checks:
        mine, theirs = ([one.variables for _, cases in drawn(reference, grade_id, s) for one in cases]
                        for s in STUDENTS)
        assert mine != theirs, grade_id


def test_no_automatic_point_is_for_an_error_alone(reference):
    for grade_id in reference.checks:
        cases = [one for _, cases in drawn(reference, grade_id, STUDENTS[0]) for one in cases]
        assert any(not one.must_name for one in cases), grade_id


def p99s(reference, variables) -> list[float]:
    """The reference's p99 (ms) at each rate of a capacity case."""
    p99 = reference.namespace["p99_at_rate_ms"]
    return [p99(rate, variables["max_batch_size"], variables["max_wait_ms"], variables["overhead_ms"],
                variables["per_item_ms"], variables["n_requests"], variables["seed"])
            for rate in variables["rates_per_s"]]


def test_light_load_cases_are_missed_at_light_load_and_met_at_a_heavier_one(reference):
    capacity = reference.namespace["capacity_per_s"]
    for student in STUDENTS:
        [(_, cases)] = drawn(reference, "test_capacity_light_load", student)
        for one in cases:
            if "too long" in one.about:  # the highest rate that meets the SLO is not the capacity
                met = [p <= one.variables["slo_ms"] for p in p99s(reference, one.variables)]
                assert not met[0] and any(met), one.variables
                assert capacity(**one.variables) == 0


def test_capacity_cases_find_a_capacity_inside_the_grid(reference):
    capacity = reference.namespace["capacity_per_s"]
    found = [capacity(**one.variables) for s in STUDENTS
             for one in drawn(reference, "test_capacity", s)[1][1] if "another" in one.about]
    assert any(0 < c for c in found), found


def test_policies_that_tie_keep_the_first_listed(reference):
    best = reference.namespace["best_policy"]
    for student in STUDENTS:
        [(_, cases)] = drawn(reference, "test_no_policy", student)
        tied = next(one.variables for one in cases if "tie" in one.about)
        assert best(**tied)["max_batch_size"] == tied["policies"][0][0]
        swapped = {**tied, "policies": tied["policies"][::-1]}
        assert best(**swapped)["max_batch_size"] == tied["policies"][1][0]
