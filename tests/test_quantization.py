"""quantization: the integer grids by hand (symmetric, asymmetric, per tensor, channel and block); the float
emulation bit-exact with torch's float8 casts; block formats store what their specification says (E2M1
elements, E8M0 powers of two, E4M3 scales, fp16 scales) at the bytes formats states; numpy and torch alike."""

import numpy as np
import pytest
import torch

from hwopt import formats, quantization

TORCH_FP8 = [("E4M3", torch.float8_e4m3fn), ("E5M2", torch.float8_e5m2)]


def _weight(rows=64, cols=256, seed=0):
    return torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * 0.05


# ---- integer grids -----------------------------------------------------------------------------------------


def test_symmetric_quantization_by_hand():
    w = torch.tensor([[-1.0, -0.5, 0.0, 0.24, 1.0]])
    q = quantization.quantize(w, 3)  # codes -3..3, scale 1/3
    assert q.codes.tolist() == [[-3, -2, 0, 1, 3]] and q.codes.dtype == torch.int8
    assert q.scales.item() == pytest.approx(1 / 3) and q.zero_points is None and q.symmetric
    assert torch.allclose(q.dequantize(), torch.tensor([[-1.0, -2 / 3, 0.0, 1 / 3, 1.0]]))


def test_asymmetric_uses_all_codes_and_keeps_zero_exact():
    w = torch.tensor([0.0, 0.1, 0.2, 0.3])
    q = quantization.quantize(w, 2, symmetric=False)
    assert q.codes.tolist() == [0, 1, 2, 3] and q.zero_points.item() == 0 and not q.symmetric
    assert torch.allclose(q.dequantize(), w)
    shifted = torch.tensor([-1.0, 0.0, 2.0])  # the range widened to hold 0: zero stays exact
    assert quantization.fake_quantize(shifted, 4, symmetric=False)[1].item() == 0.0
    q = quantization.quantize(shifted, 8, symmetric=False)
    assert q.codes.dtype == torch.uint8 and q.zero_points.item() == 85  # round(1 / (3 / 255))


def test_levels_are_the_codes_a_grid_uses():
    assert quantization.levels(4) == 15 and quantization.levels(2) == 3 and quantization.levels(8) == 255
    assert quantization.levels(4, symmetric=False) == 16 and quantization.levels(2, symmetric=False) == 4
    for bits in (2, 3, 4, 8):
        symmetric = quantization.quantize(torch.linspace(-1, 1, 1001), bits).codes
        assert len(torch.unique(symmetric)) == quantization.levels(bits)
        asymmetric = quantization.quantize(torch.linspace(0, 1, 1001), bits, symmetric=False).codes
        assert len(torch.unique(asymmetric)) == quantization.levels(bits, symmetric=False)
    with pytest.raises(ValueError, match="bits"):
        quantization.levels(1)


def test_per_channel_scales_each_row_and_beats_per_tensor_when_rows_differ():
    w = torch.stack([torch.linspace(-1, 1, 50), torch.linspace(-0.01, 0.01, 50)])
    per_tensor = (quantization.fake_quantize(w, 4) - w)[1].abs().max()
    per_channel = (quantization.fake_quantize(w, 4, per_channel=True) - w)[1].abs().max()
    assert per_channel < per_tensor / 10
    assert quantization.quantize(w, 4, per_channel=True).scales.shape == (2, 1)
    by_column = quantization.quantize(w, 4, per_channel=True, axis=0)  # the reduction axis: rows
    assert by_column.scales.shape == (1, 50) and by_column.block == 2
    np.testing.assert_allclose(by_column.scales.numpy()[0], w.abs().amax(dim=0).numpy() / 7, rtol=1e-6)


def test_blocks_run_along_the_axis_and_the_last_one_may_be_short():
    w = torch.tensor([[0.7, -0.1, 0.35, -0.35, 0.05]])
    q = quantization.quantize(w, 4, block=2)  # blocks of 2, 2 and 1, each its own fp32 scale
    np.testing.assert_allclose(q.scales.numpy(), [[0.1, 0.05, 0.05 / 7]], rtol=1e-6)
    assert q.codes.tolist() == [[7, -1, 7, -7, 7]] and q.precision.bits_per_weight == 4 + 32 / 2
    np.testing.assert_allclose(q.dequantize().numpy(), w.numpy(), atol=1e-6)
    assert quantization.quantize(w.T, 4, block=2, axis=0).scales.shape == (3, 1)


def test_zero_blocks_get_scale_one_and_round_trips_stay_within_half_a_step():
    w = np.zeros((64, 96), np.float32)
    w[:, 0] = np.linspace(-1, 1, 64)
    q = quantization.quantize(w, "int8", per_channel=True, axis=0)  # a scale per column of w (K, N)
    assert q.scales[0, 0] == pytest.approx(1 / 127) and np.all(q.scales[0, 1:] == 1.0)
    assert q.codes[0, 0] == -127 and q.codes[-1, 0] == 127 and not q.codes[:, 1:].any()
    for precision in ("mxfp4", "nvfp4", "fp8_e4m3"):  # a power-of-two scale too: 2^0, not 2^-emax
        assert np.all(quantization.quantize(np.zeros((2, 64)), precision).scales == 1.0), precision
    rng = np.random.default_rng(0)
    w = rng.standard_normal((96, 64)).astype(np.float32)
    for precision, kwargs in [("int8", {"per_channel": True}), ("int4_g32", {}), ("int8", {"block": 32}),
                              (6, {"per_channel": True, "symmetric": False})]:
        q = quantization.quantize(w, precision, axis=0, **kwargs)
        assert np.all(np.abs(q.dequantize() - w) <= q.steps() / 2 + 1e-6), (precision, kwargs)


def test_scales_are_stored_in_the_formats_scale_format_and_the_codes_use_them():
    w = _weight()
    q = quantization.quantize(w, "int4_g128")
    assert q.codes.abs().max() == 7 and q.scales.shape == (64, 2)
    scales = q.scales.numpy()
    assert np.array_equal(scales, scales.astype(np.float16).astype(np.float32))  # fp16 scales
    expanded = np.repeat(scales, 128, axis=1)
    assert np.array_equal(q.codes.numpy(), np.clip(np.rint(w.numpy() / expanded), -7, 7))


def test_block_formats_by_name_or_by_blocks():
    assert quantization.blocked(4, 32).name == "int4_g32"  # formats holds that layout
    assert quantization.blocked("int8", 128).name == "int8_g128"
    regrouped = quantization.blocked("int4_g128", 32)
    assert regrouped.scale_format == "fp16" and regrouped.bits_per_weight == 4.5
    grouped = quantization.blocked("int4", 16)  # no entry: fp32 scales
    assert grouped.block == 16 and grouped.scale_format == "fp32" and grouped.bits_per_weight == 6
    assert quantization.quantize(_weight(), "mxfp4", block=16).scales.shape == (64, 16)
    with pytest.raises(ValueError, match="block"):
        quantization.blocked("fp16", 32)


# ---- float formats ----------------------------------------------------------------------------------------


def _spread(n=200_000, seed=0):
    """float32 values over 2^-24 .. 2^20 of both signs: subnormals, normals and beyond the fp8 ranges."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g) * torch.exp2(torch.empty(n).uniform_(-24, 20, generator=g))


@pytest.mark.parametrize("encoding, dtype", TORCH_FP8)
def test_emulation_is_bit_exact_with_torch_inside_the_range(encoding, dtype):
    top = formats.ENCODINGS[encoding].max_value
    x = _spread()
    emulated = quantization.round_to_float(x, encoding)
    assert emulated.dtype == torch.float32
    assert torch.equal(emulated, x.clamp(-top, top).to(dtype).float())  # saturation: clamp, then cast
    assert np.array_equal(quantization.round_to_float(x.numpy(), encoding), emulated.numpy())


@pytest.mark.parametrize("encoding, dtype", TORCH_FP8)
def test_ties_round_to_even_and_subnormals_match_torch(encoding, dtype):
    enc = formats.ENCODINGS[encoding]
    grid = torch.from_numpy(quantization.representable_values(formats.get(dtype).name)).float()
    midpoints = (grid[1:] + grid[:-1]) / 2  # every tie, the subnormal ones included
    assert torch.equal(quantization.round_to_float(midpoints, encoding), midpoints.to(dtype).float())
    assert torch.equal(quantization.round_to_float(grid, encoding), grid)  # representable values stay
    half = torch.tensor([enc.min_subnormal / 2])
    assert float(quantization.round_to_float(half, encoding)) == 0.0  # a tie between 0 and the smallest: even
    assert float(quantization.round_to_float(torch.tensor([0.75 * enc.min_subnormal]), encoding)) \
        == enc.min_subnormal


@pytest.mark.parametrize("encoding, dtype", TORCH_FP8)
def test_values_beyond_the_range_saturate(encoding, dtype):
    top = formats.ENCODINGS[encoding].max_value
    x = torch.tensor([2 * top, -10 * top, 1e30])
    assert quantization.round_to_float(x, encoding).tolist() == [top, -top, top]


@pytest.mark.parametrize("precision, count", [("fp8_e4m3", 253), ("fp8_e5m2", 247)])  # 256 less NaN, inf, -0
def test_the_fp8_grids_are_every_finite_torch_value(precision, count):
    codes = torch.arange(256, dtype=torch.uint8).view(getattr(torch, formats.torch_dtype(precision))).float()
    finite = np.unique(codes[codes.isfinite()].numpy().astype(np.float64))
    values = quantization.representable_values(precision)
    assert len(values) == count and np.array_equal(values, finite)


def test_the_e2m1_grid_is_the_ocp_fp4_grid_and_int_grids_are_symmetric():
    for precision in ("mxfp4", "nvfp4"):
        values = quantization.representable_values(precision)
        assert set(values[values >= 0]) == {0, 0.5, 1, 1.5, 2, 3, 4, 6}
        assert np.array_equal(values, -values[::-1])
    assert quantization.representable_values("int4").tolist() == list(range(-7, 8))
    assert quantization.representable_values(3).tolist() == [-3, -2, -1, 0, 1, 2, 3]


def test_mxfp4_stores_e2m1_values_under_power_of_two_scales():
    q = quantization.quantize(_weight(), "mxfp4")
    block = formats.get("mxfp4").block
    assert q.codes.shape == (64, 256) and q.scales.shape == (64, 256 // block) and q.block == block
    codes = q.codes.numpy()
    assert set(np.abs(codes).ravel()) <= {0, 0.5, 1, 1.5, 2, 3, 4, 6}
    exponents = np.log2(q.scales.numpy())
    assert np.array_equal(exponents, np.round(exponents))  # E8M0: powers of two
    assert torch.equal(q.scales.to(torch.float8_e8m0fnu).float(), q.scales)
    largest = np.abs(codes).reshape(64, -1, block).max(axis=-1)  # the OCP rule: a block's largest in [4, 6]
    assert np.all((largest >= 4) & (largest <= 6))


def test_nvfp4_block_scales_are_e4m3_under_one_fp32_tensor_scale():
    w = _weight()
    q = quantization.quantize(w, "nvfp4")
    assert q.scales.shape == (64, 256 // formats.get("nvfp4").block)
    assert torch.equal(q.scales.to(torch.float8_e4m3fn).float(), q.scales)
    assert q.tensor_scale == pytest.approx(float(w.abs().max()) / (6 * 448))
    assert q.tensor_scale == float(np.float32(q.tensor_scale))  # stored in fp32
    assert set(np.abs(q.codes.numpy()).ravel()) <= {0, 0.5, 1, 1.5, 2, 3, 4, 6}


def test_fp8_takes_a_scale_per_tensor_or_per_channel_and_casts_take_none():
    w = _weight()
    per_tensor = quantization.quantize(w, "fp8_e4m3")
    assert per_tensor.scales.shape == (1, 1)
    assert per_tensor.scales.item() == pytest.approx(w.abs().max() / 448)
    assert quantization.quantize(w, "fp8_e4m3", per_channel=True).scales.shape == (64, 1)
    cast = quantization.quantize(w, "bf16", per_channel=True)
    assert cast.block == 0 and torch.all(cast.scales == 1)
    assert torch.equal(cast.dequantize(), w.bfloat16().float())
    with pytest.raises(ValueError, match="symmetric"):
        quantization.quantize(w, "mxfp4", symmetric=False)


@pytest.mark.parametrize("precision", ["mxfp4", "nvfp4", "int4_g32", "int4_g64", "int4_g128", "int8_g32"])
def test_bytes_per_weight_agree_with_formats(precision):
    q = quantization.quantize(_weight(), precision)
    f = formats.get(precision)
    stored_bits = q.codes.numel() * f.bits + q.scales.numel() * f.scale_bits
    assert stored_bits / q.codes.numel() == f.bits_per_weight == q.precision.bits_per_weight


# ---- numpy and torch --------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["int4_g32", "int4_g64", "int4_g128", "mxfp4", "nvfp4", "fp8_e4m3",
                                       "int8", "fp16", 5])
def test_fake_quantize_keeps_shape_type_and_dtype_and_pads_partial_blocks(precision):
    w = _weight(5, 70)  # 70 is no multiple of any block
    out = quantization.fake_quantize(w, precision)
    assert out.shape == w.shape and out.dtype == w.dtype and isinstance(out, torch.Tensor)
    assert float((out - w).pow(2).mean().sqrt() / w.pow(2).mean().sqrt()) < 0.3
    as_numpy = quantization.fake_quantize(w.numpy(), precision)
    assert isinstance(as_numpy, np.ndarray) and as_numpy.dtype == np.float32
    assert np.array_equal(as_numpy, out.numpy())
    assert quantization.fake_quantize(w.bfloat16(), precision).dtype == torch.bfloat16
    assert quantization.fake_quantize(w.double().numpy(), precision).dtype == np.float64
    assert quantization.fake_quantize(w.tolist(), precision).dtype == np.float64


def test_results_are_arrays_of_the_type_given():
    w = _weight(8, 64)
    as_torch, as_numpy = quantization.quantize(w, "int4_g32"), quantization.quantize(w.numpy(), "int4_g32")
    assert isinstance(as_torch.codes, torch.Tensor) and isinstance(as_torch.scales, torch.Tensor)
    assert isinstance(as_numpy.codes, np.ndarray) and as_numpy.codes.dtype == np.int8
    assert np.array_equal(as_torch.codes.numpy(), as_numpy.codes)
    assert isinstance(as_torch.steps(), torch.Tensor) and as_torch.steps().shape == w.shape
    codes, scales, zero_points = as_torch.numpy()  # what a backend packs: numpy, shared with the tensors
    assert isinstance(codes, np.ndarray) and np.shares_memory(codes, as_torch.codes.numpy())
    assert scales.shape == (8, 2) and zero_points is None
    assert quantization.fake_quantize(torch.zeros(3, 4), 4, per_channel=True).abs().sum() == 0


@pytest.mark.parametrize("call, match", [
    (lambda: quantization.quantize(torch.ones(3), 1), "precision"),
    (lambda: quantization.quantize(torch.ones(3), 17), "precision"),
    (lambda: quantization.quantize(torch.ones(3), "int9"), "precision"),
    (lambda: quantization.quantize(torch.ones(3, dtype=torch.int32), 4), "x must be"),
    (lambda: quantization.quantize(torch.ones(3), 4, per_channel=True), "per_channel"),
    (lambda: quantization.quantize(torch.ones(3), 4, axis=1), "axis"),
    (lambda: quantization.quantize(torch.ones(3), 4, block=0), "block"),
    (lambda: quantization.quantize(np.array([1.0, np.nan]), 4), "x"),
    (lambda: quantization.quantize(np.float32(1.0), 4), "x"),
    (lambda: quantization.round_to_float(torch.ones(3), "E8M0"), "encoding"),
    (lambda: quantization.representable_values("fp32"), "precision"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_round_to_scales_is_quantize_with_the_scales_given():
    torch.manual_seed(0)
    w = torch.randn(8, 64)
    q = quantization.quantize(w, "int4_g32")
    scales = torch.repeat_interleave(q.scales, 32, dim=1)
    assert torch.equal(quantization.round_to_scales(w, scales, "int4_g32"), q.dequantize())
    column = quantization.round_to_scales(w[:, :1], q.scales[:, :1], 4)  # one column, its group's scales
    assert torch.equal(column, q.dequantize()[:, :1])
    with pytest.raises(ValueError, match="integer format"):
        quantization.round_to_scales(w, scales, "nvfp4")
    with pytest.raises(ValueError, match="scales"):
        quantization.round_to_scales(w, -scales, "int4")
