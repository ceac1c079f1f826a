"""experiments.fusion: byte counts of the elementwise chain, predictions, the chain vs its formula, widget."""

from types import SimpleNamespace

import pytest
import torch

from hwopt import widgets
from hwopt.experiments import fusion
from hwopt.machine import probe
from hwopt.machine.bench import Measurement


def test_passes_and_bytes_of_the_lesson_chain():
    assert fusion.passes(fused=False) == 9 and fusion.passes(fused=True) == 3
    assert fusion.bytes_moved(1000, fused=False) == 9 * 1000 * 4
    assert fusion.bytes_moved(1000, fused=True, bytes_per_element=2) == 3 * 1000 * 2
    assert fusion.predicted_speedup() == 3.0
    assert fusion.predicted_speedup(n_ops=1, extra_inputs=0) == 1.0  # one op: nothing to fuse


def test_predicted_time_and_slider_callback():
    assert fusion.predicted_time_ms(20e9, 20.0) == pytest.approx(1000.0)
    p = fusion.fusion_prediction(size_mb=4.0, n_ops=4, bandwidth_gbs=10.0)
    assert p["n_elements"] == 1_000_000 and p["unfused_mb"] == pytest.approx(36.0)
    assert p["fused_ms"] == pytest.approx(1.2) and p["speedup"] == pytest.approx(3.0)
    assert fusion.fusion_prediction(1.0, 1, 10.0)["speedup"] == pytest.approx(1.0)  # one op: nothing to fuse
    capped = fusion.fusion_prediction(1.0, 2, 10.0, extra_inputs=5)  # extra inputs capped at n_ops
    assert capped["speedup"] == pytest.approx(1.5)


def test_chain_matches_its_formula_and_module():
    inputs = fusion.chain_inputs(8, 16)
    x, b, r, s = inputs["x"], inputs["bias"], inputs["residual"], inputs["scale"]
    expected = (0.5 * (x + b) * (1 + torch.erf((x + b) / 2**0.5)) + r) * s
    assert torch.allclose(fusion.chain(x, b, r, s), expected, atol=1e-6)
    assert torch.allclose(fusion.Chain(b, s)(x, r), expected, atol=1e-6)


@pytest.mark.parametrize("into", [fusion.chain_into, fusion.chain_eager_into])  # fused by compile; op by op
def test_each_chain_into_writes_the_same_values_into_its_output(into):
    inputs = fusion.chain_inputs(8, 16, seed=1)
    out = torch.empty(8, 16)
    result = into(**inputs, out=out)
    assert result.data_ptr() == out.data_ptr()
    assert torch.allclose(out, fusion.chain(**inputs), atol=1e-6)


def test_chain_shape_is_a_multiple_of_the_measured_cache(monkeypatch):
    monkeypatch.setattr(probe, "last_level_cache_bytes", lambda: 32 * 2**20)  # a 32 MiB L3
    rows, cols = fusion.chain_shape("cpu")
    assert cols == 1024 and rows % 64 == 0
    assert 4 * rows * cols == pytest.approx(4 * 32 * 2**20, rel=0.01)  # four times the cache
    assert fusion.chain_shape("cpu", cache_multiple=2)[0] == pytest.approx(rows / 2, abs=64)
    monkeypatch.setattr(probe, "last_level_cache_bytes", lambda: 1 * 2**30)  # a huge cache: capped at 512 MB
    assert 4 * fusion.chain_shape("cpu")[0] * 1024 == pytest.approx(512e6, rel=0.01)
    monkeypatch.setattr(probe, "last_level_cache_bytes", lambda: None)  # unknown: 32 MiB assumed
    assert fusion.chain_shape("cpu")[0] == rows


def test_cache_bytes_of_a_cuda_gpu_is_its_l2(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    gpu = SimpleNamespace(L2_cache_size=50 * 2**20)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: gpu)
    assert fusion.cache_bytes("cuda") == 50 * 2**20
    assert 4 * fusion.chain_shape("cuda")[0] * 1024 == pytest.approx(4 * 50 * 2**20, rel=0.01)


def test_gelu_rate_is_measured_on_a_cache_sized_array(monkeypatch):
    sizes = []
    real_gelu = fusion.F.gelu
    monkeypatch.setattr(fusion.F, "gelu", lambda x: sizes.append(x.numel()) or real_gelu(x))
    monkeypatch.setattr(probe, "last_level_cache_bytes", lambda: 2 * 2**20)  # a 2 MiB cache
    rate = fusion.gelu_elements_per_s(repeats=3)
    assert set(sizes) == {2 * 2**20 // 32}  # an eighth of the cache for input and output (4 B each)
    assert 1e6 < rate < 1e12  # real erf-GELUs per second: between 1 M/s and 1 T/s


def test_chain_roofs_and_the_bound_sentence():
    n = 33_554_432  # 8192 x 4096: 134 MB per tensor, one pass 4.86 ms at 27.6 GB/s
    one_pass_s = n * 4 / 27.6e9
    fast_erf = fusion.chain_roofs(n, 27.6, 3.8e9)  # fused: one kernel, 3 passes
    assert fast_erf.erf_kernel.memory_s == pytest.approx(3 * one_pass_s) and fast_erf.other_memory_s == 0
    assert fast_erf.erf_kernel.transcendental_s == pytest.approx(n / 3.8e9)
    assert fast_erf.bound == "memory" and fast_erf.time_s == pytest.approx(3 * one_pass_s)
    assert "memory-bound here" in fusion.bound_sentence(fast_erf, 27.6, 3.8e9)
    slow_erf = fusion.chain_roofs(n, 27.6, 1.5e9)  # erfs take 22.4 ms > 14.6 ms of bytes
    assert slow_erf.bound == "transcendental" and slow_erf.time_s == pytest.approx(n / 1.5e9)
    assert "compute-bound here" in fusion.bound_sentence(slow_erf, 27.6, 1.5e9)
    # unfused: the GELU kernel (2 passes) under both roofs, the other 7 passes at the memory roof
    unfused = fusion.chain_roofs(n, 27.6, 1.5e9, fused=False)
    assert unfused.bound == "transcendental" and unfused.other_memory_s == pytest.approx(7 * one_pass_s)
    assert unfused.time_s == pytest.approx(n / 1.5e9 + 7 * one_pass_s)
    assert fusion.chain_roofs(n, 27.6, 3.8e9, fused=False).time_s == pytest.approx(9 * one_pass_s)
    assert fusion.chain_roofs(n, 27.6, 1.5e9, n_passes=7, fused=False).other_memory_s == pytest.approx(
        5 * one_pass_s
    )


def test_fresh_output_sentence_follows_the_measurement():
    def rows(allocating_s):
        results = {
            "eager": Measurement("eager", (0.150,) * 3),
            "torch.compile": Measurement("torch.compile", (allocating_s,) * 3),
            "torch.compile, out given": Measurement("given", (0.017,) * 3),
        }
        passes = {"eager": 9, "torch.compile": 3, "torch.compile, out given": 3}
        return fusion.report_rows(results, 33_554_432, passes, 27.6, gelus_per_s=3.8e9)

    faults = fusion.fresh_output_sentence(rows(0.053))
    assert "36.0 ms per call" in faults and "68%" in faults and "page faults" in faults
    assert "86% of the speed its memory roof allows" in faults  # 14.6 ms predicted / 17 ms measured
    assert "memory was reused" in fusion.fresh_output_sentence(rows(0.0175))
    with pytest.raises(ValueError, match="given"):
        fusion.fresh_output_sentence(rows(0.053), given="missing")


def test_fusion_verdict_names_absolute_times_and_does_not_accept_a_matching_ratio_alone():
    def rows(eager_s, fused_s):
        results = {"eager, out given": Measurement("e", (eager_s,) * 3),
                   "torch.compile, out given": Measurement("c", (fused_s,) * 3)}
        passes = {"eager, out given": 9, "torch.compile, out given": 3}
        return fusion.report_rows(results, 33_554_432, passes, 52.6, gelus_per_s=4.44e9)

    # the recorded EPYC run's allocating times: the ratio matched (3.2x), each ran at 0.15 of its prediction
    slow = fusion.fusion_verdict(rows(0.16728, 0.05168))
    assert "predicted 25.42 ms (transcendental roof), measured 167.28 ms: 15% of its predicted speed" in slow
    assert "Fusion: predicted 3.3x, measured 3.2x. Whatever the ratios, the roofs miss the absolute" in slow
    close = fusion.fusion_verdict(rows(0.0280, 0.0085))
    assert "The roofs predict both times within 30%" in close
    with pytest.raises(ValueError, match="unfused"):
        fusion.fusion_verdict(rows(0.1, 0.05), unfused="eager")


def test_first_call_and_max_abs_error():
    assert fusion.first_call_s(lambda: sum(range(10))) >= 0
    assert fusion.max_abs_error(torch.ones(2), torch.zeros(2)) == 1.0


def test_fusion_explorer_redraws(monkeypatch):
    shown = []
    monkeypatch.setattr(widgets, "display", shown.append)
    box = fusion.fusion_explorer(bandwidth_gbs=20.0)
    box.controls["n_ops"].value = 8
    assert len(shown) == 2 and "8 ops" in shown[-1].axes[0].get_title()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: fusion.chain_inputs(0, 4), "rows"),
        (lambda: fusion.chain_inputs(4, 1.5), "cols"),
        (lambda: fusion.passes(0, fused=True), "n_ops"),
        (lambda: fusion.passes(2, 3, fused=True), "extra_inputs"),
        (lambda: fusion.bytes_moved(0, fused=True), "n_elements"),
        (lambda: fusion.bytes_moved(10, fused=True, bytes_per_element=0), "bytes_per_element"),
        (lambda: fusion.predicted_time_ms(-1, 10), "n_bytes"),
        (lambda: fusion.predicted_time_ms(1, 0), "bandwidth_gbs"),
        (lambda: fusion.fusion_prediction(0, 4, 10), "size_mb"),
        (lambda: fusion.first_call_s(3), "fn"),
        (lambda: fusion.max_abs_error(torch.ones(2), torch.ones(3)), "shapes"),
        (lambda: fusion.fusion_explorer(0), "bandwidth_gbs"),
        (lambda: fusion.chain_shape(cache_multiple=0), "cache_multiple"),
        (lambda: fusion.chain_shape(cols=0), "cols"),
        (lambda: fusion.gelu_elements_per_s(n_elements=0), "n_elements"),
        (lambda: fusion.chain_roofs(0, 10.0, 1e9), "n_elements"),
        (lambda: fusion.chain_roofs(10, 10.0, 1e9, n_passes=0), "n_passes"),
        (lambda: fusion.chain_roofs(10, 10.0, 0), "gelus_per_s"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_report_rows_and_table():
    results = {
        "eager": Measurement("eager", (0.009, 0.009, 0.009)),
        "fused": Measurement("fused", (0.003,) * 3),
    }
    rows = fusion.report_rows(results, 1_000_000, {"eager": 9, "fused": 3}, bandwidth_gbs=4.0)
    assert rows[0]["predicted_ms"] == pytest.approx(9.0) and rows[0]["achieved_gbs"] == pytest.approx(4.0)
    assert rows[1]["speedup"] == pytest.approx(3.0) and rows[1]["predicted_over_measured"] == pytest.approx(
        1.0
    )
    assert "3.00x" in fusion.format_report(rows) and {r["bound"] for r in rows} == {"memory"}
    # with the transcendental roof: 1 M erfs at 0.25 G/s = 4 ms, one pass 1 ms at 4 GB/s
    rows = fusion.report_rows(results, 1_000_000, {"eager": 9, "fused": 3}, 4.0, gelus_per_s=0.25e9)
    assert rows[0]["bound"] == "transcendental" and rows[0]["predicted_ms"] == pytest.approx(4.0 + 7.0)
    assert rows[1]["bound"] == "transcendental" and rows[1]["predicted_ms"] == pytest.approx(4.0)
    rows = fusion.report_rows(results, 1_000_000, {"eager": 9, "fused": 3}, 4.0, gelus_per_s=1e9)
    assert [r["bound"] for r in rows] == ["memory", "memory"] and rows[1]["predicted_ms"] == pytest.approx(3)
    both_unfused = fusion.report_rows(results, 1_000_000, {"eager": 9, "fused": 3}, 4.0,
                                      gelus_per_s=0.25e9, fused_labels=[])
    assert both_unfused[1]["predicted_ms"] == pytest.approx(4.0 + 1.0)
    assert "transcendental" in fusion.format_report(both_unfused)
    with pytest.raises(ValueError, match="passes_by_label"):
        fusion.report_rows(results, 10, {"eager": 9}, 4.0)
    with pytest.raises(ValueError, match="baseline"):
        fusion.report_rows(results, 10, {"eager": 9, "fused": 3}, 4.0, baseline="x")
    with pytest.raises(ValueError, match="results"):
        fusion.report_rows({}, 10, {}, 4.0)
