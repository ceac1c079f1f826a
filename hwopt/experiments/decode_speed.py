"""A decoder's decode speed against its bandwidth bound (lesson 2): tokens/s measured, bytes read per token,
the C kernel against torch on the same weights.

Each generated token reads every weight once and the K and V of every past token, so the bound is
bandwidth / (weight bytes + KV bytes) tokens/s; the measured rate says how much of it a runtime reaches.
"""

from __future__ import annotations

import torch
from torch import nn

from hwopt import arguments
from hwopt.experiments import decode
from hwopt.kernels import lowbit_gemv
from hwopt.machine import bench
from hwopt.models import tiny_decoder as td


def decode_steps(model: td.TinyDecoder, prompt_len: int = 16, new_tokens: int = 32, device="cpu"):
    """A zero-argument function running the new_tokens - 1 single-token steps after a prompt's prefill (done
    once, here): what measure_decode times. The steps read decode_bytes_read(model, prompt_len, new_tokens)
    bytes."""
    arguments.instance("model", model, td.TinyDecoder)
    arguments.count("prompt_len", prompt_len, "tokens")
    td.check_new_tokens(model, prompt_len, new_tokens, minimum=2)  # the first new token comes from prefill
    device = bench.resolve_device(device)
    prompt = torch.randint(0, model.tok.num_embeddings, (1, prompt_len), device=device)
    with torch.inference_mode():
        logits, caches = model(prompt)  # prefill once; time only the token-by-token steps

    def steps():
        with torch.inference_mode():
            cache = caches
            nxt = logits[:, -1:].argmax(-1)
            for i in range(new_tokens - 1):
                out, cache = model(nxt, cache, start=prompt_len + i)
                nxt = out[:, -1:].argmax(-1)
            return nxt

    return steps


def gemvs_alone(model: td.TinyDecoder, tokens: int = 1):
    """A zero-argument function running only the GEMVs of `tokens` decode steps (every Linear once a token,
    on fixed input vectors, in whatever the model's `kernel` says when it runs): what a step would cost with
    nothing between them. It reads tokens x td.weight_bytes_per_token(model) bytes."""
    arguments.instance("model", model, td.TinyDecoder)
    tokens = arguments.count("tokens", tokens, "tokens")
    device = next(model.parameters()).device
    layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
    inputs = [torch.randn(1, 1, layer.in_features, device=device) for layer in layers]

    def run():
        with torch.inference_mode():
            for _ in range(tokens):
                for layer, x in zip(layers, inputs, strict=True):
                    y = td.project(layer, x, model.kernel)
            return y

    return run


def measure_decode(model: td.TinyDecoder, prompt_len: int = 16, new_tokens: int = 32, device="cpu",
                   repeats: int = 3) -> tuple[float, bench.Measurement]:
    """Measured single-stream decode speed (tokens/s) over new_tokens steps after a prompt, and the timing."""
    steps = decode_steps(model, prompt_len, new_tokens, device)
    arguments.count("repeats", repeats, "repeats")
    device = bench.resolve_device(device)
    with torch.inference_mode():
        m = bench.time_fn(steps, label="decode", device=device, warmup=1, repeats=repeats, number=1)
    return (new_tokens - 1) / m.median_s, m


def compare_kernels(model: td.TinyDecoder, bandwidth_gbs: float, prompt_len: int = 16, new_tokens: int = 8,
                    repeats: int = 5) -> str:
    """Decode on the CPU in the C kernel (model.gemv_runner() says how) and in torch, interleaved
    (bench.compare): tokens/s of each against the bound at bandwidth_gbs (weights + KV), and how much the C
    kernel gained (lesson 2)."""
    arguments.instance("model", model, td.TinyDecoder)
    arguments.positive("bandwidth_gbs", bandwidth_gbs)
    arguments.count("repeats", repeats, "repeats")
    if next(model.parameters()).device.type != "cpu":
        return "the model is on a GPU, where every Linear runs in torch: nothing to compare"
    if reason := lowbit_gemv.unavailable_reason():
        return f"the C kernel is not available here ({reason}): every Linear runs in torch"
    kept = model.kernel
    fns = {}
    for kernel in ("c", "torch"):
        steps = decode_steps(model, prompt_len, new_tokens)

        def run(steps=steps, kernel=kernel):
            model.kernel = kernel
            return steps()

        fns[kernel] = run
    try:
        timed = bench.compare(fns, repeats=repeats, warmup=1, settle_s=decode.SETTLE_S)
    finally:
        model.kernel = kept
    per_token = decode_bytes_read(model, prompt_len, new_tokens) / (new_tokens - 1)
    bound = bandwidth_gbs * 1e9 / per_token
    rate = {k: (new_tokens - 1) / m.median_s for k, m in timed.items()}
    lines = [f"bound at {bandwidth_gbs:,.1f} GB/s: {bound:,.0f} tokens/s ({per_token / 1e6:,.0f} MB read per "
             "token: weights + KV)"]
    for kernel, label in (("c", "C kernel step"), ("torch", "torch        ")):
        m = timed[kernel]
        lines.append(f"  {label} {rate[kernel]:8,.0f} tokens/s = {rate[kernel] / bound:4.0%} of the bound "
                     f"({m.median_ms / (new_tokens - 1):.2f} ms per token, IQR {m.relative_iqr:.0%})")
    gain = bench.speedup(timed["torch"], timed["c"])
    lines.append(f"the same model and weights: the C kernel decodes {gain:.2f}x "
                 + ("faster than torch, measured interleaved" if gain >= 1 else
                    "as fast as torch (slower), measured interleaved: look at the spread, and rerun"))
    return "\n".join(lines)


def estimated_tokens_per_s(model: td.TinyDecoder, bandwidth_gbs: float, context_len: int = 0) -> float:
    """Bandwidth-bound estimate: bandwidth / bytes read per token (weights, and K and V of context_len past
    tokens), in tokens/s."""
    bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    return bandwidth_gbs * 1e9 / (td.weight_bytes_per_token(model) + td.kv_bytes_read(model, context_len))


def decode_bytes_read(model: td.TinyDecoder, prompt_len: int, new_tokens: int) -> int:
    """Bytes the new_tokens - 1 steps of decode_steps read in all: every weight once a step, and at step i the
    K and V of the prompt_len + i tokens before it."""
    arguments.instance("model", model, td.TinyDecoder)
    arguments.count("prompt_len", prompt_len, "tokens")
    td.check_new_tokens(model, prompt_len, new_tokens, minimum=2)
    return sum(td.weight_bytes_per_token(model) + td.kv_bytes_read(model, prompt_len + i)
               for i in range(new_tokens - 1))


def bound_report(model: td.TinyDecoder, measured_tokens_per_s: float, bandwidth_gbs: float,
                 context_len: int = 0) -> str:
    """The measured decode rate against its bandwidth bound: the ratio, and what it means (lesson 2).

    context_len: the longest context of the measured steps: the K and V of every past token are read too, and
    the bound counts them (weights + KV bytes per token).
    """
    arguments.positive("measured_tokens_per_s", measured_tokens_per_s)
    context_len = arguments.count("context_len", context_len, "tokens", minimum=0)
    bound = estimated_tokens_per_s(model, bandwidth_gbs, context_len)
    weights, kv = td.weight_bytes_per_token(model), td.kv_bytes_read(model, context_len)
    ratio = bound / measured_tokens_per_s
    streamed_gbs = (weights + kv) * measured_tokens_per_s / 1e9
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    runner = model.gemv_runner()
    lines = [f"{weights / 1e6:,.0f} MB of {dtype} weights per token" + (" and its KV cache" if kv else "")
             + f"; the bound at {bandwidth_gbs:,.1f} GB/s is {bound:,.0f} tokens/s, measured "
             f"{measured_tokens_per_s:,.0f} tokens/s: bound / measured = {ratio:.2f} (the bytes streamed at "
             f"{streamed_gbs:,.1f} GB/s, {streamed_gbs / bandwidth_gbs:.0%} of the bandwidth)",
             f"a decode step ran in {runner}"]
    if context_len:
        meaning = ("the weights are what this step reads" if kv < 0.1 * weights else
                   "a real share of the bytes read, which a bound from the weights alone would leave out")
        lines.append(f"the KV cache at {context_len} tokens of context adds {kv / 1e6:,.2f} MB per token, "
                     f"{kv / weights:.1%} of the weight bytes: {meaning}")
    if ratio < 0.9:
        lines.append("Faster than the bound: some of the weights were read from a cache rather than memory, "
                     "or the bandwidth probe measured low.")
    elif ratio <= 1.25:
        lines.append("At the bound: decoding here is memory-bound, as predicted, and only fewer bytes per "
                     "token would make it faster.")
    elif runner.startswith("torch"):
        lines.append(f"{ratio:.1f}x below the bound: {1 - 1 / ratio:.0%} of each step goes to something "
                     "other than reading weights at full bandwidth: one framework call per layer with its "
                     "own overhead, attention and normalization on single vectors, and GEMVs that may not "
                     "use every core. The bound is what a kernel with none of that would reach.")
    elif "decoder step" in runner:
        lines.append(f"{ratio:.1f}x below the bound: {1 - 1 / ratio:.0%} of each step goes to something "
                     "other than reading weights at full bandwidth, although the whole step is one C call: "
                     "each GEMV's stream starting and draining, the cores meeting at the end of every GEMV "
                     "(waiting for the slower one; on a busy machine, one that lost its core for a while), "
                     "and the norms and attention one core does between them.")
    else:
        lines.append(f"{ratio:.1f}x below the bound: {1 - 1 / ratio:.0%} of each step goes to something "
                     "other than reading weights at full bandwidth, although one C loop streams every "
                     "weight: the torch calls between the GEMVs (attention and normalization on single "
                     "vectors), and the cores meeting at the end of every GEMV, which waits for the slower "
                     "one (on a busy machine, one that lost its core for a while).")
    return "\n".join(lines)
