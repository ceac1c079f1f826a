"""experiments.fake_quant: each format's error on a weight, measured and predicted from its rounding steps;
finer groups cost scale bits; the plots and the explorer follow their inputs."""

import pytest
import torch

from hwopt import formats, quantization, widgets
from hwopt.experiments import fake_quant


def _weight(rows=64, cols=256, seed=0):
    return torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * 0.05


def test_finer_groups_cost_scale_bits_and_lower_the_error():
    rows = fake_quant.format_errors(_weight(), ["int4_g32", "int4_g64", "int4_g128", "int4"])
    errors = [r["relative_rmse"] for r in rows]
    assert errors == sorted(errors)
    assert [r["bits_per_weight"] for r in rows] == [formats.get(r["precision"]).bits_per_weight for r in rows]
    assert rows[0]["bits_per_weight"] > rows[1]["bits_per_weight"] > rows[2]["bits_per_weight"] > 4


@pytest.mark.parametrize("precision", ["int8", "int4_g32", "fp8_e4m3", "fp16"])
def test_the_uniform_noise_prediction_holds_where_values_spread_over_many_levels(precision):
    w = _weight()
    measured = fake_quant.relative_rmse(quantization.fake_quantize(w, precision), w)
    assert measured / fake_quant.predicted_relative_rmse(w, precision) == pytest.approx(1.0, abs=0.1)
    rows = fake_quant.format_errors(w, [precision])
    assert rows[0]["relative_rmse"] == pytest.approx(measured, rel=1e-3)


def test_relative_rmse_refuses_mismatched_or_zero_references():
    assert fake_quant.relative_rmse(torch.ones(3) * 1.1, torch.ones(3)) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="approx"):
        fake_quant.relative_rmse(torch.ones(3), torch.ones(4))
    with pytest.raises(ValueError, match="exact"):
        fake_quant.relative_rmse(torch.ones(3), torch.zeros(3))


def test_plots_and_the_explorer_follow_the_controls(monkeypatch):
    shown = []
    monkeypatch.setattr(widgets, "display", shown.append)
    box = fake_quant.format_explorer(_weight())
    assert set(box.controls) == {"precision", "block"}
    box.controls["precision"].value = "mxfp4"
    box.controls["block"].value = 64
    assert len(shown) == 3
    assert "E8M0 scale per 64" in shown[-1].axes[0].get_title()
    assert "4.125 bits/weight" in shown[-1].axes[0].get_title()
    assert fake_quant.plot_value_grids().axes[0].get_yticklabels()[0].get_text() == "mxfp4"
    rows = fake_quant.format_errors(_weight(), ["int4_g32", "nvfp4"])
    labels = [t.get_text() for t in fake_quant.plot_error_vs_bits(rows).axes[0].get_legend().get_texts()]
    assert labels[0].startswith("int4_g32: 5 bits") and labels[1].startswith("nvfp4: 4.5 bits")
