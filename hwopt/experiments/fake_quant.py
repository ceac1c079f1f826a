"""The error of storing weights in each format of hwopt.formats (lesson 9): fake-quantized by
hwopt.quantization (int with block scales, fp8, MXFP4, NVFP4, casts), measured against the uniform-noise
prediction from each value's rounding step, and plotted.
"""

from __future__ import annotations

from collections.abc import Iterable

import matplotlib.pyplot as plt
import numpy as np
import torch

from hwopt import arguments, formats, plots, quantization, widgets


def _as_numpy(x, name: str = "x") -> np.ndarray:
    arguments.finite_array(name, x)
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor; got a tensor of {x.dtype}")
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def relative_rmse(approx, exact) -> float:
    """RMS of (approx - exact) over RMS of exact: 0.01 is a 1 % error."""
    a, e = _as_numpy(approx, "approx"), _as_numpy(exact, "exact")
    if a.shape != e.shape:
        raise ValueError(f"approx must have the shape of exact {e.shape}; got {a.shape}")
    rms = float(np.sqrt(np.mean(e**2)))
    if rms == 0:
        raise ValueError("exact must hold a non-zero value (the error is relative to its RMS)")
    return float(np.sqrt(np.mean((a - e) ** 2))) / rms


def predicted_relative_rmse(x, precision: str | int, block: int | None = None) -> float:
    """The uniform-noise prediction: each value off by up to half its local step, RMS error step/sqrt(12);
    relative to the RMS of x. Right when values spread over many levels; a cast predicts its mantissa."""
    values = _as_numpy(x)
    steps = quantization.quantize(values, precision, block=block).steps()
    rms = float(np.sqrt(np.mean(values**2)))
    if rms == 0:
        raise ValueError("x must hold a non-zero value (the error is relative to its RMS)")
    return float(np.sqrt(np.mean(steps**2) / 12)) / rms


def format_errors(w, precisions: Iterable[str]) -> list[dict]:
    """One row per format: precision, bits_per_weight (scales included, from hwopt.formats), relative_rmse
    measured and predicted (predicted_relative_rmse) of fake-quantizing w."""
    arguments.instance("precisions", precisions, (list, tuple))
    if not precisions:
        raise ValueError("precisions must name at least one format")
    names = [formats.name(p, f"precisions[{i}]") for i, p in enumerate(precisions)]
    values = _as_numpy(w, "w")
    return [{"precision": name, "bits_per_weight": formats.get(name).bits_per_weight,
             "relative_rmse": relative_rmse(quantization.fake_quantize(values, name), values),
             "predicted_rmse": predicted_relative_rmse(values, name)} for name in names]


def plot_value_grids(precisions: Iterable[str] = ("mxfp4", "fp8_e4m3", "fp8_e5m2"), ax=None):
    """The positive values each float format's elements can take, one row per format, on a log axis."""
    arguments.instance("precisions", precisions, (list, tuple))
    names = [formats.name(p, f"precisions[{i}]") for i, p in enumerate(precisions)]
    if not names:
        raise ValueError("precisions must name at least one format")
    ax = plots.axes("value (log scale)", "format", title="Every positive value of each format", logx=True,
                    ax=ax)
    for k, name in enumerate(names):
        values = quantization.representable_values(name)
        values = values[values > 0]
        ax.plot(values, np.full(len(values), k), "|", markersize=14, color=plots.color(k),
                label=f"{name} ({formats.get(name).element or 'int'}): {len(values)} positive values")
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(-0.7, len(names) - 0.3 + 0.6 * len(names))
    return plots.finish(ax)


def plot_error_vs_bits(rows: list[dict], ax=None):
    """Relative RMS error (%) vs bits per weight (scales included), a labelled point per format_errors row."""
    arguments.instance("rows", rows, (list, tuple))
    if not rows:
        raise ValueError("rows must hold at least one row of format_errors")
    points = []
    for k, row in enumerate(rows):
        arguments.instance(f"rows[{k}]", row, dict)
        bits = arguments.positive(f"rows[{k}]['bits_per_weight']", row.get("bits_per_weight"))
        error = arguments.positive(f"rows[{k}]['relative_rmse']", row.get("relative_rmse"))
        points.append((bits, error, str(row.get("precision"))))
    ax = plots.axes("bits per weight (scales included)", "relative RMS error (%)", logy=True,
                    title="Error vs storage", ax=ax, figsize=(8.4, 4.0))
    for k, (bits, error, name) in enumerate(points):  # a legend: equal bits would overlap labels
        ax.plot(bits, 100 * error, "osD^v"[k // 8 % 5], color=plots.color(k), linestyle="none",
                label=f"{name}: {bits:g} bits, {error:.2%}")
    ax.legend(frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return plots.finish(ax, legend=False)


def plot_format_error_map(w: torch.Tensor, precision: str | int, block: int | None = None, ax=None):
    """Heat-map of |w - fake_quantize(w, precision, block)| of a weight (out, in); bits and error in the
    title."""
    values = _as_numpy(w, "w")
    if values.ndim != 2:
        raise ValueError(f"w must be a 2-D weight (out, in); got shape {values.shape}")
    q = quantization.quantize(values, precision, block=block)
    f, rounded = q.precision, q.dequantize()
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
    _as_numpy(w, "w")
    block_formats = [f.name for f in formats.FORMATS.values() if f.block]
    groups = sorted({2**k for k in range(3, 9)} | {formats.get(n).block for n in block_formats})
    return widgets.explore(
        lambda precision, block: plot_format_error_map(w, precision, block),
        precision=widgets.dropdown("format", block_formats, "int4_g128"),
        block=widgets.toggle("values per scale", groups, formats.get("int4_g128").block),
    )
