"""The report's plots, drawn with the course's plot style (hwopt.plots) from a report document."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from hwopt import plots  # noqa: E402

MB = 1e6


def ratio_chart(rows: list[dict], title: str):
    """Horizontal bars of each row's ratio with its paired IQR, the goal as a marker (a band: both ends);
    None if no ratios."""
    rows = [r for r in rows if r["ratio"] is not None]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 0.5 * len(rows) + 1.6))
    plots.axes("ratio (higher is better)", "measurement", ax=ax, title=title)
    y = list(range(len(rows)))
    ratios = [r["ratio"] for r in rows]
    lo = [r["ratio"] - (r["ratio_q1"] if r.get("ratio_q1") is not None else r["ratio"]) for r in rows]
    hi = [(r["ratio_q3"] if r.get("ratio_q3") is not None else r["ratio"]) - r["ratio"] for r in rows]
    palette = {"meets goal": plots.color(2), "below goal": plots.color(1)}
    colors = [palette.get(r["verdict"], plots.color(5)) for r in rows]
    ax.barh(y, ratios, xerr=[[max(0, v) for v in lo], [max(0, v) for v in hi]], color=colors, alpha=0.85,
            capsize=4)
    goals = [(i, g) for i, r in enumerate(rows) if r["goal"] is not None  # a band (low, high): both ends
             for g in (r["goal"] if isinstance(r["goal"], list | tuple) else [r["goal"]])]
    if goals:
        ax.plot([g for _, g in goals], [i for i, _ in goals], "k|", markersize=18, markeredgewidth=2,
                label="goal")
    ax.set_yticks(y, [r["name"] for r in rows])
    ax.invert_yaxis()
    return plots.finish(ax)


def bandwidth_chart(series: list[dict], caches: dict[str, int]):
    """GB/s vs working set (MB, log) for each source and kernel, cache capacities marked; None if empty."""
    if not series:
        return None
    ax = plots.axes("working set of the 3 arrays (MB)", "bandwidth (GB/s)", logx=True, logy=True,
                    title="Bandwidth vs array size")
    curves = list(dict.fromkeys((s["source"], s["kernel"]) for s in series))
    for i, (source, kernel) in enumerate(curves):
        pts = sorted((s for s in series if (s["source"], s["kernel"]) == (source, kernel)),
                     key=lambda s: s["working_set_bytes"])
        plots.band(ax, [s["working_set_bytes"] / MB for s in pts], [s["gbs"] for s in pts],
                   [s["q1"] for s in pts], [s["q3"] for s in pts], label=f"{source} {kernel}",
                   color=plots.color(i), marker="os^v"[i % 4])
    for i, (level, size) in enumerate(sorted(caches.items())):
        shown = f"{size / 2**20:g} MiB" if size >= 2**20 else f"{size / 2**10:g} KiB"
        ax.axvline(size / MB, color=plots.color(4 + i), linestyle=":", label=f"{level} {shown}")
    return plots.finish(ax)


def gemv_chart(series: list[dict]):
    """Decode GEMV time (ms) and GB/s vs weights + scales (MB) per variant, two panels; None if empty."""
    if not series:
        return None
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(11, 4))
    plots.axes("weights + scales (MB)", "time per GEMV (ms)", logx=True, logy=True, ax=ax_t,
               title="Decode GEMV time")
    plots.axes("weights + scales (MB)", "weights + scales streamed (GB/s)", logx=True, ax=ax_b,
               title="Achieved bandwidth")
    for i, variant in enumerate(dict.fromkeys(s["variant"] for s in series)):
        pts = sorted((s for s in series if s["variant"] == variant), key=lambda s: s["weight_mb"])
        x = [s["weight_mb"] for s in pts]
        plots.band(ax_t, x, [s["median_ms"] for s in pts], [s["q1_ms"] for s in pts],
                   [s["q3_ms"] for s in pts], label=variant, color=plots.color(i))
        ax_b.plot(x, [s["gbs"] for s in pts], marker="o", label=variant, color=plots.color(i))
    ax_b.set_ylim(bottom=0)
    plots.finish(ax_t)
    return plots.finish(ax_b)


def grading_chart(series: list[dict]):
    """Autograding seconds (total and per submission-notebook) vs class size (sample mix); None if empty."""
    if not series:
        return None
    ax = plots.axes("class size (students)", "autograde time (s)",
                    title="Grading time vs class size (sample mix)")
    x = [s["class_size"] for s in series]
    ax.plot(x, [s["total_s"] for s in series], marker="o", color=plots.color(0), label="whole class")
    ax2 = ax.twinx()
    ax2.plot(x, [s["s_per_notebook"] for s in series], marker="s", color=plots.color(1),
             label="per submission-notebook")
    ax2.set_ylabel("seconds per submission-notebook")
    ax2.set_ylim(bottom=0)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", frameon=False)
    ax2.legend(loc="lower right", frameon=False)
    return plots.finish(ax, legend=False)


def notebooks_chart(rows: list[dict], goal_s: float):
    """Execution seconds per notebook with the goal line; None if no notebook ran."""
    rows = [r for r in rows if r["seconds"] is not None]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 0.4 * len(rows) + 1.6))
    plots.axes("headless execution (s)", "notebook", ax=ax, title="Course cost: notebook execution")
    y = list(range(len(rows)))
    ax.barh(y, [r["seconds"] for r in rows], color=[plots.color(2) if r["verdict"] == "meets goal"
                                                     else plots.color(1) for r in rows])
    ax.axvline(goal_s, color="k", linestyle="--", label=f"goal {goal_s:g} s")
    ax.set_yticks(y, [r["path"] for r in rows])
    ax.invert_yaxis()
    return plots.finish(ax)


def save_all(doc: dict, out_dir: Path, caches: dict[str, int]) -> dict[str, str]:
    """Draw every plot that has data into out_dir as PNG; {key: file name} for the report."""
    figures = {
        "fidelity": ratio_chart(doc["fidelity"]["rows"], "Probe fidelity: toolkit probe / reference"),
        "effects": ratio_chart(doc["effects"]["rows"], "Headline effects: speedup vs goal"),
        "notebooks": notebooks_chart(doc["course_cost"]["notebooks"], 90.0),
        "bandwidth": bandwidth_chart(doc["scaling"]["bandwidth"], caches),
        "gemv": gemv_chart(doc["scaling"]["gemv"]),
        "grading": grading_chart(doc["scaling"]["grading"]),
    }
    names = {}
    for key, fig in figures.items():
        if fig is not None:
            name = f"{key}.png"
            fig.savefig(Path(out_dir) / name, dpi=100)
            names[key] = name
    return names
