"""Assignment batching: the reference passes its own checks, students draw their own measurements, and the
reference's fit is the least-squares line (numpy's, on the same weights)."""

import math

import numpy as np
import pytest

from tests import support

ASSIGNMENT = "batching"
STUDENTS = ("ada", "grace")


def test_the_reference_passes_its_own_checks_and_students_draw_their_own_cases(reference):
    support.check_reference_and_draws(reference, ASSIGNMENT, STUDENTS)


@pytest.mark.parametrize("grade_id", ["test_fit_measured", "test_fit_relative"])
def test_the_fit_is_numpys_weighted_least_squares(reference, grade_id):
    fit = reference.namespace["fit_batch_latency"]
    for student in STUDENTS:
        for _, cases in support.drawn(reference, ASSIGNMENT, grade_id, student):
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
        [(_, cases)] = support.drawn(reference, ASSIGNMENT, "test_knee", student)
        for one in cases:
            v = one.variables
            exact = v["fraction"] * v["overhead_ms"] / ((1 - v["fraction"]) * v["per_item_ms"])
            assert exact < 1 or 1e-6 < exact % 1 < 1 - 1e-6, v


def test_miss_cases_keep_away_from_the_tolerance(reference):
    for student in STUDENTS:
        [(_, cases)] = support.drawn(reference, ASSIGNMENT, "test_misses", student)
        for v in (one.variables for one in cases):
            for b, t in zip(v["batch_sizes"], v["latencies_ms"], strict=True):
                off = abs(v["overhead_ms"] + v["per_item_ms"] * b - t) / t
                assert abs(off - v["tolerance"]) > 1e-6, (b, off, v["tolerance"])
