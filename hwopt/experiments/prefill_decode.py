"""Prefill and decode on the course's tiny decoder (lesson 8): TTFT and time per output token, decode time
as the KV cache grows, and the error of storing the real K/V cache in fewer bits.

The predictions come from hwopt.cost.phases on the decoder's own shape (shape_of); every timing is
interleaved (hwopt.machine.bench.compare) and synchronised on CUDA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from hwopt import arguments, formats, plots, quantization
from hwopt.cost import footprint, phases, serving
from hwopt.machine import bench
from hwopt.models import tiny_decoder


def shape_of(model: tiny_decoder.TinyDecoder) -> footprint.ModelShape:
    """The tiny decoder as a ModelShape (plain 4x MLP, one K and V per head, untied head; biases and norms,
    a fraction of a percent of the weights, are not counted)."""
    arguments.instance("model", model, tiny_decoder.TinyDecoder)
    d_model, heads = model.tok.embedding_dim, model.blocks[0].n_heads
    return footprint.ModelShape("tiny decoder", len(model.blocks), d_model, heads, heads, 4 * d_model,
                                model.tok.num_embeddings, gated_mlp=False, tied_embeddings=False,
                                max_seq_len=model.max_len)


def model_format(model: tiny_decoder.TinyDecoder) -> str:
    """The hwopt.formats name of the model's weights ('fp32', 'fp16', ...)."""
    arguments.instance("model", model, tiny_decoder.TinyDecoder)
    return formats.get(next(model.parameters()).dtype, argument="model").name


def kv_cache_nbytes(caches) -> int:
    """Bytes held by a KV cache as the decoder returns it: a list of (k, v) tensors, one pair per layer."""
    arguments.instance("caches", caches, (list, tuple))
    if not caches or not all(isinstance(c, tuple | list) and len(c) == 2 and all(
            isinstance(t, torch.Tensor) for t in c) for c in caches):
        raise ValueError("caches must be the decoder's list of (k, v) tensor pairs, one per layer")
    return sum(t.nbytes for pair in caches for t in pair)


def _prompt(model, batch_size: int, prompt_len: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, model.tok.num_embeddings, (batch_size, prompt_len), generator=generator)
    return tokens.to(_weights_on(model))


def _weights_on(model) -> torch.device:
    return next(model.parameters()).device


def _device_kind(model) -> str:
    """'cpu', 'cuda' or 'mps': where the model's weights are."""
    return _weights_on(model).type


def _check_model(model, device) -> str:
    arguments.instance("model", model, tiny_decoder.TinyDecoder)
    device = bench.resolve_device(device)
    if _device_kind(model) != device.split(":")[0]:
        raise ValueError(f"device must be where the model is ({_weights_on(model)}); got {device!r}")
    return device


def _lengths(name: str, values, model, room: int = 1) -> list[int]:
    arguments.instance(name, values, (list, tuple))
    if not values:
        raise ValueError(f"{name} must hold at least one length")
    out = [arguments.count(f"{name}[{i}]", v, "tokens") for i, v in enumerate(values)]
    if max(out) + room > model.max_len:
        raise ValueError(f"{name} must be at most {model.max_len - room} (the model's max_len is "
                         f"{model.max_len}); got {max(out)}")
    return out


# ---- TTFT and time per output token --------------------------------------------------------------------


@dataclass(frozen=True)
class PhaseTimes:
    """Measured time to first token (the prefill) and one decode step after it, per prompt length."""

    prompt_lens: tuple[int, ...]
    ttft: tuple[bench.Measurement, ...]
    tpot: tuple[bench.Measurement, ...]  # one decode step at context = that prompt length
    shape: footprint.ModelShape
    precision: str


def phase_steps(model: tiny_decoder.TinyDecoder, prompt_lens=(8, 32, 128, 256), device="cpu") -> dict:
    """Zero-argument callables {'prefill P': TTFT of a P-token prompt, 'decode P': the next decode step}."""
    device = _check_model(model, device)
    lens = _lengths("prompt_lens", prompt_lens, model)
    fns = {}
    with torch.inference_mode():
        for p in lens:
            prompt = _prompt(model, 1, p)
            logits, caches = model(prompt)
            first = logits[:, -1:].argmax(-1)

            def prefill(prompt=prompt):
                with torch.inference_mode():
                    return model(prompt)[0][:, -1:].argmax(-1)

            def step(first=first, caches=caches, p=p):
                with torch.inference_mode():
                    return model(first, caches, start=p)[0].argmax(-1)

            fns[f"prefill {p}"], fns[f"decode {p}"] = prefill, step
    return fns


def measure_phases(model: tiny_decoder.TinyDecoder, prompt_lens=(8, 32, 128, 256), device="cpu",
                   repeats: int = 5) -> PhaseTimes:
    """TTFT (prefill + first token) and a decode step after it, for each prompt length, all interleaved."""
    repeats = arguments.count("repeats", repeats, "repeats")
    fns = phase_steps(model, prompt_lens, device)
    lens = [int(p) for p in prompt_lens]
    res = bench.compare(fns, device=bench.resolve_device(device), warmup=1, repeats=repeats, number=1)
    return PhaseTimes(tuple(lens), tuple(res[f"prefill {p}"] for p in lens),
                      tuple(res[f"decode {p}"] for p in lens), shape_of(model), model_format(model))


def predicted_phases(times: PhaseTimes, peak_flops: float, bandwidth_gbs: float) -> dict[str, list[float]]:
    """Roofline times (s) of each measured prefill and decode step: {'prefill': [...], 'decode': [...]}."""
    arguments.instance("times", times, PhaseTimes)
    return {
        "prefill": [phases.prefill_cost(times.shape, p, 1, times.precision).time_s(peak_flops, bandwidth_gbs)
                    for p in times.prompt_lens],
        "decode": [phases.decode_cost(times.shape, p, 1, times.precision).time_s(peak_flops, bandwidth_gbs)
                   for p in times.prompt_lens],
    }


def phase_report(times: PhaseTimes, peak_flops: float, bandwidth_gbs: float) -> str:
    """Table per prompt length: intensity, predicted and measured TTFT and decode step, pred/meas; verdict."""
    predicted = predicted_phases(times, peak_flops, bandwidth_gbs)
    lines = [f"{'prompt':>7}{'prefill FLOP/B':>15}{'TTFT pred ms':>13}{'meas ms':>9}{'pred/meas':>10}"
             f"{'decode FLOP/B':>14}{'step pred ms':>13}{'meas ms':>9}{'pred/meas':>10}"]
    for i, p in enumerate(times.prompt_lens):
        pre = phases.prefill_cost(times.shape, p, 1, times.precision)
        dec = phases.decode_cost(times.shape, p, 1, times.precision)
        t_pre, t_dec = times.ttft[i].median_s, times.tpot[i].median_s
        lines.append(f"{p:>7}{pre.intensity:>15,.1f}{predicted['prefill'][i] * 1e3:>13,.2f}"
                     f"{t_pre * 1e3:>9,.2f}"
                     f"{predicted['prefill'][i] / t_pre:>10.2f}{dec.intensity:>14,.2f}"
                     f"{predicted['decode'][i] * 1e3:>13,.2f}{t_dec * 1e3:>9,.2f}"
                     f"{predicted['decode'][i] / t_dec:>10.2f}")
    p = times.prompt_lens[-1]
    per_token_prefill = times.ttft[-1].median_s / p
    gain = times.tpot[-1].median_s / per_token_prefill
    ridge = peak_flops / (bandwidth_gbs * 1e9)
    pre = phases.prefill_cost(times.shape, p, 1, times.precision)
    dec = phases.decode_cost(times.shape, p, 1, times.precision)
    lines.append(f"At {p} prompt tokens the prefill spends {per_token_prefill * 1e3:,.3f} ms per token, a "
                 f"decode step {times.tpot[-1].median_s * 1e3:,.2f} ms for its one token: {gain:,.1f}x more "
                 f"per token. "
                 f"The roofline's ridge here is {ridge:,.1f} FLOP/byte: this prefill is "
                 f"{pre.bound(peak_flops, bandwidth_gbs)}-bound ({pre.intensity:,.0f} FLOP/byte), the decode "
                 f"step {dec.bound(peak_flops, bandwidth_gbs)}-bound ({dec.intensity:.2f} FLOP/byte).")
    grew = times.tpot[-1].median_s / times.tpot[0].median_s
    lines.append(f"From a {times.prompt_lens[0]}- to a {p}-token prompt, the roofline's decode step grows "
                 f"{predicted['decode'][-1] / predicted['decode'][0]:.2f}x (the weights are most of what it "
                 f"reads), the measured one {grew:.2f}x.")
    return "\n".join(lines)


def plot_phases(times: PhaseTimes, peak_flops: float, bandwidth_gbs: float, ax=None):
    """Measured TTFT and decode-step time (median, IQR band) vs prompt length, with the roofline's; Figure."""
    predicted = predicted_phases(times, peak_flops, bandwidth_gbs)
    ax = plots.axes("prompt length (tokens)", "time (ms)", logx=True, logy=True, ax=ax)
    x = list(times.prompt_lens)
    plots.measurement_band(ax, x, list(times.ttft), label="TTFT measured", color=plots.color(0))
    ax.plot(x, [t * 1e3 for t in predicted["prefill"]], "--", color=plots.color(0), label="TTFT roofline")
    plots.measurement_band(ax, x, list(times.tpot), label="decode step measured", color=plots.color(1))
    ax.plot(x, [t * 1e3 for t in predicted["decode"]], "--", color=plots.color(1), label="decode roofline")
    return plots.finish(ax)


# ---- decode time as the KV cache grows ------------------------------------------------------------------


def batch_for_kv_share(model: tiny_decoder.TinyDecoder, context_len: int, share: float = 1.0) -> int:
    """Smallest batch whose KV cache at context_len is at least `share` x the weight bytes a step reads."""
    share = arguments.positive("share", share, maximum=1000)
    kv = tiny_decoder.kv_bytes_read(model, arguments.count("context_len", context_len, "tokens"))
    return max(1, math.ceil(share * tiny_decoder.weight_bytes_per_token(model) / kv))


@torch.inference_mode()
def kv_passes_per_step(model: tiny_decoder.TinyDecoder, device="cpu") -> int:
    """Times a decode step moves the cache: 3 when it appends by copying (read + write of the copy, then
    attention reads it), 1 when it writes the new token into the cache in place (attention's read only)."""
    device = _check_model(model, device)
    _, caches = model(_prompt(model, 1, 2))
    _, grown = model(torch.zeros(1, 1, dtype=torch.long, device=_weights_on(model)), caches, start=2)
    return 1 if grown[0][0].data_ptr() == caches[0][0].data_ptr() else 3


@dataclass(frozen=True)
class ContextSweep:
    """Decode-step times of one batch at several contexts, and the bytes each step reads."""

    contexts: tuple[int, ...]
    batch_size: int
    steps: tuple[bench.Measurement, ...]
    weight_bytes: int  # weights one step reads
    kv_bytes: tuple[int, ...]  # KV cache of the whole batch at each context (one copy)
    kv_passes: int  # times the implementation moves the cache per step (kv_passes_per_step)
    flops: tuple[float, ...] = ()  # FLOP of one step at each context (phases.decode_cost); () if unknown

    def predicted_slowdowns(self) -> list[float]:
        """If a step's time is proportional to the bytes it moves: time(context) / time(first context)."""
        return _slowdowns(self.weight_bytes, self.kv_bytes, self.kv_passes)

    def measured_slowdowns(self) -> list[float]:
        """Measured median step time / the first context's."""
        return [m.median_s / self.steps[0].median_s for m in self.steps]

    def slowdown_ratio(self) -> float:
        """Predicted / measured slowdown at the longest context (1: time follows bytes)."""
        return self.predicted_slowdowns()[-1] / self.measured_slowdowns()[-1]


def _slowdowns(weight_bytes: int, kv_bytes, kv_passes: int) -> list[float]:
    moved = [weight_bytes + kv_passes * kv for kv in kv_bytes]  # bytes a step moves: weights + passes x KV
    return [m / moved[0] for m in moved]


def predicted_slowdowns(model: tiny_decoder.TinyDecoder, contexts=(16, 448), batch_size: int = 16,
                        device="cpu") -> list[float]:
    """Decode-step time at each context / at the first, if time is proportional to the bytes a step moves."""
    device = _check_model(model, device)
    lens = _lengths("contexts", contexts, model)
    batch_size = arguments.count("batch_size", batch_size, "batch")
    kv = [batch_size * tiny_decoder.kv_bytes_read(model, c) for c in lens]
    return _slowdowns(tiny_decoder.weight_bytes_per_token(model), kv, kv_passes_per_step(model, device))


def context_steps(model: tiny_decoder.TinyDecoder, contexts=(16, 128, 256, 448), batch_size: int = 16,
                  device="cpu") -> dict:
    """Zero-argument callables {context: one decode step of batch_size sequences at that context}. The cache
    is the model's own, from a real prefill of one prompt of the longest context, repeated over the batch."""
    device = _check_model(model, device)
    lens = _lengths("contexts", contexts, model)
    batch_size = arguments.count("batch_size", batch_size, "batch")
    with torch.inference_mode():
        _, caches = model(_prompt(model, 1, max(lens)))
        full = [tuple(t.expand(batch_size, *t.shape[1:]).contiguous() for t in pair) for pair in caches]
    token = torch.zeros(batch_size, 1, dtype=torch.long, device=_weights_on(model))
    fns = {}
    for c in lens:
        cache = [tuple(t[:, :, :c] for t in pair) for pair in full]

        def step(cache=cache, c=c):
            with torch.inference_mode():
                return model(token, cache, start=c)[0].argmax(-1)

        fns[c] = step
    return fns


def decode_vs_context(model: tiny_decoder.TinyDecoder, contexts=(16, 128, 256, 448), batch_size: int = 16,
                      device="cpu", repeats: int = 5) -> ContextSweep:
    """Time one decode step of batch_size sequences at each context (context_steps), interleaved."""
    repeats = arguments.count("repeats", repeats, "repeats")
    fns = context_steps(model, contexts, batch_size, device)
    lens = list(fns)
    device = bench.resolve_device(device)
    res = bench.compare(fns, device=device, warmup=1, repeats=repeats, number=1)
    return ContextSweep(tuple(lens), batch_size, tuple(res[c] for c in lens),
                        tiny_decoder.weight_bytes_per_token(model),
                        tuple(batch_size * tiny_decoder.kv_bytes_read(model, c) for c in lens),
                        kv_passes_per_step(model, device),
                        tuple(phases.decode_cost(shape_of(model), c, batch_size, model_format(model)).flops
                              for c in lens))


def context_report(sweep: ContextSweep, bandwidth_gbs: float, peak_flops: float) -> str:
    """Per context: KV/weights, step time, the roofline bound max(bytes / bandwidth, FLOP / peak) (one read
    of weights + cache; FLOP of the batch's tokens), slowdowns; then which term binds at this batch."""
    arguments.instance("sweep", sweep, ContextSweep)
    bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    peak_flops = arguments.positive("peak_flops", peak_flops)
    pred, meas = sweep.predicted_slowdowns(), sweep.measured_slowdowns()
    flops = sweep.flops or (0.0,) * len(sweep.contexts)
    lines = [f"batch {sweep.batch_size}; {sweep.weight_bytes / 1e6:,.0f} MB of weights per step",
             f"{'context':>8}{'KV MB':>9}{'KV/weights':>11}{'FLOP/B':>8}{'step ms':>9}{'bound ms':>10}"
             f"{'tokens/s':>10}{'bound tok/s':>12}{'slowdown pred':>14}{'meas':>7}"]
    for i, c in enumerate(sweep.contexts):
        moved = sweep.weight_bytes + sweep.kv_bytes[i]
        bound_s = max(moved / (bandwidth_gbs * 1e9), flops[i] / peak_flops)
        step_s = sweep.steps[i].median_s
        lines.append(f"{c:>8}{sweep.kv_bytes[i] / 1e6:>9,.1f}{sweep.kv_bytes[i] / sweep.weight_bytes:>11.2f}"
                     f"{flops[i] / moved:>8.2f}"
                     f"{step_s * 1e3:>9,.2f}{bound_s * 1e3:>10,.2f}{sweep.batch_size / step_s:>10,.0f}"
                     f"{sweep.batch_size / bound_s:>12,.0f}{pred[i]:>14.2f}{meas[i]:>7.2f}")
    copy = ("this decoder appends to its cache by copying it (torch.cat): a step moves the cache 3 times"
            if sweep.kv_passes == 3 else "this decoder writes new K/V in place: a step reads the cache once")
    ratio = sweep.slowdown_ratio()
    verdict = ("time grows with the bytes moved, as the memory-bound model predicts" if 0.7 <= ratio <= 1.3
               else
               "time grows less than the bytes: the step has costs that do not grow with the cache (compute, "
               "framework calls), part of the cache is served from a CPU cache, or other programs shared "
               "the machine while it ran" if ratio > 1.3 else
               "time grows more than the bytes: moving the cache costs more than streaming the weights here "
               "(fresh memory for each copy, attention kernels that do not reach full bandwidth)")
    lines.append(f"{copy}; slowdown at {sweep.contexts[-1]} tokens predicted {pred[-1]:.2f}x, measured "
                 f"{meas[-1]:.2f}x ({sweep.steps[0].median_ms:,.2f} -> {sweep.steps[-1].median_ms:,.2f} ms; "
                 f"ratio {ratio:.2f}): {verdict}.")
    ridge = peak_flops / (bandwidth_gbs * 1e9)
    bound = [i for i in range(len(sweep.contexts))
             if flops[i] / peak_flops > (sweep.weight_bytes + sweep.kv_bytes[i]) / (bandwidth_gbs * 1e9)]
    if bound:
        first = flops[bound[0]] / (sweep.weight_bytes + sweep.kv_bytes[bound[0]])
        lines.append(f"at batch {sweep.batch_size} the step's intensity ({first:.2f} FLOP/byte at "
                     f"{sweep.contexts[bound[0]]} tokens) is above this machine's ridge ({ridge:.2f}): "
                     f"compute, not bytes, bounds {len(bound)} of the {len(sweep.contexts)} rows, "
                     "so 'slowdown pred' (bytes only) overstates the slowdown there.")
    return "\n".join(lines)


def plot_decode_vs_context(sweep: ContextSweep, ax=None):
    """Measured decode-step time vs context (median, IQR) and the bytes-proportional prediction; Figure."""
    arguments.instance("sweep", sweep, ContextSweep)
    ax = plots.axes("context (tokens)", "decode step (ms)", ax=ax,
                    title=f"batch {sweep.batch_size}: weights vs KV cache")
    x = list(sweep.contexts)
    plots.measurement_band(ax, x, list(sweep.steps), label="measured", color=plots.color(0))
    base = sweep.steps[0].median_ms
    ax.plot(x, [base * s for s in sweep.predicted_slowdowns()], "--", color=plots.color(1),
            label="predicted: time proportional to bytes moved")
    crossover = sweep.weight_bytes / (sweep.kv_bytes[-1] / sweep.contexts[-1])
    if crossover <= x[-1]:
        ax.axvline(crossover, color=plots.color(2), linestyle=":", label="KV cache = weights")
    ax.set_ylim(bottom=0)
    return plots.finish(ax)


# ---- KV-cache precision: the real cache stored in fewer bits ---------------------------------------------


def quantize_kv(tensor: torch.Tensor, kv_precision: str) -> torch.Tensor:
    """tensor (..., head_dim) stored in kv_precision and read back (same dtype): 16 bits or more by a cast,
    fp8 and ints with a (symmetric) scale per vector of head_dim (hwopt.quantization.fake_quantize)."""
    arguments.instance("tensor", tensor, torch.Tensor)
    if not tensor.is_floating_point() or tensor.dim() < 1:
        raise ValueError(f"tensor must be a floating-point tensor (..., head_dim); got {tensor.dtype}, "
                         f"shape {tuple(tensor.shape)}")
    arguments.finite_array("tensor", tensor)
    fmt = formats.get(kv_precision, "kv_precision", footprint.KV_PRECISIONS)
    return quantization.fake_quantize(tensor, fmt, per_channel=tensor.dim() > 1)


def _relative_rms(error: torch.Tensor, reference: torch.Tensor) -> float:
    return float(error.float().pow(2).mean().sqrt() / reference.float().pow(2).mean().sqrt())


def _quantized(caches, kv_precision):
    return [tuple(quantize_kv(t, kv_precision) for t in pair) for pair in caches]


@torch.inference_mode()
def kv_quantization_error(model: tiny_decoder.TinyDecoder, prompt_len: int = 128, kv_precisions=("fp16",
                          "fp8_e4m3", "int8"), steps: int = 16, device="cpu", seed: int = 0) -> list[dict]:
    """Store the model's real K/V cache in each format and decode `steps` tokens on the full-precision path's
    tokens: per format its bytes per token, relative RMS error of K/V and of the logits, top-1 agreement."""
    device = _check_model(model, device)
    steps = arguments.count("steps", steps, "tokens")
    if steps >= model.max_len:
        raise ValueError(f"steps must be below the model's max_len ({model.max_len}); got {steps}")
    prompt_len = arguments.count("prompt_len", prompt_len, "tokens")
    if prompt_len + steps > model.max_len:
        raise ValueError(f"prompt_len must be at most {model.max_len - steps} for {steps} steps (the model's "
                         f"max_len is {model.max_len}); got {prompt_len}")
    arguments.instance("kv_precisions", kv_precisions, (list, tuple))
    names = [formats.name(f, f"kv_precisions[{i}]", footprint.KV_PRECISIONS)
             for i, f in enumerate(kv_precisions)]
    if not names:
        raise ValueError("kv_precisions must name at least one format")
    seed = arguments.count("seed", seed, "seed", minimum=0)
    logits, caches = model(_prompt(model, 1, prompt_len, seed))
    tokens, reference = [], []
    ref_caches = caches
    for i in range(steps):
        tokens.append(logits[:, -1:].argmax(-1))
        logits, ref_caches = model(tokens[-1], ref_caches, start=prompt_len + i)
        reference.append(logits[:, -1].float())
    reference = torch.cat(reference)
    rows = []
    for name in names:
        cache = _quantized(caches, name)
        kv_err = torch.cat([(q - t).flatten() for qp, tp in zip(cache, caches, strict=True)
                            for q, t in zip(qp, tp, strict=True)])
        kv_ref = torch.cat([t.flatten() for tp in caches for t in tp])
        out = []
        for i in range(steps):
            step_logits, cache = model(tokens[i], cache, start=prompt_len + i)
            cache = _quantized(cache, name)  # the new token's K and V are stored in the format too
            out.append(step_logits[:, -1].float())
        out = torch.cat(out)
        rows.append({
            "kv_precision": name,
            "kv_bytes_per_token": phases.kv_bytes_per_token(shape_of(model), name),
            "kv_relative_rmse": _relative_rms(kv_err, kv_ref),
            "logit_relative_rmse": _relative_rms(out - reference, reference),
            "top1_agreement": float((out.argmax(-1) == reference.argmax(-1)).float().mean()),
        })
    return rows


def kv_precision_table(rows: list[dict]) -> str:
    """kv_quantization_error's rows as a table."""
    arguments.instance("rows", rows, list)
    keys = {"kv_precision", "kv_bytes_per_token", "kv_relative_rmse", "logit_relative_rmse", "top1_agreement"}
    if not rows or not all(isinstance(r, dict) and keys <= set(r) for r in rows):
        raise ValueError("rows must be kv_quantization_error(...)'s list of dicts")
    lines = [f"{'KV format':<10}{'KB/token':>9}{'K/V error':>11}{'logit error':>13}{'same top-1':>12}"]
    lines += [f"{r['kv_precision']:<10}{r['kv_bytes_per_token'] / 1024:>9,.1f}{r['kv_relative_rmse']:>11.2e}"
              f"{r['logit_relative_rmse']:>13.2e}{r['top1_agreement']:>12.0%}" for r in rows]
    return "\n".join(lines)


# ---- the measured costs as a serving model, and the lesson's summary -------------------------------------


def serving_costs(times: PhaseTimes, sweep: ContextSweep, context_len: int | None = None) -> dict[str, float]:
    """serving.mixed_step_ms's costs (ms) from the measurements: weight_read_ms = a batch-1 decode step at the
    shortest prompt (it reads every weight once, and carries the step's fixed costs); token_compute_ms = the
    longest prefill's time per token (compute-bound); kv_read_per_seq_ms = what one sequence's cache of
    context_len tokens (default the sweep's longest context) added to the sweep's step, from its growth
    between the shortest and the longest context (0 if it did not grow). Measure both with the same kernels
    (a model made with kernel="torch"): mixing kernels puts their speed difference into the costs."""
    arguments.instance("times", times, PhaseTimes)
    arguments.instance("sweep", sweep, ContextSweep)
    if context_len is not None:
        context_len = arguments.count("context_len", context_len, "tokens")
    context_len = sweep.contexts[-1] if context_len is None else context_len
    if len(sweep.contexts) < 2:
        raise ValueError("sweep must hold at least two contexts: the cache's cost is its growth between them")
    growth_ms = sweep.steps[-1].median_ms - sweep.steps[0].median_ms
    per_token_ms = max(growth_ms, 0.0) / (sweep.batch_size * (sweep.contexts[-1] - sweep.contexts[0]))
    return {"weight_read_ms": times.tpot[0].median_ms,
            "token_compute_ms": times.ttft[-1].median_ms / times.prompt_lens[-1],
            "kv_read_per_seq_ms": per_token_ms * context_len}


def lesson_summary(times: PhaseTimes, sweep: ContextSweep, kv_rows: list[dict], runs: dict) -> str:
    """Lesson 8's summary, in sentences built from the learner's own measurements. kv_rows: the trained
    model's KV-cache results (llm_kv_cache.evaluate_kv), full precision first."""
    arguments.instance("times", times, PhaseTimes)
    arguments.instance("sweep", sweep, ContextSweep)
    arguments.instance("kv_rows", kv_rows, (list, tuple))
    keys = {"variant", "kv_bytes_per_value", "perplexity", "top1_agreement"}
    if not kv_rows or not all(isinstance(r, dict) and keys <= set(r) for r in kv_rows):
        raise ValueError("kv_rows must be a non-empty list of llm_kv_cache.evaluate_kv results")
    arguments.instance("runs", runs, dict)
    if len(runs) != 2 or not all(isinstance(s, serving.PhaseLatencyStats) for s in runs.values()):
        raise ValueError("runs must be {label: PhaseLatencyStats} of two runs: whole prompts, then chunked")
    p = times.prompt_lens[-1]
    per_token = times.tpot[-1].median_s / (times.ttft[-1].median_s / p)
    (whole_label, whole), (chunk_label, chunked) = runs.items()
    base = kv_rows[0]
    close = [r for r in kv_rows if r["perplexity"] <= 1.01 * base["perplexity"]]
    best = min(close or kv_rows, key=lambda r: (r["kv_bytes_per_value"], r["perplexity"]))
    return "\n".join([
        f"- A prefill of {p} tokens cost {times.ttft[-1].median_ms:,.1f} ms, {per_token:,.1f}x less per "
        f"token than a decode step ({times.tpot[-1].median_ms:,.2f} ms): the prompt reuses each weight "
        f"{p} times.",
        f"- At batch {sweep.batch_size}, going from {sweep.contexts[0]} to {sweep.contexts[-1]} tokens of "
        f"context made a decode step {sweep.measured_slowdowns()[-1]:.2f}x slower; bytes moved predicted "
        f"{sweep.predicted_slowdowns()[-1]:.2f}x (predicted / measured {sweep.slowdown_ratio():.2f}).",
        f"- The trained model's cache as {best['variant']} ({best['kv_bytes_per_value']:.3g} bytes per "
        "number, "
        f"scales included, against {base['kv_bytes_per_value']:.3g}) moved validation perplexity from "
        f"{base['perplexity']:,.3f} to {best['perplexity']:,.3f} and kept {best['top1_agreement']:.1%} of "
        "the full-precision model's top-1 tokens: the fewest bytes within 1% of the perplexity.",
        f"- {chunk_label}: worst gap between two tokens {chunked.percentile('tpot', 100):,.1f} ms, against "
        f"{whole.percentile('tpot', 100):,.1f} ms with {whole_label}; p99 TPOT "
        f"{chunked.percentile('tpot', 99):,.1f} vs {whole.percentile('tpot', 99):,.1f} ms, p99 TTFT "
        f"{chunked.percentile('ttft', 99):,.1f} vs {whole.percentile('ttft', 99):,.1f} ms.",
    ])
