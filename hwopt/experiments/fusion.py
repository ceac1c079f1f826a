"""Fusion: bytes moved by a chain of elementwise ops, unfused vs fused, and the speedup predicted (lesson 5).

The chain is y = (gelu(x + bias) + residual) * scale on x, residual of shape (rows, cols).
Unfused, each op reads its inputs from memory and writes its output back; fused, one kernel reads x and
residual once and writes y once. For the 4-op chain: 9 vs 3 tensor passes, a predicted 3x.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from hwopt import arguments
from hwopt.machine import bench

CHAIN_OPS = 4  # add bias, gelu, add residual, scale
CHAIN_EXTRA_INPUTS = 1  # residual: a full-size tensor; bias (cols,) and scale (scalar) are negligible


def chain(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, scale: float) -> torch.Tensor:
    """(gelu(x + bias) + residual) * scale; x, residual (rows, cols), bias (cols,)."""
    return (F.gelu(x + bias) + residual) * scale


class Chain(nn.Module):
    """The chain as a module with its bias and scale inside (for torch.compile and ONNX export)."""

    def __init__(self, bias: torch.Tensor, scale: float):
        super().__init__()
        arguments.instance("bias", bias, torch.Tensor)
        arguments.finite_array("bias", bias, ndim=1)
        scale = arguments.number("scale", scale)
        self.bias = nn.Parameter(bias.detach().clone(), requires_grad=False)
        self.scale = float(scale)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return chain(x, self.bias, residual, self.scale)


def chain_inputs(rows: int, cols: int, device: str = "cpu", seed: int = 0) -> dict:
    """Random inputs for the chain: {'x', 'bias', 'residual', 'scale'} on device, float32."""
    arguments.count("rows", rows, "dimension")
    arguments.count("cols", cols, "dimension")
    if rows * cols > arguments.LIMITS["elements"]:
        raise ValueError(f"rows * cols must be at most {arguments.LIMITS['elements']:,} elements "
                         f"(hwopt.arguments.LIMITS['elements']); got {rows * cols:,}")
    device = bench.resolve_device(device)
    g = torch.Generator().manual_seed(arguments.count("seed", seed, "seed", minimum=0))
    return {
        "x": torch.randn(rows, cols, generator=g).to(device),
        "bias": torch.randn(cols, generator=g).to(device),
        "residual": torch.randn(rows, cols, generator=g).to(device),
        "scale": 0.5,
    }


def passes(n_ops: int = CHAIN_OPS, extra_inputs: int = CHAIN_EXTRA_INPUTS, *, fused: bool) -> int:
    """Full-tensor memory passes of a chain of n_ops elementwise ops (one read per input, one write each).

    Unfused: every op reads its input and writes its output (2 * n_ops), plus one read per extra input.
    Fused: read the input and the extra inputs once, write the output once.
    """
    n_ops = arguments.count("n_ops", n_ops, "layers")
    extra_inputs = arguments.between("extra_inputs", extra_inputs, 0, n_ops, integer=True)
    fused = arguments.boolean("fused", fused)
    return (1 + extra_inputs + 1) if fused else (2 * n_ops + extra_inputs)


def bytes_moved(
    n_elements: int,
    *,
    fused: bool,
    n_ops: int = CHAIN_OPS,
    extra_inputs: int = CHAIN_EXTRA_INPUTS,
    bytes_per_element: float = 4.0,
) -> float:
    """Bytes read + written by the chain on tensors of n_elements each."""
    n_elements = arguments.count("n_elements", n_elements, "elements")
    bytes_per_element = arguments.positive("bytes_per_element", bytes_per_element)
    return float(passes(n_ops, extra_inputs, fused=fused) * n_elements * bytes_per_element)


def predicted_speedup(n_ops: int = CHAIN_OPS, extra_inputs: int = CHAIN_EXTRA_INPUTS) -> float:
    """Fused over unfused speed when memory traffic is all that matters: unfused bytes / fused bytes."""
    return passes(n_ops, extra_inputs, fused=False) / passes(n_ops, extra_inputs, fused=True)


def predicted_time_ms(n_bytes: float, bandwidth_gbs: float) -> float:
    """Time to move n_bytes at bandwidth_gbs (the memory roof), milliseconds."""
    n_bytes = arguments.positive("n_bytes", n_bytes, allow_zero=True)
    bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    return n_bytes / (bandwidth_gbs * 1e9) * 1e3


def fusion_prediction(size_mb: float, n_ops: int, bandwidth_gbs: float, extra_inputs: int = 1) -> dict:
    """Slider callback: for tensors of size_mb (fp32) -> unfused/fused MB moved, predicted ms, speedup."""
    size_mb = arguments.positive("size_mb", size_mb, maximum=arguments.LIMITS["megabytes"])
    n_ops = arguments.count("n_ops", n_ops, "layers")
    extra_inputs = min(arguments.count("extra_inputs", extra_inputs, "layers", minimum=0), n_ops)
    arguments.positive("bandwidth_gbs", bandwidth_gbs)
    n_elements = max(1, int(size_mb * 1e6 / 4))
    out = {"n_elements": n_elements}
    for kind, fused in (("unfused", False), ("fused", True)):
        moved = bytes_moved(n_elements, fused=fused, n_ops=n_ops, extra_inputs=extra_inputs)
        out[f"{kind}_mb"] = moved / 1e6
        out[f"{kind}_ms"] = predicted_time_ms(moved, bandwidth_gbs)
    out["speedup"] = out["unfused_ms"] / out["fused_ms"]
    return out


def plot_fusion_prediction(size_mb: float, n_ops: int, bandwidth_gbs: float, extra_inputs: int = 1, ax=None):
    """Bars of predicted unfused vs fused time for the slider; returns the Figure."""
    from hwopt import plots

    p = fusion_prediction(size_mb, n_ops, bandwidth_gbs, extra_inputs)
    ax = plots.axes(
        "predicted time at the memory roof (ms)",
        "variant",
        title=f"{n_ops} ops on {size_mb:g} MB tensors: fused {p['speedup']:.1f}x faster",
        ax=ax,
    )
    ax.barh([0, 1], [p["unfused_ms"], p["fused_ms"]], color=[plots.color(1), plots.color(2)])
    ax.set_yticks(
        [0, 1], [f"unfused ({p['unfused_mb']:.0f} MB moved)", f"fused ({p['fused_mb']:.0f} MB moved)"]
    )
    ax.invert_yaxis()
    return plots.finish(ax)


def first_call_s(fn: Callable[[], object], device: str = "cpu") -> float:
    """Seconds taken by one call of fn, synchronised (a compiled function's first call includes compiling)."""
    arguments.function("fn", fn)
    bench.sync(device)
    start = time.perf_counter()
    fn()
    bench.sync(device)
    return time.perf_counter() - start


def max_abs_error(candidate: torch.Tensor, reference: torch.Tensor) -> float:
    """max |candidate - reference| (the eager FP32 result is the reference)."""
    candidate = arguments.finite_array("candidate", candidate)
    reference = arguments.finite_array("reference", reference)
    candidate = torch.as_tensor(candidate).float().cpu()
    reference = torch.as_tensor(reference).float().cpu()
    if candidate.shape != reference.shape:
        raise ValueError(
            f"shapes differ: candidate {tuple(candidate.shape)} vs reference {tuple(reference.shape)}"
        )
    return float((candidate - reference).abs().max())


def fusion_explorer(bandwidth_gbs: float):
    """Sliders (tensor size, ops in the chain) -> predicted unfused vs fused time at bandwidth_gbs."""
    from hwopt import widgets

    bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    return widgets.explore(
        plot_fusion_prediction,
        bandwidth_gbs=bandwidth_gbs,
        size_mb=widgets.log_slider("tensor size", 0.1, 1000.0, 16.0, unit="MB"),
        n_ops=widgets.int_slider("elementwise ops in the chain", 1, 10, CHAIN_OPS),
    )


def report_rows(
    results: dict,
    n_elements: int,
    passes_by_label: dict[str, int],
    bandwidth_gbs: float,
    baseline: str | None = None,
) -> list[dict]:
    """Per variant: measured ms, full-tensor passes, achieved GB/s, predicted ms at the memory roof,
    predicted/measured ratio and speedup over the baseline (the first variant unless named)."""
    arguments.instance("results", results, dict)
    if not results:
        raise ValueError("results must hold at least one Measurement")
    for label, m in results.items():
        arguments.instance(f"results[{label!r}]", m, bench.Measurement)
    n_elements = arguments.count("n_elements", n_elements, "elements")
    arguments.instance("passes_by_label", passes_by_label, dict)
    for label, n in passes_by_label.items():
        arguments.count(f"passes_by_label[{label!r}]", n, "items")
    arguments.positive("bandwidth_gbs", bandwidth_gbs)
    if baseline is not None:
        arguments.one_of("baseline", baseline, results)
    baseline = baseline or next(iter(results))
    missing = set(results) - set(passes_by_label)
    if missing:
        raise ValueError(f"passes_by_label must give the memory passes of {sorted(missing)}")
    rows = []
    for label, m in results.items():
        moved = passes_by_label[label] * n_elements * 4.0
        predicted_ms = predicted_time_ms(moved, bandwidth_gbs)
        rows.append(
            {
                "variant": label,
                "measured_ms": m.median_ms,
                "iqr_ms": m.iqr_ms,
                "passes": passes_by_label[label],
                "achieved_gbs": moved / m.median_s / 1e9,
                "predicted_ms": predicted_ms,
                "predicted_over_measured": predicted_ms / m.median_ms,
                "speedup": results[baseline].median_s / m.median_s,
            }
        )
    return rows


def format_report(rows: list[dict]) -> str:
    """report_rows as an aligned text table."""
    arguments.instance("rows", rows, (list, tuple))
    for i, row in enumerate(rows):
        arguments.instance(f"rows[{i}]", row, dict)
    lines = [
        f"{'variant':<16}{'passes':>7}{'ms':>9}{'IQR':>8}{'GB/s':>8}{'predicted ms':>14}"
        f"{'pred/meas':>11}{'speedup':>9}"
    ]
    for r in rows:
        lines.append(
            f"{r['variant']:<16}{r['passes']:>7}{r['measured_ms']:>9.2f}{r['iqr_ms']:>8.2f}"
            f"{r['achieved_gbs']:>8.1f}{r['predicted_ms']:>14.2f}{r['predicted_over_measured']:>11.2f}"
            f"{r['speedup']:>8.2f}x"
        )
    return "\n".join(lines)
