"""cost.batching: a sweep's throughput, knee and latency budget (every edge case), the model, its fit."""

import numpy as np
import pytest
import torch

from hwopt.cost import batching as bt
from hwopt.machine import bench
from hwopt.models import mlp

pytestmark = pytest.mark.filterwarnings("ignore::hwopt.machine.bench.NoisyMeasurementWarning")


def sweep_of(batch_sizes, latencies_ms):
    """A BatchSweep whose median latencies are latencies_ms (one timed repeat per batch size)."""
    return bt.BatchSweep(batch_sizes, tuple(bench.Measurement(f"batch {b}", (t / 1e3,))
                                            for b, t in zip(batch_sizes, latencies_ms, strict=True)))


def test_throughput_is_items_per_second():
    assert sweep_of((32, 1), (16.0, 1000.0)).throughputs_per_s == pytest.approx([2000.0, 1.0])


@pytest.mark.parametrize(("sizes", "lats", "word"), [
    ((0,), (1.0,), "batch_sizes"), ((-1,), (1.0,), "batch_sizes"), ((1.5,), (1.0,), "batch_sizes"),
    ((True,), (1.0,), "batch_sizes"), ("12", (1.0, 2.0), "batch_sizes"), ((1,), (0.0,), "latencies_ms"),
    ((4, 8, 8), (5.0, 9.0, 20.0), "repeat"),
])
def test_sweep_rejects_bad_batch_sizes_and_zero_latency(sizes, lats, word):
    with pytest.raises(ValueError, match=word):
        sweep_of(sizes, lats)
    with pytest.raises(ValueError, match="equal length"):
        bt.BatchSweep((1, 2), (bench.Measurement("a", (0.001,)),))


def test_batch_latency_model():
    assert bt.batch_latency_ms(10, 2.0, 0.5) == pytest.approx(7.0)
    assert bt.batch_latency_ms(1, 0, 0.5) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="overhead_ms"):
        bt.batch_latency_ms(1, -1.0, 0.5)
    with pytest.raises(ValueError, match="per_item_ms"):
        bt.batch_latency_ms(1, 1.0, 0.0)
    with pytest.raises(ValueError, match="batch_size"):
        bt.batch_latency_ms(0, 1.0, 1.0)


def test_budget_picks_largest_fitting_batch():
    best = sweep_of((1, 2, 4, 8), (1.0, 2.0, 4.0, 8.0)).largest_within(5.0)
    assert best == (4, pytest.approx(1000.0))


def test_budget_equal_latency_fits():
    best, rate = sweep_of((1, 2, 4), (10.0, 20.0, 100.0)).largest_within(100.0)
    assert best == 4 and rate == pytest.approx(40.0)


def test_budget_nothing_fits():
    assert sweep_of((1, 2), (5.0, 9.0)).largest_within(4.0) == (None, 0.0)


def test_budget_unsorted_sweep():
    assert sweep_of((64, 1, 16, 4), (90.0, 3.0, 40.0, 12.0)).largest_within(50.0)[0] == 16


def test_budget_non_monotonic_larger_batch_fits_while_smaller_does_not():
    best, rate = sweep_of((8, 16, 32), (30.0, 60.0, 45.0)).largest_within(50.0)
    assert best == 32 and rate == pytest.approx(32 / 0.045)


def test_budget_accepts_numpy_batch_sizes_and_an_int_budget():
    sweep = sweep_of(np.array([1, 2]), (1.0, 2.0))
    assert sweep.batch_sizes == (1, 2) and sweep.largest_within(2) == (2, pytest.approx(1000.0))


@pytest.mark.parametrize("budget", [0.0, -1.0, float("nan"), "5", True])
def test_budget_rejects_bad_budget(budget):
    with pytest.raises(ValueError, match="budget_ms"):
        sweep_of((1, 2), (1.0, 2.0)).largest_within(budget)


def test_budget_empty_sweep_fits_nothing():
    assert bt.BatchSweep((), ()).largest_within(10.0) == (None, 0.0)


def test_fit_recovers_overhead_and_per_item_from_synthetic_data():
    sizes = [1, 2, 4, 8, 16, 32, 64]
    rng = np.random.default_rng(0)
    lats = [2.0 + 0.25 * b + rng.normal(0, 0.01) for b in sizes]
    fit = bt.fit_latency_model(sizes, lats)
    assert fit.overhead_ms == pytest.approx(2.0, abs=0.05)
    assert fit.per_item_ms == pytest.approx(0.25, abs=0.005)
    assert fit.rms_error_ms < 0.03 and fit.max_relative_error < 0.02
    assert fit.max_items_per_s == pytest.approx(4000, rel=0.02)
    assert fit.half_throughput_batch == pytest.approx(8, rel=0.05)
    assert fit.latency_ms([0, 4]) == pytest.approx([fit.overhead_ms, fit.overhead_ms + 4 * fit.per_item_ms])
    assert "rms error" in str(fit)


def test_fit_exact_line_has_zero_error_and_needs_two_sizes():
    fit = bt.fit_latency_model([1, 3], [3.0, 7.0])
    assert (fit.overhead_ms, fit.per_item_ms) == pytest.approx((1.0, 2.0))
    assert fit.rms_error_ms == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="two different"):
        bt.fit_latency_model([4, 4], [1.0, 1.1])


def test_knee_is_where_throughput_flattens():
    sizes = [1, 2, 4, 8, 16, 32, 64, 128]
    lats = [bt.batch_latency_ms(b, 8.0, 0.1) for b in sizes]  # ceiling 10,000/s, half at batch 80
    sweep = sweep_of(sizes, lats)
    assert sweep.knee(0.9) == 128
    assert sweep.knee(0.5) == 64
    assert sweep.best_batch == 128
    with pytest.raises(ValueError, match="fraction"):
        sweep.knee(0.0)


def test_make_mlp_shapes_and_bad_width():
    model = mlp.make_mlp(width=16, depth=3)
    assert model(torch.zeros(5, 16)).shape == (5, 16)
    assert sum(isinstance(m, torch.nn.Linear) for m in model) == 3
    with pytest.raises(ValueError, match="width"):
        mlp.make_mlp(width=0)


def test_measure_sweep_at_tiny_sizes_and_report():
    model = mlp.make_mlp(width=8, depth=2)
    sweep = bt.measure_batch_sweep(model, (1, 4, 16), repeats=2, warmup=1, progress=False)
    assert sweep.batch_sizes == (1, 4, 16) and len(sweep.latencies_ms) == 3
    assert all(t > 0 for t in sweep.latencies_ms)
    assert sweep.best_batch in (1, 4, 16)
    assert "largest batch" in bt.budget_report(sweep, 1e6)
    assert "nothing fits" in bt.budget_report(sweep, 1e-9)
    fit = bt.fit_latency_model(sweep.batch_sizes, sweep.latencies_ms)
    fig = bt.plot_batch_sweep(sweep, fit, budget_ms=1e6)
    assert len(fig.axes) == 2
    with pytest.raises(ValueError, match="batch_sizes"):
        bt.measure_batch_sweep(model, (0,), progress=False)
    with pytest.raises(ValueError, match="repeat"):
        bt.measure_batch_sweep(model, (4, 4), progress=False)


def test_compare_batch_sizes_interleaved():
    rates = bt.compare_batch_sizes(mlp.make_mlp(width=8, depth=1), (1, 8), repeats=2)
    assert set(rates) == {1, 8} and all(r > 0 for r in rates.values())


def test_sweep_runs_on_cuda_path_with_monkeypatched_device(monkeypatch):
    """The CUDA branch resolves the device and synchronises through bench; here a fake 'cuda' maps to CPU."""
    calls = []
    monkeypatch.setattr(bench, "resolve_device", lambda device="auto": "cuda")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append("sync"))
    real_randn = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *s, device=None, **k: real_randn(*s, **k))
    model = mlp.make_mlp(width=8, depth=1)
    monkeypatch.setattr(model, "to", lambda device: model)
    sweep = bt.measure_batch_sweep(model, (1, 2), device="cuda", repeats=1, warmup=0, progress=False)
    assert len(sweep.measurements) == 2 and calls  # timing synchronised the (fake) GPU
    assert all(m.device == "cuda" for m in sweep.measurements)


def test_fit_weights_relative_error_and_never_returns_negative_overhead():
    # a curve bending down at small batches would give a negative intercept: refitted through the origin
    fit = bt.fit_latency_model([1, 2, 64, 128], [0.1, 0.2, 70.0, 140.0])
    assert fit.overhead_ms == 0.0 and fit.per_item_ms > 0
    plain = bt.fit_latency_model([1, 2, 4, 512], [1.0, 1.1, 1.3, 60.0], relative=False)
    weighted = bt.fit_latency_model([1, 2, 4, 512], [1.0, 1.1, 1.3, 60.0])
    assert abs(weighted.latency_ms(1) - 1.0) < abs(plain.latency_ms(1) - 1.0)  # small batches count


def test_predicted_latency_memory_then_compute_bound():
    # 1e6 params fp32 = 4 MB at 4 GB/s = 1 ms; compute 2e6*b FLOP at 1e11 FLOP/s = 0.02 ms * b
    assert bt.predicted_latency_ms(1e6, 1, 1e11, 4.0) == pytest.approx(1.0)
    assert bt.predicted_latency_ms(1e6, 500, 1e11, 4.0) == pytest.approx(10.0)
    with pytest.raises(ValueError, match="batch_size"):
        bt.predicted_latency_ms(1e6, 0, 1e11, 4.0)


def test_sweep_table_with_prediction():
    sweep = bt.BatchSweep((1, 4), (bench.Measurement("a", (0.001,)), bench.Measurement("b", (0.002,))))
    lines = bt.sweep_table(sweep, predicted_ms=[0.5, 2.0]).splitlines()
    assert "pred/meas" in lines[0] and lines[1].split()[-1] == "0.50" and "2,000" in lines[2]
    assert "pred" not in bt.sweep_table(sweep)


@pytest.mark.parametrize("weight_bytes, cache_bytes, says", [
    (12.6e6, 32 * 2**20, "fit in this device's last-level cache (32 MiB): "),  # the lesson's MLP on EPYC
    (12.6e6, 16 * 2**20, "(more than half of it"),
    (12.6e6, 8 * 2**20, "exceed this device's last-level cache (8 MiB): every batch-1 call streams them"),
    (12.6e6, None, "its size is not known here"),
])
def test_batch1_regime_sizes_the_weights_against_the_cache(weight_bytes, cache_bytes, says):
    assert says in bt.batch1_regime(weight_bytes, "last-level cache", cache_bytes)
    assert "12.6 MB" in bt.batch1_regime(weight_bytes, "last-level cache", cache_bytes)


def test_batch1_regime_rejects_bad_sizes():
    with pytest.raises(ValueError, match="weight_bytes"):
        bt.batch1_regime(0, "L2 cache", 2**20)
    with pytest.raises(ValueError, match="cache_bytes"):
        bt.batch1_regime(1e6, "L2 cache", -1)


@pytest.mark.parametrize("latency_ms, cache_bytes, says", [
    (0.2, None, "came from cache"),  # 12.6 MB in 0.2 ms = 63 GB/s > 25 GB/s
    (0.6, None, "memory-bound here"),  # 21 GB/s
    (0.6, 8 * 2**20, "(they exceed the L3 cache, 8 MiB), so batch 1 is memory-bound here"),
    (1.3, None, "fixed cost of each call"),  # 9.7 GB/s
])
def test_batch1_verdict_reads_the_measured_rate(latency_ms, cache_bytes, says):
    verdict = bt.batch1_verdict(12.6e6, latency_ms, 25.0, "L3 cache", cache_bytes)
    assert says in verdict and f"{12.6e6 / latency_ms / 1e6:,.1f} GB/s" in verdict
    with pytest.raises(ValueError, match="bandwidth_gbs"):
        bt.batch1_verdict(12.6e6, latency_ms, 0)


def test_batch1_verdict_does_not_call_memory_bound_weights_that_fit_in_the_cache():
    # the recorded EPYC run: 12.6 MB in a 32 MiB cache read at 35.0 GB/s against 34.8 GB/s of DRAM
    verdict = bt.batch1_verdict(12.6e6, 0.360, 34.8, "L3 cache", 32 * 2**20)
    assert "memory-bound" not in verdict
    assert "fit in the L3 cache (32 MiB), so DRAM is not what limits" in verdict
    assert "1.01x the measured DRAM bandwidth (34.8 GB/s)" in verdict


def recorded_sweep():
    """The recorded EPYC sweep of lesson 3 (ms per batch): a step from batch 1 to 2, then a line."""
    latencies = {1: 0.360, 2: 1.122, 4: 1.199, 8: 1.187, 16: 1.457, 32: 2.185, 64: 3.728, 128: 6.051,
                 256: 11.390, 512: 18.316}
    return bt.BatchSweep(tuple(latencies), tuple(bench.Measurement(f"b{b}", (ms / 1e3,) * 3)
                                                  for b, ms in latencies.items()))


def test_fit_verdict_names_the_batch_sizes_the_line_misses_and_a_ceiling_below_the_measurement():
    sweep = recorded_sweep()
    fit = bt.fit_latency_model(sweep.batch_sizes, sweep.latencies_ms)
    verdict = bt.fit_verdict(fit, sweep)
    assert "The line misses 5 of 10" in verdict and "batch 512: 18.3 ms measured, 23.3 fitted" in verdict
    ceiling = (f"Its ceiling, {fit.max_items_per_s:,.0f} items/s, is below the 27,954 items/s measured "
               "at batch 512")
    assert ceiling in verdict
    exact = bt.fit_latency_model([1, 2, 4], [2.0, 3.0, 5.0])
    line = bt.BatchSweep((1, 2, 4), tuple(bench.Measurement("b", (t / 1e3,) * 3) for t in (2.0, 3.0, 5.0)))
    assert bt.fit_verdict(exact, line) == "The line misses 0 of 3 batch sizes by more than 20%."


def test_latency_table_interpolates_between_measured_sizes_and_stays_within_them():
    table = recorded_sweep().latency_table_ms(32)
    assert len(table) == 32 and table[0] == pytest.approx(0.360) and table[1] == pytest.approx(1.122)
    assert table[2] == pytest.approx((1.122 + 1.199) / 2) and table[31] == pytest.approx(2.185)
    with pytest.raises(ValueError, match="max_batch_size must lie within the measured batch sizes"):
        recorded_sweep().latency_table_ms(1024)


def test_latency_that_does_not_grow_with_the_batch_fits_a_flat_line_not_a_negative_cost():
    fit = bt.fit_latency_model([1, 2, 4], [5.0, 3.0, 2.0])  # falls as batches grow: no per-item cost to see
    assert fit.per_item_ms == 0.0
    assert 2.0 < fit.overhead_ms < 5.0
    assert fit.max_items_per_s == float("inf") and "0 x batch_size" in str(fit)


def test_nan_bytes_per_weight_is_refused_not_swallowed_by_max():
    with pytest.raises(ValueError, match="bytes_per_weight"):
        bt.predicted_latency_ms(1e9, 1, 1e12, 100.0, bytes_per_weight=float("nan"))
