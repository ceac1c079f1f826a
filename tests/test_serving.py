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
    ({"per_item_ms": 0}, "per_item_ms"),
    ({"n_requests": 0}, "n_requests"),
])
def test_simulation_rejects_bad_input(kwargs, word):
    args = {"arrival_rate_per_s": 100, "max_batch_size": 4, "max_wait_ms": 1.0, "overhead_ms": 1.0,
            "per_item_ms": 0.1, "n_requests": 50}
    args.update(kwargs)
    with pytest.raises(ValueError, match=word):
        sv.simulate_dynamic_batching(**args)


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
