"""experiments.prefill_decode: KV bytes against the real cache, measurements that can contradict the model,
KV quantization against full precision (the oracle), the reports' wording, and the CUDA branch on the CPU."""

import pytest
import torch

from hwopt.cost import footprint, phases, serving
from hwopt.experiments import prefill_decode as pd
from hwopt.machine import bench
from hwopt.models import tiny_decoder as td

pytestmark = pytest.mark.filterwarnings("ignore::hwopt.machine.bench.NoisyMeasurementWarning")


@pytest.fixture(scope="module")
def model():
    return td.make_tiny_decoder(vocab_size=64, d_model=32, n_layers=2, n_heads=4, seed=0)


def test_shape_of_counts_the_weights_a_step_reads(model):
    shape = pd.shape_of(model)
    assert (shape.n_layers, shape.d_model, shape.n_heads, shape.n_kv_heads) == (2, 32, 4, 4)
    big = td.make_tiny_decoder(vocab_size=512, d_model=128, n_layers=2, n_heads=4)
    counted = phases.matmul_params(pd.shape_of(big)) * 4
    assert counted == pytest.approx(td.weight_bytes_per_token(big), rel=0.02)  # biases and norms left out
    assert pd.model_format(model) == "fp32"


def test_kv_bytes_agree_with_the_real_cache_tensors(model):
    with torch.inference_mode():
        _, caches = model(torch.zeros(3, 11, dtype=torch.long))
    real = pd.kv_cache_nbytes(caches)
    assert real == sum(t.numel() * t.element_size() for pair in caches for t in pair)
    shape = pd.shape_of(model)
    assert real == 3 * td.kv_bytes_read(model, 11) == footprint.kv_cache_bytes(shape, 3, 11, "fp32")
    assert real == 3 * 11 * phases.kv_bytes_per_token(shape, "fp32")
    assert phases.prefill_cost(shape, 11, 3, "fp32").kv_bytes == real
    with pytest.raises(ValueError, match="caches"):
        pd.kv_cache_nbytes([torch.zeros(2)])


@pytest.mark.timing
def test_prefill_is_cheaper_per_token_than_a_decode_step(model):
    """The intensity argument, measured: a pass over 128 tokens costs less per token than a one-token step."""
    times = pd.measure_phases(model, prompt_lens=(4, 128), repeats=3)
    assert times.prompt_lens == (4, 128) and len(times.ttft) == len(times.tpot) == 2
    assert times.ttft[-1].median_s / 128 < times.tpot[-1].median_s
    report = pd.phase_report(times, 1e11, 10.0)
    assert "compute-bound" in report and "memory-bound" in report and "pred/meas" in report
    assert pd.plot_phases(times, 1e11, 10.0).axes[0].get_xlabel() == "prompt length (tokens)"


def test_this_decoder_copies_its_cache_every_step(model):
    assert pd.kv_passes_per_step(model) == 3  # torch.cat: a new tensor each step


@pytest.mark.timing
def test_decode_slows_down_when_the_kv_cache_dwarfs_the_weights():
    """A check that fails if the KV cache were not read: at 50x the weights it must show in the time."""
    small = td.make_tiny_decoder(vocab_size=64, d_model=64, n_layers=2, n_heads=4)
    batch = pd.batch_for_kv_share(small, 448, share=50.0)
    with bench.threads(1):  # a busy machine delays one thread less than two that wait for each other
        sweep = pd.decode_vs_context(small, contexts=(8, 448), batch_size=batch, repeats=5)
    assert sweep.kv_bytes[-1] >= 50 * sweep.weight_bytes
    assert sweep.predicted_slowdowns()[-1] > 10 and sweep.measured_slowdowns()[-1] > 2
    assert sweep.predicted_slowdowns() == pd.predicted_slowdowns(small, (8, 448), batch)
    assert "slowdown" in pd.context_report(sweep, 20.0, 1e11)
    assert pd.plot_decode_vs_context(sweep).axes[0].get_xlabel() == "context (tokens)"


def test_batch_for_kv_share_is_the_smallest_that_reaches_the_share(model):
    b = pd.batch_for_kv_share(model, 100, share=2.0)
    weights, kv = td.weight_bytes_per_token(model), td.kv_bytes_read(model, 100)
    assert b * kv >= 2 * weights > (b - 1) * kv


def _sweep(measured_ms):
    steps = tuple(bench.Measurement(f"c{i}", (t / 1e3,) * 3) for i, t in enumerate(measured_ms))
    return pd.ContextSweep((16, 448), 8, steps, weight_bytes=100, kv_bytes=(1, 100), kv_passes=1)


@pytest.mark.parametrize(("measured_ms", "says"), [
    ((10.0, 19.8), "as the memory-bound model predicts"),
    ((10.0, 11.0), "grows less than the bytes"),
    ((10.0, 40.0), "grows more than the bytes")])
def test_context_report_says_which_way_the_measurement_went(measured_ms, says):
    sweep = _sweep(measured_ms)
    assert sweep.predicted_slowdowns()[-1] == pytest.approx(200 / 101)
    report = pd.context_report(sweep, 10.0, 1e11)
    assert says in report and "reads the cache once" in report


def test_quantize_kv_errors_follow_the_bits():
    x = torch.randn(2, 4, 16, 32, generator=torch.Generator().manual_seed(0))
    assert torch.equal(pd.quantize_kv(x, "fp32"), x)
    errors = {f: float((pd.quantize_kv(x, f) - x).abs().max()) for f in ("fp16", "int8", "fp8_e4m3", "int4")}
    assert errors["fp16"] < errors["int8"] < errors["int4"] and errors["fp8_e4m3"] < errors["int4"]
    per_vector_max = x.abs().amax(-1, keepdim=True)
    assert torch.all((pd.quantize_kv(x, "int8") - x).abs() <= per_vector_max / 127 / 2 + 1e-6)
    again = pd.quantize_kv(pd.quantize_kv(x, "fp8_e4m3"), "fp8_e4m3")
    assert torch.allclose(again, pd.quantize_kv(x, "fp8_e4m3"))
    with pytest.raises(ValueError, match="kv_precision"):
        pd.quantize_kv(x, "nvfp4")
    with pytest.raises(ValueError, match="tensor"):
        pd.quantize_kv(torch.zeros(3, dtype=torch.long), "int8")


def test_kv_quantization_error_is_zero_at_full_precision_and_grows_with_fewer_bits(model):
    rows = pd.kv_quantization_error(model, prompt_len=24, kv_precisions=("fp32", "fp16", "int8", "int4"),
                                    steps=4)
    by = {r["kv_precision"]: r for r in rows}
    assert by["fp32"]["logit_relative_rmse"] == 0 and by["fp32"]["top1_agreement"] == 1.0
    assert 0 < by["fp16"]["logit_relative_rmse"] < by["int8"]["logit_relative_rmse"] \
        < by["int4"]["logit_relative_rmse"]
    assert by["int8"]["kv_bytes_per_token"] == by["fp32"]["kv_bytes_per_token"] / 4
    assert "same top-1" in pd.kv_precision_table(rows)


def test_serving_costs_and_summary_come_from_the_measurements(model):
    times = pd.measure_phases(model, prompt_lens=(4, 16), repeats=1)
    sweep = pd.decode_vs_context(model, contexts=(4, 16), batch_size=4, repeats=1)
    costs = pd.serving_costs(times, sweep)
    assert costs["weight_read_ms"] == times.tpot[0].median_ms
    assert costs["token_compute_ms"] == pytest.approx(times.ttft[-1].median_ms / 16)
    growth = max(0.0, sweep.steps[-1].median_ms - sweep.steps[0].median_ms)
    assert costs["kv_read_per_seq_ms"] == pytest.approx(growth / (4 * 12) * 16)
    longer = pd.serving_costs(times, sweep, 32)
    assert longer["kv_read_per_seq_ms"] == pytest.approx(2 * costs["kv_read_per_seq_ms"])
    requests = serving.mixed_requests(20, 10.0, 4, 64, 0.2, 4.0)
    runs = {"whole prompts": serving.simulate_chunked_prefill(*requests, 4, **costs),
            "chunks of 16": serving.simulate_chunked_prefill(*requests, 4, **costs, chunk_tokens=16)}
    rows = [{"variant": "KV fp16", "kv_bytes_per_value": 2.0, "perplexity": 60.0, "top1_agreement": 1.0},
            {"variant": "KV int8 K per-token", "kv_bytes_per_value": 1.06, "perplexity": 60.3,
             "top1_agreement": 0.99},
            {"variant": "KV int4 K per-token", "kv_bytes_per_value": 0.56, "perplexity": 66.0,
             "top1_agreement": 0.9}]
    text = pd.lesson_summary(times, sweep, rows, runs)
    assert f"{times.ttft[-1].median_ms:,.1f} ms" in text and "as KV int8 K per-token" in text
    assert "chunks of 16" in text and "60.300" in text


def test_a_compute_bound_batch_is_named_in_the_context_report():
    steps = tuple(bench.Measurement(f"c{i}", (t,) * 3) for i, t in enumerate((0.01, 0.02)))
    sweep = pd.ContextSweep((16, 448), 8, steps, weight_bytes=1000, kv_bytes=(10, 1000), kv_passes=1,
                            flops=(20_000.0, 21_000.0))
    report = pd.context_report(sweep, 1.0, 1e9)  # ridge 1 FLOP/byte, the step at ~20
    assert "above this machine's ridge (1.00)" in report and "2 of the 2 rows" in report
    assert "above this machine's ridge" not in pd.context_report(sweep, 1.0, 1e12)


def test_the_device_must_be_the_models(model):
    with pytest.raises(ValueError, match="device"):
        pd.measure_phases(model, (4,), device="cuda" if not torch.cuda.is_available() else "meta")


def test_cuda_branch_on_the_cpu(model, monkeypatch):
    """With a fake 'cuda' device (the model stays on the CPU), timing synchronises the device every call."""
    syncs = []
    monkeypatch.setattr(bench, "resolve_device", lambda device="auto": "cuda")
    monkeypatch.setattr(pd, "_device_kind", lambda model: "cuda")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: syncs.append(1))
    times = pd.measure_phases(model, (4, 8), device="cuda", repeats=1)
    assert times.ttft[0].device == "cuda" and syncs
    syncs.clear()
    sweep = pd.decode_vs_context(model, (4, 8), batch_size=2, device="cuda", repeats=1)
    assert sweep.steps[0].device == "cuda" and syncs
    assert pd.kv_quantization_error(model, 8, ("int8",), 2, device="cuda")[0]["kv_precision"] == "int8"
