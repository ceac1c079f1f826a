"""Section 2's rows for lesson 12: a transformer block split over two processes (tensor parallelism), its time
predicted from parts measured apart (each rank's compute alone, all-reduces from the alpha-beta fit of a
separate sweep) against the split block measured whole."""

from __future__ import annotations

from benchmarks import report

BATCHES = (128, 1)  # the goal's batch first
SPLIT_BLOCK = [("tensor-parallel block predicted / measured, batch 128", (0.7, 1.3)),
               ("tensor-parallel block predicted / measured, batch 1", None)]


def rows(tensor_parallel_block, quick: bool) -> list[dict]:
    """The SPLIT_BLOCK rows from hwopt.experiments.tensor_parallel_block (measure_allreduce, measure_block):
    per repeat, the prediction is that repeat's compute + 2 all-reduces of batch x d_model fp32 values by the
    fit."""
    sweep = tensor_parallel_block.measure_allreduce(2, repeats=5 if quick else 9)
    times = tensor_parallel_block.measure_block(2, BATCHES, repeats=7 if quick else 15)
    fit = sweep.fit
    out = []
    for (name, goal), batch in zip(SPLIT_BLOCK, BATCHES, strict=True):
        comm_s = 2 * fit.time_s(times.message_bytes(batch))
        predicted = [t + comm_s for t in times.measurements[batch]["compute"].times_s]
        note = (f"hwopt.experiments.tensor_parallel_block.measure_block on 2 {times.backend} processes, "
                f"d_model "
                f"{times.d_model}, {times.n_heads} heads, d_ff {times.d_ff}, fp32, one token per sequence; "
                f"prediction per repeat = both ranks' compute alone (slowest rank) + 2 x all-reduce of "
                f"{times.message_bytes(batch) / 1024:,.0f} KiB by the fit {fit}; the unsplit block took "
                f"{times.median_s(batch, 'unsplit') * 1e3:.3g} ms in one process with every thread; split vs "
                f"unsplit max difference {times.max_error:.1e}")
        measured = times.measurements[batch]["split"]
        out.append(report.time_prediction_row(name, predicted, measured, goal, note))
    return out
