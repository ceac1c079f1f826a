"""Cost model (lesson 1): predicted time and dollars per 1M inferences of a workload on each chip.

A forward pass of a dense model with `params` weights on a batch of b inputs does 2 * params * b FLOP and
reads every weight once (params * bytes_per_weight bytes). The roofline predicts its time as
    time_s = max(FLOP / peak FLOP/s, bytes / bandwidth),
and the cost per inference is time_s * price_per_hour_usd / 3600 (one inference = one item of the batch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hwopt import arguments, plots

BYTES_PER_WEIGHT: dict[str, float] = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "int8": 1.0, "int4": 0.5}
# Which spec-sheet peak a precision runs at, best first; a chip without that peak falls back to the next.
PEAK_DTYPES: dict[str, tuple[str, ...]] = {
    "fp32": ("float32",),
    "fp16": ("float16", "float32"),
    "bf16": ("bfloat16", "float32"),
    "int8": ("int8", "float16", "float32"),
    "int4": ("int8", "float16", "float32"),  # int4 weights are unpacked to int8/fp16 units to compute
}


def _number(value) -> float | None:
    """A usable positive number from a spec cell, else None (missing, NaN, zero)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x > 0 else None


def check_precision(precision: str) -> str:
    """Normalise a precision name ('fp32', 'fp16', 'bf16', 'int8', 'int4'); ValueError otherwise."""
    name = str(precision).strip().lower()
    if name not in BYTES_PER_WEIGHT:
        raise ValueError(f"precision must be one of {sorted(BYTES_PER_WEIGHT)}; got {precision!r}")
    return name


def peak_flops(chip, precision: str = "fp32") -> float | None:
    """Spec-sheet peak (FLOP/s or OP/s) of a specs.Chip at precision, else a wider type's; None if none."""
    for dtype in PEAK_DTYPES[check_precision(precision)]:
        if chip.has_dtype(dtype):
            return chip.peak_flops(dtype)
    return None


def roofline_time_s(flop: float, bytes_moved: float, peak_flops_per_s: float, bandwidth_gbs: float) -> float:
    """Roofline time (s) of work doing `flop` FLOP and moving `bytes_moved` bytes: max(compute, memory)."""
    flop = arguments.positive("flop", flop, allow_zero=True)
    bytes_moved = arguments.positive("bytes_moved", bytes_moved, allow_zero=True)
    peak = arguments.positive("peak_flops_per_s", peak_flops_per_s)
    bandwidth = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    return max(flop / peak, bytes_moved / (bandwidth * 1e9))


def cost_per_million_usd(seconds_per_inference: float, price_per_hour_usd: float) -> float:
    """Dollars for 1,000,000 inferences at seconds_per_inference each on a chip at price_per_hour_usd."""
    seconds = arguments.positive("seconds_per_inference", seconds_per_inference)
    price = arguments.positive("price_per_hour_usd", price_per_hour_usd)
    return seconds * 1e6 * price / 3600.0


@dataclass(frozen=True)
class ChipEstimate:
    """Predicted performance of one workload on one chip (time per inference in ms, cost in USD per 1M)."""

    chip: str
    kind: str
    batch_latency_ms: float
    ms_per_inference: float
    inferences_per_s: float
    bound: str  # "memory" or "compute"
    fits_memory: bool
    price_per_hour_usd: float | None
    cost_per_million_usd: float | None  # None when no price is listed or the model does not fit


def estimate(params: float, batch_size: int = 1, precision: str = "fp32", chips: Sequence | None = None
             ) -> list[ChipEstimate]:
    """Predicted time and cost of a forward pass (params weights, batch_size items) per chip, cheapest first.

    Chips without a price are kept (cost None) and sorted last; so are chips too small to hold the weights.
    Chips with no listed peak for the precision (or a wider one) are left out.
    """
    params = arguments.positive("params", params)
    batch_size = arguments.count("batch_size", batch_size, "batch")
    precision = check_precision(precision)
    chips = _chips(chips)
    weight_bytes = params * BYTES_PER_WEIGHT[precision]
    flop = 2.0 * params * batch_size
    rows = []
    for chip in chips:
        peak = peak_flops(chip, precision)
        bandwidth = _number(getattr(chip, "bandwidth_gbs", None))
        if peak is None or bandwidth is None:
            continue  # the table gives no usable peak for this precision
        seconds = roofline_time_s(flop, weight_bytes, peak, bandwidth)
        memory_gb = _number(getattr(chip, "memory_gb", None))
        fits = memory_gb is None or weight_bytes <= memory_gb * 1e9
        price = _number(getattr(chip, "price_per_hour_usd", None))
        per_item = seconds / batch_size
        rows.append(ChipEstimate(
            chip=chip.name,
            kind=str(getattr(chip, "kind", "")),
            batch_latency_ms=seconds * 1e3,
            ms_per_inference=per_item * 1e3,
            inferences_per_s=1.0 / per_item,
            bound="compute" if flop / peak >= weight_bytes / (bandwidth * 1e9) else "memory",
            fits_memory=fits,
            price_per_hour_usd=price,
            cost_per_million_usd=cost_per_million_usd(per_item, price) if (price and fits) else None,
        ))
    rows.sort(key=lambda r: (r.cost_per_million_usd is None, r.cost_per_million_usd or 0.0,
                             r.ms_per_inference))
    return rows


def _chips(chips) -> list:
    """The chip table (None), or the given list of specs.Chip rows, checked."""
    from hwopt.machine import specs

    if chips is None:
        return specs.load_chips()
    arguments.instance("chips", chips, (list, tuple))
    for i, chip in enumerate(chips):
        arguments.instance(f"chips[{i}]", chip, specs.Chip)
    return list(chips)


def _estimates(estimates) -> list[ChipEstimate]:
    arguments.instance("estimates", estimates, (list, tuple))
    for i, e in enumerate(estimates):
        arguments.instance(f"estimates[{i}]", e, ChipEstimate)
    return list(estimates)


def best_chip(estimates: Sequence[ChipEstimate]) -> ChipEstimate | None:
    """The cheapest chip per 1M inferences among those with a price that can hold the model (None if none)."""
    estimates = _estimates(estimates)
    priced = [e for e in estimates if e.cost_per_million_usd is not None]
    return min(priced, key=lambda e: e.cost_per_million_usd) if priced else None


def cost_report(params: float, batch_size: int = 1, precision: str = "fp32", chips: Sequence | None = None,
                top: int = 6) -> str:
    """A short text table of the cheapest chips for a workload (the lesson's slider callback)."""
    top = arguments.count("top", top, "items")
    rows = estimate(params, batch_size, precision, chips)
    best = best_chip(rows)
    lines = [f"{params / 1e6:,.0f}M params, batch {batch_size}, {precision} "
             f"({params * BYTES_PER_WEIGHT[precision] / 1e9:.2f} GB of weights)",
             f"{'chip':28s} {'ms/inference':>13s} {'bound':>8s} {'$/1M inferences':>16s}"]
    for r in rows[:top]:
        cost = f"{r.cost_per_million_usd:16.4f}" if r.cost_per_million_usd is not None else (
            f"{'no price':>16s}" if r.fits_memory else f"{'does not fit':>16s}")
        mark = "  <- best" if best is not None and r is best else ""
        lines.append(f"{r.chip[:28]:28s} {r.ms_per_inference:13.4f} {r.bound:>8s} {cost}{mark}")
    return "\n".join(lines)


def plot_costs(estimates: Sequence[ChipEstimate], ax=None, title: str | None = None):
    """Bars of USD per 1M inferences per priced chip (log scale), cheapest highlighted; returns the Figure."""
    from matplotlib import ticker

    priced = [e for e in _estimates(estimates) if e.cost_per_million_usd is not None]
    if not priced:
        raise ValueError("estimates must contain at least one chip with a price that fits the model")
    best = best_chip(priced)
    ax = plots.axes("cost per 1M inferences (USD, log scale)", "chip", logx=True, ax=ax, title=title,
                    figsize=(7.0, 0.3 * len(priced) + 1.5))
    y = np.arange(len(priced))
    costs_usd = [e.cost_per_million_usd for e in priced]
    ax.hlines(y, min(costs_usd) / 1.5, costs_usd, color=plots.color(0), alpha=0.4)  # log axis: dots, not bars
    ax.plot(costs_usd, y, "o", color=plots.color(0), markersize=8)
    ax.plot([best.cost_per_million_usd], [priced.index(best)], "*", color=plots.color(1), markersize=16,
            label=f"best: {best.chip}")
    ax.set_xlim(min(costs_usd) / 1.5, max(costs_usd) * 1.5)
    ax.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_yticks(y, [f"{e.chip} ({e.bound})" for e in priced])
    ax.invert_yaxis()
    return plots.finish(ax)


KIND_MARKERS = {"cpu": "s", "gpu": "o", "tpu": "^", "accelerator": "D"}


def chip_rows(chips: Sequence | None = None, precision: str = "fp16") -> list[dict]:
    """Per chip: name, kind, peak FLOP/s at precision (with fallback), bandwidth GB/s, ridge FLOP/byte."""
    chips = _chips(chips)
    precision = check_precision(precision)
    rows = []
    for c in chips:
        peak = peak_flops(c, precision)
        bandwidth = _number(getattr(c, "bandwidth_gbs", None))
        if peak is None or bandwidth is None:
            continue
        rows.append({"name": c.name, "kind": c.kind, "peak_flops": peak, "bandwidth_gbs": bandwidth,
                     "ridge_flop_per_byte": peak / (bandwidth * 1e9)})
    return rows


def chip_table(chips: Sequence | None = None, precision: str = "fp16") -> str:
    """Text table of the chips: peak TFLOP/s, bandwidth, ridge point (FLOP/byte), sorted by ridge point."""
    rows = sorted(chip_rows(chips, precision), key=lambda r: r["ridge_flop_per_byte"])
    lines = [f"{'chip':28s} {'kind':12s} {'TFLOP/s':>9s} {'GB/s':>7s} {'ridge FLOP/byte':>16s}"]
    lines += [f"{r['name'][:28]:28s} {r['kind']:12s} {r['peak_flops'] / 1e12:9.1f} {r['bandwidth_gbs']:7.0f} "
              f"{r['ridge_flop_per_byte']:16.0f}" for r in rows]
    return "\n".join(lines)


def plot_chip_map(chips: Sequence | None = None, precision: str = "fp16", machine: tuple | None = None,
                  ax=None):
    """Peak FLOP/s vs memory bandwidth (log-log) per chip; diagonals are ridge points (FLOP/byte).

    machine = (bandwidth_gbs, flops, label) of the learner's measured device, drawn as a star.
    """
    rows = chip_rows(chips, precision)
    if not rows:
        raise ValueError("chips must contain at least one chip with a peak and a bandwidth")
    if machine is not None:
        arguments.instance("machine", machine, (tuple, list))
        if len(machine) not in (2, 3):
            raise ValueError(f"machine must be (bandwidth_gbs, flops) or (bandwidth_gbs, flops, label); "
                             f"got {machine!r}")
        arguments.positive("machine bandwidth_gbs", machine[0])
        arguments.positive("machine flops", machine[1])
        if len(machine) == 3:
            arguments.text("machine label", machine[2])
    ax = plots.axes("memory bandwidth (GB/s)", f"peak {precision} (TFLOP/s; fp32 where not listed)",
                    logx=True, logy=True, ax=ax, figsize=(8.0, 5.5))
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    for i, kind in enumerate(kinds):
        group = [r for r in rows if r["kind"] == kind]
        ax.scatter([r["bandwidth_gbs"] for r in group], [r["peak_flops"] / 1e12 for r in group],
                   marker=KIND_MARKERS.get(kind, "o"), color=plots.color(i), label=kind, s=40)
        for r in group:
            ax.annotate(r["name"], (r["bandwidth_gbs"], r["peak_flops"] / 1e12), fontsize=7,
                        textcoords="offset points", xytext=(4, 3))
    xs = [r["bandwidth_gbs"] for r in rows]
    if machine is not None:
        bw, flops, *label = machine
        ax.scatter([bw], [flops / 1e12], marker="*", s=250, color=plots.color(7), zorder=5,
                   label=label[0] if label else "this machine (measured)")
        xs.append(bw)
    ys = [r["peak_flops"] / 1e12 for r in rows] + ([machine[1] / 1e12] if machine is not None else [])
    y_lo, y_hi = min(ys) / 3, max(ys) * 3
    grid = np.geomspace(min(xs) / 2, max(xs) * 2, 50)
    for ridge in (1, 10, 100, 1000):
        tflops = grid * 1e9 * ridge / 1e12
        ax.plot(grid, tflops, ":", color="grey", linewidth=0.8)
        inside = grid[(tflops > y_lo) & (tflops < y_hi)]
        if len(inside):
            x_label = inside[len(inside) // 2]
            ax.annotate(f"ridge {ridge} FLOP/byte", (x_label, x_label * 1e9 * ridge / 1e12), fontsize=7,
                        color="grey", rotation=25, ha="center", va="bottom")
    ax.set_ylim(y_lo, y_hi)
    return plots.finish(ax)


def cost_explorer(chips: Sequence | None = None):
    """Sliders (parameters, batch size, precision) -> the cost table and bars, cheapest chip highlighted."""
    from hwopt import widgets

    chips = _chips(chips)

    def show(params, batch_size, precision):
        rows = estimate(params, batch_size, precision, chips)
        print(cost_report(params, batch_size, precision, chips))
        if best_chip(rows) is None:
            print("No priced chip in the table can hold these weights: try fewer parameters or bytes.")
            return None
        return plot_costs(rows, title=f"{params / 1e6:,.0f}M params, batch {batch_size}, {precision}")

    return widgets.explore(
        show,
        params=widgets.log_slider("parameters", 1e6, 1e11, 1e9, unit="count"),
        batch_size=widgets.dropdown("batch size", [2**i for i in range(11)], 1),
        precision=widgets.toggle("precision", list(BYTES_PER_WEIGHT), "fp16"),
    )
