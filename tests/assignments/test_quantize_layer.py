"""Assignment 13 (quantize_layer): the reference passes its own checks, every student draws their own cases,
and GPTQ's judge (the output error and perplexity the grader computes from returned codes) tells GPTQ from
RTN."""

import pytest
import torch

from hwopt.course.grading import collect, judge
from hwopt.course.grading.course import ROOT
from hwopt.course.grading.reference import Reference
from tests import support

SECRET = b"a test secret"
STUDENTS = ("student-a", "student-b")


@pytest.fixture(scope="module")
def reference():
    return Reference.load(ROOT / "source" / "quantize_layer" / "quantize_layer.ipynb")


def hidden(reference) -> dict:
    """The names the hidden regions define (case generators, the judge's constants), with the reference's."""
    return reference.checks["test_gptq_layer"][0].accept.__globals__


def drawn(reference, grade_id, student):
    """[(check, cases)] of one grade cell for one student, as the grader draws them."""
    return support.drawn(reference, "quantize_layer", grade_id, student)


def test_the_reference_passes_its_own_checks_and_students_draw_other_cases(reference):
    assert set(reference.checks) == {"test_rtn", "test_rtn_edges", "test_hessian", "test_gptq_small",
                                     "test_gptq_layer", "test_gptq_perplexity"}
    support.check_reference_and_draws(reference, "quantize_layer", STUDENTS)


def _layer_case(reference):
    """The first case of the GPTQ-rows check for the first student, and the reference's outcome."""
    check, cases = drawn(reference, "test_gptq_layer", STUDENTS[0])[0]
    return check, cases[0], reference.expected(check, cases[:1])[0]


def test_rtn_in_place_of_gptq_is_rejected_on_the_error_the_grader_computes(reference):
    check, one, expected = _layer_case(reference)
    ns = reference.namespace
    rtn = collect.outcome("plain(*rtn_quantize(W, GROUP_SIZE), rows=rows)", one.variables, ns)
    why = judge.judge_case(check, one, expected, rtn)
    assert why and "output error on held-out text" in why
    w, x, rows = ns["W"], ns["X_HELD_OUT"], one.variables["rows"]

    def error(value):
        return ns["output_error"](x, w[rows], ns["dequantize"](value["codes"], value["scales"], 32))

    rtn_error, gptq_error = error(rtn["value"]), error(expected["value"])
    assert rtn_error > 1.5 * hidden(reference)["ERROR_FACTOR"] * gptq_error  # a margin on both sides


@pytest.mark.parametrize("change, why", [
    (lambda v: {**v, "codes": [[8] + row[1:] for row in v["codes"]]}, "integers from -7 to 7"),
    (lambda v: {**v, "codes": [[c + 0.5 for c in row] for row in v["codes"]]}, "codes must be integers"),
    (lambda v: {**v, "scales": [[0.0] * len(row) for row in v["scales"]]}, "finite and positive"),
    (lambda v: {**v, "scales": [row[:-1] for row in v["scales"]]}, "scales (rows, 8)"),
    (lambda v: {"codes": v["codes"]}, "a dict of"),
    (lambda v: {**v, "codes": [row[:-1] for row in v["codes"][:-1]] + v["codes"][-1:]}, "not be judged"),
])
def test_returned_codes_that_are_not_int4_are_wrong_and_say_why(reference, change, why):
    check, one, expected = _layer_case(reference)
    got = judge.judge_case(check, one, expected, {"value": change(expected["value"])})
    assert got and why in got


def test_the_whole_layer_is_judged_by_its_error_and_perplexity_computed_here(reference, monkeypatch):
    ns = reference.namespace
    check, = reference.checks["test_gptq_perplexity"]
    one, = judge.draw(check, judge.case_rng(SECRET, assignment="quantize_layer", notebook="quantize_layer",
                                            grade_id="test_gptq_perplexity", student=STUDENTS[0]))
    expected = reference.expected(check, [one])[0]
    assert judge.judge_case(check, one, expected, expected) is None
    # every code one step down: codes still in range, the output error far above the reference's
    codes = expected["value"]["codes"]
    worse = {**expected["value"], "codes": [[max(-7, c - 1) for c in row] for row in codes]}
    assert "output error" in judge.judge_case(check, one, expected, {"value": worse})
    monkeypatch.setitem(hidden(reference), "PERPLEXITY_FACTOR", 0.99)  # the perplexity is computed and judged
    assert "perplexity" in judge.judge_case(check, one, expected, expected)
    trained = ns["perplexity_with"]()
    quantized = ns["perplexity_with"](ns["dequantize"](codes, expected["value"]["scales"], 32))
    assert abs(quantized / trained - 1) < 0.01  # one layer at int4 g32 moves perplexity by well under 1%


def test_the_edge_cases_are_what_they_say(reference):
    ns = hidden(reference)
    rng = judge.case_rng(SECRET, assignment="quantize_layer", notebook="quantize_layer", grade_id="x",
                         student="s")
    for _ in range(20):
        row, = ns["_ties"](rng)
        step = row[0] / 7
        assert all((value / step - 0.5) % 1 == 0 for value in row[1:])  # exactly half-way between two codes
    w = torch.tensor(ns["_synthetic"](rng, 3, 64), dtype=torch.float64)
    assert (w.abs().amax(dim=1) > 5 * w.abs().median(dim=1).values).all()  # each row has large inputs
