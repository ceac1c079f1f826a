"""experiments.precision: quantization errors, error maps, model accuracy and sizes, verdicts, the widget."""

import builtins

import pytest
import torch

from hwopt import widgets
from hwopt.experiments import precision
from hwopt.models import classifier


@pytest.fixture(scope="module")
def trained():
    data = classifier.load_digits()
    model = classifier.make_classifier(hidden=64)
    classifier.train(model, data, epochs=3)
    return model, data


def test_bytes_per_weight():
    assert precision.bytes_per_weight("fp32") == 4 and precision.bytes_per_weight("BF16") == 2
    assert precision.bytes_per_weight("int4") == 0.5 and precision.bytes_per_weight(2) == 0.25
    assert precision.bytes_per_weight("int4_g32") == 0.625  # a block format's scales count


def test_model_size_counts_a_block_formats_scales(trained):
    model, _ = trained
    weights = sum(m.weight.numel() for m in precision.linear_layers(model).values())
    extra = precision.model_size_bytes(model, "int4_g32") - precision.model_size_bytes(model, 4)
    assert extra == pytest.approx(weights * 4 / 32, abs=1)  # one fp32 scale per 32 weights


def test_per_channel_beats_per_tensor_when_rows_differ_in_range():
    w = torch.stack([torch.linspace(-1, 1, 50), torch.linspace(-0.01, 0.01, 50)])
    per_tensor = precision.quantization_error(w, 4)[1].max()
    per_channel = precision.quantization_error(w, 4, per_channel=True)[1].max()
    assert per_channel < per_tensor / 10
    assert precision.quantization_error(w, 4, per_channel=True).dtype == torch.float32


def test_error_shrinks_with_bits_and_zero_rows_are_safe():
    torch.manual_seed(0)
    w = torch.randn(32, 16)
    errs = [precision.error_summary(w, b)["relative_rmse"] for b in (2, 4, 8)]
    assert errs[0] > errs[1] > errs[2] > 0
    assert precision.quantization_error(torch.zeros(3, 4), 4, per_channel=True).abs().sum() == 0
    assert precision.quantization_error(w.half(), 8).max() <= w.abs().max() / 127 / 2 + 1e-3


def test_model_quantization_keeps_layers_and_leaves_original(trained):
    model, _ = trained
    original = model[0].weight.clone()
    q = precision.quantize_model_weights(model, 2, keep=["4"])
    assert torch.equal(model[0].weight, original)
    assert torch.equal(q[4].weight, model[4].weight) and not torch.equal(q[0].weight, model[0].weight)
    assert len(torch.unique(q[0].weight)) <= 3  # 2-bit symmetric: -1, 0, 1 times the scale


def test_model_size_bytes(trained):
    model, _ = trained
    n_weights = sum(m.weight.numel() for m in precision.linear_layers(model).values())
    n_bias = sum(m.bias.numel() for m in precision.linear_layers(model).values())
    assert precision.model_size_bytes(model) == (n_weights + n_bias) * 4
    assert precision.model_size_bytes(model, "int8") == n_weights + n_bias * 4 + 3 * 8
    assert precision.model_size_bytes(model, 4, per_channel=True) == n_weights // 2 + n_bias * 4 + 8 * (
        64 + 64 + 10
    )
    assert precision.model_size_bytes(model, 2, keep=["0"]) < precision.model_size_bytes(model, 8)


def test_accuracy_cliff_and_layer_sensitivity(trained):
    model, data = trained
    cliff = precision.accuracy_vs_bits(model, data, (8, 2))
    reference = classifier.accuracy(model, data.x_test, data.y_test)
    assert abs(cliff[8] - reference) < 0.02 and cliff[2] < cliff[8]
    sensitivity = precision.layer_sensitivity(model, data, 2)
    assert set(sensitivity) == {"0", "2", "4"} and all(0 <= v <= 1 for v in sensitivity.values())


def test_in_dtype_matches_fp32_within_tolerance(trained):
    model, data = trained
    x = data.x_test[:16]
    with torch.inference_mode():
        ref = model(x)
    for name, tol in (("fp32", 1e-6), ("bf16", 0.5), ("fp16", 0.05)):
        out = precision.in_dtype(model, name)(x)
        assert out.dtype == {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]
        assert (out.float() - ref).abs().max() < tol * max(1.0, ref.abs().max().item())


def test_verdicts_follow_the_measurement():
    assert "SLOWER" in precision.half_precision_verdict(100e9, 1e9)
    assert "1.0 against 100.0 GFLOP/s" in precision.half_precision_verdict(100e9, 1e9)  # absolute figures
    assert "same speed" in precision.half_precision_verdict(100e9, 95e9)
    assert "faster" in precision.half_precision_verdict(100e9, 400e9, "bf16")
    assert "saturates" in precision.int8_saturation_verdict(0.15, 0.01, has_vnni=False)
    assert "no saturation" in precision.int8_saturation_verdict(0.01, 0.01, has_vnni=True)


def test_plots_return_figures(trained):
    model, data = trained
    fig = precision.plot_error_map(model[0].weight, 4, per_channel=True, accuracy_value=0.9)
    assert "per-channel" in fig.axes[0].get_title()
    fig = precision.plot_accuracy_cliff({"per-tensor": {8: 0.9, 2: 0.3}}, reference=0.95)
    assert fig.axes[0].get_ylabel() == "test accuracy (%)"


def test_precision_explorer_redraws_on_change(trained, monkeypatch):
    model, data = trained
    shown = []
    monkeypatch.setattr(widgets, "display", shown.append)
    box = precision.precision_explorer(model, data, layer="2")
    assert set(box.controls) == {"bits", "granularity", "mode"} and len(shown) == 1
    box.controls["bits"].value = 2
    box.controls["granularity"].value = "per-channel"
    assert len(shown) == 3 and "2-bit per-channel" in shown[-1].axes[0].get_title()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: precision.bytes_per_weight("fp8x"), "precision"),
        (lambda: precision.bytes_per_weight(0), "precision"),
        (lambda: precision.quantization_error(torch.ones(3), 1), "bits"),
        (lambda: precision.quantization_error(torch.ones(3), 17), "bits"),
        (lambda: precision.quantization_error(torch.ones(3, dtype=torch.int32), 4), "w must be"),
        (lambda: precision.quantization_error(torch.ones(3), 4, per_channel=True), "per_channel"),
        (lambda: precision.quantization_error([1.0, 2.0], 4), "w must be"),
        (lambda: precision.linear_layers(torch.nn.ReLU()), "no nn.Linear"),
        (lambda: precision.quantize_model_weights(classifier.make_classifier(8), 4, keep=["9"]), "keep"),
        (lambda: precision.in_dtype(classifier.make_classifier(8), "fp8"), "precision"),
        (lambda: precision.half_precision_verdict(0, 1), "fp32_flops"),
        (lambda: precision.int8_saturation_verdict(-1, 0), ">= 0"),
        (lambda: precision.plot_accuracy_cliff({}), "curves"),
        (lambda: precision.precision_explorer(classifier.make_classifier(8), classifier.load_digits(),
                                              layer="x"),
         "layer"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_keep_bits_quantizes_kept_layers_more_gently(trained):
    model, _ = trained
    q = precision.quantize_model_weights(model, 2, keep=["0"], keep_bits=8)
    assert len(torch.unique(q[0].weight)) > 3 and len(torch.unique(q[2].weight)) <= 3


def test_torch_dynamic_int8_agrees_with_fp32_on_both_apis(trained):
    model, data = trained
    api = precision.torch_int8_api()
    assert api == "torch.ao" or api.startswith("torchao ")
    q = precision.torch_dynamic_int8(model)  # torchao where it imports
    assert classifier.agreement(q, model, data.x_test) > 0.95
    if api.startswith("torchao"):
        assert "torchao" in type(q[0].weight).__module__ and q[0].weight.dtype == torch.float32
    with pytest.warns(DeprecationWarning, match="deprecated"):  # the old path says that it is old
        old = precision.torch_dynamic_int8(model, api="torch.ao")
    assert "quantized" in type(old[0]).__module__
    assert classifier.agreement(old, model, data.x_test) > 0.95
    assert type(model[0]) is torch.nn.Linear and model[0].weight.dtype == torch.float32  # original untouched
    with pytest.raises(ValueError, match="api"):
        precision.torch_dynamic_int8(model, api="fbgemm")


def test_torch_int8_api_falls_back_when_torchao_does_not_import(monkeypatch):
    real_import = builtins.__import__

    def no_torchao(name, *args, **kwargs):
        if name.startswith("torchao"):
            raise ImportError("no torchao here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torchao)
    assert precision.torch_int8_api() == "torch.ao"


def test_compare_variants_and_table(trained):
    model, data = trained
    rows = precision.compare_variants(
        {"fp32": model, "int2": precision.quantize_model_weights(model, 2)},
        data,
        sizes_bytes={"fp32": 4000},
        timed=["fp32"],
        batch_size=8,
        repeats=2,
    )
    assert [r["variant"] for r in rows] == ["fp32", "int2"]
    assert rows[0]["agreement"] == 1.0 and rows[0]["latency"].median_s > 0 and rows[1]["latency"] is None
    assert [r["runs_on"] for r in rows] == ["cpu", "cpu"]
    table = precision.format_variants(rows)
    assert "fp32" in table and "4.0" in table and "runs on" in table and table.count("\n") == 2


def test_runs_on_names_where_each_variant_computes():
    class OnCuda:
        device = "cuda"

    assert precision.runs_on(torch.nn.Linear(2, 2)) == "cpu"
    assert precision.runs_on(OnCuda()) == "cuda"
    assert precision.runs_on(torch.nn.ReLU()) == precision.runs_on(lambda x: x) == "-"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"predictors": {}}, "predictors"),
        ({"reference": "nope"}, "reference"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_compare_variants_bad_input(trained, kwargs, match):
    model, data = trained
    args = {"predictors": {"fp32": model}, **kwargs}
    with pytest.raises(ValueError, match=match):
        precision.compare_variants(args.pop("predictors"), data, **args)
