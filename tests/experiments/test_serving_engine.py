"""experiments.serving_engine: lesson 11's measurements run on the real llama-server with the course's model,
their reports and plots hold the measured figures, and a run saved to JSON reads back the same."""

import math

import pytest

from hwopt.experiments import serving_engine
from hwopt.kernels import llama_build
from hwopt.machine import loadgen
from tests.support import skip_outside_ci


@pytest.fixture(scope="module")
def engine():
    reason = serving_engine.unavailable_reason()
    if reason:
        skip_outside_ci(f"llama-server is not built here ({reason})")
    return llama_build.built_binary()


def records(*ttfts_s):
    return tuple(loadgen.RequestRecord(0.0, 0.0, (t, t + 0.01, t + 0.03), t + 0.03, 3) for t in ttfts_s)


def test_prompts_are_validation_text_of_about_the_asked_length():
    text = serving_engine.prompt(32, 100)
    assert 40 < len(text) < 400 and text != serving_engine.prompt(32, 200)
    shape = serving_engine.shape("target")
    assert shape.n_layers > 0 and shape.tied_embeddings


def test_a_saved_run_reads_back_the_same(tmp_path):
    loops = serving_engine.LoopComparison(
        loadgen.LoadResult(records(0.05, 0.06), "closed", users=2, label="closed"),
        loadgen.LoadResult(records(0.05, 0.5), "open", rate_per_s=4.0, label="open"))
    spec = serving_engine.SpeculativeRun(4, 500.0, 2000.0, 650.0, 40, 30)
    path = serving_engine.save({"loops": loops, "speculative": spec}, tmp_path / "run.json")
    run, machine = serving_engine.load_run(path)
    assert run["speculative"] == spec and run["loops"] == loops
    assert "llama.cpp" in machine["engine"]
    summary = serving_engine.lesson_summary(run)
    assert "500 -> 650 tokens/s (1.30x, acceptance 75%" in summary and "Open vs closed loop" in summary
    with pytest.raises(ValueError, match="does not exist"):
        serving_engine.load_run(tmp_path / "missing.json")


def test_slots_and_prefix_caching_on_the_engine(engine):
    slots = serving_engine.slots_sweep((1, 2), max_tokens=8)
    assert all(len(r.ok) == 2 * b for r, b in zip(slots.runs, slots.streams, strict=True))
    assert all(t > 0 for t in slots.tokens_per_s) and all(t > 0 for t in slots.tpot_ms)
    assert "streams" in slots.report() and slots.plot() is not None
    prefix = serving_engine.prefix_caching(system_tokens=128, question_tokens=8, n_requests=3)
    # the engine's own count: with the cache on it computes only what follows the shared prefix
    assert prefix.prefilled_on < prefix.prefilled_off / 2
    assert "cache on" in prefix.report() and prefix.plot() is not None


def test_formats_speculative_decoding_and_open_loop_on_the_engine(engine):
    weights = serving_engine.weight_formats(("int8_g32", "int4_g32"), prompt_tokens=8, max_tokens=16)
    assert weights.step_bytes[1] < weights.step_bytes[0] and all(t > 0 for t in weights.tpot_ms)
    assert "Q4_0" in weights.report() and weights.plot() is not None
    spec = serving_engine.speculative_decoding(draft_max=2, n_prompts=1, max_tokens=16)
    assert spec.drafted > 0 and 0 <= spec.accepted <= spec.drafted
    assert spec.draft_tokens_per_s > spec.target_tokens_per_s  # the draft is 6x smaller
    assert math.isfinite(spec.predicted_speedup) and "speed-up" in spec.report()
    loops = serving_engine.open_vs_closed(users=2, n_requests=6, max_tokens=8)
    assert len(loops.closed.ok) == len(loops.opened.ok) == 6
    assert "goodput" in loops.report() and loops.plot() is not None


def test_where_the_engine_is_missing_the_recorded_run_stands_in(monkeypatch):
    monkeypatch.setenv(llama_build.SERVER_ENV, "/no/such/llama-server")
    assert "not an executable" in serving_engine.unavailable_reason()
    run, machine = serving_engine.load_run()
    assert {"slots", "loops", "prefix", "chunks", "speculative", "kv", "weights"} <= set(run)
    assert machine["cores"] >= 1 and len(serving_engine.lesson_summary(run).splitlines()) == 7
