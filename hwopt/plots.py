"""The course's one plotting style: labelled axes with units, log scales, one palette, median+IQR bands."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt

from hwopt import arguments

# Okabe-Ito: readable for colour-blind learners and in greyscale print.
PALETTE: tuple[str, ...] = (
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#009E73",  # green
    "#CC79A7",  # purple
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#F0E442",  # yellow
    "#000000",  # black
)
FIGSIZE: tuple[float, float] = (6.4, 4.0)


def color(i: int) -> str:
    """The i-th colour of the course palette (wraps around)."""
    return PALETTE[arguments.count("i", i, "items", minimum=0) % len(PALETTE)]


def axes(
    xlabel: str,
    ylabel: str,
    *,
    title: str | None = None,
    logx: bool = False,
    logy: bool = False,
    ax=None,
    figsize: tuple[float, float] = FIGSIZE,
):
    """Axes with unit-labelled x/y (e.g. "size (MB)"), optional log scales; new figure unless ax is given."""
    arguments.text("xlabel", xlabel)
    arguments.text("ylabel", ylabel)
    if title is not None:
        arguments.text("title", title, allow_empty=True)
    arguments.boolean("logx", logx)
    arguments.boolean("logy", logy)
    if ax is None:
        arguments.instance("figsize", figsize, tuple)
        for size in figsize:
            arguments.positive("figsize", size, maximum=100)
        _, ax = plt.subplots(figsize=figsize)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.grid(True, which="major", alpha=0.3)
    return ax


def band(
    ax,
    x: Sequence[float],
    median: Sequence[float],
    low: Sequence[float],
    high: Sequence[float],
    *,
    label: str | None = None,
    color: str | None = None,
    marker: str = "o",
):
    """Plot a median line with a shaded low..high band (e.g. the IQR); returns the median's Line2D."""
    x, median, low, high = (arguments.finite_array(name, v, ndim=1).astype(float)
                            for name, v in (("x", x), ("median", median), ("low", low), ("high", high)))
    for name, value in (("label", label), ("color", color)):
        if value is not None:
            arguments.text(name, value, allow_empty=True)
    arguments.text("marker", marker)
    if not (x.shape == median.shape == low.shape == high.shape) or x.ndim != 1:
        raise ValueError(
            f"x, median, low and high must be 1-D and the same length; got shapes "
            f"{x.shape}, {median.shape}, {low.shape}, {high.shape}"
        )
    (line,) = ax.plot(x, median, marker=marker, label=label, color=color)
    ax.fill_between(x, low, high, color=line.get_color(), alpha=0.25, linewidth=0)
    return line


TIME_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6}


def measurement_band(
    ax,
    x: Sequence[float],
    measurements: Sequence,
    *,
    unit: str = "ms",
    label: str | None = None,
    color: str | None = None,
):
    """band() of timing measurements (bench.Measurement): median with the IQR shaded, in `unit`."""
    arguments.one_of("unit", unit, TIME_UNITS)
    arguments.instance("measurements", measurements, (list, tuple))
    if not all(hasattr(m, "median_s") and hasattr(m, "q1_s") and hasattr(m, "q3_s") for m in measurements):
        raise ValueError("measurements must be bench.Measurement objects (median_s, q1_s, q3_s)")
    k = TIME_UNITS[unit]
    return band(
        ax,
        x,
        [m.median_s * k for m in measurements],
        [m.q1_s * k for m in measurements],
        [m.q3_s * k for m in measurements],
        label=label,
        color=color,
    )


def finish(ax, *, legend: bool = True):
    """Tidy the figure (legend if any labels, tight layout) and return it, closed so Jupyter shows it once."""
    arguments.boolean("legend", legend)
    fig = ax.figure
    if legend and any(not h.startswith("_") for h in ax.get_legend_handles_labels()[1]):
        ax.legend(frameon=False)
    fig.tight_layout()
    plt.close(fig)
    return fig
