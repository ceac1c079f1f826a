"""Assignment batching: the reference passes its own checks, students draw their own measurements, and the
reference's fit is the least-squares line (numpy's, on the same weights)."""

import math

import matplotlib
import numpy as np
import pytest

from hwopt.course.grading import judge
from hwopt.course.grading.course import ROOT
from hwopt.course.grading.plugins import load_reference

ASSIGNMENT = "batching"
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
                    if one.must_name:
                        assert any(name in want["message"] for name in one.must_name), (one.about, want)


def test_hidden_cases_differ_between_students(reference):
    for grade_id in reference.checks:
        mine, theirs = ([one.variables for _, cases in drawn(reference, grade_id, s) for one in cases]
                        for s in STUDENTS)
        assert mine != theirs, grade_id


@pytest.mark.parametrize("grade_id", ["test_fit_measured", "test_fit_relative"])
def test_the_fit_is_numpys_weighted_least_squares(reference, grade_id):
    fit = reference.namespace["fit_batch_latency"]
    for student in STUDENTS:
        for _, cases in drawn(reference, grade_id, student):
            for one in (c for c in cases if not c.must_name):
                b, t = (np.asarray(one.variables[k], float) for k in ("batch_sizes", "latencies_ms"))
                weights = 1 / t if one.variables["relative"] else np.ones_like(t)  # on residuals, not squares
                per_item, overhead = np.polyfit(b, t, 1, w=weights)
                got = fit(**one.variables)
                assert math.isclose(got["overhead_ms"], overhead, rel_tol=1e-7, abs_tol=1e-9)
                assert math.isclose(got["per_item_ms"], per_item, rel_tol=1e-7)


def test_knee_cases_keep_away_from_whole_batch_sizes(reference):
    """A loop over batch sizes and the closed form agree unless the exact knee is within rounding of a whole
    number: the drawn lines keep clear of that."""
    for student in STUDENTS:
        [(_, cases)] = drawn(reference, "test_knee", student)
        for one in cases:
            v = one.variables
            exact = v["fraction"] * v["overhead_ms"] / ((1 - v["fraction"]) * v["per_item_ms"])
            assert exact < 1 or 1e-6 < exact % 1 < 1 - 1e-6, v


def test_miss_cases_keep_away_from_the_tolerance(reference):
    for student in STUDENTS:
        [(_, cases)] = drawn(reference, "test_misses", student)
        for v in (one.variables for one in cases):
            for b, t in zip(v["batch_sizes"], v["latencies_ms"], strict=True):
                off = abs(v["overhead_ms"] + v["per_item_ms"] * b - t) / t
                assert abs(off - v["tolerance"]) > 1e-6, (b, off, v["tolerance"])
