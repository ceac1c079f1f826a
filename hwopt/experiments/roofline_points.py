"""Measured kernels as roofline points (lessons 1-2): matmul throughput vs size, GEMM, GEMV and elementwise.

Timing and probing come from probe / bench; this module turns their numbers into FLOP/s per size
and into roofline.KernelPoint objects with the intensity formulas of hwopt.roofline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from hwopt import arguments, formats, plots, roofline
from hwopt.machine import bench, probe

MATMUL_SIZES: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024, 2048)


def matmul_sweep(sizes: Sequence[int] = MATMUL_SIZES, device="cpu", precision="fp32",
                 progress: bool = True) -> list[float]:
    """Best measured FLOP/s (2 n^3 per product) of an n x n matmul at each size, via probe.matmul_flops."""
    sizes = arguments.finite_array("sizes", sizes, ndim=1, integer=True, minimum=1,
                                   maximum=arguments.LIMITS["dimension"]).tolist()
    device = bench.resolve_device(device)
    precision = formats.name(precision, supported=probe.MATMUL_PRECISIONS)
    progress = arguments.boolean("progress", progress)
    return [probe.matmul_flops(precision, device, n=n)
            for n in tqdm(sizes, desc=f"matmul sizes on {device}", disable=not progress)]


def predicted_matmul_flops(n: int, peak_flops: float, bandwidth_gbs: float, bytes_per_element: float = 4.0
                           ) -> float:
    """Roofline prediction for an n x n matmul: min(peak, intensity x bandwidth) FLOP/s (no overheads)."""
    arguments.count("n", n, "dimension")
    intensity = roofline.intensity_gemm(n, n, n, bytes_per_element)
    return float(roofline.attainable_flops(intensity, peak_flops, bandwidth_gbs))


def plot_matmul_sweep(sizes: Sequence[int], flops_by_device: Mapping[str, Sequence[float]],
                      predicted: Sequence[float] | None = None, ax=None):
    """Measured GFLOP/s vs matrix size per device (log-log), optionally with the roofline prediction."""
    sizes = arguments.finite_array("sizes", sizes, ndim=1, integer=True, minimum=1)
    arguments.instance("flops_by_device", flops_by_device, Mapping)
    if not flops_by_device:
        raise ValueError("flops_by_device must map at least one device to its FLOP/s per size")
    for device, flops in flops_by_device.items():
        arguments.finite_array(f"flops_by_device[{device!r}]", flops, ndim=1, minimum=0, strict=True)
    if predicted is not None:
        predicted = arguments.finite_array("predicted", predicted, ndim=1, minimum=0, strict=True)
        if len(predicted) != len(sizes):
            raise ValueError(f"predicted must have one value per size ({len(sizes)}); got {len(predicted)}")
    ax = plots.axes("matrix size n (n x n @ n x n)", "throughput (GFLOP/s)", logx=True, logy=True, ax=ax,
                    title="Matmul throughput vs size")
    for i, (device, flops) in enumerate(flops_by_device.items()):
        if len(flops) != len(sizes):
            raise ValueError(f"flops_by_device[{device!r}] must have one value per size ({len(sizes)})")
        ax.plot(sizes, np.asarray(flops) / 1e9, "o-", color=plots.color(i), label=f"measured on {device}")
    if predicted is not None:
        ax.plot(sizes, np.asarray(predicted) / 1e9, "--", color="grey",
                label="roofline prediction (no overhead)")
    ax.set_xscale("log", base=2)
    return plots.finish(ax)


def gemm_point(n: int, flops: float, bytes_per_element: float = 4.0) -> roofline.KernelPoint:
    """KernelPoint of an n x n x n matmul that achieved `flops` FLOP/s."""
    arguments.count("n", n, "dimension")
    return roofline.KernelPoint(f"GEMM n={n}", roofline.intensity_gemm(n, n, n, bytes_per_element), flops)


def gemv_point(rows: int, cols: int, seconds: float, bytes_per_weight: float = 4.0, label: str | None = None,
               layers: int = 1) -> roofline.KernelPoint:
    """KernelPoint of `layers` GEMVs (rows x cols weights each) that took `seconds` in all."""
    flop, _ = roofline.flops_bytes_gemv(rows, cols, bytes_per_weight=bytes_per_weight)
    seconds = arguments.positive("seconds", seconds)
    layers = arguments.count("layers", layers, "layers")
    if label is not None:
        arguments.text("label", label)
    intensity = roofline.intensity_gemv(rows, cols, bytes_per_weight)
    return roofline.KernelPoint(label or f"GEMV {rows}x{cols}", intensity, layers * flop / seconds)


def triad_point(bandwidth_gbs: float) -> roofline.KernelPoint:
    """KernelPoint of the elementwise triad a = b + 3c (2 FLOP per 12 bytes) streamed at bandwidth_gbs."""
    intensity = roofline.intensity_elementwise(flops_per_element=2.0)
    bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    return roofline.KernelPoint("elementwise a = b + 3c", intensity, intensity * bandwidth_gbs * 1e9)


def intensity_table(points: Sequence[roofline.KernelPoint], peak_flops: float, bandwidth_gbs: float) -> str:
    """Text table: intensity (FLOP/byte), achieved GFLOP/s, the roofline's attainable GFLOP/s, verdict."""
    arguments.instance("points", points, (list, tuple))
    for i, p in enumerate(points):
        arguments.instance(f"points[{i}]", p, roofline.KernelPoint)
    roofline.ridge_point(peak_flops, bandwidth_gbs)  # checks both
    lines = [f"{'kernel':28s} {'FLOP/byte':>10s} {'GFLOP/s':>9s} {'roof':>9s} {'of roof':>8s}  bound"]
    for p in points:
        roof = float(roofline.attainable_flops(p.intensity, peak_flops, bandwidth_gbs))
        verdict = roofline.bound(p.intensity, peak_flops, bandwidth_gbs)
        lines.append(f"{p.label[:28]:28s} {p.intensity:10.2f} {p.achieved_flops / 1e9:9.1f} "
                     f"{roof / 1e9:9.1f} {p.achieved_flops / roof:8.0%}  {verdict}")
    return "\n".join(lines)
