"""Section 6 of the performance report: the serving engine (lesson 11).

The course's C kernel (hwopt.kernels.lowbit_gemv) against llama.cpp on the course's trained weights, batch 1,
on the same threads, in the same kind of format (the kernel's int8 against Q8_0, its int4_g32 against Q4_0),
measured interleaved in one run; then llama.cpp's goodput at lesson 11's SLO.

The kernel cannot run the trained model's decoder step: its whole-step function runs the tiny decoder
(LayerNorm, GELU, fp32), not a Llama (RMSNorm, RoPE, grouped-query attention, SwiGLU), and its int8 and int4
loops run stacks of square layers. So the kernel's side is the GEMV stack of every matrix the trained model
reads per token, cut into square tiles (model_stack), and llama.cpp's side is its whole decode step: the
ratio is an upper bound on what a decoder built on the kernel would reach, and the rows' notes say so.
"""

from __future__ import annotations

import os
import time
import traceback

import gguf
import numpy as np

from benchmarks import report
from hwopt import formats
from hwopt.experiments import decode, serving_engine
from hwopt.kernels import llama_build, lowbit_gemv
from hwopt.kernels.llama_server import ggml_type
from hwopt.machine import bench
from hwopt.models import checkpoint

# the kernel's precision -> the llama.cpp format of the same kind (8-bit and 4-bit codes, symmetric, scaled)
PEERS = {"int8": "int8_g32", "int4": "int4_g32"}
GOODPUT_ROW = (f"llama.cpp goodput at lesson 11's SLO (TTFT <= {serving_engine.SLO_TTFT_MS:g} ms, TPOT <= "
               f"{serving_engine.SLO_TPOT_MS:g} ms) / requests/s answered", None)
PROMPT_TOKENS = 16  # llama.cpp's prompt before the timed tokens
NEW_TOKENS = {True: 16, False: 64}  # tokens generated (steps timed) per round, by quick
ROUNDS = {True: 5, False: 15}
GOODPUT_REQUESTS = {True: 8, False: 16}


def model_stack(model: str = "target") -> decode.DecodeStack:
    """Every matrix the trained model reads per decode token (each layer's Q, K, V, O, gate, up and down
    projections, and the output head: the tied embedding table), cut into (d_model, d_model) blocks, as a
    stack for the C kernel's decode step; x is a fixed random unit vector.

    The blocks hold the trained weights as they are (the kernel's layer i computes h + h @ B_i, B_i a block
    transposed); the stack reads the same number of weights as the model's step, in another order."""
    config = checkpoint.read_config(checkpoint.resolve(model))
    tile = config.d_model
    weights = checkpoint.load(model).state_dict()
    rows = []
    for name, w in weights.items():
        if w.ndim != 2 or (name == "lm_head.weight" and config.tie_embeddings):
            continue  # norms; a tied head is the embedding table, counted once
        w = w.detach().float().numpy()
        if w.shape[1] % tile:
            raise ValueError(f"model: {name} has rows of {w.shape[1]} values; expected a multiple of {tile}")
        rows += [w[:, j:j + tile] for j in range(0, w.shape[1], tile)]
    rows = np.concatenate(rows)
    if len(rows) % tile:
        raise ValueError(f"model: its matrices hold {len(rows)} rows; expected a multiple of {tile}")
    blocks = rows.reshape(-1, tile, tile)
    x = np.random.default_rng(0).standard_normal(tile).astype(np.float32)
    return decode.DecodeStack(tuple(np.ascontiguousarray(b.T) for b in blocks), x / np.linalg.norm(x))


def ggml_bytes_per_weight(ggml_name: str) -> float:
    """Bytes per weight of a llama.cpp tensor type ('Q8_0', 'Q4_0'), its block's scale included (gguf-py's
    table)."""
    block, type_size = gguf.GGML_QUANT_SIZES[getattr(gguf.GGMLQuantizationType, ggml_name)]
    return type_size / block


def unavailable_reason() -> str | None:
    """None when both sides run here, else why the rows cannot be measured."""
    reason = lowbit_gemv.unavailable_reason()
    if reason is not None:
        return f"the course's C kernel cannot be built here: {reason}"
    reason = llama_build.unavailable_reason()
    return None if reason is None else f"llama.cpp's llama-server is not built here: {reason}"


def _kernel_tokens(step, tokens: int) -> float:
    """Seconds per token of `tokens` calls of step, back to back."""
    t = time.perf_counter()
    for _ in range(tokens):
        step()
    return (time.perf_counter() - t) / tokens


def _engine_tokens(server, text: str, tokens: int) -> float:
    """Seconds per generated token by llama.cpp's own clock (timings.predicted_ms / predicted_n)."""
    timings = server.complete(text, tokens, cache_prompt=False)["timings"]
    if timings["predicted_n"] < 1:
        raise RuntimeError(f"llama-server generated no token: {timings}")
    return timings["predicted_ms"] / 1e3 / timings["predicted_n"]


def thread_counts() -> list[int]:
    """The thread counts both sides run at: torch's (the report's; the rows with a goal), then 1 (no thread
    waits for another: each side's single-core speed, for information)."""
    return list(dict.fromkeys((lowbit_gemv.default_threads(), 1)))


def kernel_row_names() -> list[tuple[str, float | None, str, int]]:
    """(name, goal, precision, threads) of every kernel-vs-llama.cpp row, in the report's order."""
    default = lowbit_gemv.default_threads()
    return [(f"{p} C kernel GEMV stack / llama.cpp {ggml_type(q)} decode, tokens/s, {t} thread"
             + "s" * (t > 1), 1.0 if t == default else None, p, t)
            for t in thread_counts() for p, q in PEERS.items()]


def _check_stack(stack: decode.DecodeStack, precision: str, threads: int) -> None:
    """The kernel against the float64 oracle on the stack's first 4 blocks (the lesson's tolerance is stated
    for 4 layers); ValueError beyond it."""
    first = decode.DecodeStack(stack.layers[:4], stack.x)
    fmt = lowbit_gemv.WEIGHT_FORMATS[precision]
    path = decode.DecodePath(precision, precision, fmt, lowbit_gemv.step_fn(first, precision, threads), 0)
    decode.check_paths({precision: path}, first)


BUSY_WINDOW_S = 1.0  # how long busy_cores watches the cores
BUSY_MARGIN = 0.25  # cores other work may take before the rows with a goal get no verdict


def busy_cores(window_s: float = BUSY_WINDOW_S) -> float | None:
    """How many cores were busy over the next window_s (this process idle meanwhile, so: other work), from
    /proc/stat (time stolen by the hypervisor counts as busy); None where there is no /proc/stat."""
    def ticks():
        with open("/proc/stat", encoding="ascii") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return sum(values), values[3] + values[4]  # all, idle + iowait

    try:
        total0, idle0 = ticks()
        time.sleep(window_s)
        total1, idle1 = ticks()
    except OSError:
        return None
    total = total1 - total0
    return (os.cpu_count() or 1) * (total - (idle1 - idle0)) / total if total > 0 else 0.0


def judged(row: dict, threads: int, busy: float | None, cores: int) -> dict:
    """row, its verdict withheld ('not available', the note saying why) when `busy` cores taken by other work
    and `threads` do not fit in `cores`: then llama.cpp's step waits at its barriers for descheduled threads,
    and the ratio measures the sharing, not the code."""
    if row["goal"] is None or busy is None or busy <= cores - threads + BUSY_MARGIN:
        return row
    why = (f"no verdict: {threads} threads each and other work ({busy:.2f} cores busy) do not fit in {cores} "
           "cores, and llama.cpp's step waits at every barrier for a descheduled thread")
    return {**row, "verdict": report.UNAVAILABLE, "note": f"{why}; {row['note']}"}


def kernel_rows(quick: bool, rounds: int | None = None, tokens: int | None = None, model: str = "target"
                ) -> tuple[list, list]:
    """The kernel-vs-llama.cpp rows (kernel_row_names) on the course's `model`, and the section's notes."""
    rounds = ROUNDS[quick] if rounds is None else rounds
    tokens = NEW_TOKENS[quick] if tokens is None else tokens
    stack = model_stack(model)
    steps = {}
    for _, _, precision, threads in kernel_row_names():
        _check_stack(stack, precision, threads)
        steps[precision, threads] = lowbit_gemv.step_fn(stack, precision, threads)
        if not np.all(np.isfinite(steps[precision, threads]())):
            raise RuntimeError(f"the {precision} stack's output is not finite")
    text = serving_engine.prompt(PROMPT_TOKENS, 20_000)
    servers = {(p, t): serving_engine.trained_server(model, PEERS[p], threads=t, parallel=1,
                                                     ctx_per_slot=PROMPT_TOKENS + tokens + 16)
               for p, t in steps}
    times = {(key, side): [] for key in steps for side in ("kernel", "engine")}
    busy_before = busy_cores()
    try:
        for server in servers.values():
            server.start()
        for r in range(rounds + 1):  # round 0 warms both sides up, untimed
            for key, server in servers.items():
                kernel_s = _kernel_tokens(steps[key], tokens)
                engine_s = _engine_tokens(server, text, tokens)
                if r:
                    times[key, "kernel"].append(kernel_s)
                    times[key, "engine"].append(engine_s)
    finally:
        for server in servers.values():
            server.stop()
    busy = [b for b in (busy_before, busy_cores()) if b is not None]
    cores = os.cpu_count() or 1
    load = (f"other work kept {max(busy):.2f} of {cores} cores busy (before and after the rounds, "
            f"{BUSY_WINDOW_S:g} s each)" if busy else "other work on the cores not known here")
    rows = []
    for name, goal, precision, threads in kernel_row_names():
        peer = ggml_type(PEERS[precision])
        fmt, peer_bytes = lowbit_gemv.WEIGHT_FORMATS[precision], ggml_bytes_per_weight(peer)
        kernel = bench.Measurement(f"C kernel {precision} ({fmt}), GEMV stack, {threads} threads",
                                   tuple(times[(precision, threads), "kernel"]))
        engine = bench.Measurement(f"llama.cpp {peer}, decode step, {threads} threads",
                                   tuple(times[(precision, threads), "engine"]))
        note = (f"{1 / kernel.median_s:,.0f} tokens/s (C kernel, {lowbit_gemv.kernel_path()} path, GEMVs "
                f"only, {stack.weight_bytes(fmt) / 1e6:.1f} MB per token in {fmt}, "
                f"{formats.bytes_per_weight(fmt):.4g} bytes per weight) against {1 / engine.median_s:,.0f} "
                f"tokens/s (llama.cpp, whole step, {stack.n_params * peer_bytes / 1e6:.1f} MB of matrices "
                f"per token in {peer}, {peer_bytes:.4g} bytes per weight); {load}")
        if goal is None:
            note = "for information, one core each: " + note
        rows.append(judged(report.speedup_row(name, engine, kernel, goal=goal, note=note), threads,
                           max(busy, default=None), cores))
    notes = [
        f"Kernel rows: the trained model '{model}' ({stack.n_params / 1e6:.1f} M weights in its matrices), "
        f"batch 1, the same threads on both sides, {rounds} interleaved rounds (and an untimed one first): "
        f"in each round, per format and thread count, the C kernel runs {tokens} steps back to back, then "
        f"llama-server generates {tokens} tokens greedily after a {PROMPT_TOKENS}-token prompt (prompt "
        "cache off); times are per token; ratio = llama.cpp's seconds per token / the kernel's = the "
        "kernel's tokens/s / llama.cpp's.",
        "What each side times. The C kernel: only the GEMVs of every matrix the model reads per token (Q, "
        f"K, V, O, gate, up, down of each layer and the tied output head), cut into {len(stack.layers)} "
        f"blocks of {stack.d_model}x{stack.d_model} and run as its decode stack h <- h + h @ B (the input "
        "quantized to int8 per block), timed by perf_counter around the calls from Python. llama.cpp: its "
        "whole decode step (RMSNorm, RoPE, attention over the KV cache, SwiGLU, the head, greedy "
        "sampling) by its own clock (timings.predicted_ms / predicted_n of /completion: no HTTP, "
        "tokenizer or prompt in it), run with --no-repack (its AMX repacked layouts crash on this "
        "model's shapes) and --poll 0 (its idle threads sleep rather than spin).",
        "So a ratio is an upper bound on what a whole decoder built on the course's kernel would reach, "
        "not a win over llama.cpp at decoding: the kernel cannot run a Llama's step (its whole-step "
        "function runs the tiny decoder, LayerNorm and GELU in fp32). The formats differ too: int8 with "
        "an fp32 scale per row against Q8_0's fp16 scale per 32 weights; int4_g32 with an fp32 scale per "
        "32 against Q4_0's fp16 one.",
        "llama.cpp's step is a graph of small operations, each ending at a barrier where every thread "
        "waits for the slowest: on cores shared with other work a descheduled thread stalls the step. The "
        "kernel's workers take a block's chunks as they come and nobody waits for a worker that has not "
        "started, so it feels that far less. The 1-thread rows, where nothing waits for another thread, "
        "compare the two sides' code on one core.",
    ]
    return rows, notes


def goodput_row(quick: bool) -> tuple[dict, str]:
    """llama.cpp's goodput at lesson 11's SLO in the lesson's open-loop run, as a row without a goal
    (goodput / requests answered per second), and its note."""
    name, goal = GOODPUT_ROW
    busy = busy_cores()
    loop = serving_engine.open_vs_closed(n_requests=GOODPUT_REQUESTS[quick])
    opened = loop.opened
    good = opened.goodput(serving_engine.SLO_TTFT_MS, serving_engine.SLO_TPOT_MS)
    answered = report.rate_stats("requests answered", [opened.requests_per_s], "requests/s")
    detail = (f"lesson 11's open-loop run (hwopt.experiments.serving_engine.open_vs_closed): Q8_0, 4 slots, "
              f"{len(opened.records)} streamed requests, Poisson arrivals at {opened.rate_per_s:.3g} "
              f"requests/s (1.5x what 4 closed-loop users reached, {loop.closed.requests_per_s:.3g}); "
              f"goodput {good:.3g} requests/s of {opened.requests_per_s:.3g} answered; p90 TTFT "
              f"{opened.percentile_ms('ttft', 90):,.0f} ms, p90 TPOT "
              f"{opened.percentile_ms('tpot', 90):.1f} ms"
              + ("" if busy is None else f"; other work kept {busy:.2f} of {os.cpu_count()} cores busy "
                 "before the run"))
    if good > 0:
        row = report.fidelity_row(name, report.rate_stats("goodput", [good], "requests/s"), answered,
                                  goal=goal, note=detail)
    else:  # nothing met the SLO: a measured zero, which rate_stats (positive rates) cannot hold
        row = {**report.unavailable_row(name, detail, goal=goal, kind="fidelity"), "ratio": 0.0,
               "verdict": report.NO_GOAL, "baseline": answered}
    return row, detail


def measure(quick: bool) -> dict:
    """{"rows": the kernel-vs-llama.cpp rows and the goodput row, "notes": [...]}; rows read 'not available'
    with the reason where the kernel or the engine is not built here, or where a measurement failed."""
    kernel_names = [(name, goal) for name, goal, _, _ in kernel_row_names()]
    declared = [*kernel_names, GOODPUT_ROW]
    reason = unavailable_reason()
    if reason is not None:
        return {"rows": [report.unavailable_row(n, reason, goal=g) for n, g in declared], "notes": []}
    rows, notes = [], []
    for part, names in ((kernel_rows, kernel_names), (goodput_row, [GOODPUT_ROW])):
        try:
            got, note = part(quick)
        except Exception as exc:  # a failure of one part must not take the report down with it
            last = traceback.format_exception_only(exc)[-1].strip()
            rows += [report.unavailable_row(n, f"failed: {last[:200]}", goal=g) for n, g in names]
            continue
        rows += got if isinstance(got, list) else [got]
        notes += note if isinstance(note, list) else []
    return {"rows": rows, "notes": notes}
