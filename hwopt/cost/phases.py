"""Prefill and decode (lesson 8): FLOPs, bytes, arithmetic intensity and roofline time of each phase.

One request is a prefill (the whole prompt of P tokens in one pass: every weight is read once and used P
times) and then decode steps (one new token per sequence, reading every weight and the whole KV cache).
FLOP count a multiply-add as 2; bytes are what must come from memory at least once (the roofline's traffic).
  matmul FLOP per token  = 2 * matmul parameters (every Linear layer and the output head; a MoE's chosen
                           experts only)
  prefill attention FLOP = 2 * n_layers * batch * P^2 * n_heads * head_dim (q.K^T and p.V, causal: half)
  prefill bytes          = matmul weights (a MoE's experts chosen by some token) + the KV cache written
  decode FLOP            = batch * (2 * active matmul parameters + attention over the context (roofline))
  decode bytes           = matmul weights read (a MoE's distinct experts only, cost.moe) + the KV cache read
                           (batch * context tokens, footprint.kv_cache_bytes) + q and outputs
Shapes are hwopt.cost.footprint.ModelShape (hwopt/data/model_shapes.csv); formats are hwopt.formats names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hwopt import arguments, formats, roofline
from hwopt.cost import footprint, moe


def matmul_params(shape: footprint.ModelShape) -> int:
    """Parameters a token multiplies by: all but the input embedding table (a lookup reads one row of it)."""
    arguments.instance("shape", shape, footprint.ModelShape)
    return shape.n_params - (0 if shape.tied_embeddings else shape.vocab_size * shape.d_model)


def active_matmul_params(shape: footprint.ModelShape) -> int:
    """Parameters one token multiplies by: matmul_params with only its chosen experts in a MoE."""
    return matmul_params(shape) - (shape.n_params - shape.active_params)


def kv_bytes_per_token(shape: footprint.ModelShape, kv_precision: str = "fp16") -> float:
    """Bytes of K and V one token of context adds to the cache, all layers (footprint.kv_cache_bytes)."""
    return footprint.kv_cache_bytes(shape, 1, 1, formats.get(kv_precision, argument="kv_precision").name)


@dataclass(frozen=True)
class PhaseCost:
    """Work and traffic of one phase (a prefill, or one decode step): FLOP, bytes, tokens produced."""

    phase: str
    flops: float
    bytes: float
    tokens: int  # tokens processed: the prompts' tokens (prefill), one per sequence (decode step)
    kv_bytes: float  # the KV cache's share of `bytes`

    def __post_init__(self):
        arguments.one_of("phase", self.phase, ("prefill", "decode"))
        arguments.positive("flops", self.flops)
        arguments.positive("bytes", self.bytes)
        arguments.count("tokens", self.tokens, "tokens")
        arguments.positive("kv_bytes", self.kv_bytes, allow_zero=True, maximum=self.bytes)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP/byte."""
        return self.flops / self.bytes

    def time_s(self, peak_flops: float, bandwidth_gbs: float) -> float:
        """Roofline time (s): the larger of FLOP / peak and bytes / bandwidth."""
        peak_flops = arguments.positive("peak_flops", peak_flops)
        bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
        return max(self.flops / peak_flops, self.bytes / (bandwidth_gbs * 1e9))

    def bound(self, peak_flops: float, bandwidth_gbs: float) -> str:
        """'memory' or 'compute': which roof bounds this phase (roofline.bound)."""
        return roofline.bound(self.intensity, peak_flops, bandwidth_gbs)

    def __str__(self) -> str:
        return (f"{self.phase}: {self.flops / 1e9:,.3g} GFLOP, {self.bytes / 1e6:,.4g} MB "
                f"({self.kv_bytes / self.bytes:.0%} KV cache), {self.intensity:,.3g} FLOP/byte")


def _check(shape, batch_size, precision, kv_precision) -> tuple[float, str]:
    arguments.instance("shape", shape, footprint.ModelShape)
    arguments.count("batch_size", batch_size, "batch")
    weight_format = formats.get(precision, argument="precision")
    return weight_format.bytes_per_weight, footprint.kv_precision_for(weight_format.name, kv_precision)


def prefill_cost(shape: footprint.ModelShape, prompt_len: int, batch_size: int = 1, precision: str = "fp16",
                 kv_precision: str | None = None) -> PhaseCost:
    """FLOP and bytes of the prefill of batch_size prompts of prompt_len tokens (weights in `precision`,
    KV cache in kv_precision, default: the activations' format)."""
    _, kv_fmt = _check(shape, batch_size, precision, kv_precision)
    prompt_len = arguments.count("prompt_len", prompt_len, "tokens")
    tokens = batch_size * prompt_len
    attention = 2.0 * shape.n_layers * batch_size * prompt_len**2 * shape.n_heads * shape.head_dim
    kv = footprint.kv_cache_bytes(shape, batch_size, prompt_len, kv_fmt)
    return PhaseCost("prefill", 2.0 * active_matmul_params(shape) * tokens + attention,
                     moe.weight_bytes_read(shape, tokens, precision) + kv, tokens, kv)


def decode_cost(shape: footprint.ModelShape, context_len: int, batch_size: int = 1, precision: str = "fp16",
                kv_precision: str | None = None) -> PhaseCost:
    """FLOP and bytes of one decode step of batch_size sequences, each attending to context_len tokens.

    Attention FLOP are counted over the whole context in every layer (an upper bound for sliding-window
    layers and for MLA, whose cache the KV bytes count exactly)."""
    _, kv_fmt = _check(shape, batch_size, precision, kv_precision)
    context_len = arguments.count("context_len", context_len, "tokens")
    per_value = formats.bytes_per_weight(kv_fmt)
    attn_flops, _ = roofline.flops_bytes_attention_decode(
        context_len, shape.head_dim, shape.n_heads, bytes_per_element=per_value, n_kv_heads=shape.n_kv_heads)
    kv = footprint.kv_cache_bytes(shape, batch_size, context_len, kv_fmt)
    q_and_out = batch_size * shape.n_layers * 2 * shape.n_heads * shape.head_dim * per_value
    flops = batch_size * (2.0 * active_matmul_params(shape) + shape.n_layers * attn_flops)
    traffic = moe.weight_bytes_read(shape, batch_size, precision) + kv + q_and_out
    return PhaseCost("decode", flops, traffic, batch_size, kv)


def decode_tokens_per_s_bound(shape: footprint.ModelShape, context_len: int, bandwidth_gbs: float,
                              batch_size: int = 1, precision: str = "fp16",
                              kv_precision: str | None = None) -> float:
    """Tokens/s of ONE sequence at most: bandwidth / (weight bytes + KV bytes at this context x batch)."""
    bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    step = decode_cost(shape, context_len, batch_size, precision, kv_precision)
    return bandwidth_gbs * 1e9 / step.bytes


def kv_crossover_context(shape: footprint.ModelShape, batch_size: int = 1, precision: str = "fp16",
                         kv_precision: str | None = None) -> int:
    """Context length (tokens) from which a decode step reads more KV-cache bytes than weight bytes: the
    weights a step reads are matmul_params (the input embedding table is not read, only one row of it per
    token) in `precision`, the KV bytes batch_size x context x kv_bytes_per_token in kv_precision (default:
    the activations' format). Lessons 2 and 8 both call this one function."""
    weight_bytes, kv_fmt = _check(shape, batch_size, precision, kv_precision)
    per_step_token = batch_size * kv_bytes_per_token(shape, kv_fmt)
    return math.ceil(matmul_params(shape) * weight_bytes / per_step_token)


def kv_report(shape: footprint.ModelShape, kv_precision: str = "fp16", batch_sizes=(1, 16)) -> str:
    """One line: KV bytes per token from the shape, and the context where KV reads pass the weights."""
    arguments.instance("batch_sizes", batch_sizes, (list, tuple))
    if not batch_sizes:
        raise ValueError("batch_sizes must hold at least one batch size")
    batch_sizes = [arguments.count(f"batch_sizes[{i}]", b, "batch") for i, b in enumerate(batch_sizes)]
    fmt = formats.get(kv_precision, argument="kv_precision")
    crossovers = ", ".join(f"{kv_crossover_context(shape, b, fmt.name, fmt.name):,} at batch {b}"
                           for b in batch_sizes)
    return (f"{shape.name}: {shape.n_kv_heads} KV heads x {shape.head_dim} x {shape.n_layers} layers x 2 "
            f"(K, V) x {fmt.bytes_per_weight:g} B = {kv_bytes_per_token(shape, fmt.name) / 1e3:,.0f} kB "
            f"per token; "
            f"{fmt.name} KV reads pass the {fmt.name} weights from {crossovers} tokens of context")


def phase_table(shapes, prompt_len: int, context_len: int, batch_size: int = 1, precision: str = "fp16",
                peak_flops: float | None = None, bandwidth_gbs: float | None = None) -> str:
    """One line per model at batch_size sequences: prefill and decode-step intensity (FLOP/byte), and with a
    roofline their times, max(FLOP / peak, bytes / bandwidth) (PhaseCost.time_s)."""
    arguments.instance("shapes", shapes, (list, tuple))
    if not shapes:
        raise ValueError("shapes must hold at least one ModelShape")
    timed = peak_flops is not None or bandwidth_gbs is not None
    if timed:
        peak_flops = arguments.positive("peak_flops", peak_flops)
        bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    lines = [f"{'model':<18}{'batch':>6}{'prefill FLOP/B':>15}{'decode FLOP/B':>15}{'KV kB/token':>13}"
             + (f"{'prefill ms':>12}{'decode ms':>11}" if timed else "")]
    for i, s in enumerate(shapes):
        arguments.instance(f"shapes[{i}]", s, footprint.ModelShape)
        pre = prefill_cost(s, prompt_len, batch_size, precision)
        dec = decode_cost(s, context_len, batch_size, precision)
        kv_kb = kv_bytes_per_token(s, footprint.kv_precision_for(precision)) / 1e3
        line = f"{s.name:<18}{batch_size:>6}{pre.intensity:>15,.1f}{dec.intensity:>15,.2f}{kv_kb:>13,.0f}"
        if timed:
            line += (f"{pre.time_s(peak_flops, bandwidth_gbs) * 1e3:>12,.1f}"
                     f"{dec.time_s(peak_flops, bandwidth_gbs) * 1e3:>11,.2f}")
        lines.append(line)
    return "\n".join(lines)


def serving_step_costs(shape: footprint.ModelShape, bandwidth_gbs: float, peak_flops: float,
                       precision: str = "fp16", context_len: int = 1024,
                       kv_precision: str | None = None) -> dict[str, float]:
    """The roofline's costs of a serving step (ms), as serving.mixed_step_ms takes them: weight_read_ms (the
    weights one token reads, at bandwidth_gbs), kv_read_per_seq_ms (the rest of a one-sequence decode step's
    bytes: its KV cache at context_len), token_compute_ms (one token's FLOP at peak_flops FLOP/s: its
    matmuls and attention over context_len). A dense model's; a MoE reads more experts as tokens grow."""
    bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    peak_flops = arguments.positive("peak_flops", peak_flops)
    one = decode_cost(shape, context_len, 1, precision, kv_precision)
    weights = moe.weight_bytes_read(shape, 1, precision)
    return {"weight_read_ms": 1e3 * weights / (bandwidth_gbs * 1e9),
            "token_compute_ms": 1e3 * one.flops / peak_flops,
            "kv_read_per_seq_ms": 1e3 * (one.bytes - weights) / (bandwidth_gbs * 1e9)}
