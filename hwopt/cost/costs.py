"""Cost model (lesson 1): predicted time and dollars per 1M inferences of a workload on each chip.

One inference is one forward pass of one input through a dense model with `params` weights: 2 * params FLOP.
For a language model that is one token of one sequence (a reply of 500 tokens is 500 inferences). A batch of b
inputs reads every weight once (params * bytes_per_weight bytes, the format's block scales included), and the
roofline at 100% of the datasheet peak and bandwidth predicts its time as
    time_s = max(2 * params * b / peak FLOP/s, params * bytes_per_weight / bandwidth),
so the cost per inference is time_s / b * price_per_hour_usd / 3600. The bound leaves out everything else a
step reads or does (KV cache, activations, attention FLOP, overheads) and every second the chip is paid for
but idle: `beyond_the_bound` puts numbers on the first two.

Each format computes at its own peak column (fp8 on Hopper, Blackwell, MI300; mxfp4 on Blackwell and MI355X,
nvfp4 on Blackwell only).
The one fallback is physical: integer weights narrower than a byte (int4, int2) are unpacked to int8,
16-bit or fp32 units to compute. A chip without a peak for the format is skipped, and `skipped` says why.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib import ticker

from hwopt import arguments, formats, plots, roofline, widgets
from hwopt.machine import specs

# The formats the explorer offers: one of each kind of peak column in the chip table.
PRECISIONS = ("fp32", "bf16", "fp16", "fp8_e4m3", "int8", "int4", "mxfp4", "nvfp4")


def _number(value) -> float | None:
    """A usable positive number from a spec cell, else None (missing, NaN, zero)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x > 0 else None


def _format(precision) -> formats.Format:
    """The Format of precision; ValueError naming `precision` if unknown or without chip-table peaks."""
    fmt = formats.get(precision, argument="precision")
    if not fmt.peak_column and not (fmt.kind == "int" and fmt.bits < 8):  # sub-byte ints unpack
        raise ValueError(f"precision {fmt.name!r} has no peaks in the chip table; "
                         f"expected one of {', '.join(PRECISIONS)} (or another format with a peak column)")
    return fmt


def skipped(precision="fp32", chips: Sequence | None = None) -> list[tuple[str, str]]:
    """(chip name, reason) for every chip the cost model leaves out at precision."""
    fmt = _format(precision)
    return [(c.name, why) for c in _chips(chips) for flops, why in [c.peak(fmt)] if flops is None]


def _skipped_lines(precision, chips, width: int = 110) -> list[str]:
    """'skipped ...' lines for a report: every left-out chip with its reason, grouped by reason."""
    by_reason: dict[str, list[str]] = {}
    for name, why in skipped(precision, chips):
        by_reason.setdefault(why, []).append(name)
    lines = []
    for why, names in by_reason.items():
        text = f"skipped, {why}: {', '.join(names)}"
        while len(text) > width:
            cut = text.rfind(", ", 0, width)
            lines.append(text[:cut + 1])
            text = "    " + text[cut + 2:]
        lines.append(text)
    return lines


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
    peak_basis: str = ""  # the chip-table column whose peak was used


def estimate(params: float, batch_size: int = 1, precision="fp32", chips: Sequence | None = None,
             extra_bytes: float = 0.0) -> list[ChipEstimate]:
    """Predicted time and cost of a forward pass (params weights, batch_size items) per chip, cheapest first.

    extra_bytes: bytes each step reads besides the weights (a KV cache, say; 0 for the plain bound). Chips
    without a price are kept (cost None) and sorted last; so are chips too small to hold the weights. Chips
    with no peak for the precision are left out: `skipped` lists them with the reason.
    """
    params = arguments.positive("params", params)
    batch_size = arguments.count("batch_size", batch_size, "batch")
    extra_bytes = arguments.positive("extra_bytes", extra_bytes, allow_zero=True)
    fmt = _format(precision)
    weight_bytes = params * fmt.bytes_per_weight
    step_bytes = weight_bytes + extra_bytes
    flop = 2.0 * params * batch_size
    rows = []
    for chip in _chips(chips):
        peak, basis = chip.peak(fmt)
        bandwidth = _number(getattr(chip, "bandwidth_gbs", None))
        if peak is None or bandwidth is None:
            continue  # listed by skipped()
        seconds = roofline.time_s(flop, step_bytes, peak, bandwidth)
        memory = _number(getattr(chip, "memory_bytes", None))
        fits = memory is None or step_bytes <= memory
        price = _number(getattr(chip, "price_per_hour_usd", None))
        per_item = seconds / batch_size
        rows.append(ChipEstimate(
            chip=chip.name,
            kind=str(getattr(chip, "kind", "")),
            batch_latency_ms=seconds * 1e3,
            ms_per_inference=per_item * 1e3,
            inferences_per_s=1.0 / per_item,
            bound="compute" if flop / peak >= step_bytes / (bandwidth * 1e9) else "memory",
            fits_memory=fits,
            price_per_hour_usd=price,
            cost_per_million_usd=cost_per_million_usd(per_item, price) if (price and fits) else None,
            peak_basis=basis,
        ))
    rows.sort(key=lambda r: (r.cost_per_million_usd is None, r.cost_per_million_usd or 0.0,
                             r.ms_per_inference))
    return rows


def _chip(chip):
    """chip itself when it is a specs.Chip (a row of the chip table)."""
    return arguments.instance("chip", chip, specs.Chip)


def _chips(chips) -> list:
    """The chip table (None), or the given list of specs.Chip rows, checked."""
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


def inference_definition(params: float, batch_size: int = 1, precision="fp32") -> str:
    """What one 'inference' is in this cost model, with its FLOP and bytes for this workload."""
    params = arguments.positive("params", params)
    batch_size = arguments.count("batch_size", batch_size, "batch")
    fmt = _format(precision)
    weights_gb = params * fmt.bytes_per_weight / 1e9
    share = "the whole read" if batch_size == 1 else f"1/{batch_size} of one read"
    return _paragraphs([
        f"One inference = one forward pass of one input through all {params / 1e6:,.0f}M weights: "
        f"{2 * params / 1e9:,.1f} GFLOP, and {share} of the {weights_gb:,.2f} GB of {fmt.name} weights "
        f"(the batch of {batch_size} shares it).",
        "For a language model that is ONE token of one sequence: a reply of 500 tokens is 500 inferences, "
        "and a prompt of 2,000 tokens is 2,000 inferences of FLOP done in one pass.",
        "The bound assumes 100% of the datasheet peak and bandwidth, and reads nothing but the weights."])


def _paragraphs(sentences: list[str], width: int = 110) -> str:
    """Sentences as lines of at most width characters, continuation lines indented."""
    return "\n".join(textwrap.fill(s, width, subsequent_indent="  ") for s in sentences)


def beyond_the_bound(params: float, batch_size: int, precision, chip, extra_bytes: float = 0.0,
                     utilisation: float = 1.0, extra_label: str = "other bytes per step") -> str:
    """Sentences: the bound's cost on chip, then with extra_bytes read per step, then at utilisation (0-1].

    utilisation: the share of peak and bandwidth actually reached (a measured ratio); the time scales by 1/u.
    """
    params = arguments.positive("params", params)
    batch_size = arguments.count("batch_size", batch_size, "batch")
    utilisation = arguments.fraction("utilisation", utilisation)
    extra_bytes = arguments.positive("extra_bytes", extra_bytes, allow_zero=True)
    extra_label = arguments.text("extra_label", extra_label)
    fmt = _format(precision)
    _chip(chip)
    peak, basis = chip.peak(fmt)
    if peak is None:
        raise ValueError(f"chip {chip.name!r} has no peak for {fmt.name}: {basis}")
    price = _number(getattr(chip, "price_per_hour_usd", None))
    if price is None:
        raise ValueError(f"chip must have an on-demand price; {chip.name!r} has none in the chip table")
    weight_bytes, flop = params * fmt.bytes_per_weight, 2.0 * params * batch_size

    def usd(step_bytes):
        seconds = roofline.time_s(flop, step_bytes, peak, chip.bandwidth_gbs) / batch_size
        return cost_per_million_usd(seconds, price)

    bound, more = usd(weight_bytes), usd(weight_bytes + extra_bytes)
    real = more / utilisation
    memory = _number(getattr(chip, "memory_bytes", None))
    total_gb = (weight_bytes + extra_bytes) / 1e9
    overflow = (f"; and the {total_gb:,.1f} GB no longer fit in its {memory / 2**30:g} GiB"
                if memory is not None and weight_bytes + extra_bytes > memory else "")
    return _paragraphs([
        f"The bound on {chip.name}: ${bound:.4f} per 1M inferences ({basis}, {price:g} USD per chip-hour).",
        f"Reading {extra_bytes / 1e9:,.1f} GB of {extra_label} per step as well: ${more:.4f} per 1M "
        f"({more / bound:.1f}x){overflow}.",
        f"At {utilisation:.0%} of peak and bandwidth instead of 100%: ${real:.4f} per 1M "
        f"({real / bound:.1f}x the bound).",
        "Still left out: attention FLOP, activations, framework and launch overhead, the time a rented chip "
        "sits idle between requests, and the network between chips when a model needs more than one.",
    ])


def cost_report(params: float, batch_size: int = 1, precision="fp32", chips: Sequence | None = None,
                top: int = 6) -> str:
    """A short text table of the cheapest chips for a workload, and the chips left out with the reason."""
    top = arguments.count("top", top, "items")
    rows = estimate(params, batch_size, precision, chips)
    fmt = _format(precision)
    best = best_chip(rows)
    lines = [f"{params / 1e6:,.0f}M params, batch {batch_size}, {fmt.name} "
             f"({params * fmt.bytes_per_weight / 1e9:.2f} GB of weights, read once per batch)",
             "one inference = one forward pass of one input (a language model: one token), at 100% of "
             "the datasheet",
             f"{'chip':28s} {'ms/inference':>13s} {'bound':>8s} {'$/1M inferences':>16s}  peak used"]
    for r in rows[:top]:
        cost = f"{r.cost_per_million_usd:16.4f}" if r.cost_per_million_usd is not None else (
            f"{'no price':>16s}" if r.fits_memory else f"{'does not fit':>16s}")
        mark = "  <- best" if best is not None and r is best else ""
        lines.append(f"{r.chip[:28]:28s} {r.ms_per_inference:13.4f} {r.bound:>8s} {cost}  "
                     f"{r.peak_basis}{mark}")
    return "\n".join(lines + _skipped_lines(fmt, chips))


def plot_costs(estimates: Sequence[ChipEstimate], ax=None, title: str | None = None):
    """Bars of USD per 1M inferences per priced chip (log scale), cheapest highlighted; returns the Figure."""
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


def chip_rows(chips: Sequence | None = None, precision="bf16") -> list[dict]:
    """Per chip with a peak at precision: name, kind, peak FLOP/s, its column, GB/s, ridge FLOP/byte."""
    fmt = _format(precision)
    rows = []
    for c in _chips(chips):
        peak, basis = c.peak(fmt)
        bandwidth = _number(getattr(c, "bandwidth_gbs", None))
        if peak is None or bandwidth is None:
            continue
        rows.append({"name": c.name, "kind": c.kind, "peak_flops": peak, "peak_basis": basis,
                     "bandwidth_gbs": bandwidth, "ridge_flop_per_byte": peak / (bandwidth * 1e9)})
    return rows


def chip_table(chips: Sequence | None = None, precision="bf16") -> str:
    """Text table of the chips with a peak at precision, sorted by ridge point; then the chips left out."""
    fmt = _format(precision)
    rows = sorted(chip_rows(chips, fmt), key=lambda r: r["ridge_flop_per_byte"])
    lines = [f"{'chip':28s} {'kind':12s} {fmt.name + ' TFLOP/s':>14s} {'GB/s':>7s} {'ridge FLOP/byte':>16s}"]
    lines += [f"{r['name'][:28]:28s} {r['kind']:12s} {r['peak_flops'] / 1e12:14.1f} "
              f"{r['bandwidth_gbs']:7.0f} {r['ridge_flop_per_byte']:16.0f}" for r in rows]
    return "\n".join(lines + _skipped_lines(fmt, chips))


def plot_chip_map(chips: Sequence | None = None, precision="bf16", machine: tuple | None = None,
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
    name = _format(precision).name
    ax = plots.axes("memory bandwidth (GB/s)", f"peak {name} (TFLOP/s; chips without one are left out)",
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
        precision=widgets.toggle("precision", list(PRECISIONS), "fp16"),
    )
