"""experiments.attention: naive, fused (SDPA) and tiled attention agree; score bytes; measured peak memory."""

import pytest
import torch

from hwopt.experiments import attention as at
from hwopt.machine import bench

pytestmark = pytest.mark.filterwarnings("ignore::hwopt.machine.bench.NoisyMeasurementWarning")


@pytest.mark.parametrize(("seq_len", "block"), [(1, 4), (37, 8), (64, 16), (100, 256)])
def test_tiled_equals_naive_equals_sdpa(seq_len, block):
    q, k, v = at.attention_inputs(seq_len, n_heads=2, head_dim=8, batch=2, seed=seq_len)
    naive = at.naive_attention(q, k, v)
    assert torch.allclose(at.tiled_attention(q, k, v, block=block), naive, atol=1e-5)
    assert torch.allclose(at.sdpa(q, k, v), naive, atol=1e-5)


def test_tiling_survives_scores_that_overflow_a_plain_exp():
    """The online softmax subtracts the running maximum: scores near 1e3 must not become inf / inf."""
    q, k, v = at.attention_inputs(48, n_heads=1, head_dim=4)
    q = q * 200
    out = at.tiled_attention(q, k, v, block=16)
    assert torch.isfinite(out).all() and torch.allclose(out, at.naive_attention(q, k, v), atol=1e-4)


def test_every_variant_matches_the_float64_oracle():
    errors = at.max_abs_difference(*at.attention_inputs(70, n_heads=2, head_dim=16))
    assert set(errors) == {"naive", "sdpa", "tiled"} and max(errors.values()) < 1e-5


def test_score_matrix_bytes():
    assert at.score_matrix_bytes(4096, 4) == 4 * 4096 * 4096 * 4  # 268 MB
    assert at.score_matrix_bytes(1024, 8, batch=2, bytes_per_element=2) == 2 * 8 * 1024**2 * 2
    assert at.predicted_naive_extra_s(1000, 1, 10.0) == pytest.approx(at.SCORE_PASSES * 4e6 / 1e10)
    assert at.predicted_naive_extra_s(1000, 1, 10.0, fresh_gbs=1.0) == pytest.approx(
        at.SCORE_PASSES * 4e6 / 1e10 + at.SCORE_BUFFERS * 4e6 / 1e9)


def test_peak_memory_sees_the_score_matrix_only_in_naive_attention():
    n, h = 1024, 2
    q, k, v = at.attention_inputs(n, n_heads=h, head_dim=16)
    scores = at.score_matrix_bytes(n, h)
    naive = at.peak_memory_bytes(lambda: at.naive_attention(q, k, v))
    assert at.SCORE_BUFFERS * scores <= naive < (at.SCORE_BUFFERS + 0.5) * scores
    assert at.peak_memory_bytes(lambda: at.tiled_attention(q, k, v, block=128)) < 0.2 * scores
    assert at.peak_memory_bytes(lambda: at.sdpa(q, k, v)) < 0.2 * scores


def test_peak_memory_on_cuda_reads_the_allocator(monkeypatch):
    """The CUDA branch: max_memory_allocated after a reset, minus what was allocated before (faked here)."""
    calls = []
    monkeypatch.setattr(bench, "resolve_device", lambda device="auto": "cuda")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 1000)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 5000)
    assert at.peak_memory_bytes(lambda: calls.append("fn"), "cuda") == 4000
    assert calls == ["sync", "reset", "fn", "sync"]


def test_measure_report_and_plot():
    points = at.measure_attention([64, 128], n_heads=2, head_dim=8, variants=["naive", "sdpa", "tiled"],
                                  repeats=2)
    assert [p.seq_len for p in points] == [64, 128] and points[1].score_bytes == 2 * 128 * 128 * 4
    table = at.attention_table(points, 20.0, fresh_gbs=2.0)
    assert table.splitlines()[0].split()[:3] == ["N", "scores", "MB"] and len(table.splitlines()) == 3
    assert at.attention_sentence(points).startswith("At N = 128:")
    assert at.plot_attention(points) is not None
    with pytest.raises(ValueError, match="variants"):
        at.measure_attention([64], variants=["sdpa"])
    fresh_gbs = at.fresh_memory_gbs(1 << 20, repeats=2)  # None where the timing is too noisy to tell
    assert fresh_gbs is None or fresh_gbs > 0


def test_mismatched_shapes_are_refused():
    q, k, v = at.attention_inputs(8, n_heads=2, head_dim=4)
    with pytest.raises(ValueError, match="head_dim"):
        at.naive_attention(q, k[..., :2], v)
    with pytest.raises(ValueError, match="q must be"):
        at.sdpa(q[0], k, v)
