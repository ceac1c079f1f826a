"""experiments.tiny_decoder: KV-cached decode matches a full forward pass (the oracle); bytes; tokens/s."""

import pytest
import torch

from hwopt.experiments import tiny_decoder as td

pytestmark = pytest.mark.filterwarnings("ignore::hwopt.machine.bench.NoisyMeasurementWarning")


@pytest.fixture(scope="module")
def model():
    return td.make_tiny_decoder(vocab_size=50, d_model=32, n_layers=2, n_heads=4, seed=0)


def test_forward_shapes(model):
    logits, caches = model(torch.zeros(2, 5, dtype=torch.long))
    assert logits.shape == (2, 5, 50) and len(caches) == 2
    assert caches[0][0].shape == (2, 4, 5, 8)


def test_cached_decode_matches_full_forward(model):
    prompt = torch.randint(0, 50, (1, 6), generator=torch.Generator().manual_seed(0))
    out = td.generate(model, prompt, new_tokens=5)
    assert out.shape == (1, 11) and torch.equal(out[:, :6], prompt)
    with torch.inference_mode():
        full, _ = model(out[:, :-1])
    # greedy choice at every position after the prompt, recomputed without any cache, agrees
    assert torch.equal(full.argmax(-1)[:, 5:], out[:, 6:])


def test_causal_mask_makes_the_prefix_independent_of_later_tokens(model):
    a = torch.tensor([[1, 2, 3, 4]])
    b = torch.tensor([[1, 2, 3, 9]])
    with torch.inference_mode():
        la, _ = model(a)
        lb, _ = model(b)
    assert torch.allclose(la[:, :3], lb[:, :3], atol=1e-5)


def test_weight_bytes_exclude_the_embedding_tables(model):
    total = sum(p.numel() * 4 for p in model.parameters())
    embeddings = (50 + 512) * 32 * 4
    assert td.weight_bytes_per_token(model) == total - embeddings


def test_tokens_per_s_measured_and_estimated(model):
    rate, m = td.measure_decode(model, prompt_len=4, new_tokens=4, repeats=1)
    assert rate > 0 and m.repeats == 1
    assert td.estimated_tokens_per_s(model, 10.0) == pytest.approx(10e9 / td.weight_bytes_per_token(model))
    with pytest.raises(ValueError, match="bandwidth_gbs"):
        td.estimated_tokens_per_s(model, 0.0)


def test_bad_input(model):
    with pytest.raises(ValueError, match="d_model"):
        td.TinyDecoder(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="n_layers"):
        td.TinyDecoder(n_layers=0)
    with pytest.raises(ValueError, match="new_tokens"):
        td.generate(model, torch.zeros(1, 2, dtype=torch.long), 0)
    with pytest.raises(ValueError, match="tokens"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 600, dtype=torch.long))
    _, caches = model(torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="length"):
        td.truncate_caches(caches, 3)


def test_several_tokens_after_a_cache_match_the_full_forward(model):
    """Speculative verification feeds k tokens after a cache: the mask lets each see the past and itself."""
    assert td.causal_mask_after(2, 2).tolist() == [[True, True, True, False], [True, True, True, True]]
    tokens = torch.tensor([[3, 1, 4, 1, 5, 9]])
    with torch.inference_mode():
        _, caches = model(tokens[:, :2])
        several, _ = model(tokens[:, 2:], caches, start=2)
        full, _ = model(tokens)
        _, longer = model(tokens[:, :4])
    assert torch.allclose(several, full[:, 2:], atol=1e-5)
    kept = td.truncate_caches(longer, 2)
    assert all(torch.allclose(k, c[0], atol=1e-5) and torch.allclose(v, c[1], atol=1e-5)
               for (k, v), c in zip(kept, caches, strict=True))


def test_tokens_per_s_cuda_path_synchronises_on_cpu(model, monkeypatch):
    """The GPU branch (device placement, synchronised timing) runs with a fake 'cuda' mapped to the CPU."""
    from hwopt.machine import bench

    syncs = []
    monkeypatch.setattr(bench, "resolve_device", lambda device="auto": "cuda")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: syncs.append(1))
    real_randint = torch.randint
    monkeypatch.setattr(torch, "randint", lambda *a, device=None, **k: real_randint(*a, **k))
    rate, m = td.measure_decode(model, prompt_len=3, new_tokens=3, device="cuda", repeats=1)
    assert rate > 0 and m.device == "cuda" and syncs


def test_kv_bytes_read_match_the_cache_tensors(model):
    with torch.inference_mode():
        _, caches = model(torch.zeros(1, 7, dtype=torch.long))
    real = sum(t.numel() * t.element_size() for k, v in caches for t in (k, v))
    assert td.kv_bytes_read(model, 7) == real
    with pytest.raises(ValueError, match="context_len"):
        td.kv_bytes_read(model, -1)


@pytest.mark.parametrize("fraction_of_bound, says", [
    (1.5, "Faster than the bound"),
    (1.0, "At the bound"),
    (1 / 2.4, "2.4x below the bound: 58% of each step"),
])
def test_bound_report_prints_the_measured_ratio_and_its_meaning(model, fraction_of_bound, says):
    bound = td.estimated_tokens_per_s(model, 20.0)
    report = td.bound_report(model, bound * fraction_of_bound, 20.0, context_len=10)
    assert says in report and f"bound / measured = {1 / fraction_of_bound:.2f}" in report
    kv_share = td.kv_bytes_read(model, 10) / td.weight_bytes_per_token(model)
    assert f"{kv_share:.1%} of the weight bytes" in report
    assert "KV cache" not in td.bound_report(model, bound, 20.0)
    long = td.bound_report(model, bound, 20.0, context_len=400)  # this small model's KV outgrows its weights
    short = td.bound_report(model, bound, 20.0, context_len=1)
    assert "leaves out" in long and "the weights are what" in short
    with pytest.raises(ValueError, match="measured_tokens_per_s"):
        td.bound_report(model, 0.0, 20.0)
