"""Lesson 12's summary, written from the learner's own measurements of its experiments."""

from __future__ import annotations

from hwopt import arguments
from hwopt.experiments import moe_layer, pipeline_parallel, tensor_parallel_block
from hwopt.machine import power

__all__ = ["lesson_summary"]


def lesson_summary(sweep: tensor_parallel_block.AllReduceSweep, times: tensor_parallel_block.BlockTimes,
                   run: pipeline_parallel.PipelineRun, experts: moe_layer.MoESweep,
                   energy: power.EnergyReading | None = None, energy_tokens: int = 1) -> str:
    """Bullets: the all-reduce fit, the split block predicted and measured, the bubble, the experts read, and
    the energy measured (or why it could not be)."""
    arguments.instance("sweep", sweep, tensor_parallel_block.AllReduceSweep)
    arguments.instance("times", times, tensor_parallel_block.BlockTimes)
    arguments.instance("run", run, pipeline_parallel.PipelineRun)
    arguments.instance("experts", experts, moe_layer.MoESweep)
    if energy is not None:
        arguments.instance("energy", energy, power.EnergyReading)
    energy_tokens = arguments.count("energy_tokens", energy_tokens, "items")
    fit = sweep.fit
    small, large = times.batch_sizes[0], times.batch_sizes[-1]
    few, many = run.microbatch_counts[0], run.microbatch_counts[-1]
    first, last = experts.batch_sizes[0], experts.batch_sizes[-1]
    predicted, measured = experts.slowdown(last)
    lines = [
        f"- An all-reduce between {sweep.world_size} processes ({sweep.backend}) cost "
        f"{fit.latency_s * 1e6:,.0f} us + bytes / {fit.bandwidth_gbs:.2g} GB/s: below "
        f"{fit.half_bandwidth_bytes / 1e3:,.0f} kB, latency is most of it.",
        f"- The block split over {times.world_size} processes equalled the unsplit one to "
        f"{times.max_error:.1e}. At batch {small} it took {times.median_s(small, 'split') * 1e3:.2f} ms "
        f"(predicted {times.predicted_s(small, fit) * 1e3:.2f}), at batch {large} "
        f"{times.median_s(large, 'split') * 1e3:.2f} ms "
        f"(predicted {times.predicted_s(large, fit) * 1e3:.2f}); "
        f"the unsplit block on one process took {times.median_s(small, 'unsplit') * 1e3:.2f} and "
        f"{times.median_s(large, 'unsplit') * 1e3:.2f} ms.",
        f"- {run.n_stages} pipeline stages idled {run.measured_bubble(few):.0%} of the time with {few} "
        f"micro-batch(es) and {run.measured_bubble(many):.0%} with {many} ((p-1)/(m+p-1): "
        f"{run.predicted_bubble(few):.0%} and {run.predicted_bubble(many):.0%}).",
        f"- The MoE layer read {experts.timed_distinct[first]} of {experts.n_experts} experts at batch "
        f"{first} and {experts.timed_distinct[last]} at batch {last}: {predicted:.1f}x the bytes, and its "
        f"step took {measured:.1f}x the time.",
    ]
    if energy is None:
        lines.append(f"- Energy was not measured here: {power.absent_reason() or 'no counter was given'}.")
    else:
        lines.append(f"- Measured energy: {energy.total_j:,.1f} J for {energy_tokens:,} tokens = "
                     f"{energy.total_j / energy_tokens:.3f} J per token ({energy.watts:,.0f} W).")
    return "\n".join(lines)
