"""machine.loadgen: per-token latencies and their percentiles are right against a server with scripted delays;
open loop shows the queue a closed loop hides (coordinated omission); bad input and failed runs are told."""

import numpy as np
import pytest

from hwopt.machine import loadgen
from tests.support import ScriptedServer


def test_record_metrics_follow_their_definitions():
    r = loadgen.RequestRecord(
        due_s=1.0, sent_s=1.1, token_times_s=(1.3, 1.35, 1.45), end_s=1.5, output_tokens=3
    )
    assert r.ttft_s == pytest.approx(0.3)  # from the due time, not the send time
    assert r.e2e_s == pytest.approx(0.5)
    assert r.tpot_s == pytest.approx((1.5 - 1.3) / 2)
    assert r.itl_s == pytest.approx([0.05, 0.1])
    failed = loadgen.RequestRecord(0.0, 0.0, (), 1.0, 0, "HTTP 500: boom")
    assert not failed.ok and np.isnan(failed.ttft_s)


def test_percentiles_goodput_and_throughput_of_known_records():
    records = tuple(
        loadgen.RequestRecord(0.0, 0.0, (t, t + 0.01), t + 0.01, 2) for t in np.arange(1, 11) / 100
    )
    result = loadgen.LoadResult(records, "open", rate_per_s=10.0)
    assert result.percentile_ms("ttft", 50) == pytest.approx(55.0)
    assert result.percentile_ms("ttft", 90) == pytest.approx(91.0)
    assert result.percentile_ms("tpot", 99) == pytest.approx(10.0)
    assert result.span_s == pytest.approx(0.11)
    assert result.goodput(ttft_ms=50, tpot_ms=20) == pytest.approx(5 / 0.11)
    assert result.goodput(ttft_ms=50, tpot_ms=5) == 0
    assert result.output_tokens_per_s == pytest.approx(20 / 0.11)
    assert "time to first token" in result.table()


@pytest.mark.timing
def test_percentiles_match_the_scripted_delays():
    ttfts = np.arange(1, 11) * 100.0  # 100 ... 1000 ms, one request each; the answer takes 200 ms more
    prompts = [f"ttft={t:g} gap=50 tokens=5" for t in ttfts]
    with ScriptedServer() as server:
        loadgen.run_load(server.base_url, ["ttft=1 tokens=1"], users=1, progress=False)  # Python warmed up
        result = loadgen.run_load(server.base_url, prompts, users=10, max_tokens=5, progress=False)
    assert len(result.ok) == 10
    for q in (50, 90, 99):
        expected = np.percentile(ttfts, q)
        assert expected <= result.percentile_ms("ttft", q) <= expected + 100, q  # a shared machine's noise
    assert 45 <= result.percentile_ms("tpot", 50) <= 80
    assert 45 <= result.percentile_ms("itl", 50) <= 80
    assert 300 <= result.percentile_ms("e2e", 0) <= 400
    assert result.ok[0].output_tokens == 5


@pytest.mark.timing
def test_open_loop_shows_the_queue_that_a_closed_loop_hides():
    prompts = ["ttft=40 gap=5 tokens=3"]  # 50 ms per request, one at a time: at most 20 requests/s
    with ScriptedServer(workers=1) as server:
        opened = loadgen.run_load(server.base_url, prompts, rate_per_s=40, n_requests=16, progress=False)
        closed = loadgen.run_load(server.base_url, prompts, users=1, n_requests=8, progress=False)
    assert closed.percentile_ms("ttft", 99) < 100
    assert opened.percentile_ms("ttft", 99) > 3 * closed.percentile_ms("ttft", 99)
    assert opened.mode == "open" and closed.mode == "closed"


def test_chat_endpoint_and_a_trace_of_arrivals():
    with ScriptedServer(ttft_ms=5, gap_ms=1, tokens=3) as server:
        result = loadgen.run_load(
            server.base_url,
            ["hello"],
            arrivals_s=[0.0, 0.01, 0.02],
            endpoint="chat",
            progress=False,
            label="chat",
        )
    assert len(result.ok) == 3 and result.ok[0].output_tokens == 3
    assert "chat: open loop, a trace" in result.table()


def test_a_dead_server_fails_the_run_with_the_error_and_calls_check():
    calls = []
    with pytest.raises(loadgen.LoadFailed, match="all 2 requests .* failed; the first: Connect"):
        loadgen.run_load(
            "http://127.0.0.1:9/v1",
            ["x"],
            users=1,
            n_requests=2,
            progress=False,
            check=lambda: calls.append(1),
        )
    assert calls == [1]


def test_a_request_that_takes_too_long_is_a_timeout():
    with (
        ScriptedServer(ttft_ms=2000, tokens=1) as server,
        pytest.raises(loadgen.LoadFailed, match="timed out"),
    ):
        loadgen.run_load(server.base_url, ["x"], users=1, n_requests=1, timeout_s=0.2, progress=False)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"rate_per_s": 1, "users": 1}, "exactly one"),
        ({"rate_per_s": -1}, "rate_per_s"),
        ({"users": 0}, "users"),
        ({"arrivals_s": [1.0, 0.5]}, "arrivals_s"),
        ({"users": 1, "max_tokens": float("nan")}, "max_tokens"),
        ({"users": 1, "endpoint": "embeddings"}, "endpoint"),
    ],
)
def test_bad_input_is_named(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        loadgen.run_load("http://127.0.0.1:9/v1", ["x"], progress=False, **kwargs)
    with pytest.raises(ValueError, match="prompts"):
        loadgen.run_load("http://127.0.0.1:9/v1", [], users=1)


def test_plot_and_comparison_table():
    records = tuple(loadgen.RequestRecord(0.0, 0.0, (0.1, 0.12), 0.12, 2) for _ in range(3))
    runs = {"a": loadgen.LoadResult(records, "closed", users=2)}
    assert loadgen.plot_latency_cdfs(runs, "itl") is not None
    table = loadgen.comparison_table(runs, ttft_ms=200, tpot_ms=50)
    assert "goodput" in table and "a" in table
