"""fake_quant: the numpy float emulation is bit-exact with torch's float8 casts; block formats store what
their specification says (E2M1 elements, E8M0 powers of two, E4M3 scales) at the bytes formats states."""

import numpy as np
import pytest
import torch

from hwopt import formats
from hwopt.experiments import fake_quant, precision

TORCH_FP8 = [("E4M3", torch.float8_e4m3fn), ("E5M2", torch.float8_e5m2)]


def _spread(n=200_000, seed=0):
    """float32 values over 2^-24 .. 2^20 of both signs: subnormals, normals and beyond the fp8 ranges."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g) * torch.exp2(torch.empty(n).uniform_(-24, 20, generator=g))


@pytest.mark.parametrize("encoding, dtype", TORCH_FP8)
def test_emulation_is_bit_exact_with_torch_inside_the_range(encoding, dtype):
    top = formats.ENCODINGS[encoding].max_value
    x = _spread()
    emulated = fake_quant.round_to_float(x, encoding)
    assert torch.equal(emulated, x.clamp(-top, top).to(dtype).float())  # saturation: clamp, then cast


@pytest.mark.parametrize("encoding, dtype", TORCH_FP8)
def test_ties_round_to_even_and_subnormals_match_torch(encoding, dtype):
    enc = formats.ENCODINGS[encoding]
    grid = torch.from_numpy(fake_quant.representable_values(formats.get(dtype).name)).float()
    midpoints = (grid[1:] + grid[:-1]) / 2  # every tie, the subnormal ones included
    assert torch.equal(fake_quant.round_to_float(midpoints, encoding), midpoints.to(dtype).float())
    assert torch.equal(fake_quant.round_to_float(grid, encoding), grid)  # representable values stay
    half = torch.tensor([enc.min_subnormal / 2])
    assert float(fake_quant.round_to_float(half, encoding)) == 0.0  # a tie between 0 and the smallest: even
    assert float(fake_quant.round_to_float(torch.tensor([0.75 * enc.min_subnormal]), encoding)) \
        == enc.min_subnormal


@pytest.mark.parametrize("encoding, dtype", TORCH_FP8)
def test_values_beyond_the_range_saturate(encoding, dtype):
    top = formats.ENCODINGS[encoding].max_value
    x = torch.tensor([2 * top, -10 * top, 1e30])
    assert fake_quant.round_to_float(x, encoding).tolist() == [top, -top, top]


@pytest.mark.parametrize("fmt, count", [("fp8_e4m3", 253), ("fp8_e5m2", 247)])  # 256 codes less NaN, inf, -0
def test_the_fp8_grids_are_every_finite_torch_value(fmt, count):
    codes = torch.arange(256, dtype=torch.uint8).view(getattr(torch, formats.torch_dtype(fmt))).float()
    finite = np.unique(codes[codes.isfinite()].numpy().astype(np.float64))
    values = fake_quant.representable_values(fmt)
    assert len(values) == count and np.array_equal(values, finite)


def test_the_e2m1_grid_is_the_ocp_fp4_grid():
    for fmt in ("mxfp4", "nvfp4"):
        values = fake_quant.representable_values(fmt)
        assert set(values[values >= 0]) == {0, 0.5, 1, 1.5, 2, 3, 4, 6}
        assert np.array_equal(values, -values[::-1])
    assert fake_quant.representable_values("int4").tolist() == list(range(-7, 8))


def _weight(rows=64, cols=256, seed=0):
    return torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * 0.05


def test_mxfp4_stores_e2m1_values_under_power_of_two_scales():
    q = fake_quant.quantize_blocks(_weight(), "mxfp4")
    block = formats.get("mxfp4").block
    assert q.values.shape == (64 * 256 // block, block)
    assert set(np.abs(q.values).ravel()) <= {0, 0.5, 1, 1.5, 2, 3, 4, 6}
    exponents = np.log2(q.scales)
    assert np.array_equal(exponents, np.round(exponents))  # E8M0: powers of two
    as_e8m0 = torch.from_numpy(q.scales).float().to(torch.float8_e8m0fnu).float().double().numpy()
    assert np.array_equal(as_e8m0, q.scales)
    largest = np.abs(q.values).max(axis=1)  # the OCP rule puts each block's largest value in [4, 6]
    assert np.all((largest >= 4) & (largest <= 6))


def test_nvfp4_block_scales_are_e4m3_under_one_fp32_tensor_scale():
    w = _weight()
    q = fake_quant.quantize_blocks(w, "nvfp4")
    assert q.values.shape[1] == formats.get("nvfp4").block
    scales = torch.from_numpy(q.scales).float()
    assert torch.equal(scales.to(torch.float8_e4m3fn).float(), scales)
    assert q.tensor_scale == pytest.approx(float(w.abs().max()) / (6 * 448))
    assert set(np.abs(q.values).ravel()) <= {0, 0.5, 1, 1.5, 2, 3, 4, 6}


def test_int_groups_reuse_lesson_4s_quantizer_with_scales_in_their_format():
    w = _weight()
    q = fake_quant.quantize_blocks(w, "int4_g128")
    assert np.abs(q.values).max() == 7 and q.values.shape == (64 * 2, 128)
    assert np.array_equal(q.scales, q.scales.astype(np.float16).astype(np.float64))  # fp16 scales
    per_tensor = fake_quant.fake_quantize(w, "int8")
    assert torch.allclose(per_tensor, precision.fake_quantize(w, 8))


@pytest.mark.parametrize("fmt", ["int4_g32", "int4_g64", "int4_g128", "mxfp4", "nvfp4", "fp8_e4m3", "int8"])
def test_fake_quantize_keeps_shape_type_and_pads_partial_blocks(fmt):
    w = _weight(5, 70)  # 70 is no multiple of any block
    out = fake_quant.fake_quantize(w, fmt)
    assert out.shape == w.shape and out.dtype == w.dtype
    assert fake_quant.relative_rmse(out, w) < 0.3
    assert np.allclose(fake_quant.fake_quantize(w.numpy(), fmt), out.double().numpy(), rtol=1e-6)


def test_finer_groups_cost_scale_bits_and_lower_the_error():
    rows = fake_quant.format_errors(_weight(), ["int4_g32", "int4_g64", "int4_g128", "int4"])
    errors = [r["relative_rmse"] for r in rows]
    assert errors == sorted(errors)
    assert [r["bits_per_weight"] for r in rows] == [formats.get(r["format"]).bits_per_weight for r in rows]
    assert rows[0]["bits_per_weight"] > rows[1]["bits_per_weight"] > rows[2]["bits_per_weight"] > 4


def test_bytes_per_weight_agree_with_formats():
    w = _weight()
    for fmt in ("mxfp4", "nvfp4", "int4_g32", "int4_g64", "int4_g128"):
        f = formats.get(fmt)
        q = fake_quant.quantize_blocks(w, fmt)
        stored_bits = q.values.size * f.bits + q.scales.size * f.scale_bits
        assert stored_bits / w.numel() == f.bits_per_weight
        assert f.bits_per_weight / 8 == formats.bytes_per_weight(fmt)
    assert formats.get("mxfp4").bits_per_weight == 4.25 and formats.get("nvfp4").bits_per_weight == 4.5


def test_regrouping_keeps_the_scale_format_and_changes_the_bits():
    f = formats.get("int4_g128").with_block(32)
    assert f.scale_format == "fp16" and f.bits_per_weight == 4.5
    assert fake_quant.quantize_blocks(_weight(), "mxfp4", block=16).values.shape[1] == 16
    with pytest.raises(ValueError, match="block"):
        formats.get("int8").with_block(32)


@pytest.mark.parametrize("fmt", ["int8", "int4_g32", "fp8_e4m3", "fp16"])
def test_the_uniform_noise_prediction_holds_where_values_spread_over_many_levels(fmt):
    w = _weight()
    measured = fake_quant.relative_rmse(fake_quant.fake_quantize(w, fmt), w)
    assert measured / fake_quant.predicted_relative_rmse(w, fmt) == pytest.approx(1.0, abs=0.1)


def test_relative_rmse_refuses_mismatched_or_zero_references():
    assert fake_quant.relative_rmse(torch.ones(3) * 1.1, torch.ones(3)) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="approx"):
        fake_quant.relative_rmse(torch.ones(3), torch.ones(4))
    with pytest.raises(ValueError, match="exact"):
        fake_quant.relative_rmse(torch.ones(3), torch.zeros(3))


def test_plots_and_the_explorer_follow_the_controls(monkeypatch):
    from hwopt import widgets

    shown = []
    monkeypatch.setattr(widgets, "display", shown.append)
    box = fake_quant.format_explorer(_weight())
    assert set(box.controls) == {"fmt", "block"}
    box.controls["fmt"].value = "mxfp4"
    box.controls["block"].value = 64
    assert len(shown) == 3
    assert "E8M0 scale per 64" in shown[-1].axes[0].get_title()
    assert "4.125 bits/weight" in shown[-1].axes[0].get_title()
    assert fake_quant.plot_value_grids().axes[0].get_yticklabels()[0].get_text() == "mxfp4"
    rows = fake_quant.format_errors(_weight(), ["int4_g32", "nvfp4"])
    labels = [t.get_text() for t in fake_quant.plot_error_vs_bits(rows).axes[0].get_legend().get_texts()]
    assert labels[0].startswith("int4_g32: 5 bits") and labels[1].startswith("nvfp4: 4.5 bits")
