"""Pipeline parallelism (lesson 12): p stages on p chips, a batch split into m micro-batches.

Stage s works on micro-batch i at step s + i, so the last micro-batch leaves the last stage after m + p - 1
steps of one micro-batch's stage time; of the p (m + p - 1) chip-steps, p m do work. The idle share, the
bubble, is (p - 1) / (m + p - 1): more micro-batches shrink it, more stages grow it. Equal stages and free
hand-offs are assumed; a measured bubble is 1 - (busy time of all stages) / (p * makespan).
"""

from __future__ import annotations

from hwopt import arguments

__all__ = ["bubble_fraction", "pipeline_time_s", "measured_bubble"]


def _sizes(n_stages, n_microbatches) -> tuple[int, int]:
    return (arguments.count("n_stages", n_stages, "layers"),
            arguments.count("n_microbatches", n_microbatches, "batch"))


def bubble_fraction(n_stages: int, n_microbatches: int) -> float:
    """Idle share of the stages' time: (p - 1) / (m + p - 1)."""
    p, m = _sizes(n_stages, n_microbatches)
    return (p - 1) / (m + p - 1)


def pipeline_time_s(stage_time_s: float, n_stages: int, n_microbatches: int) -> float:
    """Seconds for m micro-batches through p stages, stage_time_s per micro-batch per stage: (m + p - 1) t."""
    t = arguments.positive("stage_time_s", stage_time_s)
    p, m = _sizes(n_stages, n_microbatches)
    return (m + p - 1) * t


def measured_bubble(busy_s, makespan_s: float) -> float:
    """Idle share measured: 1 - sum(busy_s) / (stages * makespan_s); busy_s: each stage's working time."""
    busy = arguments.finite_array("busy_s", busy_s, ndim=1, minimum=0)
    makespan = arguments.positive("makespan_s", makespan_s)
    if busy.max() > makespan * (1 + 1e-9):
        raise ValueError(f"busy_s must not exceed makespan_s ({makespan:g} s); got {busy.max():g} s")
    return float(1.0 - busy.sum() / (busy.size * makespan))
