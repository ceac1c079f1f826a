"""The trained draft's KV cache in fewer bits: what the attention reads is rounded, top-1 agreement falls with
the bits, and the bytes count the scales."""

import pytest
import torch

from hwopt.experiments import llm_accuracy, llm_kv_cache

SHORT = {"seq_len": 128, "max_windows": 2, "progress": False, "cache": False}


def test_bytes_per_cached_number_include_the_scales():
    assert llm_kv_cache.kv_bytes_per_value("fp16", 64) == 2.0
    assert llm_kv_cache.kv_bytes_per_value("int8", 64) == pytest.approx(1 + 4 / 64)
    assert llm_kv_cache.kv_bytes_per_value("int4", 64, "per-channel") == pytest.approx(
        0.5 + (4 / 128 + 4 / 64) / 2)


def test_the_keys_and_values_attention_reads_are_rounded():
    net = llm_accuracy.load("draft")[0]
    rounded = llm_kv_cache.quantized_kv(net, "int4", "per-token")
    seen = {}
    rounded.layers[0].self_attn.k_proj.register_forward_hook(lambda m, a, out: seen.setdefault("k", out))
    rounded(torch.arange(40).view(1, 40))
    heads = seen["k"].view(1, 40, -1, 64)
    assert all(len(torch.unique(v)) <= 15 for v in heads.reshape(-1, 64))  # a symmetric int4 grid per vector
    assert not net.layers[0].self_attn.k_proj._forward_hooks  # the original is untouched


def test_top1_agreement_falls_with_the_cache_bits():
    full = llm_accuracy.evaluate("draft", "fp32", **SHORT)
    rows = [llm_kv_cache.evaluate_kv("draft", p, **SHORT) for p in ("fp16", "int8", "int4")]
    fp16, int8, int4 = (r["perplexity"] for r in rows)
    assert fp16 == pytest.approx(full["perplexity"], rel=1e-4)
    assert abs(int8 / full["perplexity"] - 1) < 0.01 and int4 != int8
    assert rows[2]["top1_agreement"] < rows[1]["top1_agreement"] <= rows[0]["top1_agreement"]
    table = llm_kv_cache.kv_table(rows)
    assert "KV int4 K per-token" in table and "the first 2 windows of 128 tokens" in table
