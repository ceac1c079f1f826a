"""Fake quantization to any format of hwopt.formats: each value rounded to what the format stores, then back
to float, so that its error can be measured on a CPU that has none of these formats (lesson 9).

Floats round to the nearest value of their encoding, ties to even, saturating at the largest finite value (the
numpy emulation that tests/test_fake_quant.py checks bit for bit against torch's float8 casts). Scales:
- int formats: symmetric, scale = amax / (2^(bits-1) - 1) per block (lesson 4's precision.quantize), the scale
  stored in the format's scale_format;
- a power-of-two scale (E8M0, the OCP MX rule): 2^(floor(log2 amax) - the element's largest exponent);
- any other scale (NVFP4's E4M3; FP8's per-tensor fp32): amax / the element's largest value, rounded to the
  scale's encoding, under a per-tensor fp32 scale where the format has one (NVFP4).
Blocks run along the last axis (the input features of a weight (out, in)); a format without blocks has one
scale for the whole tensor; formats of 16 bits or more are plain casts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from hwopt import arguments, formats
from hwopt.experiments import precision

_SIGNED_FLOATS = tuple(e.name for e in formats.ENCODINGS.values() if e.signed)


def _format(fmt, block: int | None = None, name: str = "fmt") -> formats.Format:
    f = formats.get(fmt, name)
    return f if block is None else f.with_block(block)


def _as_numpy(x, name: str = "x") -> np.ndarray:
    arguments.finite_array(name, x)
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor; got a tensor of {x.dtype}")
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def _like(values: np.ndarray, x):
    """values as the type of x (a tensor of x's dtype, else a float64 array)."""
    if isinstance(x, torch.Tensor):
        return torch.from_numpy(values).to(x.dtype)
    return values


def _quantum(magnitude: np.ndarray, enc: formats.Encoding) -> np.ndarray:
    """The spacing of the encoding's values around each magnitude (>= 0): its local rounding step."""
    _, exponent = np.frexp(magnitude)  # magnitude = f * 2^exponent, 0.5 <= f < 1
    return np.ldexp(1.0, np.maximum(exponent - 1, enc.min_exponent) - enc.mantissa_bits)


def _round(values: np.ndarray, enc: formats.Encoding) -> np.ndarray:
    magnitude = np.abs(values)
    quantum = _quantum(magnitude, enc)
    return np.sign(values) * np.minimum(np.rint(magnitude / quantum) * quantum, enc.max_value)


def round_to_float(x, encoding: str):
    """x rounded to the nearest value of a signed float encoding ('E4M3', 'E5M2', 'E2M1', ...: a key of
    hwopt.formats.ENCODINGS), ties to even, saturating at +-max_value; same shape and type as x."""
    arguments.one_of("encoding", encoding, _SIGNED_FLOATS)
    return _like(_round(_as_numpy(x), formats.ENCODINGS[encoding]), x)


def representable_values(fmt) -> np.ndarray:
    """Every finite value a format's elements take before any scale, sorted (mxfp4's E2M1: -6 .. 6; int4: the
    codes -7 .. 7); formats of at most 16 bits."""
    f = _format(fmt)
    if f.bits > 16:
        raise ValueError(f"fmt must be a format of at most 16 bits (its values are listed); got {fmt!r}")
    if f.kind == "int":
        top = (precision.levels(f.bits) - 1) // 2
        return np.arange(-top, top + 1, dtype=np.float64)
    enc = f.encoding
    exponent, mantissa = np.meshgrid(np.arange(2**enc.exponent_bits), np.arange(2**enc.mantissa_bits))
    exponent, fraction = exponent.ravel(), mantissa.ravel() / 2**enc.mantissa_bits
    normal = np.ldexp(1.0 + fraction, exponent - enc.bias)
    subnormal = np.ldexp(fraction, enc.min_exponent)
    magnitudes = np.where((exponent == 0) & (enc.mantissa_bits > 0), subnormal, normal)
    magnitudes = magnitudes[magnitudes <= enc.max_value]
    return np.unique(np.concatenate([-magnitudes, magnitudes]) if enc.signed else magnitudes)


@dataclass(frozen=True)
class BlockQuantized:
    """What a scaled format stores: values (n_blocks, block), element values or integer codes; scales
    (n_blocks, 1) in the scale's format; tensor_scale (1.0 unless the format has a per-tensor scale)."""

    values: np.ndarray
    scales: np.ndarray
    tensor_scale: float
    shape: tuple[int, ...]
    format: formats.Format

    def dequantize(self) -> np.ndarray:
        """Back to float64 of the original shape: values * scales * tensor_scale."""
        rows = (self.values * self.scales * self.tensor_scale).reshape(_rows(self.shape), -1)
        return rows[:, : self.shape[-1] if self.shape else 1].reshape(self.shape)  # padding dropped

    def steps(self) -> np.ndarray:
        """Each value's local rounding step (same shape as values), in the units of the original tensor."""
        scale = self.scales * self.tensor_scale
        if self.format.kind == "int":
            return np.broadcast_to(scale, self.values.shape)
        return _quantum(np.abs(self.values), self.format.encoding) * scale


def _rows(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape[:-1])) if len(shape) > 1 else 1


def _blocks(values: np.ndarray, block: int) -> np.ndarray:
    """values (..., n) as (rows * ceil(n / block), block), the last axis zero-padded; one block if 0."""
    if not block:
        return values.reshape(1, -1)
    rows = values.reshape(_rows(values.shape), -1)
    padded = np.pad(rows, ((0, 0), (0, -rows.shape[1] % block)))
    return padded.reshape(-1, block)


def _quantize(values: np.ndarray, f: formats.Format) -> BlockQuantized:
    blocks = _blocks(values, f.block)
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    scale_enc = f.scale_encoding
    if f.kind == "int":
        q = precision.quantize(torch.from_numpy(blocks), f.bits, per_channel=True)
        scales = _round(q.scale.double().numpy(), scale_enc)
        return BlockQuantized(q.q.double().numpy(), scales, 1.0, values.shape, f)
    enc, tensor_scale = f.encoding, 1.0
    if not scale_enc.mantissa_bits:  # a power of two (E8M0): the OCP MX rule
        exponent = np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - enc.max_exponent
        scales = np.ldexp(1.0, np.clip(exponent, scale_enc.min_exponent, scale_enc.max_exponent).astype(int))
    else:
        if f.tensor_scale_format:  # NVFP4: the tensor's amax lands on the largest block scale x element
            tensor_amax = float(amax.max())
            tensor_scale = tensor_amax / (enc.max_value * scale_enc.max_value) if tensor_amax > 0 else 1.0
        scales = _round(amax / enc.max_value / tensor_scale, scale_enc)
    scaled = np.divide(blocks, scales * tensor_scale, out=np.zeros_like(blocks), where=scales > 0)
    return BlockQuantized(_round(scaled, enc), scales, tensor_scale, values.shape, f)


def _is_cast(f: formats.Format) -> bool:
    return f.kind == "float" and f.bits >= 16


def quantize_blocks(x, fmt, block: int | None = None) -> BlockQuantized:
    """The values and scales a scaled format (int, fp8, mxfp4, nvfp4, ...) stores for x; block overrides the
    format's values per scale (its scale format kept)."""
    f = _format(fmt, block)
    if _is_cast(f):
        raise ValueError(f"fmt must be a scaled format (8 bits or fewer); {f.name} is a plain cast")
    return _quantize(_as_numpy(x), f)


def fake_quantize(x, fmt, block: int | None = None):
    """x rounded to what format fmt stores (scales included) and back: same shape and type as x."""
    f = _format(fmt, block)
    values = _as_numpy(x)
    if _is_cast(f):
        return _like(_round(values, f.encoding), x)
    return _like(_quantize(values, f).dequantize(), x)


def relative_rmse(approx, exact) -> float:
    """RMS of (approx - exact) over RMS of exact: 0.01 is a 1 % error."""
    a, e = _as_numpy(approx, "approx"), _as_numpy(exact, "exact")
    if a.shape != e.shape:
        raise ValueError(f"approx must have the shape of exact {e.shape}; got {a.shape}")
    rms = float(np.sqrt(np.mean(e**2)))
    if rms == 0:
        raise ValueError("exact must hold a non-zero value (the error is relative to its RMS)")
    return float(np.sqrt(np.mean((a - e) ** 2))) / rms


def predicted_relative_rmse(x, fmt, block: int | None = None) -> float:
    """The uniform-noise prediction: each value off by up to half its local step, RMS error step/sqrt(12);
    relative to the RMS of x. Right when values spread over many levels; a cast predicts its mantissa."""
    f = _format(fmt, block)
    values = _as_numpy(x)
    if _is_cast(f):
        steps = _quantum(np.abs(values), f.encoding)
    else:
        steps = _quantize(values, f).steps()
    rms = float(np.sqrt(np.mean(values**2)))
    if rms == 0:
        raise ValueError("x must hold a non-zero value (the error is relative to its RMS)")
    return float(np.sqrt(np.mean(steps**2) / 12)) / rms


def format_errors(w, fmts: Iterable[str]) -> list[dict]:
    """One row per format: format, bits_per_weight (scales included, from hwopt.formats), relative_rmse
    measured and predicted (predicted_relative_rmse) of fake-quantizing w."""
    arguments.instance("fmts", fmts, (list, tuple))
    if not fmts:
        raise ValueError("fmts must name at least one format")
    names = [formats.name(f, f"fmts[{i}]") for i, f in enumerate(fmts)]
    _as_numpy(w, "w")
    return [{"format": name, "bits_per_weight": formats.get(name).bits_per_weight,
             "relative_rmse": relative_rmse(fake_quantize(w, name), w),
             "predicted_rmse": predicted_relative_rmse(w, name)} for name in names]


def plot_value_grids(fmts: Iterable[str] = ("mxfp4", "fp8_e4m3", "fp8_e5m2"), ax=None):
    """The positive values each float format's elements can take, one row per format, on a log axis."""
    from hwopt import plots

    arguments.instance("fmts", fmts, (list, tuple))
    names = [formats.name(f, f"fmts[{i}]") for i, f in enumerate(fmts)]
    if not names:
        raise ValueError("fmts must name at least one format")
    ax = plots.axes("value (log scale)", "format", title="Every positive value of each format", logx=True,
                    ax=ax)
    for k, name in enumerate(names):
        values = representable_values(name)
        values = values[values > 0]
        ax.plot(values, np.full(len(values), k), "|", markersize=14, color=plots.color(k),
                label=f"{name} ({formats.get(name).element or 'int'}): {len(values)} positive values")
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(-0.7, len(names) - 0.3 + 0.6 * len(names))
    return plots.finish(ax)


def plot_error_vs_bits(rows: list[dict], ax=None):
    """Relative RMS error (%) vs bits per weight (scales included), a labelled point per format_errors row."""
    from hwopt import plots

    arguments.instance("rows", rows, (list, tuple))
    if not rows:
        raise ValueError("rows must hold at least one row of format_errors")
    points = []
    for k, row in enumerate(rows):
        arguments.instance(f"rows[{k}]", row, dict)
        bits = arguments.positive(f"rows[{k}]['bits_per_weight']", row.get("bits_per_weight"))
        error = arguments.positive(f"rows[{k}]['relative_rmse']", row.get("relative_rmse"))
        points.append((bits, error, str(row.get("format"))))
    ax = plots.axes("bits per weight (scales included)", "relative RMS error (%)", logy=True,
                    title="Error vs storage", ax=ax, figsize=(8.4, 4.0))
    for k, (bits, error, name) in enumerate(points):  # a legend: equal bits would overlap labels
        ax.plot(bits, 100 * error, "osD^v"[k // 8 % 5], color=plots.color(k), linestyle="none",
                label=f"{name}: {bits:g} bits, {error:.2%}")
    ax.legend(frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return plots.finish(ax, legend=False)


def plot_format_error_map(w: torch.Tensor, fmt, block: int | None = None, ax=None):
    """Heat-map of |w - fake_quantize(w, fmt, block)| of a weight (out, in); bits and error in the title."""
    import matplotlib.pyplot as plt

    from hwopt import plots

    f = _format(fmt, block)
    values = _as_numpy(w, "w")
    if values.ndim != 2:
        raise ValueError(f"w must be a 2-D weight (out, in); got shape {values.shape}")
    rounded = fake_quantize(values, f)
    error = np.abs(rounded - values)
    error_text = f"relative RMS error {relative_rmse(rounded, values):.2%}"
    title = f"{f.name}: {f.layout}\n{f.bits_per_weight:g} bits/weight, {error_text}"
    ax = plots.axes("input feature (column)", "output channel (row)", title=title, ax=ax)
    top = float(np.percentile(error, 99.5)) or None  # a few heavy-tail errors would leave the rest black
    image = ax.imshow(error, aspect="auto", cmap="magma", interpolation="nearest", vmin=0, vmax=top)
    ax.grid(False)
    plt.colorbar(image, ax=ax, label="|error| (weight units; top 0.5 % clipped)")
    return plots.finish(ax, legend=False)


def format_explorer(w: torch.Tensor):
    """Controls (block format, values per scale) -> the error heat-map of w and its bits per weight."""
    from hwopt import widgets

    _as_numpy(w, "w")
    block_formats = [f.name for f in formats.FORMATS.values() if f.block]
    groups = sorted({2**k for k in range(3, 9)} | {formats.get(n).block for n in block_formats})
    return widgets.explore(
        lambda fmt, block: plot_format_error_map(w, fmt, block),
        fmt=widgets.dropdown("format", block_formats, "int4_g128"),
        block=widgets.toggle("values per scale", groups, formats.get("int4_g128").block),
    )
