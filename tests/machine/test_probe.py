"""machine.probe: bytes/FLOPs with fake clocks, the size sweep's budget, bad input, one smoke probe."""

import math
import warnings

import pytest
import torch

from hwopt import roofline
from hwopt.machine import probe


class StepClock:
    """Every read advances time by `step_s`: each timed repeat then lasts exactly one step."""

    def __init__(self, step_s: float):
        self.now, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        self.now += self.step_s
        return self.now


class WorkClock:
    """A clock moved only by fake matmuls that run at `rate` FLOP/s."""

    def __init__(self, rate: float):
        self.now, self.rate, self.sizes = 0.0, rate, []

    def __call__(self) -> float:
        return self.now

    def fns(self, precision, device, n):
        self.sizes.append(n)

        def matmul():
            self.now += 2.0 * n**3 / self.rate

        return {"lib-a": matmul, "lib-b": matmul}


# --- format names and byte accounting ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alias", "name"),
    [("fp32", "fp32"), (torch.float32, "fp32"), ("half", "fp16"), ("BF16", "bf16"),
     (torch.bfloat16, "bf16"), ("double", "fp64"), ("int8", "int8")],
)  # fmt: skip
def test_probe_keys_its_results_by_the_canonical_format_name(alias, name, monkeypatch):
    """Any spelling formats knows reaches the probe as the canonical name lessons key results by."""
    asked = []
    monkeypatch.setattr(probe, "memory_bandwidth_gbs", lambda device, size_mb, repeats: 10.0)
    monkeypatch.setattr(probe, "matmul_flops", lambda d, device, quick: asked.append(d) or 1e9)
    ceilings = probe.probe("cpu", precisions=[alias], quick=True)
    assert list(ceilings.flops_by_precision) == [name] == asked
    assert ceilings.peak_flops(alias) == 1e9 and ceilings.to_ceiling(alias).label == f"this cpu {name}"


@pytest.mark.parametrize("precision", ["int4", "mxfp4", "float128"])
def test_formats_the_bandwidth_probe_cannot_hold_are_rejected(precision):
    with pytest.raises(ValueError, match="precision must be one of"):
        probe.triad_bytes(10, precision)


def test_formats_without_a_matmul_probe_are_unsupported():
    with pytest.raises(probe.UnsupportedPrecision, match="no matmul probe"):
        probe.matmul_flops("fp8_e4m3", n=64)
    with pytest.raises(probe.UnsupportedPrecision, match="no matmul probe"):
        probe.probe("cpu", precisions=["fp32", "fp8"], quick=True)


def test_triad_bytes_counts_three_arrays_like_stream():
    assert probe.triad_bytes(1000) == 12_000
    assert probe.triad_bytes(1000, "fp64") == 24_000
    assert probe.triad_bytes(10, "bf16") == 60
    with pytest.raises(ValueError, match="n_elements"):
        probe.triad_bytes(0)


def test_memory_bandwidth_is_triad_bytes_over_best_repeat(monkeypatch):
    calls = []
    real_add = torch.add

    def spy_add(*args, **kwargs):
        calls.append(kwargs.get("alpha"))
        return real_add(*args, **kwargs)

    monkeypatch.setattr(torch, "add", spy_add)
    gbs = probe.memory_bandwidth_gbs(size_mb=1, repeats=4, clock=StepClock(0.5))
    n = 2**20 // 4  # 1 MB of float32
    assert gbs == pytest.approx(3 * n * 4 / 0.5 / 1e9)
    assert calls == [3] * (2 + 4)  # two warm-ups, then one call per repeat (each repeat lasts >= 10 ms)


def test_memory_bandwidth_runs_for_real_on_a_small_array():
    gbs = probe.memory_bandwidth_gbs(size_mb=4, repeats=2, precision="fp64")
    assert math.isfinite(gbs) and gbs > 0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"size_mb": 0}, "size_mb"), ({"size_mb": "big"}, "size_mb"), ({"precision": "int8"}, "precision"),
     ({"device": "tpu"}, "device"), ({"repeats": 0}, "repeats")],
)  # fmt: skip
def test_memory_bandwidth_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        probe.memory_bandwidth_gbs(**{"size_mb": 1, **kwargs})


def test_last_level_cache_is_positive_or_unknown():
    llc = probe.last_level_cache_bytes()
    assert llc is None or llc > 0


def test_cache_sizes_sum_private_caches_over_the_cpus(tmp_path, monkeypatch):
    monkeypatch.setattr(probe.os, "cpu_count", lambda: 2)
    caches = [("1", "Data", "32K", "0"), ("1", "Instruction", "32K", "0"), ("2", "Unified", "512K", "0"),
              ("3", "Unified", "32768K", "0-1"), ("4", "Unified", "garbled", "0-1")]
    for i, (level, kind, size, shared) in enumerate(caches):
        d = tmp_path / f"index{i}"
        d.mkdir()
        for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
            (d / name).write_text(value + "\n")
    assert probe.cache_sizes_bytes(tmp_path) == {"L1": 64 * 2**10, "L2": 2**20, "L3": 32 * 2**20}
    assert probe.last_level_cache_bytes(tmp_path) == 32 * 2**20
    assert probe.cache_sizes_bytes(tmp_path / "missing") == {}
    assert probe.last_level_cache_bytes(tmp_path / "missing") is None


@pytest.mark.parametrize(("llc", "mb"), [(None, 128.0), (32 * 2**20, 128.0), (2**20, 64.0), (2**30, 512.0)])
def test_default_array_is_four_times_the_cache_within_limits(monkeypatch, llc, mb):
    monkeypatch.setattr(probe, "last_level_cache_bytes", lambda: llc)
    assert probe.default_array_mb("cpu") == mb


def test_default_array_on_cuda_uses_an_eighth_of_free_memory(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (4 * 2**30, 16 * 2**30))
    assert probe.default_array_mb("cuda") == 512.0
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (80 * 2**30, 80 * 2**30))
    assert probe.default_array_mb("cuda") == 1024.0


# --- matmul FLOP/s ----------------------------------------------------------------------------------------


def test_matmul_flops_at_fixed_n_counts_two_n_cubed():
    assert probe.matmul_flops("fp32", n=64, clock=StepClock(0.25)) == pytest.approx(2 * 64**3 / 0.25)


def test_matmul_sweep_finds_the_rate_and_respects_the_budget(monkeypatch):
    clock = WorkClock(rate=1e9)  # a slow precision: 1 GFLOP/s
    monkeypatch.setattr(probe, "_matmul_fns", clock.fns)
    flops = probe.matmul_flops("fp16", budget_s=2.0, clock=clock)
    assert flops == pytest.approx(1e9)
    assert clock.sizes[0] == probe.MATMUL_MIN_N and clock.sizes[-1] < 2048
    assert clock.now <= 2.0 + 2 * 2.0 * clock.sizes[-1] ** 3 / 1e9  # at most one trial call per lib over


def test_matmul_sweep_stops_at_the_largest_size_on_fast_devices(monkeypatch):
    clock = WorkClock(rate=1e12)
    monkeypatch.setattr(probe, "_matmul_fns", clock.fns)
    assert probe.matmul_flops("fp32", quick=True, clock=clock) == pytest.approx(1e12)
    assert clock.sizes == [128, 256, 512, 1024, 2048]


def test_matmul_sweep_drops_a_much_slower_library(monkeypatch):
    clock, calls = WorkClock(rate=1e12), []

    def fns(precision, device, n):
        def run(lib, rate):
            def matmul():
                calls.append((lib, n))
                clock.now += 2.0 * n**3 / rate

            return matmul

        return {"fast": run("fast", 1e12), "slow": run("slow", 0.25e12)}

    monkeypatch.setattr(probe, "_matmul_fns", fns)
    assert probe.matmul_flops("fp32", clock=clock) == pytest.approx(1e12)
    assert {n for lib, n in calls if lib == "slow"} == {128, 256, 512}  # small sizes are too noisy to judge
    assert max(n for lib, n in calls if lib == "fast") == 2048


@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp64", "int8"])
def test_matmul_flops_runs_every_cpu_precision_quietly(precision):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation chatter on stderr (graded notebooks score 0 on it)
        flops = probe.matmul_flops(precision, n=32)
    assert math.isfinite(flops) and flops > 0


def test_matmul_fns_compute_the_product():
    fns = probe._matmul_fns("fp32", "cpu", 8)
    assert set(fns) == {"torch", "numpy"}
    results = [torch.as_tensor(f()) for f in fns.values()]
    assert torch.allclose(results[0], results[1], atol=1e-4)


def test_int8_has_no_probe_on_mps():
    with pytest.raises(probe.UnsupportedPrecision, match="int8"):
        probe._matmul_fns("int8", "mps", 8)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"n": 0}, "n must"), ({"n": 2.5}, "n must"), ({"budget_s": 0}, "budget_s"),
     ({"precision": "int4"}, "precision"), ({"device": "gpu"}, "device")],
)  # fmt: skip
def test_matmul_flops_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        probe.matmul_flops(**kwargs)


# --- Ceilings and probe -----------------------------------------------------------------------------------


def test_ceilings_ridge_point_and_conversions():
    c = probe.Ceilings("cpu", 24.6, {"fp32": 141e9, "fp16": 1e9}, threads=2)
    assert c.peak_flops("fp32") == 141e9
    assert c.ridge_point("fp32") == pytest.approx(141e9 / 24.6e9)
    roof = c.to_ceiling()
    assert isinstance(roof, roofline.Ceiling) and roof.measured and roof.peak_flops == 141e9
    d = c.to_dict()
    assert d["bandwidth_gbs"] == 24.6 and d["ridge_point_by_precision"]["fp16"] == pytest.approx(1 / 24.6)
    text = str(c)
    assert "24.6 GB/s" in text and "141.0 GFLOP/s" in text and "2 threads" in text
    with pytest.raises(ValueError, match="'int8' was not measured"):
        c.ridge_point("int8")


def test_probe_skips_default_dtypes_without_a_path_but_not_requested_ones(monkeypatch):
    def fake_flops(precision, device, quick):
        if precision == "int8":
            raise probe.UnsupportedPrecision("no int8 here")
        return 1e9

    monkeypatch.setattr(probe, "memory_bandwidth_gbs", lambda device, size_mb, repeats: 10.0)
    monkeypatch.setattr(probe, "matmul_flops", fake_flops)
    c = probe.probe("cpu", quick=True)
    assert list(c.flops_by_precision) == ["fp32", "bf16", "fp16"] and c.bandwidth_gbs == 10.0
    with pytest.raises(probe.UnsupportedPrecision):
        probe.probe("cpu", precisions=["int8"], quick=True)


def test_probe_on_cuda_uses_the_cuda_dtypes(monkeypatch):
    seen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(probe, "default_array_mb", lambda device: 1024.0)
    monkeypatch.setattr(probe, "memory_bandwidth_gbs", lambda device, size_mb, repeats: 3000.0)
    monkeypatch.setattr(probe, "matmul_flops", lambda d, device, quick: seen.append((d, device)) or 1e12)
    c = probe.probe("auto", quick=True)
    assert c.device == "cuda" and c.threads == 1
    assert seen == [(d, "cuda") for d in probe.DEFAULT_PRECISIONS["cuda"]]


def test_probe_bad_input():
    with pytest.raises(ValueError, match="precisions"):
        probe.probe(precisions=["int3"], quick=True)
    with pytest.raises(ValueError, match="threads must be an integer from 1"):
        probe.probe(precisions=["fp32"], quick=True, threads=0)


def test_quick_probe_of_this_machine_is_plausible():
    c = probe.probe("cpu", precisions=["fp32"], quick=True, threads=1)
    assert c.threads == 1 and c.device == "cpu" and c.quick
    assert math.isfinite(c.bandwidth_gbs) and c.bandwidth_gbs > 0
    assert math.isfinite(c.peak_flops("fp32")) and c.peak_flops("fp32") > 0


# --- ceilings: one probe per machine, reused --------------------------------------------------------------


@pytest.fixture
def counted_probe(monkeypatch, tmp_path):
    """probe.ceilings with a private record folder, and fake measurements that count themselves."""
    monkeypatch.setenv("HWOPT_CACHE", str(tmp_path))
    calls = {"bandwidth": 0, "matmul": []}

    def bandwidth(device, size_mb, repeats):
        calls["bandwidth"] += 1
        return 30.0 + calls["bandwidth"]  # every measurement a little different, as on a real machine

    def flops(precision, device, quick=True):
        calls["matmul"].append(precision)
        if precision == "int8":
            raise probe.UnsupportedPrecision("no int8 here")
        return {"fp32": 200e9, "bf16": 400e9, "fp16": 1e9}[precision]

    monkeypatch.setattr(probe, "memory_bandwidth_gbs", bandwidth)
    monkeypatch.setattr(probe, "matmul_flops", flops)
    return calls


def test_ceilings_are_measured_once_and_reused_with_their_provenance(counted_probe, tmp_path):
    first = probe.ceilings("cpu")
    assert counted_probe == {"bandwidth": 1, "matmul": ["fp32"]} and not first.reused
    assert first.bandwidth_gbs == 31.0 and first.array_mb > 0 and first.measured_at > 0
    assert first.provenance().startswith("measured just now (bandwidth: STREAM Triad a = b + 3c on three")
    again = probe.ceilings("cpu")
    assert again.reused and again.bandwidth_gbs == 31.0 and again.peak_flops("fp32") == 200e9
    assert counted_probe["bandwidth"] == 1 and (tmp_path / probe.CEILINGS_FILE).is_file()
    said = again.provenance(now=again.measured_at + 600)
    assert "measured 10 min ago on this machine by an earlier cell or lesson, and reused" in said
    assert "fresh=True" in said and f"{again.threads} thread" in said
    more = probe.ceilings("cpu", ["fp32", "bf16"])  # a precision the record lacks: measured and added
    assert more.bandwidth_gbs == 31.0 and more.peak_flops("bf16") == 400e9 and more.reused
    assert counted_probe["matmul"] == ["fp32", "bf16"]
    assert list(probe.ceilings("cpu", ["bf16"]).flops_by_precision) == ["bf16"] and counted_probe[
        "matmul"] == ["fp32", "bf16"]  # only the precisions asked for, none measured again


def test_ceilings_measure_again_when_fresh_old_full_or_unreadable(counted_probe, tmp_path):
    probe.ceilings("cpu")
    assert probe.ceilings("cpu", fresh=True).bandwidth_gbs == 32.0
    assert probe.ceilings("cpu", max_age_s=0).bandwidth_gbs == 33.0
    assert probe.ceilings("cpu", quick=False).bandwidth_gbs == 34.0 and probe.ceilings("cpu").reused
    (tmp_path / probe.CEILINGS_FILE).write_text("{half a fi")
    assert probe.ceilings("cpu").bandwidth_gbs == 35.0
    with probe.bench.threads(1):  # another thread count is another machine for the record
        assert probe.ceilings("cpu").bandwidth_gbs == 36.0
    assert probe.ceilings("cpu").bandwidth_gbs == 35.0


def test_ceilings_with_the_device_defaults_leave_out_what_has_no_path_once(counted_probe):
    c = probe.ceilings("cpu", None)
    assert list(c.flops_by_precision) == ["fp32", "bf16", "fp16"]
    assert probe.ceilings("cpu", None).reused and counted_probe["matmul"].count("int8") == 1
    with pytest.raises(probe.UnsupportedPrecision):
        probe.ceilings("cpu", ["int8"])


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"precisions": "fp32"}, "precisions"), ({"precisions": []}, "precisions"),
    ({"precisions": ["fp7"]}, "precisions"), ({"fresh": 1}, "fresh"), ({"quick": "yes"}, "quick"),
    ({"max_age_s": -1.0}, "max_age_s"), ({"max_age_s": float("nan")}, "max_age_s"),
])
def test_ceilings_bad_input(kwargs, name, counted_probe):
    with pytest.raises(ValueError, match=name):
        probe.ceilings("cpu", **kwargs)
