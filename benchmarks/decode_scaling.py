"""Scaling of the decode step: GEMV time and weight GB/s vs matrix size, for the lesson's fp32/int8/int4."""

from __future__ import annotations

from benchmarks.effects import Unavailable, need


def measure(*, quick: bool) -> tuple[list[dict], list[str], list[dict]]:
    """GEMV series (variant, rows, cols, weight_mb, median_ms, q1_ms, q3_ms, gbs), notes, stats for noise."""
    try:
        need("decode")
    except Unavailable as exc:
        return [], [f"GEMV vs matrix size not measured: {exc}"], []
    return [], [], []
