"""models.tiny_decoder: KV-cached decode matches a full forward pass (the oracle); bytes; tokens/s."""

import pytest
import torch

from hwopt.experiments import decode_speed
from hwopt.kernels import lowbit_gemv
from hwopt.machine import bench
from hwopt.models import tiny_decoder as td

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
    rate, m = decode_speed.measure_decode(model, prompt_len=4, new_tokens=4, repeats=1)
    assert rate > 0 and m.repeats == 1
    expected = 10e9 / td.weight_bytes_per_token(model)
    assert decode_speed.estimated_tokens_per_s(model, 10.0) == pytest.approx(expected)
    with pytest.raises(ValueError, match="bandwidth_gbs"):
        decode_speed.estimated_tokens_per_s(model, 0.0)


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
    syncs = []
    monkeypatch.setattr(bench, "resolve_device", lambda device="auto": "cuda")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: syncs.append(1))
    real_randint = torch.randint
    monkeypatch.setattr(torch, "randint", lambda *a, device=None, **k: real_randint(*a, **k))
    rate, m = decode_speed.measure_decode(model, prompt_len=3, new_tokens=3, device="cuda", repeats=1)
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
    bound = decode_speed.estimated_tokens_per_s(model, 20.0, context_len=10)  # weights + K and V of 10 tokens
    report = decode_speed.bound_report(model, bound * fraction_of_bound, 20.0, context_len=10)
    assert says in report and f"bound / measured = {1 / fraction_of_bound:.2f}" in report
    kv_share = td.kv_bytes_read(model, 10) / td.weight_bytes_per_token(model)
    assert f"{kv_share:.1%} of the weight bytes" in report
    assert "KV cache" not in decode_speed.bound_report(model, bound, 20.0)
    long = decode_speed.bound_report(model, bound, 20.0, context_len=400)  # its KV outgrows its weights
    short = decode_speed.bound_report(model, bound, 20.0, context_len=1)
    assert "would leave out" in long and "the weights are what" in short
    with pytest.raises(ValueError, match="measured_tokens_per_s"):
        decode_speed.bound_report(model, 0.0, 20.0)


needs_kernel = pytest.mark.skipif(lowbit_gemv.unavailable_reason() is not None, reason="C kernel unavailable")


@needs_kernel
def test_decode_steps_in_the_c_kernel_match_torch():
    """The same model decoding a step in C (one lowbit_decoder_step call) and in torch: the same logits and
    caches (to fp32 rounding)."""
    model = td.make_tiny_decoder(vocab_size=64, d_model=64, n_layers=2, n_heads=4, seed=1, kernel="c")
    prompt = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(1))
    assert model.kernel == "c" and all(b.kernel == "c" for b in model.blocks)
    threads = torch.get_num_threads()
    assert "C kernel's decoder step" in model.gemv_runner()
    with torch.inference_mode():
        _, caches = model(prompt)
        c_logits, c_caches = model(prompt[:, -1:], caches, start=5)
        model.kernel = "torch"
        torch_logits, torch_caches = model(prompt[:, -1:], caches, start=5)
    assert model.gemv_runner().startswith("torch")
    torch.testing.assert_close(c_logits, torch_logits, rtol=1e-4, atol=1e-4)
    assert torch.get_num_threads() == threads
    for (ck, cv), (tk, tv) in zip(c_caches, torch_caches, strict=True):  # one (K, V) per layer, as before
        torch.testing.assert_close(ck, tk, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(cv, tv, rtol=1e-4, atol=1e-4)


@needs_kernel
def test_a_step_leaves_to_torch_what_the_c_step_would_skip():
    """A hooked module keeps its hook (each GEMV then goes to C alone), a token out of range gets torch's
    error, and several steps in C decode what the full forward pass predicts."""
    model = td.make_tiny_decoder(vocab_size=64, d_model=64, n_layers=2, n_heads=4, seed=2, kernel="c")
    prompt = torch.randint(0, 64, (1, 4), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        _, caches = model(prompt)
        plain, _ = model(prompt[:, -1:], caches, start=4)
        seen = []
        hook = model.blocks[1].up.register_forward_hook(lambda m, args, out: seen.append(out.shape))
        assert "one call per Linear" in model.gemv_runner()
        hooked, _ = model(prompt[:, -1:], caches, start=4)
        hook.remove()
        for token, start in ((64, 4), (1, -1)):  # a token, or a position, out of range
            with pytest.raises(IndexError):
                model(torch.tensor([[token]]), caches, start=start)
    assert seen == [(1, 1, 256)] and "decoder step" in model.gemv_runner()
    torch.testing.assert_close(hooked, plain, rtol=1e-4, atol=1e-4)
    out = td.generate(model, prompt, new_tokens=6)
    with torch.inference_mode():
        full, _ = model(out[:, :-1])
    assert torch.equal(full.argmax(-1)[:, 3:], out[:, 4:])


@needs_kernel
def test_project_leaves_batches_and_autograd_to_torch(model):
    layer = model.blocks[0].up
    x = torch.randn(1, 1, 32)
    with torch.inference_mode():
        y = td.project(layer, x, "c")
    torch.testing.assert_close(y, layer(x).detach(), rtol=1e-5, atol=1e-5)
    assert td.project(layer, x, "c").requires_grad  # with autograd on: torch's Linear, gradients flow
    with torch.inference_mode():
        batch = torch.randn(3, 1, 32)
        torch.testing.assert_close(td.project(layer, batch, "c"), layer(batch))  # several vectors: torch


def test_kernel_choice_is_checked(model, monkeypatch):
    with pytest.raises(ValueError, match="kernel"):
        td.make_tiny_decoder(vocab_size=50, d_model=32, n_layers=1, n_heads=4, kernel="cuda")
    monkeypatch.setattr(td, "_c_kernel", lambda: "no C compiler found (tried cc)")
    with pytest.raises(lowbit_gemv.KernelUnavailable, match="no C compiler"):
        model.kernel = "c"
    model.kernel = "auto"  # where the C kernel does not build, auto is torch
    assert model.gemv_runner().startswith("torch")


def test_decode_bytes_read_count_weights_and_the_growing_kv(model):
    weights, kv_per_token = td.weight_bytes_per_token(model), td.kv_bytes_read(model, 1)
    # steps at 4, 5 and 6 past tokens: three times the weights, 15 tokens' K and V
    assert decode_speed.decode_bytes_read(model, 4, 4) == 3 * weights + 15 * kv_per_token
    steps = decode_speed.decode_steps(model, prompt_len=4, new_tokens=4)
    assert steps().shape == (1, 1)
    with pytest.raises(ValueError, match="new_tokens"):
        decode_speed.decode_bytes_read(model, 4, 1)


@needs_kernel
def test_compare_kernels_times_both_and_keeps_the_models_choice(model):
    model.kernel = "torch"
    text = decode_speed.compare_kernels(model, 20.0, prompt_len=3, new_tokens=3, repeats=1)
    assert "C kernel step" in text and "torch " in text and "of the bound" in text
    assert "x faster than torch" in text or "slower" in text
    assert model.kernel == "torch"  # put back as it was
    model.kernel = "auto"


def test_compare_kernels_says_why_there_is_nothing_to_compare(model, monkeypatch):
    monkeypatch.setattr(lowbit_gemv, "unavailable_reason", lambda: "no C compiler found (tried cc)")
    assert "not available here (no C compiler" in decode_speed.compare_kernels(model, 20.0)
    with pytest.raises(ValueError, match="bandwidth_gbs"):
        decode_speed.compare_kernels(model, 0.0)


def test_gemvs_alone_run_every_linear_once_a_token(model, monkeypatch):
    calls = []
    real = td.project
    monkeypatch.setattr(td, "project", lambda layer, x, kernel="auto": calls.append(layer) or real(layer, x))
    out = decode_speed.gemvs_alone(model, tokens=2)()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert calls == linears * 2 and out.shape == (1, 1, 50)  # the head comes last
    with pytest.raises(ValueError, match="tokens"):
        decode_speed.gemvs_alone(model, 0)
