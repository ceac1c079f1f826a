"""The LLaMA module: prefill and decode via the KV cache equal a full pass; greedy generation; bad input."""

import pytest
import torch

from hwopt.models.llama import KVCache, Llama, LlamaConfig

SMALL = LlamaConfig(vocab_size=300, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden=128,
                    max_seq_len=64)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Llama(SMALL).eval()


def test_prefill_then_decode_through_the_cache_equals_one_full_pass(model):
    tokens = torch.randint(0, SMALL.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache(batch_size=2)
        steps = [model(tokens[:, :10], cache), model(tokens[:, 10:14], cache)]  # a prompt, a verified draft
        steps += [model(tokens[:, i:i + 1], cache) for i in range(14, 24)]
    assert cache.length == 24
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_truncate_forgets_rejected_tokens(model):
    tokens = torch.randint(0, SMALL.vocab_size, (1, 12), generator=torch.Generator().manual_seed(2))
    other = torch.randint(0, SMALL.vocab_size, (1, 3), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        cache = model.new_cache()
        model(tokens[:, :8], cache)
        model(other, cache)  # a draft the target rejects
        cache.truncate(8)
        after = model(tokens[:, 8:], cache)
        full = model(tokens)
    torch.testing.assert_close(after, full[:, 8:], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="length"):
        cache.truncate(13)


def test_generate_greedy_is_the_argmax_of_each_full_pass(model):
    prompt = torch.tensor([[5, 17, 42]])
    out = model.generate(prompt, 6)
    tokens = prompt
    with torch.no_grad():
        for _ in range(6):
            tokens = torch.cat([tokens, model(tokens)[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(out, tokens)
    sampled = model.generate(prompt, 6, temperature=1.0, seed=3)
    assert torch.equal(sampled, model.generate(prompt, 6, temperature=1.0, seed=3))


def test_grouped_query_attention_and_tied_embeddings_set_the_parameter_count(model):
    d, kv, hidden, layers, vocab = 64, 2 * 16, 128, 2, 300
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * hidden + 2 * d
    assert model.parameter_count() == vocab * d + layers * per_layer + d
    assert model.lm_head.weight is model.embed_tokens.weight


def test_bad_shapes_and_lengths_are_refused(model):
    with pytest.raises(ValueError, match="tokens"):
        model(torch.zeros(5, dtype=torch.int64))
    with pytest.raises(ValueError, match="positions"):
        model(torch.zeros(1, 65, dtype=torch.int64))
    with pytest.raises(ValueError, match="n_heads"):
        LlamaConfig(n_heads=6, n_kv_heads=4)
    with pytest.raises(ValueError, match="max_len"):
        KVCache(SMALL, max_len=0)


def test_runs_in_bf16(model):
    tokens = torch.randint(0, SMALL.vocab_size, (1, 16), generator=torch.Generator().manual_seed(4))
    half = Llama(SMALL).eval()
    half.load_state_dict(model.state_dict())
    with torch.no_grad():
        low = half.to(torch.bfloat16)(tokens).float()
        full = model(tokens)
    assert (low.argmax(-1) == full.argmax(-1)).float().mean() > 0.8
