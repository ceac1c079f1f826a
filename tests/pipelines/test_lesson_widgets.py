"""Lessons 1-3 sliders: each explorer is wired to its pure function; moving a control re-runs it."""

import pytest

from hwopt import widgets
from hwopt.cost import batching, costs, paging, serving
from hwopt.experiments import decode
from hwopt.machine import bench


@pytest.fixture
def shown(monkeypatch):
    out = []
    monkeypatch.setattr(widgets, "display", out.append)
    return out


def test_cost_explorer_follows_the_controls(shown, capsys):
    box = costs.cost_explorer()
    assert set(box.controls) == {"params", "batch_size", "precision"}
    box.controls["precision"].value = "int4"
    box.controls["batch_size"].value = 64
    text = capsys.readouterr().out
    assert "batch 64, int4" in text and "<- best" in text
    assert len(shown) == 3  # one figure per run: initial, precision, batch
    box.controls["params"].value = 1e11
    box.controls["precision"].value = "fp32"  # 400 GB of weights: nothing priced holds it
    assert "No priced chip" in capsys.readouterr().out


def test_speed_explorer_offers_the_measured_machine(shown, capsys):
    box = decode.speed_explorer(measured_bandwidth_gbs=20.0)
    assert box.controls["chip"].value == "this machine"
    box.controls["precision"].value = "int4_g32"
    text = capsys.readouterr().out.splitlines()
    assert "0.625 B/weight incl. scales" in text[-2]
    assert "at most 4.6 tokens/s" in text[-1]  # 20 GB/s / (7e9 x 0.625 B = 4.375 GB)
    box.controls["chip"].value = "NVIDIA H100 SXM"
    assert "3,350 GB/s" in capsys.readouterr().out
    with pytest.raises(ValueError, match="measured_bandwidth_gbs"):
        decode.speed_explorer(measured_bandwidth_gbs=0.0)


def test_budget_explorer_marks_the_best_batch(shown, capsys):
    m = [bench.Measurement(f"batch {b}", (t / 1e3,)) for b, t in ((1, 1.0), (8, 2.0), (64, 10.0))]
    sweep = batching.BatchSweep((1, 8, 64), tuple(m))
    box = batching.budget_explorer(sweep)
    box.controls["budget_ms"].value = 2.5
    assert "largest batch that fits = 8" in capsys.readouterr().out.splitlines()[-1]
    box.controls["budget_ms"].value = 0.6
    assert "nothing fits" in capsys.readouterr().out


def test_serving_explorer_reports_both_policies(shown, capsys):
    box = serving.serving_explorer(2.0, 0.1)
    box.controls["max_batch_size"].value = 1
    text = capsys.readouterr().out
    assert "dynamic batching (max 1" in text and "one request at a time" in text
    box.controls["arrival_rate_per_s"].value = 100.0
    assert "p99" in capsys.readouterr().out
    with pytest.raises(ValueError, match="per_item_ms"):
        serving.serving_explorer(0.0, 0.0)  # batches that cost nothing


def test_serving_explorer_starts_within_its_slider_when_items_cost_more_than_the_overhead(shown):
    rate = serving.serving_explorer(0.1, 2.0).controls["arrival_rate_per_s"]  # one at a time 476/s, max 500
    assert 10**rate.min <= rate.value <= 10**rate.max * (1 + 1e-9)  # a log slider's bounds are exponents


def test_paging_explorer_recounts_the_sequences_on_every_control(shown, capsys):
    box = paging.paging_explorer(131072.0, n_requests=500)  # Llama-3-8B's fp16 KV bytes per token
    first = capsys.readouterr().out
    assert "contiguous" in first and "paged" in first and len(shown) == 1
    box.controls["memory_gb"].value = 2.0
    box.controls["max_len"].value = 16384
    text = capsys.readouterr().out
    assert text != first and "16,384 held tokens" not in text and len(shown) == 3
    box.controls["block_size"].value = 1
    paged = [line for line in capsys.readouterr().out.splitlines() if line.startswith("paged")]
    assert paged and " 0% wasted" in paged[-1]  # blocks of one token waste nothing


def test_chunked_prefill_explorer_reruns_both_schedules(shown, capsys):
    requests = serving.mixed_requests(100, 20.0, 16, 1000, 0.2, 16.0, seed=0)
    box = serving.chunked_prefill_explorer(1.0, 0.05, requests, max_batch_size=8, kv_read_per_seq_ms=0.2)
    box.controls["chunk_tokens"].value = 32
    text = capsys.readouterr().out
    assert "whole prompts" in text and "chunks of 32 tokens" in text and len(shown) == 2
