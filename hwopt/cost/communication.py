"""Communication between chips (lesson 12): the alpha-beta model, its fit to measured timings, collectives.

Sending n bytes costs a fixed latency alpha plus n over the bandwidth (beta = 1 / bandwidth):
    time_s = latency_s + n_bytes / (bandwidth_gbs * 1e9).
A ring all-reduce of n bytes over p chips passes 2 (p - 1) messages of n / p bytes through every chip
(reduce-scatter, then all-gather), so with one-direction link bandwidth B and per-message latency alpha
    all-reduce time = 2 (p - 1) * alpha + 2 (p - 1) / p * n / B,
and an all-to-all of n bytes per chip (a 1/p share to every chip) (p - 1) * alpha + (p - 1) / p * n / B.
Datasheets give bandwidth, not latency: with latency_s = 0 these times are lower bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hwopt import arguments

__all__ = ["AlphaBeta", "fit_alpha_beta", "allreduce_time_s", "all_to_all_time_s"]


@dataclass(frozen=True)
class AlphaBeta:
    """A fitted (or assumed) cost of moving n bytes: latency_s + n / (bandwidth_gbs * 1e9) seconds."""

    latency_s: float
    bandwidth_gbs: float

    def __post_init__(self):
        arguments.positive("latency_s", self.latency_s, allow_zero=True)
        arguments.positive("bandwidth_gbs", self.bandwidth_gbs)

    def time_s(self, n_bytes: float) -> float:
        """Seconds to move n_bytes."""
        n_bytes = arguments.positive("n_bytes", n_bytes, allow_zero=True)
        return self.latency_s + n_bytes / (self.bandwidth_gbs * 1e9)

    @property
    def half_bandwidth_bytes(self) -> float:
        """The message size (bytes) at which latency and transfer take equal time: latency x bandwidth."""
        return self.latency_s * self.bandwidth_gbs * 1e9

    def __str__(self) -> str:
        return (f"alpha = {self.latency_s * 1e6:,.1f} us, bandwidth = {self.bandwidth_gbs:,.3g} GB/s "
                f"(equal shares at {self.half_bandwidth_bytes / 1e3:,.0f} kB)")


def fit_alpha_beta(sizes_bytes, times_s) -> AlphaBeta:
    """The AlphaBeta that best fits measured (size, time) pairs, least squares on the relative error (so that
    small messages, where latency rules, count as much as large ones); latency is kept >= 0.

    ValueError when fewer than two distinct sizes are given or the times do not grow with the size."""
    sizes = arguments.finite_array("sizes_bytes", sizes_bytes, ndim=1, minimum=0).astype(float)
    times = arguments.finite_array("times_s", times_s, ndim=1, minimum=0, strict=True).astype(float)
    if sizes.shape != times.shape:
        raise ValueError(f"sizes_bytes and times_s must have the same length; got {sizes.size} and "
                         f"{times.size}")
    if np.unique(sizes).size < 2:
        raise ValueError("sizes_bytes must hold at least two different sizes to tell latency from "
                         "bandwidth")
    weights = 1.0 / times  # minimise sum(((alpha + beta n - t) / t)^2)
    design = np.stack([np.ones_like(sizes), sizes], axis=1) * weights[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, times * weights, rcond=None)
    if alpha < 0:  # a negative latency means the small sizes were noise: fit bandwidth alone
        alpha, beta = 0.0, float(np.sum(weights**2 * sizes * times) / np.sum(weights**2 * sizes**2))
    if not beta > 0 or not math.isfinite(beta):
        raise ValueError("times_s must grow with sizes_bytes: the fitted time per byte is not positive")
    return AlphaBeta(float(alpha), 1.0 / beta / 1e9)


def _collective(n_bytes, n_chips, link_gbs, latency_s) -> tuple[float, int, float, float]:
    n_bytes = arguments.positive("n_bytes", n_bytes, allow_zero=True)
    n_chips = arguments.count("n_chips", n_chips, "threads")
    link_gbs = arguments.positive("link_gbs", link_gbs)
    return n_bytes, n_chips, link_gbs * 1e9, arguments.positive("latency_s", latency_s, allow_zero=True)


def allreduce_time_s(n_bytes: float, n_chips: int, link_gbs: float, latency_s: float = 0.0) -> float:
    """Ring all-reduce of n_bytes on each of n_chips with link_gbs one way: 2(p-1) alpha + 2(p-1)/p n / B."""
    n, p, bandwidth, alpha = _collective(n_bytes, n_chips, link_gbs, latency_s)
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / bandwidth


def all_to_all_time_s(n_bytes: float, n_chips: int, link_gbs: float, latency_s: float = 0.0) -> float:
    """All-to-all of n_bytes per chip, a 1/p share to each chip: (p-1) alpha + (p-1)/p n / B (the chip's
    one-way bandwidth shared by its links)."""
    n, p, bandwidth, alpha = _collective(n_bytes, n_chips, link_gbs, latency_s)
    return (p - 1) * alpha + (p - 1) / p * n / bandwidth
