"""The KV cache of the course's trained LLM stored in fewer bits, judged by validation perplexity and top-1
agreement with fp32 (lesson 8).

Every attention's keys and values are rounded to `kv_precision` as they are written, so every later query
reads the rounded ones: in a whole-window forward pass this is exactly what a cache stored in that format
gives. Keys are rounded before RoPE, as KVQuant does (a rotation mixes channel pairs and blurs the channels
a per-channel scale relies on); values as they leave v_proj. Scales: 'per-token' gives every token's vector of
head_dim its own (what prefill_decode.quantize_kv does, what engines' fp8/int8 caches do); 'per-channel' gives
K one scale per channel over each group of CHANNEL_GROUP tokens (KIVI's layout; values stay per token, as
KIVI keeps them). Formats of 16 bits are a cast. Weights stay fp32: only the cache changes.
"""

from __future__ import annotations

import copy

import torch

from hwopt import arguments, formats, quantization
from hwopt.cost import footprint
from hwopt.experiments import llm_accuracy, prefill_decode
from hwopt.models import checkpoint
from hwopt.models.llama import Llama

__all__ = ["KEY_SCALES", "CHANNEL_GROUP", "quantized_kv", "kv_bytes_per_value", "evaluate_kv", "kv_table"]

KEY_SCALES = ("per-token", "per-channel")
CHANNEL_GROUP = 128  # tokens sharing a per-channel key scale (KIVI's group); the last group may be shorter


def _round_keys_per_channel(k: torch.Tensor, fmt: formats.Format) -> torch.Tensor:
    """k (batch, seq, heads, head_dim) with a scale per (batch, head, channel) and group of tokens."""
    groups = [quantization.fake_quantize(part, fmt, per_channel=True, axis=1)
              for part in k.split(CHANNEL_GROUP, dim=1)]
    return torch.cat(groups, dim=1)


def _rounder(fmt: formats.Format, head_dim: int, per_channel: bool):
    def hook(module, args, output):
        b, s, width = output.shape
        heads = output.view(b, s, width // head_dim, head_dim)
        if fmt.bits >= 16 or not per_channel:
            rounded = prefill_decode.quantize_kv(heads, fmt.name)
        else:
            rounded = _round_keys_per_channel(heads, fmt)
        return rounded.reshape(b, s, width)
    return hook


def quantized_kv(net: Llama, kv_precision: str = "int8", key_scales: str = "per-token") -> Llama:
    """A copy of net whose attention keys and values are rounded to kv_precision as they are written
    (key_scales: one of KEY_SCALES)."""
    arguments.instance("net", net, Llama)
    fmt = formats.get(kv_precision, "kv_precision", footprint.KV_PRECISIONS)
    arguments.one_of("key_scales", key_scales, KEY_SCALES)
    out = copy.deepcopy(net)
    head_dim = out.config.dim_per_head
    for block in out.layers:
        attention = block.self_attn
        attention.k_proj.register_forward_hook(_rounder(fmt, head_dim, key_scales == "per-channel"))
        attention.v_proj.register_forward_hook(_rounder(fmt, head_dim, False))
    return out


def kv_bytes_per_value(kv_precision: str, head_dim: int, key_scales: str = "per-token") -> float:
    """Bytes per cached number, scales included: an fp32 scale per vector of head_dim (per-token), or per
    channel and group of CHANNEL_GROUP tokens for K (per-channel; V stays per token): the mean of K and V."""
    fmt = formats.get(kv_precision, "kv_precision", footprint.KV_PRECISIONS)
    head_dim = arguments.count("head_dim", head_dim, "dimension")
    arguments.one_of("key_scales", key_scales, KEY_SCALES)
    value = fmt.bits / 8
    if fmt.bits >= 16:
        return value
    per_token = value + 4 / head_dim
    key = value + 4 / CHANNEL_GROUP if key_scales == "per-channel" else per_token
    return (key + per_token) / 2


def evaluate_kv(model="target", kv_precision: str = "int8", key_scales: str = "per-token", **options) -> dict:
    """llm_accuracy.evaluate_variant of quantized_kv(net, kv_precision, key_scales): validation perplexity and
    top-1 agreement with fp32, plus kv_precision, key_scales and kv_bytes_per_value (options: seq_len,
    max_windows, ... as llm_accuracy.evaluate's; bytes_per_weight is the weights', fp32)."""
    fmt = formats.get(kv_precision, "kv_precision", footprint.KV_PRECISIONS)
    arguments.one_of("key_scales", key_scales, KEY_SCALES)
    variant = f"KV {fmt.name}" + (f" K {key_scales}" if fmt.bits < 16 else "")
    key = variant + (f" group={CHANNEL_GROUP}" if key_scales == "per-channel" and fmt.bits < 16 else "")
    result = llm_accuracy.evaluate_variant(
        model, key, lambda net: (quantized_kv(net, fmt.name, key_scales), 4.0), **options)
    head_dim = checkpoint.read_config(checkpoint.resolve(model)).dim_per_head
    return {**result, "variant": variant, "kv_precision": fmt.name, "key_scales": key_scales,
            "kv_bytes_per_value": kv_bytes_per_value(fmt.name, head_dim, key_scales)}


def kv_table(rows: list[dict]) -> str:
    """A table of evaluate_kv's results: format, K scales, bytes per cached number, perplexity (and its change
    from the first row), top-1 agreement; the slice of text they come from."""
    arguments.instance("rows", rows, (list, tuple))
    keys = {"variant", "kv_bytes_per_value", "perplexity", "top1_agreement"}
    if not rows or not all(isinstance(r, dict) and keys <= set(r) for r in rows):
        raise ValueError("rows must be a non-empty list of evaluate_kv results")
    base = rows[0]["perplexity"]
    lines = [f"{'KV cache':<26}{'B/value':>8}{'perplexity':>12}{'change':>9}{'top-1':>8}"]
    lines += [f"{r['variant']:<26}{r['kv_bytes_per_value']:>8.3f}{r['perplexity']:>12.3f}"
              f"{r['perplexity'] / base - 1:>+9.2%}{r['top1_agreement']:>8.1%}" for r in rows]
    lines.append(f"on {llm_accuracy.describe_slice(list(rows))}")
    return "\n".join(lines)
