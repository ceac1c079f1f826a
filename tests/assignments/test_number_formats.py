"""Assignment 12 (number_formats): the reference passes its own hidden checks for any student, draws other
values for each, and agrees with the course's quantizer (hwopt.quantization) and with torch's FP8 casts."""

import math

import numpy as np
import pytest
import torch

from hwopt import formats, quantization
from hwopt.course.grading import judge
from hwopt.course.grading.course import ROOT, load_notebook
from hwopt.course.grading.notebooks import hidden_region
from hwopt.course.grading.plugins import load_reference

ASSIGNMENT = "number_formats"
SECRET = b"a course secret"


@pytest.fixture(scope="module")
def ref():
    return load_reference(ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")


def drawn(ref, student: str) -> dict[str, list[list[judge.Case]]]:
    """Each grade cell's cases for one student, as the grader draws them."""
    return {gid: [judge.draw(check, judge.case_rng(SECRET, assignment=ASSIGNMENT, notebook=ASSIGNMENT,
                                                   grade_id=gid, student=student, index=i))
                  for i, check in enumerate(checks)]
            for gid, checks in ref.checks.items()}


def test_the_reference_passes_its_own_checks_and_each_student_draws_other_values(ref):
    assert set(ref.checks) == {"test_e4m3", "test_e5m2", "test_fp8_value", "test_mxfp4", "test_nvfp4",
                               "test_bytes", "test_layer_fp8", "test_layer_fp4"}
    mine, theirs = drawn(ref, "ada"), drawn(ref, "grace")
    for gid, checks in ref.checks.items():
        for check, cases in zip(checks, mine[gid], strict=True):
            for one, expected in zip(cases, ref.expected(check, cases), strict=True):
                assert ("raised" in expected) == bool(one.must_name), (gid, one.about, expected)
                assert judge.judge_case(check, one, expected, expected) is None, (gid, one.about)
        if gid.startswith("test_layer"):  # 3 layers to draw from: ids share draws, but not all
            draws = {repr([c.variables for c in drawn(ref, f"student{i}")[gid][0]]) for i in range(12)}
            assert len(draws) > 1, gid
        else:
            assert [[c.variables for c in cases] for cases in mine[gid]] != \
                   [[c.variables for c in cases] for cases in theirs[gid]], gid


def test_the_fp8_ties_are_exact_midpoints_and_the_overflow_cases_overflow(ref):
    ns = dict(ref.namespace)
    cell = next(c for c in load_notebook("source", ASSIGNMENT).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "test_e4m3")
    judge.read_checks(hidden_region(cell.source), ns)  # defines its case generator, _fp8_cases
    for encoding in ("E4M3", "E5M2"):
        cases = {c.about: c.variables["values"] for c in ns["_fp8_cases"](judge.case_rng(
            SECRET, assignment=ASSIGNMENT, notebook=ASSIGNMENT, grade_id="t", student="ada"), encoding)}
        grid = np.array([v for v in ns["fp8_value"](list(range(128)), encoding) if math.isfinite(v)])
        for value in cases["ties between two neighbours"]:
            below, above = grid[grid < abs(value)].max(), grid[grid > abs(value)].min()
            assert abs(value) - below == above - abs(value), (encoding, value)
        assert all(abs(v) >= ns["LARGEST"][encoding] for v in cases["values past the largest finite number"])


def test_fp8_bits_are_torchs_saturating_casts_and_fp8_value_its_decoding(ref):
    fp8_bits, fp8_value = ref.namespace["fp8_bits"], ref.namespace["fp8_value"]
    rng = np.random.default_rng(0)
    for encoding, dtype in (("E4M3", torch.float8_e4m3fn), ("E5M2", torch.float8_e5m2)):
        largest = ref.namespace["LARGEST"][encoding]
        x = np.concatenate([rng.standard_normal(20_000) * 10 ** rng.uniform(-7, 7, 20_000),
                            [0.0, -0.0, -1e-30, largest, largest * 1.05, -1e9]])
        cast = torch.from_numpy(np.clip(x, -largest, largest)).to(dtype).view(torch.uint8)
        assert fp8_bits(x, encoding) == cast.tolist(), encoding
        decoded = torch.arange(256, dtype=torch.uint8).view(dtype).double().numpy()
        np.testing.assert_array_equal(fp8_value(list(range(256)), encoding), decoded)
        nan = torch.tensor([math.nan]).to(dtype).view(torch.uint8).tolist()
        assert fp8_bits([float("nan")], encoding) == nan


def test_the_block_formats_agree_with_the_course_quantizer(ref):
    """Codes and scales decode to hwopt.quantization's, on weights with outliers, tiny and zero blocks."""
    ns = ref.namespace
    rng = np.random.default_rng(1)
    for n in (32, 96, 4096):
        for sigma in (1e-6, 0.02, 300.0):
            x = rng.standard_normal(n) * sigma
            x[rng.integers(0, n)] *= 50
            x[:16] *= 1e-8  # a block far below the tensor's largest (NVFP4's smallest block scale)
            x[16:32] = 0.0
            mx, course = ns["mxfp4_quantize"](x), quantization.quantize(x[None], "mxfp4")
            codes, scales, _ = course.numpy()
            np.testing.assert_array_equal(ns["e2m1_value"](mx["codes"]), codes.ravel())
            np.testing.assert_array_equal(np.ldexp(1.0, np.array(mx["scales"]) - 127), scales.ravel())
            nv, course = ns["nvfp4_quantize"](x), quantization.quantize(x[None], "nvfp4")
            codes, scales, _ = course.numpy()
            np.testing.assert_array_equal(ns["e2m1_value"](nv["codes"]), codes.ravel())
            np.testing.assert_array_equal(ns["fp8_value"](nv["scales"], "E4M3"), scales.ravel())
            assert nv["tensor_scale"] == course.tensor_scale


def test_the_layer_round_trip_is_the_course_fake_quantize(ref):
    ns = ref.namespace
    for name, weight in ns["layer_weights"](0).items():
        w = weight.detach().double().numpy()
        for precision in ns["PRECISIONS"]:
            np.testing.assert_array_equal(ns["round_trip"](w, precision),
                                          quantization.fake_quantize(w, precision), err_msg=name)


def test_bytes_per_weight_is_the_format_tables_where_blocks_fill_rows_and_no_tensor_scale_is_stored(ref):
    stored = ref.namespace["stored_bytes_per_weight"]
    for precision in ("mxfp4", "fp8_e4m3"):
        assert stored(precision, 4096, 4096) == pytest.approx(formats.bytes_per_weight(precision), rel=1e-6)
    assert stored("nvfp4", 4096, 4096) > formats.bytes_per_weight("nvfp4")  # its fp32 tensor scale
    regrouped = quantization.blocked("mxfp4", 128)
    assert stored("mxfp4", 4096, 4096, 128) == pytest.approx(regrouped.bytes_per_weight)
