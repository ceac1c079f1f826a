"""W8A8 and weight-only methods on the course's draft, judged by perplexity on a slice of the validation text:
per-token activation scales beat one per tensor, GPTQ beats round-to-nearest, bytes count the scales."""

import pytest

from hwopt import formats
from hwopt.experiments import llm_accuracy, llm_quantization

SHORT = {"seq_len": 128, "max_windows": 3, "progress": False, "cache": False}


@pytest.fixture(scope="module")
def draft():
    return llm_accuracy.load("draft")[0]


def test_calibration_text_is_train_split_windows_of_the_context():
    windows = llm_quantization.calibration_windows("draft", 2)
    assert windows.shape == (2, 512) and int(windows.max()) < 4096


def test_outlier_report_covers_every_layer_and_input(draft):
    inputs = llm_quantization.group_inputs(draft, llm_quantization.calibration_windows("draft", 1))
    rows = llm_quantization.outlier_rows(inputs)
    assert len(rows) == 3 * len(llm_quantization.GROUPS)
    assert all(r["peak_ratio"] >= 1 and r["channels"] in (256, 768) for r in rows)
    report = llm_quantization.outlier_report(rows)
    assert "the largest: layer" in report and report.count("\n") == 5


def test_per_token_activation_scales_beat_one_per_tensor():
    full = llm_accuracy.evaluate("draft", "fp32", **SHORT)
    tensor = llm_quantization.evaluate_w8a8("draft", "per-tensor", **SHORT)
    token = llm_quantization.evaluate_w8a8("draft", "per-token", **SHORT)
    assert full["perplexity"] <= token["perplexity"] < tensor["perplexity"]
    assert token["top1_agreement"] > tensor["top1_agreement"]
    assert tensor["variant"] == "W8A8 per-tensor" and 1.0 < tensor["bytes_per_weight"] < 1.02


def test_gptq_beats_round_to_nearest_at_the_same_bytes():
    rtn = llm_quantization.evaluate_weight_only("draft", "int4_g128", "rtn", **SHORT)
    calibrated = llm_quantization.evaluate_weight_only("draft", "int4_g128", "gptq", **SHORT)
    assert calibrated["perplexity"] < rtn["perplexity"]
    stored = formats.get("int4_g128").bytes_per_weight
    assert rtn["bytes_per_weight"] == calibrated["bytes_per_weight"] == stored
