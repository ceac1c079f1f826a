"""cost.serving: dynamic batching (determinism, limits, hand-checked cases); continuous batching."""

import numpy as np
import pytest

from hwopt.cost import serving as sv


def test_arrivals_are_poisson_and_seeded():
    a = sv.arrivals_ms(1000.0, 20000, seed=1)
    assert np.all(np.diff(a) > 0)
    assert np.mean(np.diff(a)) == pytest.approx(1.0, rel=0.03)  # 1000 req/s -> 1 ms apart on average
    assert np.array_equal(a, sv.arrivals_ms(1000.0, 20000, seed=1))
    assert not np.array_equal(a, sv.arrivals_ms(1000.0, 20000, seed=2))


def test_simulation_is_deterministic_for_a_seed():
    a = sv.simulate_dynamic_batching(500, 16, 5.0, 2.0, 0.1, seed=3)
    b = sv.simulate_dynamic_batching(500, 16, 5.0, 2.0, 0.1, seed=3)
    assert np.array_equal(a.latencies_ms, b.latencies_ms) and a.p99_ms == b.p99_ms


def test_light_load_latency_is_one_batch_of_one():
    # one request a second, service 1 ms: (almost) never queues, never waits (max_wait 0)
    st = sv.simulate_dynamic_batching(1, 8, 0.0, 0.5, 0.5, n_requests=200)
    assert st.p50_ms == pytest.approx(1.0) and st.p99_ms == pytest.approx(1.0)
    assert st.mean_batch_size == 1.0 and not st.overloaded


def test_max_wait_adds_at_most_the_wait_under_light_load():
    st = sv.simulate_dynamic_batching(1, 8, 4.0, 0.5, 0.5, n_requests=200)
    assert st.p50_ms == pytest.approx(5.0)  # waited 4 ms for company that never came, then 1 ms of work
    assert st.latencies_ms.max() <= 4.0 + 0.5 + 8 * 0.5 + 1e-9


def test_batching_rescues_a_server_that_is_overloaded_one_at_a_time():
    # one at a time: capacity 1000 / (2 + 0.1) = 476 req/s < 800 arriving
    single = sv.simulate_dynamic_batching(800, 1, 0.0, 2.0, 0.1)
    batched = sv.simulate_dynamic_batching(800, 32, 2.0, 2.0, 0.1)
    assert single.overloaded and not batched.overloaded
    assert batched.p99_ms < single.p99_ms / 10
    assert batched.requests_per_s == pytest.approx(800, rel=0.1)
    assert single.requests_per_s == pytest.approx(single.capacity_per_s, rel=0.05)
    assert batched.mean_batch_size > 1 and batched.batch_sizes.max() <= 32


def test_all_requests_served_and_latency_at_least_service_time():
    st = sv.simulate_dynamic_batching(2000, 8, 1.0, 1.0, 0.2, n_requests=500)
    assert st.batch_sizes.sum() == 500 and len(st.latencies_ms) == 500
    assert st.latencies_ms.min() >= 1.2 - 1e-9
    assert 0 < st.utilization <= 1.0
    assert "p99" in str(st)
    assert "OVERLOADED" in str(sv.simulate_dynamic_batching(2000, 1, 0.0, 1.0, 0.2, n_requests=100))


@pytest.mark.parametrize(("kwargs", "word"), [
    ({"arrival_rate_per_s": 0}, "arrival_rate_per_s"),
    ({"max_batch_size": 0}, "max_batch_size"),
    ({"max_batch_size": 2.5}, "max_batch_size"),
    ({"max_wait_ms": -1}, "max_wait_ms"),
    ({"overhead_ms": -0.1}, "overhead_ms"),
    ({"per_item_ms": -0.1}, "per_item_ms"),
    ({"per_item_ms": 0, "overhead_ms": 0}, "per_item_ms"),
    ({"n_requests": 0}, "n_requests"),
])
def test_simulation_rejects_bad_input(kwargs, word):
    args = {"arrival_rate_per_s": 100, "max_batch_size": 4, "max_wait_ms": 1.0, "overhead_ms": 1.0,
            "per_item_ms": 0.1, "n_requests": 50}
    args.update(kwargs)
    with pytest.raises(ValueError, match=word):
        sv.simulate_dynamic_batching(**args)


def test_a_flat_fitted_line_costs_the_overhead_at_every_batch_size():
    flat = sv.simulate_dynamic_batching(500, 8, 1.0, 2.0, 0.0, n_requests=200)
    assert flat.latencies_ms.min() >= 2.0 - 1e-9 and 0 < flat.utilization <= 1.0
    steps = sv.simulate_generation([3, 1, 4], 2, 1.0, 0.0, continuous=True)
    assert steps.total_ms == pytest.approx(5.0)  # 5 steps of 1 ms: the flat line's overhead each


def test_serving_report_compares_with_one_at_a_time():
    text = sv.serving_report(800, 32, 2.0, 2.0, 0.1)
    assert "dynamic batching" in text and "one request at a time" in text and "OVERLOADED" in text


def test_latency_histogram_plot():
    fig = sv.plot_latency_histogram(sv.simulate_dynamic_batching(100, 4, 1.0, 1.0, 0.1, n_requests=100))
    assert fig.axes[0].get_xlabel() == "latency (ms)"


def test_continuous_batching_beats_static_on_varied_lengths():
    lengths = sv.output_lengths(64, 50, seed=0)
    static = sv.simulate_generation(lengths, 8, 10.0, 0.5, continuous=False)
    cont = sv.simulate_generation(lengths, 8, 10.0, 0.5, continuous=True)
    assert cont.tokens_per_s > 1.3 * static.tokens_per_s
    assert cont.mean_finish_ms < static.mean_finish_ms
    assert cont.slot_utilization > static.slot_utilization
    assert "tokens/s" in str(cont)


def test_equal_lengths_make_static_and_continuous_the_same():
    lengths = np.full(16, 10)
    static = sv.simulate_generation(lengths, 4, 1.0, 1.0, continuous=False)
    cont = sv.simulate_generation(lengths, 4, 1.0, 1.0, continuous=True)
    assert static.total_ms == pytest.approx(cont.total_ms) == pytest.approx(4 * 10 * (1 + 4))
    assert static.slot_utilization == pytest.approx(1.0)


def test_generation_rejects_bad_lengths():
    with pytest.raises(ValueError, match="lengths"):
        sv.simulate_generation([3, 0], 2, 1.0, 1.0, continuous=True)
    with pytest.raises(ValueError, match="lengths"):
        sv.simulate_generation([], 2, 1.0, 1.0, continuous=True)
    with pytest.raises(ValueError, match="mean_tokens"):
        sv.output_lengths(4, 0.5)


# ---- chunked prefill (lesson 8) ---------------------------------------------------------------------------


def test_a_mixed_step_costs_its_weight_read_until_its_compute_catches_up():
    # weights read in 10 ms, 0.1 ms of compute per token: 100 tokens ride on the read for free
    assert sv.mixed_step_ms(16, 0, 10.0, 0.1) == pytest.approx(10.0)
    assert sv.mixed_step_ms(16, 84, 10.0, 0.1) == pytest.approx(10.0)  # 100 tokens: at the ridge
    assert sv.mixed_step_ms(16, 184, 10.0, 0.1) == pytest.approx(20.0)  # compute-bound: 200 tokens
    assert sv.mixed_step_ms(16, 0, 10.0, 0.1, kv_read_per_seq_ms=0.5) == pytest.approx(18.0)
    assert sv.mixed_step_ms(0, 0, 10.0, 0.1, step_overhead_ms=2.0) == pytest.approx(12.0)
    assert sv.tokens_at_ridge(10.0, 0.1) == 100 and sv.tokens_at_ridge(10.0, 0.1, decoding=16) == 84
    assert sv.tokens_at_ridge(10.0, 0.1, 16, 0.5) == 180 - 16 and sv.tokens_at_ridge(1.0, 0.1, 16) == 0


def test_one_request_by_hand_whole_and_chunked():
    # prompt 100 tokens, 3 output tokens; weights read in 1 ms, 0.1 ms of compute per token
    whole = sv.simulate_chunked_prefill([0.0], [100], [3], 4, 1.0, 0.1)
    assert whole.ttft_ms.tolist() == [pytest.approx(10.0)]  # compute-bound: 100 x 0.1 ms
    assert whole.tpot_ms.tolist() == [pytest.approx(1.0), pytest.approx(1.0)]  # memory-bound: the read
    chunked = sv.simulate_chunked_prefill([0.0], [100], [3], 4, 1.0, 0.1, chunk_tokens=30)
    assert chunked.ttft_ms.tolist() == [pytest.approx(3 * 3.0 + 1.0)]  # chunks of 30, 30, 30, 10 tokens
    assert whole.total_ms == pytest.approx(10.0 + 2.0)


def test_a_long_prompt_stalls_decoding_unless_it_is_chunked():
    arrivals, prompts, outputs = [0.0, 5.0], [8, 2000], [200, 5]
    whole = sv.simulate_chunked_prefill(arrivals, prompts, outputs, 4, 1.0, 0.1)
    chunked = sv.simulate_chunked_prefill(arrivals, prompts, outputs, 4, 1.0, 0.1, chunk_tokens=64)
    assert whole.percentile("tpot", 100) >= 200.0  # the decoding request waited for 2000 prompt tokens
    assert chunked.percentile("tpot", 100) <= 0.1 * (64 + 1) + 1e-9  # at most one chunk per step
    assert chunked.ttft_ms[1] > whole.ttft_ms[1]  # the long prompt itself waits longer
    for stats in (whole, chunked):
        assert stats.tpot_ms.size == sum(outputs) - len(outputs)  # one gap per token after the first
    assert "whole prompts" in str(whole) and "chunks of 64" in str(chunked)


def test_a_chunk_within_the_ridge_rides_on_the_decode_steps_for_free():
    """Weights read in 10 ms, 0.01 ms per token: a step holds 1000 tokens before compute catches up. Chunks
    of 256 leave every decode gap at the weight read; the whole 4000-token prompt stalls one step."""
    arrivals, prompts, outputs = [0.0, 1.0], [8, 4000], [100, 4]
    whole = sv.simulate_chunked_prefill(arrivals, prompts, outputs, 4, 10.0, 0.01)
    chunked = sv.simulate_chunked_prefill(arrivals, prompts, outputs, 4, 10.0, 0.01, chunk_tokens=256)
    assert whole.percentile("tpot", 100) == pytest.approx(0.01 * 4001)
    assert chunked.percentile("tpot", 100) == pytest.approx(10.0)  # never above a decode-only step
    assert chunked.total_ms <= whole.total_ms + 16 * 10.0  # 16 chunks, each hidden in a step that ran anyway


def test_requests_beyond_the_slots_wait_and_idle_servers_jump_to_the_next_arrival():
    stats = sv.simulate_chunked_prefill([0.0, 0.0, 1000.0], [10, 10, 10], [2, 2, 2], 1, 2.0, 0.1)
    assert stats.ttft_ms[0] == pytest.approx(2.0)
    assert stats.ttft_ms[1] == pytest.approx(2.0 + 2.0 + 2.0)  # waits for the first request's two steps
    assert stats.ttft_ms[2] == pytest.approx(2.0)  # the server was idle when it arrived


def test_mixed_requests_and_the_explorer():
    arrivals, prompts, outputs = sv.mixed_requests(400, 50.0, 16, 1000, 0.25, 20.0, seed=1)
    assert arrivals.shape == prompts.shape == outputs.shape == (400,)
    assert set(np.unique(prompts)) == {16, 1000} and 0.15 < np.mean(prompts == 1000) < 0.35
    requests = (arrivals, prompts, outputs)
    box = sv.chunked_prefill_explorer(1.0, 0.05, requests, max_batch_size=8, kv_read_per_seq_ms=0.2)
    box.controls["chunk_tokens"].value = 64
    fig = sv.plot_phase_latencies({"a": sv.simulate_chunked_prefill(*requests, 8, 1.0, 0.05)})
    assert fig.axes[0].get_ylabel() == "time (ms)"


def test_chunked_prefill_rejects_bad_input():
    with pytest.raises(ValueError, match="equally long"):
        sv.simulate_chunked_prefill([0.0, 1.0], [4], [4], 2, 1.0, 1.0)
    with pytest.raises(ValueError, match="increasing"):
        sv.simulate_chunked_prefill([1.0, 0.0], [4, 4], [4, 4], 2, 1.0, 1.0)
    with pytest.raises(ValueError, match="chunk_tokens"):
        sv.simulate_chunked_prefill([0.0], [4], [4], 2, 1.0, 1.0, chunk_tokens=0)
    with pytest.raises(ValueError, match="which"):
        sv.simulate_chunked_prefill([0.0], [4], [4], 2, 1.0, 1.0).percentile("e2e", 50)
    with pytest.raises(ValueError, match="weight_read_ms or step_overhead_ms"):
        sv.simulate_chunked_prefill([0.0], [4], [4], 2, 0.0, 1.0)


def test_measured_batch_latencies_replace_the_line_where_it_is_optimistic():
    line = sv.simulate_dynamic_batching(2866, 32, 0.958, 0.479, 0.0445, n_requests=500)
    measured = [0.360, 1.122, 1.16, 1.199] + [1.2] * 28  # a step from batch 1 to 2 the line does not see
    stepped = sv.simulate_dynamic_batching(2866, 32, 0.958, 0.479, 0.0445, n_requests=500, batch_ms=measured)
    assert stepped.p99_ms > line.p99_ms and stepped.capacity_per_s == pytest.approx(32 / 1.2e-3)
    assert "p99" in sv.serving_report(2866, 32, 0.958, 0.479, 0.0445, batch_ms=measured)
    with pytest.raises(ValueError, match="batch_ms must give the latency of every batch size 1..32"):
        sv.simulate_dynamic_batching(100, 32, 1.0, 0.5, 0.1, batch_ms=[1.0] * 8)
