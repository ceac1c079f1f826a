"""The roofline model: arithmetic intensity of common ops, attainable FLOP/s, ridge point, verdict, plot.

Units: work in FLOP (a multiply-add counts 2), traffic in bytes, intensity in FLOP/byte, compute in FLOP/s,
bandwidth in GB/s (1 GB = 1e9 bytes) wherever a name ends in `_gbs`. Traffic counts each operand moved to or
from memory once (perfect caching), which is the lower bound the roofline assumes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from hwopt import arguments, plots

# --- work and traffic per op: (FLOP, bytes) ----------------------------------------------------------------


def flops_bytes_elementwise(
    n_elements: int,
    *,
    n_inputs: int = 2,
    n_outputs: int = 1,
    flops_per_element: float = 1.0,
    bytes_per_element: float = 4.0,
) -> tuple[float, float]:
    """(FLOP, bytes) of an elementwise op: n*flops_per_element, n*(inputs + outputs)*bytes_per_element."""
    arguments.count("n_elements", n_elements, "elements")
    arguments.count("n_inputs", n_inputs, "items")
    arguments.count("n_outputs", n_outputs, "items")
    arguments.positive("flops_per_element", flops_per_element)
    arguments.positive("bytes_per_element", bytes_per_element)
    return n_elements * flops_per_element, n_elements * (n_inputs + n_outputs) * bytes_per_element


def flops_bytes_gemv(
    rows: int,
    cols: int,
    *,
    bytes_per_weight: float = 4.0,
    batch_size: int = 1,
    bytes_per_activation: float = 4.0,
) -> tuple[float, float]:
    """(FLOP, bytes) of y = W x with W (rows, cols), x (cols, batch_size).

    FLOP = 2*rows*cols*batch_size;
    bytes = rows*cols*bytes_per_weight + batch_size*(cols + rows)*bytes_per_activation.
    bytes_per_weight: 4 fp32, 2 fp16/bf16, 1 int8, 0.5 int4 (quantization scales not counted).
    """
    arguments.count("rows", rows, "dimension")
    arguments.count("cols", cols, "dimension")
    arguments.positive("bytes_per_weight", bytes_per_weight)
    arguments.count("batch_size", batch_size, "batch")
    arguments.positive("bytes_per_activation", bytes_per_activation)
    flops = 2.0 * rows * cols * batch_size
    return flops, rows * cols * bytes_per_weight + batch_size * (cols + rows) * bytes_per_activation


def flops_bytes_gemm(m: int, n: int, k: int, *, bytes_per_element: float = 4.0) -> tuple[float, float]:
    """(FLOP, bytes) of C (m, n) = A (m, k) @ B (k, n): 2mnk FLOP, (mk + kn + mn)*bytes_per_element bytes."""
    for name, v in (("m", m), ("n", n), ("k", k)):
        arguments.count(name, v, "dimension")
    arguments.positive("bytes_per_element", bytes_per_element)
    return 2.0 * m * n * k, (m * k + k * n + m * n) * bytes_per_element


def flops_bytes_attention_decode(
    seq_len: int,
    head_dim: int,
    n_heads: int,
    *,
    bytes_per_element: float = 2.0,
    n_kv_heads: int | None = None,
) -> tuple[float, float]:
    """(FLOP, bytes) of attention for ONE new token reading a KV cache of seq_len positions.

    FLOP = 4*seq_len*head_dim*n_heads (q.K^T and p.V; softmax ignored);
    bytes = (2*seq_len*n_kv_heads + 2*n_heads)*head_dim*bytes_per_element (K and V caches, plus q and output).
    n_kv_heads (grouped-query attention) defaults to n_heads.
    """
    arguments.count("seq_len", seq_len, "tokens")
    arguments.count("head_dim", head_dim, "dimension")
    arguments.count("n_heads", n_heads, "dimension")
    arguments.positive("bytes_per_element", bytes_per_element)
    kv_heads = n_heads if n_kv_heads is None else arguments.count("n_kv_heads", n_kv_heads, "dimension")
    flops = 4.0 * seq_len * head_dim * n_heads
    return flops, (2.0 * seq_len * kv_heads + 2.0 * n_heads) * head_dim * bytes_per_element


# --- arithmetic intensity (FLOP/byte) ----------------------------------------------------------------------


def intensity_elementwise(
    *, n_inputs: int = 2, n_outputs: int = 1, flops_per_element: float = 1.0, bytes_per_element: float = 4.0
) -> float:
    """FLOP/byte of an elementwise op = flops_per_element / ((n_inputs + n_outputs) * bytes_per_element)."""
    flops, nbytes = flops_bytes_elementwise(
        1,
        n_inputs=n_inputs,
        n_outputs=n_outputs,
        flops_per_element=flops_per_element,
        bytes_per_element=bytes_per_element,
    )
    return flops / nbytes


def intensity_gemv(
    rows: int,
    cols: int,
    bytes_per_weight: float = 4.0,
    *,
    batch_size: int = 1,
    bytes_per_activation: float = 4.0,
) -> float:
    """FLOP/byte of a decode matrix-vector product; ~ 2*batch_size / bytes_per_weight for large W."""
    flops, nbytes = flops_bytes_gemv(
        rows,
        cols,
        bytes_per_weight=bytes_per_weight,
        batch_size=batch_size,
        bytes_per_activation=bytes_per_activation,
    )
    return flops / nbytes


def intensity_gemm(m: int, n: int, k: int, bytes_per_element: float = 4.0) -> float:
    """FLOP/byte of C = A @ B: 2mnk / ((mk + kn + mn) * bytes_per_element); 2n/(3*bpe) when square."""
    flops, nbytes = flops_bytes_gemm(m, n, k, bytes_per_element=bytes_per_element)
    return flops / nbytes


def intensity_attention_decode(
    seq_len: int,
    head_dim: int,
    n_heads: int,
    bytes_per_element: float = 2.0,
    *,
    n_kv_heads: int | None = None,
) -> float:
    """FLOP/byte of one attention decode step: ~ (2/bytes_per_element) * n_heads/n_kv_heads (~1 in fp16)."""
    flops, nbytes = flops_bytes_attention_decode(
        seq_len, head_dim, n_heads, bytes_per_element=bytes_per_element, n_kv_heads=n_kv_heads
    )
    return flops / nbytes


# --- the roofline ------------------------------------------------------------------------------------------


def ridge_point(peak_flops: float, bandwidth_gbs: float) -> float:
    """Intensity (FLOP/byte) where the roof turns flat: peak_flops / (bandwidth_gbs * 1e9)."""
    arguments.positive("peak_flops", peak_flops)
    arguments.positive("bandwidth_gbs", bandwidth_gbs)
    return peak_flops / (bandwidth_gbs * 1e9)


def time_s(flop: float, bytes_moved: float, peak_flops: float, bandwidth_gbs: float) -> float:
    """Roofline time (s) of work doing `flop` FLOP and moving `bytes_moved` bytes: max(compute, memory)."""
    flop = arguments.positive("flop", flop, allow_zero=True)
    bytes_moved = arguments.positive("bytes_moved", bytes_moved, allow_zero=True)
    peak = arguments.positive("peak_flops", peak_flops)
    bandwidth = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    return max(flop / peak, bytes_moved / (bandwidth * 1e9))


def attainable_flops(intensity, peak_flops: float, bandwidth_gbs: float):
    """Roofline FLOP/s = min(peak_flops, intensity * bandwidth_gbs * 1e9); intensity may be an array."""
    arguments.positive("peak_flops", peak_flops)
    arguments.positive("bandwidth_gbs", bandwidth_gbs)
    arr = arguments.finite_array("intensity", intensity, minimum=0, strict=True).astype(float)
    result = np.minimum(peak_flops, arr * bandwidth_gbs * 1e9)
    return float(result) if result.ndim == 0 else result


def bound(intensity: float, peak_flops: float, bandwidth_gbs: float) -> str:
    """'memory' if intensity < ridge point (the roof is the bandwidth slope), else 'compute'."""
    ridge = ridge_point(peak_flops, bandwidth_gbs)
    arguments.positive("intensity", intensity)
    return "memory" if intensity < ridge else "compute"


@dataclass(frozen=True)
class Ceiling:
    """One roof: peak FLOP/s and memory bandwidth (GB/s); measured=True draws it dashed."""

    label: str
    peak_flops: float
    bandwidth_gbs: float
    measured: bool = False

    def __post_init__(self):
        arguments.text("label", self.label, allow_empty=True)
        arguments.positive("peak_flops", self.peak_flops)
        arguments.positive("bandwidth_gbs", self.bandwidth_gbs)
        arguments.boolean("measured", self.measured)

    @property
    def ridge_point(self) -> float:
        """FLOP/byte where this roof turns flat."""
        return ridge_point(self.peak_flops, self.bandwidth_gbs)


@dataclass(frozen=True)
class KernelPoint:
    """A measured kernel: its intensity (FLOP/byte) and achieved FLOP/s."""

    label: str
    intensity: float
    achieved_flops: float

    def __post_init__(self):
        arguments.text("label", self.label, allow_empty=True)
        arguments.positive("intensity", self.intensity)
        arguments.positive("achieved_flops", self.achieved_flops)


def _as(kind, items, name: str) -> list:
    if isinstance(items, kind) or (isinstance(items, tuple) and items and isinstance(items[0], str)):
        items = [items]  # a single roof or point
    arguments.instance(name, items, (list, tuple))
    out = []
    for i, item in enumerate(items):
        if isinstance(item, kind):
            out.append(item)
        elif isinstance(item, tuple | list) and len(item) in (3, 4):
            try:
                out.append(kind(*item))
            except ValueError as error:
                raise ValueError(f"{name}[{i}]: {error}") from None
        else:
            raise ValueError(f"{name} must hold {kind.__name__} objects or tuples; got {item!r}")
    return out


def plot_roofline(ceilings: Iterable, points: Iterable = (), ax=None, *, title: str | None = None):
    """Log-log roofline: each Ceiling (label, peak_flops, bandwidth_gbs[, measured]) and each KernelPoint
    (label, intensity, achieved_flops); tuples work too. Returns the Figure."""
    roofs = _as(Ceiling, ceilings, "ceilings")
    if not roofs:
        raise ValueError("ceilings must hold at least one Ceiling (label, peak_flops, bandwidth_gbs)")
    dots = _as(KernelPoint, points, "points")
    xs = [c.ridge_point for c in roofs] + [p.intensity for p in dots]
    x = np.logspace(math.log10(min(xs)) - 1.5, math.log10(max(xs)) + 1.5, 200)
    ax = plots.axes(
        "arithmetic intensity (FLOP/byte)", "attainable (GFLOP/s)", title=title, logx=True, logy=True, ax=ax
    )
    for i, c in enumerate(roofs):
        kind = "measured" if c.measured else "spec"
        ax.plot(
            x,
            attainable_flops(x, c.peak_flops, c.bandwidth_gbs) / 1e9,
            color=plots.color(i),
            linestyle="--" if c.measured else "-",
            label=f"{c.label} ({kind}: {c.bandwidth_gbs:.3g} GB/s, {c.peak_flops / 1e9:.3g} GFLOP/s)",
        )
        ax.plot([c.ridge_point], [c.peak_flops / 1e9], "o", color=plots.color(i), markersize=4)
    for j, p in enumerate(dots):
        ax.plot(
            [p.intensity],
            [p.achieved_flops / 1e9],
            "X",
            color=plots.color(len(roofs) + j),
            markersize=9,
            label=p.label,
        )
        ax.annotate(
            p.label,
            (p.intensity, p.achieved_flops / 1e9),
            textcoords="offset points",
            xytext=(6, -12),
            fontsize=8,
        )
    return plots.finish(ax)


# --- a second roof for elementwise work: transcendental functions ------------------------------------------
# An elementwise chain does almost no multiply-adds, so the matmul FLOP/s roof says nothing about it; what its
# arithmetic can cost is the transcendental functions (erf, exp, tanh), each many instructions per element.
# Their roof is a measured rate, evaluations per second on data already in cache.


@dataclass(frozen=True)
class ElementwiseRoofs:
    """Seconds an elementwise kernel needs under each of its two roofs: its bytes at the memory bandwidth
    (memory_s) and its transcendental evaluations at their measured rate (transcendental_s)."""

    memory_s: float
    transcendental_s: float

    def __post_init__(self):
        arguments.positive("memory_s", self.memory_s, allow_zero=True)
        arguments.positive("transcendental_s", self.transcendental_s, allow_zero=True)

    @property
    def time_s(self) -> float:
        """Predicted seconds: the slower roof binds, max(memory_s, transcendental_s)."""
        return max(self.memory_s, self.transcendental_s)

    @property
    def bound(self) -> str:
        """'memory' or 'transcendental': the roof that sets time_s."""
        return "memory" if self.memory_s >= self.transcendental_s else "transcendental"


def elementwise_roofs(
    n_bytes: float, bandwidth_gbs: float, n_transcendentals: float, transcendentals_per_s: float
) -> ElementwiseRoofs:
    """Both roofs of an elementwise kernel: n_bytes / (bandwidth_gbs * 1e9) and
    n_transcendentals / transcendentals_per_s (e.g. erf-GELUs per second, measured in cache)."""
    arguments.positive("n_bytes", n_bytes, allow_zero=True)
    arguments.positive("bandwidth_gbs", bandwidth_gbs)
    arguments.positive("n_transcendentals", n_transcendentals, allow_zero=True)
    arguments.positive("transcendentals_per_s", transcendentals_per_s)
    return ElementwiseRoofs(n_bytes / (bandwidth_gbs * 1e9), n_transcendentals / transcendentals_per_s)


def transcendental_ridge_bytes(bandwidth_gbs: float, transcendentals_per_s: float) -> float:
    """Bytes moved per transcendental evaluation where the two roofs meet: bandwidth_gbs * 1e9 / rate.

    A kernel moving fewer bytes than this per evaluation is bound by the transcendentals, more by memory.
    """
    arguments.positive("bandwidth_gbs", bandwidth_gbs)
    arguments.positive("transcendentals_per_s", transcendentals_per_s)
    return bandwidth_gbs * 1e9 / transcendentals_per_s
