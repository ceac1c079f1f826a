"""experiments.tensor_parallel_block: the Megatron split equals the unsplit block, in one process and across
real processes; the all-reduce sweep and the block timings come back whole (their ratios are noise here)."""

import math

import pytest
import torch

from hwopt.cost import communication
from hwopt.experiments import tensor_parallel_block as tp


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_the_shards_partial_sums_add_up_to_the_unsplit_block(world_size):
    """In one process: summing the shards' partial outputs is what the all-reduce does."""
    full = tp.make_block(64, 8, 256, seed=3)
    shards = [tp.shard(full, r, world_size) for r in range(world_size)]
    assert shards[0].wq.shape == (64 // world_size, 64) and shards[0].w_down.shape == (64, 256 // world_size)
    x = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        h = x + sum(tp._attention(x, s) for s in shards)
        split = h + sum(tp._mlp(h, s) for s in shards)
        assert torch.allclose(split, tp.block(x, full), atol=1e-5)
        assert not torch.allclose(tp.block(x, shards[0]), tp.block(x, full)) or world_size == 1


@pytest.mark.parametrize("world_size", [2, 4])
def test_the_block_split_over_real_processes_equals_the_unsplit_block(world_size):
    results = tp.check_split(world_size, d_model=128, n_heads=8, d_ff=512, batch=2, seq_len=6)
    assert len(results) == world_size
    for error, scale in results:
        assert scale > 1 and error <= 1e-5 * scale  # fp32 rounding: additions in another order


def test_the_allreduce_sweep_fits_and_reports():
    sweep = tp.measure_allreduce(2, (1024, 65536, 1 << 20), repeats=3)
    assert sweep.sizes_bytes == (1024, 65536, 1 << 20) and sweep.backend == "gloo"
    assert all(m.median_s > 0 and m.repeats == 3 for m in sweep.measurements)
    fit = sweep.fit
    assert isinstance(fit, communication.AlphaBeta) and fit.bandwidth_gbs > 0
    assert "alpha-beta" in sweep.table() and sweep.plot().axes[0].get_xscale() == "log"


def test_the_block_timings_hold_every_variant_and_a_prediction():
    times = tp.measure_block(2, (1, 8), d_model=128, n_heads=4, d_ff=256, repeats=3)
    assert times.batch_sizes == (1, 8) and times.max_error <= 1e-5 * times.output_scale
    assert set(times.measurements[8]) == set(tp.VARIANTS)
    fit = communication.AlphaBeta(1e-4, 1.0)
    assert times.message_bytes(8) == 8 * 128 * 4
    assert times.predicted_s(8, fit) == pytest.approx(times.median_s(8, "compute") + 2 * fit.time_s(4096))
    assert math.isfinite(times.ratio(1, fit)) and "pred/meas" in times.report(fit)
    assert times.verdict(fit).count("predicted / measured") == 2 and "unsplit block" in times.verdict(fit)
    assert len(times.plot(fit).axes[0].patches) == 4 * 2
    with pytest.raises(ValueError, match="batch_size"):
        times.median_s(2, "split")
    with pytest.raises(ValueError, match="variant"):
        times.median_s(8, "fused")


@pytest.mark.parametrize(("call", "match"), [
    (lambda: tp.make_block(100, 3), "d_model"),
    (lambda: tp.shard(tp.make_block(64, 8, 96), 0, 16), "world_size"),
    (lambda: tp.shard(tp.make_block(64, 8, 96), 2, 2), "rank"),
    (lambda: tp.block(torch.zeros(2, 64), tp.make_block(64, 8, 96)), "x"),
    (lambda: tp.block(torch.zeros(1, 2, 64), tp.make_block(64, 8, 96), all_reduce=3), "all_reduce"),
    (lambda: tp.measure_allreduce(2, (1024,)), "sizes_bytes"),
    (lambda: tp.measure_allreduce(2, (1024, 2048), repeats=1), "repeats"),
    (lambda: tp.measure_block(3, (1,)), "world_size"),
    (lambda: tp.measure_block(2, (0,)), "batch_sizes"),
    (lambda: tp.check_split(2, d_model=100, n_heads=8), "d_model"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
