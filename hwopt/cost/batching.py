"""Batching (lesson 3): latency and throughput vs batch size, the overhead + per-item model, a latency budget.

A batch costs a fixed overhead (launch, reading the weights once) plus a per-item cost:
    latency_ms(b) = overhead_ms + b * per_item_ms,   items/s at batch b = b / (latency_ms(b) / 1000).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm.auto import tqdm

from hwopt import arguments, plots, roofline, widgets
from hwopt.machine import bench

BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def batch_latency_ms(batch_size, overhead_ms, per_item_ms) -> float:
    """Latency model of one batch (ms): overhead_ms + batch_size * per_item_ms."""
    batch_size = arguments.count("batch_size", batch_size, "batch")
    overhead_ms = arguments.positive("overhead_ms", overhead_ms, allow_zero=True)
    return overhead_ms + batch_size * arguments.positive("per_item_ms", per_item_ms)


def _check_table(batch_sizes, latencies_ms, allow_empty: bool = False) -> tuple[list[int], list[float]]:
    """Validate a (batch size, latency) table given as two equal-length sequences."""
    sizes = arguments.finite_array("batch_sizes", batch_sizes, ndim=1, integer=True, minimum=1,
                                   maximum=arguments.LIMITS["batch"], allow_empty=allow_empty).tolist()
    lats = arguments.finite_array("latencies_ms", latencies_ms, ndim=1, minimum=0, strict=True,
                                  allow_empty=allow_empty).tolist()
    if len(sizes) != len(lats):
        raise ValueError(
            "batch_sizes and latencies_ms must have equal length; "
            f"got {len(sizes)} and {len(lats)}"
        )
    return sizes, [float(t) for t in lats]


def _distinct(sizes: list[int]) -> list[int]:
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"batch_sizes must not repeat a size (each is measured once); got {sizes}")
    return sizes


def _items_per_s(batch_sizes, latencies_ms) -> list[float]:
    """Items/s of each row of a (batch size, latency in ms) table: batch_size / (latency_ms / 1000)."""
    sizes, lats = _check_table(batch_sizes, latencies_ms, allow_empty=True)
    return [b / (t / 1000.0) for b, t in zip(sizes, lats, strict=True)]


@dataclass(frozen=True)
class LatencyFit:
    """Least-squares fit latency_ms = overhead_ms + per_item_ms * batch_size, with its error."""

    overhead_ms: float
    per_item_ms: float
    rms_error_ms: float  # root-mean-square residual over the fitted points
    max_relative_error: float  # largest |measured - fitted| / measured

    def __post_init__(self):
        arguments.positive("overhead_ms", self.overhead_ms, allow_zero=True)
        arguments.positive("per_item_ms", self.per_item_ms, allow_zero=True)
        arguments.positive("rms_error_ms", self.rms_error_ms, allow_zero=True)
        arguments.positive("max_relative_error", self.max_relative_error, allow_zero=True)

    def latency_ms(self, batch_size) -> np.ndarray:
        """Fitted latency (ms) for one or many batch sizes."""
        batch_size = arguments.finite_array("batch_size", batch_size, minimum=0)
        return self.overhead_ms + self.per_item_ms * batch_size.astype(float)

    @property
    def max_items_per_s(self) -> float:
        """Throughput the model approaches for huge batches: 1000 / per_item_ms items/s."""
        return 1000.0 / self.per_item_ms if self.per_item_ms > 0 else math.inf

    @property
    def half_throughput_batch(self) -> float:
        """Batch size where the overhead equals the per-item work: throughput is half its ceiling there."""
        return self.overhead_ms / self.per_item_ms if self.per_item_ms > 0 else math.inf

    def __str__(self) -> str:
        return (
            f"latency_ms = {self.overhead_ms:.3g} + {self.per_item_ms:.3g} x batch_size "
            f"(rms error {self.rms_error_ms:.3g} ms, worst {self.max_relative_error:.0%})"
        )


def fit_latency_model(batch_sizes, latencies_ms, *, relative: bool = True) -> LatencyFit:
    """Fit the overhead + per-item model to a measured table by least squares (needs >= 2 batch sizes).

    relative=True minimises relative residuals (each point weighted 1/latency), so the small batches that
    reveal the overhead count as much as the big ones. A negative overhead is refitted as zero, and a negative
    per-item cost (latency that does not grow with the batch, as for a tiny model) as a flat line:
    per_item_ms = 0, no throughput ceiling within the measured sizes.
    """
    sizes, lats = _check_table(batch_sizes, latencies_ms)
    relative = arguments.boolean("relative", relative)
    if len(set(sizes)) < 2:
        raise ValueError("batch_sizes must contain at least two different sizes to fit a line")
    b = np.asarray(sizes, dtype=float)
    t = np.asarray(lats, dtype=float)
    weight = 1.0 / t if relative else np.ones_like(t)
    design = np.column_stack([np.ones_like(b), b]) * weight[:, None]
    (overhead, per_item), *_ = np.linalg.lstsq(design, t * weight, rcond=None)
    if overhead < 0:  # a line through the origin: slope by weighted least squares
        overhead, per_item = 0.0, float(np.sum(weight**2 * b * t) / np.sum(weight**2 * b * b))
    if per_item < 0:  # a flat line: the weighted mean latency
        overhead, per_item = float(np.sum(weight**2 * t) / np.sum(weight**2)), 0.0
    residual = t - (overhead + per_item * b)
    return LatencyFit(
        overhead_ms=float(overhead),
        per_item_ms=float(per_item),
        rms_error_ms=float(np.sqrt(np.mean(residual**2))),
        max_relative_error=float(np.max(np.abs(residual) / t)),
    )


def predicted_latency_ms(params: float, batch_size, peak_flops: float, bandwidth_gbs: float,
                         bytes_per_weight: float = 4.0) -> float:
    """Roofline latency (ms) of a dense model's batch: max(2 params b / peak, weight bytes / bandwidth)."""
    params = arguments.positive("params", params)
    b = arguments.count("batch_size", batch_size, "batch")
    arguments.positive("peak_flops", peak_flops)
    arguments.positive("bandwidth_gbs", bandwidth_gbs)
    bytes_per_weight = arguments.positive("bytes_per_weight", bytes_per_weight)
    return 1e3 * roofline.time_s(2.0 * params * b, params * bytes_per_weight, peak_flops, bandwidth_gbs)


def batch1_regime(weight_bytes: float, cache_name: str, cache_bytes: int | None) -> str:
    """Where repeated batch-1 calls find their weights, from their size against the device's cache
    (hardware.last_level_cache gives cache_name, cache_bytes): which regime applies, as a sentence."""
    weight_bytes = arguments.positive("weight_bytes", weight_bytes)
    cache_name = arguments.text("cache_name", cache_name)
    if cache_bytes is not None:
        cache_bytes = arguments.count("cache_bytes", cache_bytes, "bytes")
    size = f"The {weight_bytes / 1e6:,.1f} MB of weights"
    if cache_bytes is None:
        return (f"{size} against this device's {cache_name}: its size is not known here. If they fit in "
                "it, repeated batch-1 calls read them from the cache and the memory roof (DRAM GB/s) is "
                "pessimistic; if not, every call streams them from memory and batch 1 is memory-bound.")
    cache = f"this device's {cache_name} ({cache_bytes / 2**20:,.0f} MiB)"
    if weight_bytes <= cache_bytes:
        tight = " (more than half of it: some may be evicted between calls)" \
            if weight_bytes > cache_bytes / 2 else ""
        return (f"{size} fit in {cache}{tight}: called again and again at batch 1, they stay there, so "
                "batch 1 is not limited by DRAM bandwidth. The memory roof (DRAM GB/s) is then pessimistic, "
                "and what sets batch-1 latency is cache bandwidth and the fixed cost of each call.")
    return (f"{size} exceed {cache}: every batch-1 call streams them from DRAM, so batch 1 is memory-bound "
            "(weights / bandwidth) unless fixed per-call costs are larger still.")


def batch1_verdict(weight_bytes: float, latency_ms: float, bandwidth_gbs: float, cache_name: str = "",
                   cache_bytes: int | None = None) -> str:
    """What a measured batch-1 latency says: the rate it read its weights at, against the DRAM bandwidth,
    read together with where the weights live (the cache batch1_regime sized them against; None: unknown)."""
    weight_bytes = arguments.positive("weight_bytes", weight_bytes)
    achieved_gbs = weight_bytes / arguments.positive("latency_ms", latency_ms) / 1e6
    ratio = achieved_gbs / arguments.positive("bandwidth_gbs", bandwidth_gbs)
    cache_name = arguments.text("cache_name", cache_name, allow_empty=True) or "last-level cache"
    if cache_bytes is not None:
        cache_bytes = arguments.count("cache_bytes", cache_bytes, "bytes")
    said = (f"batch 1 took {latency_ms:.3f} ms: its {weight_bytes / 1e6:,.1f} MB of weights were read at "
            f"{achieved_gbs:,.1f} GB/s, {ratio:.2f}x the measured DRAM bandwidth ({bandwidth_gbs:,.1f} GB/s)")
    fits = cache_bytes is not None and weight_bytes <= cache_bytes
    if ratio > 1.1:
        return f"{said}: faster than DRAM can deliver, so the weights came from cache."
    if ratio < 0.5:
        return (f"{said}: far below the memory roof, so neither memory nor arithmetic sets batch-1 latency "
                "here but the fixed cost of each call (framework dispatch, threads, kernel launches).")
    if fits:
        return (f"{said}. The weights fit in the {cache_name} ({cache_bytes / 2**20:,.0f} MiB), so DRAM is "
                "not what limits this call, yet the cache did not make it faster than DRAM: the time is set "
                "by what the cache delivers to this call and by its fixed cost, which this lesson does not "
                "separate. The DRAM roof predicts the right time here for the wrong reason.")
    where = "" if cache_bytes is None else f" (they exceed the {cache_name}, {cache_bytes / 2**20:,.0f} MiB)"
    return f"{said}: close to the memory roof{where}, so batch 1 is memory-bound here."


def fit_verdict(fit: LatencyFit, sweep: BatchSweep, tolerance: float = 0.2) -> str:
    """Where the overhead + per-item line fails the measured sweep: the batch sizes it misses by more than
    tolerance (a fraction), with both times, and its throughput ceiling against the best measured."""
    arguments.instance("fit", fit, LatencyFit)
    arguments.instance("sweep", sweep, BatchSweep)
    tolerance = arguments.fraction("tolerance", tolerance)
    fitted = fit.latency_ms(list(sweep.batch_sizes))
    misses = [f"batch {b}: {m:.3g} ms measured, {f:.3g} fitted"
              for b, m, f in zip(sweep.batch_sizes, sweep.latencies_ms, fitted, strict=True)
              if abs(f - m) > tolerance * m]
    best = max(sweep.throughputs_per_s)
    lines = [f"The line misses {len(misses)} of {len(fitted)} batch sizes by more than {tolerance:.0%}"
             + (f" ({'; '.join(misses)})" if misses else "") + "."]
    if fit.per_item_ms > 0 and fit.max_items_per_s < best:
        lines.append(f"Its ceiling, {fit.max_items_per_s:,.0f} items/s, is below the {best:,.0f} items/s "
                     f"measured at batch {sweep.best_batch}: the line cannot be the limit of this curve.")
    if misses:
        lines.append("Two numbers do not describe this curve everywhere: use the measured latencies where "
                     "the line misses, as section 5 does.")
    return " ".join(lines)


# ---- measuring a real model ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchSweep:
    """Measured latency per batch: one bench.Measurement per batch size, each size measured once."""

    batch_sizes: tuple[int, ...]
    measurements: tuple[bench.Measurement, ...]

    def __post_init__(self):
        arguments.instance("measurements", self.measurements, (list, tuple))
        for m in self.measurements:
            arguments.instance("measurements", m, bench.Measurement)
        sizes, _ = _check_table(self.batch_sizes, [m.median_ms for m in self.measurements], allow_empty=True)
        object.__setattr__(self, "batch_sizes", tuple(_distinct(sizes)))
        object.__setattr__(self, "measurements", tuple(self.measurements))

    @property
    def latencies_ms(self) -> list[float]:
        """Median latency (ms) per batch size."""
        return [m.median_ms for m in self.measurements]

    @property
    def throughputs_per_s(self) -> list[float]:
        """Items/s per batch size, from the median latency."""
        return _items_per_s(self.batch_sizes, self.latencies_ms)

    @property
    def best_batch(self) -> int:
        """Batch size with the highest measured throughput."""
        rates = self.throughputs_per_s
        return self.batch_sizes[rates.index(max(rates))]

    def knee(self, fraction: float = 0.9) -> int:
        """Smallest batch whose throughput reaches `fraction` of the best measured (where it flattens)."""
        fraction = arguments.fraction("fraction", fraction)
        rates = self.throughputs_per_s
        target = fraction * max(rates)
        return min(b for b, r in zip(self.batch_sizes, rates, strict=True) if r >= target)

    def latency_table_ms(self, max_batch_size) -> list[float]:
        """Latency (ms) of every batch size 1..max_batch_size, interpolated linearly between the measured
        sizes (which must include 1 and reach max_batch_size)."""
        max_batch_size = arguments.count("max_batch_size", max_batch_size, "batch")
        if 1 not in self.batch_sizes or max_batch_size > max(self.batch_sizes, default=0):
            raise ValueError(f"max_batch_size must lie within the measured batch sizes "
                             f"{sorted(self.batch_sizes)} (which must include 1); got {max_batch_size}")
        order = np.argsort(self.batch_sizes)
        return np.interp(np.arange(1, max_batch_size + 1), np.asarray(self.batch_sizes)[order],
                         np.asarray(self.latencies_ms)[order]).tolist()

    def largest_within(self, budget_ms) -> tuple[int | None, float]:
        """Largest batch whose median latency (ms) is <= budget_ms, and its items/s; (None, 0.0) if none."""
        budget_ms = arguments.positive("budget_ms", budget_ms)
        fitting = [(b, r) for b, t, r in zip(self.batch_sizes, self.latencies_ms, self.throughputs_per_s,
                                              strict=True) if t <= budget_ms]
        return max(fitting) if fitting else (None, 0.0)


def _sizes(batch_sizes) -> list[int]:
    return arguments.finite_array("batch_sizes", batch_sizes, ndim=1, integer=True, minimum=1,
                                  maximum=arguments.LIMITS["batch"]).tolist()


def _model_input(model, batch_size: int, device: str):
    first = next((m for m in model.modules() if isinstance(m, torch.nn.Linear)), None)
    if first is None:
        raise ValueError("model must contain a torch.nn.Linear (its in_features sets the input width)")
    return torch.randn(batch_size, first.in_features, device=device)


def measure_batch_sweep(model, batch_sizes=BATCH_SIZES, *, device="cpu", repeats: int = 7, warmup: int = 2,
                        progress: bool = True) -> BatchSweep:
    """Time model(x) for x of shape (batch_size, in_features) at each batch size (inference, no grad)."""
    arguments.instance("model", model, torch.nn.Module)
    sizes = _distinct(_sizes(batch_sizes))
    device = bench.resolve_device(device)
    arguments.count("repeats", repeats, "repeats")
    arguments.count("warmup", warmup, "repeats", minimum=0)
    progress = arguments.boolean("progress", progress)
    model = model.to(device)
    results = []
    for b in tqdm(sizes, desc="batch sizes", disable=not progress):
        x = _model_input(model, b, device)

        def step(x=x):
            with torch.inference_mode():
                return model(x)

        results.append(bench.time_fn(step, label=f"batch {b}", device=device, repeats=repeats, warmup=warmup))
    return BatchSweep(tuple(sizes), tuple(results))


def compare_batch_sizes(model, batch_sizes=(1, 256), *, device="cpu", repeats: int = 15) -> dict[int, float]:
    """Throughput (items/s) of a few batch sizes timed interleaved in one run (for a fair ratio)."""
    arguments.instance("model", model, torch.nn.Module)
    sizes = _distinct(_sizes(batch_sizes))
    device = bench.resolve_device(device)
    arguments.count("repeats", repeats, "repeats")
    model = model.to(device)
    fns = {}
    for b in sizes:
        x = _model_input(model, b, device)

        def step(x=x):
            with torch.inference_mode():
                return model(x)

        fns[f"batch {b}"] = step
    res = bench.compare(fns, device=device, repeats=repeats)
    rates = _items_per_s(sizes, [res[f"batch {b}"].median_ms for b in sizes])
    return dict(zip(sizes, rates, strict=True))


def plot_batch_sweep(sweep: BatchSweep, fit: LatencyFit | None = None, budget_ms: float | None = None):
    """Two panels: latency (ms) and throughput (items/s) vs batch size, with the fit and a budget marked."""
    arguments.instance("sweep", sweep, BatchSweep)
    if fit is not None:
        arguments.instance("fit", fit, LatencyFit)
    if budget_ms is not None:
        arguments.positive("budget_ms", budget_ms)
    fig, (ax_lat, ax_thr) = plt.subplots(1, 2, figsize=(11, 4))
    b = np.asarray(sweep.batch_sizes, dtype=float)
    q1 = [m.q1_s * 1e3 for m in sweep.measurements]
    q3 = [m.q3_s * 1e3 for m in sweep.measurements]
    plots.axes("batch size", "latency per batch (ms)", logx=True, logy=True, ax=ax_lat, title="Latency")
    plots.band(ax_lat, b, sweep.latencies_ms, q1, q3, label="measured (median, IQR)", color=plots.color(0))
    plots.axes("batch size", "throughput (items/s)", logx=True, logy=True, ax=ax_thr, title="Throughput")
    thr_lo = [bb / (t / 1e3) for bb, t in zip(b, q3, strict=True)]
    thr_hi = [bb / (t / 1e3) for bb, t in zip(b, q1, strict=True)]
    plots.band(ax_thr, b, sweep.throughputs_per_s, thr_lo, thr_hi, label="measured", color=plots.color(0))
    if fit is not None:
        grid = np.geomspace(b.min(), b.max(), 100)
        ax_lat.plot(grid, fit.latency_ms(grid), "--", color=plots.color(1), label="overhead + per-item fit")
        ax_thr.plot(grid, grid / (fit.latency_ms(grid) / 1e3), "--", color=plots.color(1), label="fit")
    if budget_ms is not None:
        best, rate = sweep.largest_within(budget_ms)
        ax_lat.axhline(budget_ms, color=plots.color(2), linestyle=":", label=f"budget {budget_ms:g} ms")
        if best is not None:
            lat = dict(zip(sweep.batch_sizes, sweep.latencies_ms, strict=True))[best]
            ax_lat.plot([best], [lat], "*", markersize=16, color=plots.color(2), label=f"best: batch {best}")
            ax_thr.plot([best], [rate], "*", markersize=16, color=plots.color(2),
                        label=f"{rate:,.0f} items/s")
    plots.finish(ax_lat)
    return plots.finish(ax_thr)


def sweep_table(sweep: BatchSweep, predicted_ms=None) -> str:
    """Text table per batch size: median latency (ms) and IQR, items/s, and predicted/measured if given."""
    arguments.instance("sweep", sweep, BatchSweep)
    if predicted_ms is not None:
        predicted_ms = arguments.finite_array("predicted_ms", predicted_ms, ndim=1, minimum=0, strict=True)
        if len(predicted_ms) != len(sweep.batch_sizes):
            raise ValueError(f"predicted_ms must hold one latency per batch size ({len(sweep.batch_sizes)}); "
                             f"got {len(predicted_ms)}")
    head = f"{'batch':>6s} {'latency ms':>11s} {'IQR ms':>8s} {'items/s':>10s}"
    lines = [head + (f" {'predicted ms':>13s} {'pred/meas':>10s}" if predicted_ms is not None else "")]
    rows = zip(sweep.batch_sizes, sweep.measurements, sweep.throughputs_per_s, strict=True)
    for i, (b, m, rate) in enumerate(rows):
        line = f"{b:6d} {m.median_ms:11.3f} {m.iqr_ms:8.3f} {rate:10,.0f}"
        if predicted_ms is not None:
            line += f" {predicted_ms[i]:13.3f} {predicted_ms[i] / m.median_ms:10.2f}"
        lines.append(line)
    return "\n".join(lines)


def budget_report(sweep: BatchSweep, budget_ms: float) -> str:
    """One line: the largest batch within budget_ms and its throughput (the lesson's slider callback)."""
    arguments.instance("sweep", sweep, BatchSweep)
    best, rate = sweep.largest_within(budget_ms)
    if best is None:
        smallest, lat = min(zip(sweep.batch_sizes, sweep.latencies_ms, strict=True))
        return f"budget {budget_ms:g} ms: nothing fits (batch {smallest} already takes {lat:.2f} ms)"
    return f"budget {budget_ms:g} ms: largest batch that fits = {best}, throughput {rate:,.0f} items/s"


def budget_explorer(sweep: BatchSweep, fit: LatencyFit | None = None):
    """A latency-budget slider (ms) -> the largest batch that fits and its throughput, marked on curves."""
    arguments.instance("sweep", sweep, BatchSweep)
    if fit is not None:
        arguments.instance("fit", fit, LatencyFit)
    lo, hi = min(sweep.latencies_ms), max(sweep.latencies_ms)

    def show(budget_ms):
        print(budget_report(sweep, budget_ms))
        return plot_batch_sweep(sweep, fit, budget_ms=budget_ms)

    start = float(np.sqrt(lo * hi))
    slider = widgets.log_slider("latency budget", lo / 2, hi * 2, start, unit="ms", steps_per_decade=20)
    return widgets.explore(show, budget_ms=slider)
