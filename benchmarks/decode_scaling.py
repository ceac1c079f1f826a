"""Scaling of the decode step: GEMV time and weight GB/s vs matrix size, the lesson's fp32/int8/int4 paths."""

from __future__ import annotations

import traceback

from benchmarks import report
from benchmarks.effects import Unavailable, need
from hwopt import formats


def sizes(quick: bool) -> list[int]:
    """d_model values of the sweep: one (d_model x d_model) layer each, from in-cache to DRAM-sized."""
    return [512, 2048, 8192] if quick else [256, 512, 1024, 2048, 4096, 8192]


def measure(*, quick: bool) -> tuple[list[dict], list[str], list[dict]]:
    """GEMV series (variant, rows, cols, weight_mb, median_ms, q1_ms, q3_ms, gbs), notes, stats for noise."""
    try:
        decode = need("experiments.decode", "make_stack", "decode_paths", "time_paths")
    except Unavailable as exc:
        return [], [f"GEMV vs matrix size not measured: {exc}"], []
    series, stats, used = [], [], {}
    repeats = 5 if quick else 9
    try:
        for d in sizes(quick):
            stack = decode.make_stack(d, 1)
            result = decode.time_paths(decode.decode_paths(stack, "cpu"), "cpu", repeats=repeats)
            for label, m in result.measurements.items():
                used.setdefault(result.paths[label].storage_precision, None)
                s = report.time_stats(m)
                s["label"] = f"GEMV {d}x{d} {label}"
                stats.append(s)
                series.append({
                    "variant": label, "format": result.paths[label].storage_precision, "rows": d, "cols": d,
                    "weight_mb": result.paths[label].weight_bytes / 1e6, "median_ms": m.median_ms,
                    "q1_ms": m.q1_s * 1e3, "q3_ms": m.q3_s * 1e3, "gbs": result.achieved_gbs(label),
                    "relative_iqr": m.relative_iqr,
                })
    except Exception as exc:  # the lesson module's failure is reported, not fatal
        last = traceback.format_exception_only(exc)[-1].strip()
        return series, [f"GEMV sweep stopped: {last[:200]}"], stats

    note = (f"one residual layer h + h @ W (decode paths) per size, {repeats} interleaved repeats; "
            "GB/s = bytes of weights and their scales / median time, as stored: "
            + "; ".join(formats.get(f).describe() for f in used))
    return series, [note], stats
