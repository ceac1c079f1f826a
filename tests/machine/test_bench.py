"""machine.bench: behaviour of the timing harness under fake clocks (no real wall-clock assertions)."""

import warnings

import numpy as np
import pytest
import threadpoolctl
import torch

from hwopt.machine import bench
from hwopt.machine.bench import Measurement


class FakeClock:
    """A clock that only moves when a fake workload says so; records which workload ran when."""

    def __init__(self):
        self.now = 0.0
        self.log: list[str] = []

    def __call__(self) -> float:
        return self.now

    def work(self, name: str, durations_s):
        """A zero-argument function that advances the clock by the next scripted duration."""
        durations = list(durations_s) if not isinstance(durations_s, float | int) else None

        def fn():
            self.log.append(name)
            self.now += durations.pop(0) if durations is not None else durations_s

        return fn


# --- Measurement statistics -------------------------------------------------------------------------------


def test_measurement_statistics_match_hand_computed_quartiles():
    m = Measurement("x", (5.0, 1.0, 3.0, 2.0, 4.0))  # sorted 1..5: q1 = 2, median = 3, q3 = 4
    assert m.median_s == 3.0 and m.q1_s == 2.0 and m.q3_s == 4.0
    assert m.iqr_s == 2.0 and m.min_s == 1.0 and m.repeats == 5
    assert m.median_ms == 3000.0 and m.iqr_ms == 2000.0 and m.min_ms == 1000.0
    assert m.relative_iqr == pytest.approx(2 / 3)
    assert m.is_noisy


def test_quartiles_interpolate_like_numpy():
    times = (0.3, 0.1, 0.7, 0.2, 0.9, 0.4)
    m = Measurement("x", times)
    assert m.q1_s == pytest.approx(np.percentile(times, 25))
    assert m.q3_s == pytest.approx(np.percentile(times, 75))
    assert m.median_s == pytest.approx(np.median(times))


def test_quantile_is_numpys_linear_quantile_and_rejects_bad_input():
    values = np.random.default_rng(0).standard_normal(11).tolist()
    for q in (0.0, 0.1, 0.25, 0.5, 0.9, 1.0):
        assert bench.quantile(values, q) == pytest.approx(float(np.percentile(values, 100 * q)))
    assert bench.quantile([7.0], 0.3) == 7.0 and bench.quantile((1, 3), 0.5) == 2.0
    for q in (-0.1, 1.5, "half", True):
        with pytest.raises(ValueError, match="q must"):
            bench.quantile(values, q)
    with pytest.raises(ValueError, match="values"):
        bench.quantile([], 0.5)


def test_steady_measurement_is_not_noisy():
    m = Measurement("x", (1.0, 1.0, 1.01, 1.0))
    assert not m.is_noisy and m.relative_iqr < bench.NOISE_THRESHOLD


def test_str_is_one_readable_line():
    m = Measurement("gemv fp32", (2.30e-3, 2.35e-3, 2.41e-3, 2.47e-3, 2.6e-3), number=40)
    text = str(m)
    assert text == "gemv fp32: 2.41 ms median (IQR 0.12 ms, min 2.30 ms, 5x40 calls)"


def test_str_picks_readable_units():
    assert " us median" in str(Measurement("tiny", (3e-6,)))
    assert " s median" in str(Measurement("slow", (2.5,)))
    assert str(Measurement("", (0.0,))).startswith("0.00 ms")


def test_measurement_rejects_bad_times():
    with pytest.raises(ValueError, match="times_s"):
        Measurement("x", ())
    with pytest.raises(ValueError, match="times_s"):
        Measurement("x", (1.0, -1.0))
    with pytest.raises(ValueError, match="number"):
        Measurement("x", (1.0,), number=0)


# --- time_fn ----------------------------------------------------------------------------------------------


def test_time_fn_reports_per_call_statistics_from_scripted_durations():
    clock = FakeClock()
    durations = [0.05] * 2 + [0.010, 0.020, 0.030, 0.040, 0.050]  # 2 warm-ups, then 5 repeats of one call
    with pytest.warns(bench.NoisyMeasurementWarning):
        m = bench.time_fn(clock.work("f", durations), label="f", warmup=2, repeats=5, number=1, clock=clock)
    assert m.times_s == pytest.approx((0.010, 0.020, 0.030, 0.040, 0.050))
    assert m.median_s == pytest.approx(0.030) and m.min_s == pytest.approx(0.010)
    assert m.iqr_s == pytest.approx(0.020) and m.number == 1 and m.label == "f"


def test_time_fn_divides_by_number_of_calls():
    clock = FakeClock()
    m = bench.time_fn(clock.work("f", 0.002), warmup=0, repeats=3, number=7, clock=clock)
    assert len(clock.log) == 21
    assert m.times_s == pytest.approx((0.002,) * 3)


def test_time_fn_auto_number_makes_each_repeat_last_10ms():
    clock = FakeClock()
    m = bench.time_fn(clock.work("f", 0.0004), warmup=3, repeats=4, clock=clock)  # 0.4 ms per call
    assert m.number == 25  # ceil(10 ms / 0.4 ms)
    assert m.number * m.median_s >= bench.TARGET_REPEAT_S * 0.999
    assert len(clock.log) == 3 + 4 * 25  # warm-ups double as the calibration


def test_auto_number_is_one_for_slow_functions():
    clock = FakeClock()
    m = bench.time_fn(clock.work("f", 0.5), warmup=1, repeats=2, clock=clock)
    assert m.number == 1


def test_auto_number_without_warmup_calibrates_with_one_call():
    clock = FakeClock()
    m = bench.time_fn(clock.work("f", 0.001), warmup=0, repeats=2, clock=clock)
    assert m.number == 10 and len(clock.log) == 1 + 2 * 10


def test_auto_number_handles_calls_below_clock_resolution():
    calls = []
    clock = FakeClock()

    def fn():  # the clock moves only every 1000 calls, as a coarse timer would
        calls.append(1)
        if len(calls) % 1000 == 0:
            clock.now += 1e-3

    m = bench.time_fn(fn, warmup=1, repeats=2, clock=clock)
    assert 1 <= m.number <= bench.MAX_NUMBER


def test_auto_number_uses_fastest_warmup_call():
    clock = FakeClock()
    durations = [0.1, 0.002, 0.005] + [0.002] * 10
    m = bench.time_fn(clock.work("f", durations), warmup=3, repeats=2, clock=clock)
    assert m.number == 5  # 10 ms / 2 ms, not driven by the slow first (cold) call


def test_time_fn_warns_when_noisy_with_relative_iqr_in_message():
    clock = FakeClock()
    durations = [0.01] + [0.010, 0.020, 0.030, 0.040, 0.050]
    with pytest.warns(bench.NoisyMeasurementWarning, match=r"f is noisy: IQR is 67% of the median") as rec:
        bench.time_fn(clock.work("f", durations), label="f", warmup=1, repeats=5, number=1, clock=clock)
    assert rec[0].filename == __file__  # the warning points at the caller's line


def test_compare_warns_only_for_the_noisy_variant():
    clock = FakeClock()
    fns = {"steady": clock.work("s", 0.02), "noisy": clock.work("n", [0.01, 0.01, 0.02, 0.03, 0.04, 0.05])}
    with pytest.warns(bench.NoisyMeasurementWarning) as rec:
        bench.compare(fns, warmup=1, repeats=5, number=1, clock=clock)
    assert len(rec) == 1 and "noisy is noisy" in str(rec[0].message) and rec[0].filename == __file__


def test_time_fn_is_silent_when_steady():
    clock = FakeClock()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bench.time_fn(clock.work("f", 0.02), warmup=1, repeats=5, clock=clock)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"repeats": 0}, "repeats"), ({"repeats": 1.5}, "repeats"), ({"warmup": -1}, "warmup"),
     ({"number": 0}, "number"), ({"clock": 3}, "clock"), ({"device": "tpu"}, "device")],
)
def test_time_fn_bad_arguments_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        bench.time_fn(lambda: None, **kwargs)


def test_time_fn_rejects_non_callable():
    with pytest.raises(ValueError, match="fn must be callable"):
        bench.time_fn(42)


# --- compare ----------------------------------------------------------------------------------------------


def test_compare_interleaves_variants():
    clock = FakeClock()
    fns = {"A": clock.work("A", 0.02), "B": clock.work("B", 0.02), "C": clock.work("C", 0.02)}
    bench.compare(fns, warmup=2, repeats=3, number=1, clock=clock)
    assert clock.log == ["A", "B", "C"] * (2 + 3)


def test_compare_interleaves_repeats_of_several_calls():
    clock = FakeClock()
    bench.compare({"A": clock.work("A", 0.01), "B": clock.work("B", 0.01)}, warmup=0, repeats=2, number=2,
                  clock=clock)
    assert clock.log == ["A", "A", "B", "B", "A", "A", "B", "B"]


def test_compare_settles_each_variant_by_running_it_untimed_before_each_repeat():
    clock = FakeClock()
    measured = bench.compare({"A": clock.work("A", 0.02), "B": clock.work("B", 0.03)}, warmup=0, repeats=2,
                             number=1, settle_s=0.05, clock=clock)
    # A settles with 3 calls (0.06 s >= 0.05), B with 2 (0.06 s); then one timed call each, per repeat
    assert clock.log == ["A"] * 4 + ["B"] * 3 + ["A"] * 4 + ["B"] * 3
    assert measured["A"].median_s == pytest.approx(0.02) and measured["B"].median_s == pytest.approx(0.03)
    for bad in (-1, 11, "0.1", True):
        with pytest.raises(ValueError, match="settle_s"):
            bench.compare({"A": lambda: None}, settle_s=bad)


def test_compare_returns_one_measurement_per_label_and_speedup_is_ratio_of_medians():
    clock = FakeClock()
    res = bench.compare({"slow": clock.work("s", 0.030), "fast": clock.work("f", 0.010)}, warmup=1, repeats=5,
                        clock=clock)
    assert list(res) == ["slow", "fast"]
    assert res["slow"].median_s == pytest.approx(0.030) and res["fast"].median_s == pytest.approx(0.010)
    assert res["slow"].number == 1 and res["fast"].number == 1
    assert bench.speedup(res["slow"], res["fast"]) == pytest.approx(3.0)


def test_compare_picks_number_per_variant():
    clock = FakeClock()
    res = bench.compare({"a": clock.work("a", 0.001), "b": clock.work("b", 0.005)}, warmup=1, repeats=2,
                        clock=clock)
    assert res["a"].number == 10 and res["b"].number == 2


def test_compare_bad_input():
    with pytest.raises(ValueError, match="fns"):
        bench.compare({})
    with pytest.raises(ValueError, match="fns"):
        bench.compare([lambda: None])
    with pytest.raises(ValueError, match=r"fns\['b'\] must be callable"):
        bench.compare({"a": lambda: None, "b": 1})
    with pytest.raises(ValueError, match="repeats"):
        bench.compare({"a": lambda: None}, repeats=0)


def test_speedup_bad_input():
    m = Measurement("a", (1.0,))
    with pytest.raises(ValueError, match="baseline"):
        bench.speedup(1.0, m)
    with pytest.raises(ValueError, match="candidate"):
        bench.speedup(m, Measurement("b", (0.0,)))


# --- devices, sync, threads -------------------------------------------------------------------------------


@pytest.fixture
def fake_cuda(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: calls.append("sync"))
    return calls


def test_cuda_timing_synchronises_around_every_repeat(fake_cuda):
    clock = FakeClock()
    events = fake_cuda

    def fn():
        events.append("call")
        clock.now += 0.02

    m = bench.time_fn(fn, device="cuda", warmup=1, repeats=2, number=1, clock=clock)
    assert m.device == "cuda"
    # sync before starting the clock and after the calls, so queued GPU work is inside the timing
    assert events == ["sync", "call", "sync"] * 3


def test_sync_cpu_is_a_no_op_and_mps_calls_mps_synchronize(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(("cuda", device)))
    monkeypatch.setattr(torch.mps, "synchronize", lambda *a: calls.append("mps"))
    bench.sync("cpu")
    bench.sync(torch.device("cpu"))
    assert calls == []
    bench.sync("mps")
    bench.sync("cuda:0")
    bench.sync("cuda")
    assert calls == ["mps", ("cuda", "cuda:0"), ("cuda", None)]


def test_resolve_device_auto_prefers_cuda_then_mps_then_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert bench.resolve_device() == "cpu" and bench.resolve_device("CPU") == "cpu"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert bench.resolve_device("auto") == "mps"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert bench.resolve_device("auto") == "cuda" and bench.resolve_device("cuda:1") == "cuda:1"


def test_resolve_device_auto_follows_the_device_variable(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv(bench.DEVICE_ENV, "cpu")
    assert bench.resolve_device("auto") == "cpu" and bench.resolve_device("cuda") == "cuda"
    monkeypatch.setenv(bench.DEVICE_ENV, "cuda:1")
    assert bench.resolve_device() == "cuda:1"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="is_available"):
        bench.resolve_device()
    for bad in ("gpu", "auto"):
        monkeypatch.setenv(bench.DEVICE_ENV, bad)
        with pytest.raises(ValueError, match="HWOPT_DEVICE must name a device"):
            bench.resolve_device()
    monkeypatch.setenv(bench.DEVICE_ENV, "")
    assert bench.resolve_device() == "cpu"


def test_resolve_device_rejects_unknown_and_unavailable(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    for bad in ("tpu", "gpu", "cpu:0", ""):
        with pytest.raises(ValueError, match="device must be one of"):
            bench.resolve_device(bad)
    with pytest.raises(ValueError, match="cuda.*not available|is_available\\(\\) is False"):
        bench.resolve_device("cuda")
    with pytest.raises(ValueError, match="MPS is not available"):
        bench.resolve_device("mps")


def test_threads_sets_and_restores_torch_and_blas_threads():
    before = torch.get_num_threads()
    blas_before = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    with bench.threads(1) as n:
        assert n == 1 and torch.get_num_threads() == 1
        blas = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
        assert all(t == 1 for t in blas)
    assert torch.get_num_threads() == before
    blas_after = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    assert blas_after == blas_before


def test_threads_restores_after_an_exception():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError), bench.threads(1):
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_threads_bad_input(bad):
    with pytest.raises(ValueError, match="n must be an integer from 1"), bench.threads(bad):
        pass


# --- plot -------------------------------------------------------------------------------------------------


def test_plot_measurements_draws_one_bar_per_variant_with_iqr():
    res = {"A": Measurement("A", (1e-3, 2e-3, 3e-3)), "B": Measurement("B", (4e-3, 5e-3, 6e-3))}
    fig = bench.plot_measurements(res)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["A", "B"]
    assert [round(p.get_width(), 6) for p in ax.patches] == [2.0, 5.0]  # medians in ms
    assert "ms" in ax.get_xlabel()
    fig2 = bench.plot_measurements(list(res.values()), unit="us")
    assert [round(p.get_width(), 3) for p in fig2.axes[0].patches] == [2000.0, 5000.0]


def test_plot_measurements_bad_input():
    with pytest.raises(ValueError, match="measurements"):
        bench.plot_measurements([])
    with pytest.raises(ValueError, match="measurements"):
        bench.plot_measurements([1.0])
    with pytest.raises(ValueError, match="unit"):
        bench.plot_measurements([Measurement("a", (1.0,))], unit="h")
