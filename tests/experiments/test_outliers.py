"""outliers: planted outlier channels leave FP32 unchanged and break per-tensor activations; SmoothQuant's
migration preserves X W^T exactly and fixes them; AWQ's search is never worse than plain group int4."""

import pytest
import torch

from hwopt import quantization
from hwopt.experiments import fake_quant, outliers
from hwopt.models import classifier


@pytest.fixture(scope="module")
def trained():
    return classifier.train_digits_classifier(hidden=64, epochs=5)


def _activations(tokens=256, channels=128, planted=(3, 40, 77), factor=60.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, channels, generator=g)
    x[:, list(planted)] *= factor
    w = torch.randn(64, channels, generator=g) / channels**0.5
    return x, w


def test_migration_preserves_the_product_before_quantization():
    x, w = _activations()
    s = outliers.smoothing_scales(x, w, alpha=0.5)
    assert torch.allclose((x / s) @ (w * s).T, x @ w.T, rtol=1e-4, atol=1e-4)
    peaks = (x / s).abs().amax(dim=0)
    assert peaks.max() / peaks.median() < x.abs().amax(dim=0).max() / x.abs().amax(dim=0).median() / 10


def test_smoothquant_error_is_strictly_below_per_tensor_on_injected_outliers():
    x, w = _activations()
    exact = x @ w.T
    errors = {m: fake_quant.relative_rmse(outliers.w8a8_output(x, w, m), exact)
              for m in outliers.ACTIVATION_SCALES}
    assert errors["smoothquant"] < errors["per-tensor"] / 3
    assert errors["per-channel"] < errors["per-tensor"]
    clean, w_clean = _activations(factor=1.0)
    assert fake_quant.relative_rmse(outliers.w8a8_output(clean, w_clean), clean @ w_clean.T) < 0.02


def test_activations_take_a_scale_per_tensor_or_per_channel():
    x, _ = _activations()
    per_channel = outliers.quantize_activations(x, 8, per_channel=True)
    for c in (3, 5):  # a planted channel and an ordinary one: each its own step, max|x_c| / 127
        step = float(x[:, c].abs().max()) / 127
        assert float((per_channel[:, c] - x[:, c]).abs().max()) <= step / 2 * (1 + 1e-5)
    per_tensor = outliers.quantize_activations(x, 8)
    assert len(torch.unique(per_tensor[:, 5])) < len(torch.unique(per_channel[:, 5])) / 4


def test_detection_finds_the_planted_channels():
    x, _ = _activations()
    assert outliers.outlier_channels(x) == [3, 40, 77]
    assert outliers.outlier_channels(_activations(factor=1.0)[0]) == []


def test_planted_outliers_leave_the_fp32_model_unchanged_and_break_per_tensor_w8a8(trained):
    model, data = trained
    planted, channels = outliers.with_outlier_channels(model, "2", n_channels=4, factor=1000.0)
    assert len(channels) == 4
    assert torch.allclose(planted(data.x_test), model(data.x_test), rtol=1e-3, atol=1e-3)
    seen = outliers.layer_inputs(planted, data.x_train[:256])
    assert set(seen) == {"0", "2", "4"} and outliers.outlier_channels(seen["2"]) == channels
    accuracy = {m: classifier.accuracy(outliers.w8a8_model(planted, data.x_train[:256], m), data.x_test,
                                       data.y_test) for m in outliers.ACTIVATION_SCALES}
    fp32 = classifier.accuracy(model, data.x_test, data.y_test)
    assert accuracy["per-tensor"] < fp32 - 0.2, accuracy  # collapses
    assert accuracy["smoothquant"] > fp32 - 0.03 and accuracy["per-channel"] > fp32 - 0.03, accuracy
    with pytest.raises(ValueError, match="layer"):
        outliers.with_outlier_channels(model, "0")


def test_awq_search_is_never_worse_than_plain_group_int4():
    x, w = _activations(factor=30.0)
    result = outliers.awq_search(x, w, "int4_g32", grid=10)
    plain = fake_quant.relative_rmse(x @ quantization.fake_quantize(w, "int4_g32").T, x @ w.T)
    assert result["errors"][0.0] == pytest.approx(plain, rel=1e-5)
    assert result["errors"][result["alpha"]] == min(result["errors"].values())
    assert result["errors"][result["alpha"]] < plain
    assert result["scales"].shape == (w.shape[1],) and result["weight"].shape == w.shape


def test_weight_only_models_quantize_every_layer(trained):
    model, data = trained
    plain = outliers.weight_only_model(model, "int4_g32")
    awq = outliers.weight_only_model(model, "int4_g32", awq_x=data.x_train[:128], grid=5)
    for variant in (plain, awq):
        assert classifier.accuracy(variant, data.x_test, data.y_test) > 0.8
    assert not torch.equal(plain[0].weight, model[0].weight)


def test_heavy_tailed_weights_have_heavier_tails_than_a_gaussian():
    w = outliers.heavy_tailed_weights(256, 256, df=4.0)
    kurtosis = float(((w - w.mean()) ** 4).mean() / w.var() ** 2)
    assert w.std() * 16 == pytest.approx(1.0, rel=0.05) and kurtosis > 4  # a Gaussian's is 3


def test_the_outlier_sweep_collapses_per_tensor_only(trained):
    model, data = trained
    curves = outliers.accuracy_vs_outliers(model, data, factors=(1, 1000), n_channels=4, calibration=128)
    assert set(curves) == set(outliers.ACTIVATION_SCALES)
    assert curves["per-tensor"][1000] < curves["per-tensor"][1] - 0.2
    assert curves["smoothquant"][1000] > curves["smoothquant"][1] - 0.03
    figure = outliers.plot_accuracy_vs_outliers(curves, reference=0.97)
    assert len(figure.axes[0].lines) == 4
