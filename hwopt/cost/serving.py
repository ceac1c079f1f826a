"""Serving (lesson 3): dynamic batching of requests that arrive at random, simulated on a batch cost model;
and (lesson 8) continuous batching of prompts and answers in the same steps, with chunked prefill.

A batch of b requests takes overhead_ms + b * per_item_ms (see cost.batching). Requests arrive as a Poisson
process; the server starts a batch when it is free and either max_batch_size requests wait or the oldest has
waited max_wait_ms. A step of an LLM server that decodes d sequences and prefills p prompt tokens takes
max(weight read + d KV reads, (d + p) tokens of compute) (mixed_step_ms). Everything is deterministic for a
given seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hwopt import arguments, plots, widgets


@dataclass(frozen=True)
class ServingStats:
    """Result of one simulated run: latencies in ms (arrival -> answer), throughput in requests/s."""

    latencies_ms: np.ndarray
    batch_sizes: np.ndarray
    requests_per_s: float
    utilization: float  # fraction of the time the server was busy
    capacity_per_s: float  # most requests/s the server can answer (always full batches)
    arrival_rate_per_s: float

    @property
    def p50_ms(self) -> float:
        """Median latency (ms)."""
        return float(np.percentile(self.latencies_ms, 50))

    @property
    def p99_ms(self) -> float:
        """99th-percentile latency (ms): what the unluckiest 1% of users see."""
        return float(np.percentile(self.latencies_ms, 99))

    @property
    def mean_batch_size(self) -> float:
        """Average number of requests per batch."""
        return float(np.mean(self.batch_sizes))

    @property
    def overloaded(self) -> bool:
        """True when requests arrive faster than the server can answer them: the queue grows without end."""
        return self.arrival_rate_per_s >= self.capacity_per_s

    def __str__(self) -> str:
        warn = "  OVERLOADED: the queue grows without end" if self.overloaded else ""
        return (
            f"p50 {self.p50_ms:.1f} ms, p99 {self.p99_ms:.1f} ms, "
            f"throughput {self.requests_per_s:,.0f} req/s, "
            f"mean batch {self.mean_batch_size:.1f}, server busy {self.utilization:.0%}{warn}"
        )


def arrivals_ms(arrival_rate_per_s: float, n_requests: int, seed: int = 0) -> np.ndarray:
    """Arrival times (ms, increasing) of n_requests from a Poisson process at arrival_rate_per_s."""
    arrival_rate_per_s = arguments.positive("arrival_rate_per_s", arrival_rate_per_s)
    n_requests = arguments.count("n_requests", n_requests, "items")
    seed = arguments.count("seed", seed, "seed", minimum=0)
    gaps = np.random.default_rng(seed).exponential(1000.0 / arrival_rate_per_s, size=n_requests)
    return np.cumsum(gaps)


def _per_item(name: str, per_item_ms, overhead_ms: float) -> float:
    """A batch's cost per item (ms, >= 0: a flat line is a fit's answer for latencies that do not grow with
    the batch); with a zero overhead it must be > 0, or batches would cost nothing."""
    per_item_ms = arguments.positive(name, per_item_ms, allow_zero=True)
    if per_item_ms == 0 and overhead_ms == 0:
        raise ValueError(f"{name} must be > 0 when the overhead is 0 (a batch must cost something); got 0")
    return per_item_ms


def simulate_dynamic_batching(arrival_rate_per_s: float, max_batch_size: int, max_wait_ms: float,
                              overhead_ms: float, per_item_ms: float, *, n_requests: int = 2000,
                              seed: int = 0, batch_ms=None) -> ServingStats:
    """Simulate one server with dynamic batching; batch cost overhead_ms + b * per_item_ms (ms).

    batch_ms: measured latency (ms) of each batch size 1..max_batch_size (at least that many values), used
    instead of the overhead + per-item line where that line does not describe the measurements.
    """
    max_batch_size = arguments.count("max_batch_size", max_batch_size, "batch")
    max_wait_ms = arguments.positive("max_wait_ms", max_wait_ms, allow_zero=True)
    overhead_ms = arguments.positive("overhead_ms", overhead_ms, allow_zero=True)
    per_item_ms = _per_item("per_item_ms", per_item_ms, overhead_ms)
    if batch_ms is None:
        cost_ms = overhead_ms + per_item_ms * np.arange(max_batch_size + 1)
    else:
        cost_ms = arguments.finite_array("batch_ms", batch_ms, ndim=1, minimum=0, strict=True)
        if len(cost_ms) < max_batch_size:
            raise ValueError(f"batch_ms must give the latency of every batch size 1..{max_batch_size}; "
                             f"got {len(cost_ms)} values")
        cost_ms = np.concatenate([[0.0], cost_ms])
    arrive = arrivals_ms(arrival_rate_per_s, n_requests, seed)
    n = len(arrive)
    latencies = np.empty(n)
    sizes = []
    free_at = busy = 0.0
    i = 0
    while i < n:
        full_at = arrive[i + max_batch_size - 1] if i + max_batch_size - 1 < n else math.inf
        start = max(free_at, arrive[i], min(full_at, arrive[i] + max_wait_ms))
        j = min(i + max_batch_size, int(np.searchsorted(arrive, start, side="right")))
        duration = float(cost_ms[j - i])
        free_at = start + duration
        busy += duration
        latencies[i:j] = free_at - arrive[i:j]
        sizes.append(j - i)
        i = j
    span = free_at - arrive[0] + 1000.0 / arrival_rate_per_s  # first arrival happens after one mean gap
    return ServingStats(
        latencies_ms=latencies,
        batch_sizes=np.asarray(sizes),
        requests_per_s=n / (span / 1000.0),
        utilization=busy / span,
        capacity_per_s=max_batch_size / (cost_ms[max_batch_size] / 1000.0),
        arrival_rate_per_s=float(arrival_rate_per_s),
    )


def plot_latency_histogram(stats: ServingStats, ax=None, *, label: str | None = None):
    """Histogram of request latencies (ms) with p50 and p99 marked; returns the Figure."""
    arguments.instance("stats", stats, ServingStats)
    if label is not None:
        arguments.text("label", label, allow_empty=True)
    ax = plots.axes("latency (ms)", "requests", ax=ax, title=label)
    ax.hist(stats.latencies_ms, bins=40, color=plots.color(0), alpha=0.7)
    ax.axvline(stats.p50_ms, color=plots.color(2), label=f"p50 {stats.p50_ms:.1f} ms")
    ax.axvline(stats.p99_ms, color=plots.color(1), label=f"p99 {stats.p99_ms:.1f} ms")
    return plots.finish(ax)


def serving_report(arrival_rate_per_s: float, max_batch_size: int, max_wait_ms: float, overhead_ms: float,
                   per_item_ms: float, seed: int = 0, *, batch_ms=None) -> str:
    """Two lines: dynamic batching vs one-request-at-a-time at the same arrival rate (the slider callback);
    batch_ms as in simulate_dynamic_batching."""
    batched = simulate_dynamic_batching(arrival_rate_per_s, max_batch_size, max_wait_ms, overhead_ms,
                                        per_item_ms, seed=seed, batch_ms=batch_ms)
    single = simulate_dynamic_batching(arrival_rate_per_s, 1, 0.0, overhead_ms, per_item_ms, seed=seed,
                                       batch_ms=batch_ms)
    return (f"dynamic batching (max {max_batch_size}, wait {max_wait_ms:.3g} ms): {batched}\n"
            f"one request at a time:                {single}")


# ---- why continuous batching exists -----------------------------------------------------------------------


@dataclass(frozen=True)
class GenerationStats:
    """Text generation of many requests with one batch of slots: time (ms), tokens/s, mean finish time."""

    total_ms: float
    tokens_per_s: float
    mean_finish_ms: float
    slot_utilization: float  # fraction of slot-steps that produced a real token

    def __str__(self) -> str:
        return (f"{self.tokens_per_s:,.0f} tokens/s, mean request done after {self.mean_finish_ms:,.0f} ms, "
                f"slots busy {self.slot_utilization:.0%}")


def output_lengths(n_requests: int, mean_tokens: float, seed: int = 0) -> np.ndarray:
    """Random answer lengths (tokens >= 1): a geometric spread, as real chat answers vary a lot."""
    n_requests = arguments.count("n_requests", n_requests, "items")
    mean_tokens = arguments.between("mean_tokens", mean_tokens, 1, arguments.LIMITS["tokens"])
    seed = arguments.count("seed", seed, "seed", minimum=0)
    return np.random.default_rng(seed).geometric(1.0 / mean_tokens, size=n_requests)


def simulate_generation(lengths, max_batch_size: int, step_overhead_ms: float, step_per_item_ms: float, *,
                        continuous: bool) -> GenerationStats:
    """Generate len(lengths) answers token by token in batches of slots; all requests wait at time 0.

    Static batching: a batch runs until its longest answer is done, finished slots idle.
    Continuous batching: a finished slot takes the next waiting request at the very next step.
    One step costs step_overhead_ms + active_slots * step_per_item_ms.
    """
    lengths = arguments.finite_array("lengths", lengths, ndim=1, integer=True, minimum=1,
                                     maximum=arguments.LIMITS["tokens"])
    if lengths.sum() > arguments.LIMITS["items"]:
        raise ValueError(f"lengths must add up to at most {arguments.LIMITS['items']:,} tokens "
                         f"(hwopt.arguments.LIMITS['items']); got {lengths.sum():,}")
    max_batch_size = arguments.count("max_batch_size", max_batch_size, "batch")
    step_overhead_ms = arguments.positive("step_overhead_ms", step_overhead_ms, allow_zero=True)
    step_per_item_ms = _per_item("step_per_item_ms", step_per_item_ms, step_overhead_ms)
    continuous = arguments.boolean("continuous", continuous)
    queue = list(range(len(lengths)))[::-1]  # pop() takes the next request
    finish = np.zeros(len(lengths))
    slots: dict[int, int] = {}  # request -> tokens still to generate
    t = 0.0
    slot_steps = 0
    while queue or slots:
        if continuous or not slots:
            while queue and len(slots) < max_batch_size:
                r = queue.pop()
                slots[r] = int(lengths[r])
        active = sum(1 for left in slots.values() if left > 0)
        occupied = len(slots) if not continuous else active
        t += step_overhead_ms + occupied * step_per_item_ms
        slot_steps += max_batch_size
        for r in list(slots):
            if slots[r] > 0:
                slots[r] -= 1
                if slots[r] == 0:
                    finish[r] = t
        if continuous:
            slots = {r: left for r, left in slots.items() if left > 0}
        elif all(left == 0 for left in slots.values()):
            slots = {}
    tokens = int(lengths.sum())
    return GenerationStats(total_ms=t, tokens_per_s=tokens / (t / 1000.0),
                           mean_finish_ms=float(finish.mean()), slot_utilization=tokens / slot_steps)


def serving_explorer(overhead_ms: float, per_item_ms: float, seed: int = 0):
    """Sliders (arrival rate, max batch, max wait) -> p50/p99 latency and throughput on a batch cost model."""
    overhead_ms = arguments.positive("overhead_ms", overhead_ms, allow_zero=True)
    per_item_ms = _per_item("per_item_ms", per_item_ms, overhead_ms)
    seed = arguments.count("seed", seed, "seed", minimum=0)
    one_at_a_time = 1000.0 / (overhead_ms + per_item_ms)
    largest = 2**9  # the largest max batch offered
    ceiling = 1000.0 * largest / (overhead_ms + largest * per_item_ms)

    def show(arrival_rate_per_s, max_batch_size, max_wait_ms):
        print(serving_report(arrival_rate_per_s, max_batch_size, max_wait_ms, overhead_ms, per_item_ms, seed))
        stats = simulate_dynamic_batching(arrival_rate_per_s, max_batch_size, max_wait_ms, overhead_ms,
                                          per_item_ms, seed=seed)
        return plot_latency_histogram(stats, label=f"{arrival_rate_per_s:,.0f} requests/s, dynamic batching")

    return widgets.explore(
        show,
        arrival_rate_per_s=widgets.log_slider("arrival rate", one_at_a_time / 10, ceiling,
                                              min(2 * one_at_a_time, ceiling), unit="requests/s"),
        max_batch_size=widgets.dropdown("max batch", [2**i for i in range(10)], 32),
        max_wait_ms=widgets.float_slider("max wait", 0.0, max(1.0, 10 * overhead_ms), 2 * overhead_ms,
                                         unit="ms"),
    )


# ---- prefill and decode in one server: continuous batching with chunked prefill (lesson 8) ---------------


@dataclass(frozen=True)
class PhaseLatencyStats:
    """Per-request time to first token (ms) and every gap between two output tokens (ms) of one run."""

    ttft_ms: np.ndarray
    tpot_ms: np.ndarray  # time per output token: each gap between consecutive tokens of one request
    total_ms: float
    tokens_per_s: float
    chunk_tokens: int | None

    def percentile(self, which: str, q: float) -> float:
        """The q-th percentile (0-100) of 'ttft' or 'tpot', ms."""
        arguments.one_of("which", which, ("ttft", "tpot"))
        arguments.between("q", q, 0, 100)
        values = self.ttft_ms if which == "ttft" else self.tpot_ms
        return float(np.percentile(values, q)) if values.size else 0.0

    def __str__(self) -> str:
        chunk = "whole prompts" if self.chunk_tokens is None else f"chunks of {self.chunk_tokens:,} tokens"
        return (f"{chunk}: TTFT p50 {self.percentile('ttft', 50):,.1f} ms, p99 "
                f"{self.percentile('ttft', 99):,.1f} ms; TPOT p50 {self.percentile('tpot', 50):,.1f} ms, "
                f"p99 {self.percentile('tpot', 99):,.1f} ms, worst {self.percentile('tpot', 100):,.1f} ms; "
                f"{self.tokens_per_s:,.0f} output tokens/s")


def mixed_requests(n_requests: int, arrival_rate_per_s: float, short_prompt: int, long_prompt: int,
                   long_fraction: float, mean_output_tokens: float, seed: int = 0):
    """(arrivals_ms, prompt_lens, output_lens) of a mix: short prompts and a long_fraction of long ones."""
    short_prompt = arguments.count("short_prompt", short_prompt, "tokens")
    long_prompt = arguments.count("long_prompt", long_prompt, "tokens")
    long_fraction = arguments.fraction("long_fraction", long_fraction, allow_zero=True)
    mean_output_tokens = arguments.between("mean_output_tokens", mean_output_tokens, 1,
                                           arguments.LIMITS["tokens"])
    arrive = arrivals_ms(arrival_rate_per_s, n_requests, seed)
    is_long = np.random.default_rng(seed + 1).random(len(arrive)) < long_fraction
    prompts = np.where(is_long, long_prompt, short_prompt)
    return arrive, prompts, output_lengths(n_requests, mean_output_tokens, seed + 2)


def mixed_step_ms(decoding: int, prefill_tokens: int, weight_read_ms: float, token_compute_ms: float,
                  kv_read_per_seq_ms: float = 0.0, step_overhead_ms: float = 0.0) -> float:
    """Time of one step (ms) that makes a token for each of `decoding` sequences and prefills
    `prefill_tokens` prompt tokens: step_overhead_ms + max(weight_read_ms + kv_read_per_seq_ms * decoding,
    token_compute_ms * (decoding + prefill_tokens)). The step reads the weights once whatever its tokens (and
    each decoding sequence its KV cache), and computes every token; the slower of the two sets its time (the
    roofline), so tokens added to a memory-bound step cost nothing until its compute catches up."""
    decoding = arguments.count("decoding", decoding, "batch", minimum=0)
    prefill_tokens = arguments.count("prefill_tokens", prefill_tokens, "tokens", minimum=0)
    weight_read_ms = arguments.positive("weight_read_ms", weight_read_ms, allow_zero=True)
    token_compute_ms = arguments.positive("token_compute_ms", token_compute_ms)
    kv_read_per_seq_ms = arguments.positive("kv_read_per_seq_ms", kv_read_per_seq_ms, allow_zero=True)
    step_overhead_ms = arguments.positive("step_overhead_ms", step_overhead_ms, allow_zero=True)
    return _step_ms(decoding, prefill_tokens, weight_read_ms, token_compute_ms, kv_read_per_seq_ms,
                    step_overhead_ms)


def _step_ms(decoding, prefill_tokens, weight_read_ms, token_compute_ms, kv_read_per_seq_ms,
             step_overhead_ms) -> float:
    memory = weight_read_ms + kv_read_per_seq_ms * decoding
    return step_overhead_ms + max(memory, token_compute_ms * (decoding + prefill_tokens))


def tokens_at_ridge(weight_read_ms: float, token_compute_ms: float, decoding: int = 0,
                    kv_read_per_seq_ms: float = 0.0) -> int:
    """Prompt tokens a step of `decoding` sequences can prefill before its compute outlasts its memory reads
    (mixed_step_ms): the chunk size that rides on the weight read for free (0 when none does)."""
    weight_read_ms = arguments.positive("weight_read_ms", weight_read_ms, allow_zero=True)
    token_compute_ms = arguments.positive("token_compute_ms", token_compute_ms)
    decoding = arguments.count("decoding", decoding, "batch", minimum=0)
    kv_read_per_seq_ms = arguments.positive("kv_read_per_seq_ms", kv_read_per_seq_ms, allow_zero=True)
    memory = weight_read_ms + kv_read_per_seq_ms * decoding
    return max(0, math.floor(memory / token_compute_ms) - decoding)


def simulate_chunked_prefill(arrivals, prompt_lens, output_lens, max_batch_size: int, weight_read_ms: float,
                             token_compute_ms: float, chunk_tokens: int | None = None,
                             kv_read_per_seq_ms: float = 0.0,
                             step_overhead_ms: float = 0.0) -> PhaseLatencyStats:
    """Continuous batching of requests that each prefill a prompt, then decode output_lens tokens.

    Every step: waiting requests that have arrived take free slots; each decoding sequence makes one token;
    prompts are prefilled first-come first-served within a budget of chunk_tokens prompt tokens per step
    (None: a waiting prompt is prefilled whole in one step, and every decoding sequence waits for it).
    A request's first token comes at the end of the step that finishes its prompt. A step costs
    mixed_step_ms(decoding sequences, prompt tokens, weight_read_ms, token_compute_ms, kv_read_per_seq_ms,
    step_overhead_ms): the larger of reading the weights (and KV caches) and computing its tokens.
    """
    arrive = arguments.finite_array("arrivals", arrivals, ndim=1, minimum=0)
    prompts = arguments.finite_array("prompt_lens", prompt_lens, ndim=1, integer=True, minimum=1,
                                     maximum=arguments.LIMITS["tokens"])
    outputs = arguments.finite_array("output_lens", output_lens, ndim=1, integer=True, minimum=1,
                                     maximum=arguments.LIMITS["tokens"])
    if not arrive.size or not arrive.shape == prompts.shape == outputs.shape:
        raise ValueError(f"arrivals, prompt_lens and output_lens must be non-empty and equally long; got "
                         f"{arrive.size}, {prompts.size}, {outputs.size}")
    if np.any(np.diff(arrive) < 0):
        raise ValueError("arrivals must be in increasing order (ms)")
    if prompts.sum() + outputs.sum() > arguments.LIMITS["items"]:
        raise ValueError(f"prompt_lens and output_lens must add up to at most {arguments.LIMITS['items']:,} "
                         f"tokens (hwopt.arguments.LIMITS['items'])")
    max_batch_size = arguments.count("max_batch_size", max_batch_size, "batch")
    mixed_step_ms(0, 0, weight_read_ms, token_compute_ms, kv_read_per_seq_ms, step_overhead_ms)  # checks
    if chunk_tokens is not None:
        chunk_tokens = arguments.count("chunk_tokens", chunk_tokens, "tokens")
    if weight_read_ms + step_overhead_ms <= 0:
        raise ValueError("weight_read_ms or step_overhead_ms must be positive: a step takes time")
    n = arrive.size
    prompt_left, output_left = prompts.astype(np.int64), outputs.astype(np.int64)
    last_token = np.full(n, np.nan)
    ttft, gaps = np.zeros(n), []
    slots: list[int] = []  # admitted requests, in arrival order
    t, nxt = 0.0, 0
    while nxt < n or slots:
        if not slots and arrive[nxt] > t:
            t = float(arrive[nxt])  # idle until the next request
        while nxt < n and arrive[nxt] <= t and len(slots) < max_batch_size:
            slots.append(nxt)
            nxt += 1
        decoding = [r for r in slots if prompt_left[r] == 0]
        budget = math.inf if chunk_tokens is None else chunk_tokens
        prefilled = {}
        for r in slots:
            if prompt_left[r] and budget > 0:
                prefilled[r] = int(min(prompt_left[r], budget))
                budget -= prefilled[r]
        t += _step_ms(len(decoding), sum(prefilled.values()), weight_read_ms, token_compute_ms,
                      kv_read_per_seq_ms, step_overhead_ms)
        for r in decoding:
            gaps.append(t - last_token[r])
            last_token[r] = t
            output_left[r] -= 1
        for r, done in prefilled.items():
            prompt_left[r] -= done
            if prompt_left[r] == 0:  # the prefill's logits give the first output token
                ttft[r] = t - arrive[r]
                last_token[r] = t
                output_left[r] -= 1
        slots = [r for r in slots if output_left[r] > 0 or prompt_left[r] > 0]
    return PhaseLatencyStats(ttft, np.asarray(gaps), t, float(outputs.sum()) / (t / 1000.0), chunk_tokens)


def chunked_prefill_explorer(weight_read_ms: float, token_compute_ms: float, requests,
                             max_batch_size: int = 16, kv_read_per_seq_ms: float = 0.0,
                             step_overhead_ms: float = 0.0):
    """Slider (chunk size) -> TTFT and TPOT percentiles of `requests` (mixed_requests(...)) on the mixed-step
    cost model (simulate_chunked_prefill)."""
    arguments.instance("requests", requests, tuple)
    if len(requests) != 3:
        raise ValueError("requests must be mixed_requests(...)'s (arrivals_ms, prompt_lens, output_lens)")
    costs = {"kv_read_per_seq_ms": kv_read_per_seq_ms, "step_overhead_ms": step_overhead_ms}
    whole = simulate_chunked_prefill(*requests, max_batch_size, weight_read_ms, token_compute_ms,
                                     **costs)  # checks every argument once

    def show(chunk_tokens):
        chunked = simulate_chunked_prefill(*requests, max_batch_size, weight_read_ms, token_compute_ms,
                                           chunk_tokens, **costs)
        print(f"{whole}\n{chunked}")
        return plot_phase_latencies({"whole prompts": whole, f"chunks of {chunk_tokens}": chunked})

    longest = int(np.max(requests[1]))
    options = sorted({2**i for i in range(4, 14) if 2**i < longest} | {longest})
    return widgets.explore(show, chunk_tokens=widgets.dropdown("prefill chunk", options,
                                                               options[len(options) // 2], unit="tokens"))


def plot_phase_latencies(runs: dict, ax=None):
    """p50/p90/p99/p99.9 of TTFT and TPOT (ms, log) for runs {label: PhaseLatencyStats}; the Figure."""
    arguments.instance("runs", runs, dict)
    if not runs or not all(isinstance(s, PhaseLatencyStats) for s in runs.values()):
        raise ValueError("runs must be a non-empty {label: PhaseLatencyStats}")
    ax = plots.axes("percentile", "time (ms)", logy=True, ax=ax)
    qs = (50, 90, 99, 99.9)
    for i, (label, stats) in enumerate(runs.items()):
        for which, style in (("ttft", "-"), ("tpot", "--")):
            ys = [max(stats.percentile(which, q), 1e-3) for q in qs]
            ax.plot([q / 100 for q in qs], ys, style, marker="o",
                    color=plots.color(i), label=f"{which.upper()}, {label}")
    ax.set_xscale("logit")
    ax.set_xticks([q / 100 for q in qs], [f"p{q:g}" for q in qs])
    return plots.finish(ax)
