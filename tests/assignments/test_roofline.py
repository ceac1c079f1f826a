"""The roofline assignment: its reference passes its own checks, every student draws other kernels, chips and
matrices, and the batch that turns a layer compute-bound is the crossing of the ridge point."""

import itertools

import pytest

from hwopt.course.grading import collect, course, judge
from hwopt.course.grading.plugins import load_reference

ASSIGNMENT = "roofline"
SECRET = b"roofline test"


@pytest.fixture(scope="module")
def reference():
    """The source notebook run as the grader runs it (its visible checks included)."""
    return load_reference(course.ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")


def drawn(reference, student: str) -> dict:
    """grade_id -> the cases of each of its checks, as the grader draws them for this student."""
    return {gid: [judge.draw(check, judge.case_rng(SECRET, assignment=ASSIGNMENT, notebook=ASSIGNMENT,
                                                   grade_id=gid, student=student, index=i))
                  for i, check in enumerate(checks)]
            for gid, checks in reference.checks.items()}


@pytest.mark.parametrize("student", ["ada", "grace"])
def test_the_reference_passes_its_hidden_checks(reference, student):
    for gid, per_check in drawn(reference, student).items():
        for check, cases in zip(reference.checks[gid], per_check, strict=True):
            for one, want in zip(cases, reference.expected(check, cases), strict=True):
                got = collect.outcome(check.call, one.variables, reference.namespace)
                assert not judge.judge_case(check, one, want, got), (gid, one.about)


def test_every_student_gets_other_cases(reference):
    ada, grace = drawn(reference, "ada"), drawn(reference, "grace")
    for gid in ("test_on_chip_time", "test_crossover", "test_crossover_never"):
        assert [c.variables for cases in ada[gid] for c in cases] != [
            c.variables for cases in grace[gid] for c in cases], gid


def test_the_compute_bound_batch_is_where_the_gemm_crosses_the_ridge_point(reference):
    ns = reference.namespace
    for chip_name, precision in itertools.product(ns["CHIPS"], ns["PRECISIONS"]):
        try:
            peak_flops, bandwidth_gbs = ns["chip_roof"](chip_name, precision)
        except ValueError:  # no peak at that precision in the chip table
            continue
        ridge = peak_flops / (bandwidth_gbs * 1e9)
        for k, n in ((4096, 14336), (768, 3072), (128, 256)):
            def intensity(m, k=k, n=n, precision=precision):
                return ns["op_cost"]("gemm", {"m": m, "k": k, "n": n}, ns["BYTES_PER_ELEMENT"][precision])[
                    "intensity"]

            b = ns["compute_bound_batch"](k, n, chip_name, precision, 65536)
            where = (chip_name, precision, k, n, b)
            if b is None:
                assert intensity(65536) < ridge, where
            else:
                assert intensity(b) >= ridge and (b == 1 or intensity(b - 1) < ridge), where
