"""Lesson 11's experiments: the course's trained model served by llama.cpp's llama-server, measured live with
the course's load generator and set beside the course's cost models.

`trained_server(model, precision, **options)` is the server of the course's model (`python -m hwopt serve`
runs it). Each experiment starts the servers it needs, measures, stops them, and returns a result that plots
and explains itself: parallel slots against tokens/s and TPOT (continuous batching), prefix caching on and
off, the logical batch and micro-batch against the worst gap between tokens (chunked prefill), speculative
decoding with the trained draft, the KV cache in fp16 and int8 (Q8_0), the weights in F16, Q8_0 and Q4_0, and
open against closed loop. Every result can be saved to JSON and read back (`save`, `load_run`): where the
engine cannot be built, the lesson shows a recorded run.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hwopt import arguments, plots, widgets
from hwopt.cost import batching, footprint, phases, serving, speculative
from hwopt.kernels import llama_build
from hwopt.kernels.llama_server import GGML_TYPES, LlamaServer, ggml_type
from hwopt.machine import hardware, loadgen
from hwopt.models import checkpoint, gguf_export
from hwopt.models import tokenizer as course_tokenizer

__all__ = [
    "SLO_TTFT_MS",
    "SLO_TPOT_MS",
    "WEIGHT_PRECISIONS",
    "model_file",
    "trained_server",
    "unavailable_reason",
    "prompt",
    "shape",
    "slots_sweep",
    "prefix_caching",
    "chunked_prefill",
    "speculative_decoding",
    "kv_cache",
    "weight_formats",
    "open_vs_closed",
    "slo_explorer",
    "lesson_summary",
    "save",
    "load_run",
    "RECORDED_RUN",
]

SLO_TTFT_MS, SLO_TPOT_MS = (
    500.0,
    25.0,
)  # the lesson's service-level objective (goodput counts requests meeting it)
WEIGHT_PRECISIONS = ("fp16", "int8_g32", "int4_g32")  # llama.cpp's F16, Q8_0, Q4_0
DEFAULT_PRECISION = "int8_g32"
RECORDED_RUN = Path(__file__).resolve().parents[2] / "data" / "serving" / "recorded_run.json"


def unavailable_reason() -> str | None:
    """None when llama-server is built here, else why not (the lesson then shows the recorded run)."""
    return llama_build.unavailable_reason()


def model_file(model: str = "target", precision: str = DEFAULT_PRECISION) -> Path:
    """The course's model as a GGUF file in precision (fp16 / int8_g32 / int4_g32, or F16 / Q8_0 / Q4_0)."""
    return gguf_export.cached(model, ggml_type(precision))


def trained_server(model: str = "target", precision: str = DEFAULT_PRECISION, **options) -> LlamaServer:
    """A LlamaServer (not started) of the course's model ('target' or 'draft', or a .gguf path) in precision;
    options: LlamaServer's (port, threads, parallel, kv_precision, draft, ...)."""
    arguments.text("model", model)
    path = Path(model) if model.endswith(".gguf") else model_file(model, precision)
    return LlamaServer(path, **options)


# ---- prompts and the model's shape ------------------------------------------------------------------------


def _token_ids() -> list[int]:
    tok = course_tokenizer.load(checkpoint.WEIGHTS_DIR / "tokenizer.json")
    text = (checkpoint.WEIGHTS_DIR / "validation.txt").read_text(encoding="utf-8")
    return tok, tok.encode(text[:200_000]).ids


_TOKENS: list = []


def prompt(n_tokens: int, offset: int = 0) -> str:
    """About n_tokens tokens of the validation text (Python the model never trained on), from token offset."""
    n_tokens = arguments.count("n_tokens", n_tokens, "tokens")
    offset = arguments.count("offset", offset, "tokens", minimum=0)
    if not _TOKENS:
        _TOKENS.extend(_token_ids())
    tok, ids = _TOKENS
    if n_tokens > len(ids):
        raise ValueError(f"n_tokens must be at most {len(ids):,} (the validation text's tokens); "
                         f"got {n_tokens}")
    start = offset % (len(ids) - n_tokens + 1)  # an offset past the text's end wraps around
    return tok.decode(ids[start : start + n_tokens])


def shape(model: str = "target") -> footprint.ModelShape:
    """The course's model as a footprint.ModelShape (for the cost models)."""
    arguments.one_of("model", model, checkpoint.MODELS)
    c = checkpoint.read_config(checkpoint.resolve(model))
    return footprint.ModelShape(
        f"hwopt {model}",
        c.n_layers,
        c.d_model,
        c.n_heads,
        c.n_kv_heads,
        c.hidden,
        c.vocab_size,
        gated_mlp=True,
        tied_embeddings=c.tie_embeddings,
        max_seq_len=c.max_seq_len,
        head_dim=c.dim_per_head,
    )


def _warm(server: LlamaServer) -> None:
    server.complete(prompt(16, 5000), 8)


def _load(server, prompts, **kwargs) -> loadgen.LoadResult:
    kwargs.setdefault("extra", {}).setdefault("ignore_eos", True)
    return loadgen.run_load(server.base_url, prompts, check=server.check, progress=False, **kwargs)


# ---- 1. continuous batching: parallel slots ---------------------------------------------------------------


@dataclass(frozen=True)
class SlotsSweep:
    """Concurrent streams (one slot each) against output tokens/s and TPOT, with the additive step model
    (lesson 8: step = overhead + per-sequence cost x sequences) fitted on the first two points."""

    streams: tuple[int, ...]
    runs: tuple[loadgen.LoadResult, ...]

    @property
    def tpot_ms(self) -> list[float]:
        """Median time per output token of each run (ms): one decode step of that many sequences."""
        return [r.percentile_ms("tpot", 50) for r in self.runs]

    @property
    def tokens_per_s(self) -> list[float]:
        """Output tokens/s of each run, all streams together."""
        return [r.output_tokens_per_s for r in self.runs]

    def fit(self) -> batching.LatencyFit:
        """The step model fitted on the two smallest stream counts."""
        return batching.fit_latency_model(list(self.streams[:2]), self.tpot_ms[:2])

    def report(self) -> str:
        fit = self.fit()
        lines = [
            f"step model from {self.streams[0]} and {self.streams[1]} streams: {fit.overhead_ms:.2f} ms + "
            f"{fit.per_item_ms:.2f} ms per sequence",
            f"{'streams':>8s}{'TPOT (ms)':>11s}{'predicted':>11s}{'tokens/s':>10s}{'predicted':>11s}",
        ]
        for b, tpot, tps in zip(self.streams, self.tpot_ms, self.tokens_per_s, strict=True):
            step = fit.overhead_ms + fit.per_item_ms * b
            lines.append(f"{b:8d}{tpot:11.2f}{step:11.2f}{tps:10.0f}{1000 * b / step:11.0f}")
        return "\n".join(lines)

    def plot(self):
        fit = self.fit()
        ax = plots.axes("concurrent streams (slots in use)", "output tokens/s", logx=True)
        ax.plot(self.streams, self.tokens_per_s, "o-", color=plots.color(0), label="measured (llama-server)")
        predicted = [1000 * b / (fit.overhead_ms + fit.per_item_ms * b) for b in self.streams]
        ax.plot(
            self.streams, predicted, "--", color=plots.color(1), label="additive step model (fit on 2 points)"
        )
        ax.set_xticks(self.streams, [str(b) for b in self.streams])
        return plots.finish(ax)


def slots_sweep(streams=(1, 2, 4, 8), max_tokens: int = 32, precision: str = DEFAULT_PRECISION) -> SlotsSweep:
    """One server with max(streams) slots; for each count, that many requests at once (closed loop)."""
    arguments.instance("streams", streams, (list, tuple))
    streams = tuple(arguments.count(f"streams[{i}]", b, "batch") for i, b in enumerate(streams))
    if len(streams) < 2 or list(streams) != sorted(set(streams)):
        raise ValueError(f"streams must be at least two increasing counts; got {streams}")
    max_tokens = arguments.count("max_tokens", max_tokens, "tokens")
    runs = []
    with trained_server(precision=precision, parallel=max(streams), ctx_per_slot=128) as server:
        _warm(server)
        for b in streams:
            prompts = [prompt(12, 1000 + 50 * i) for i in range(b)]
            runs.append(
                _load(server, prompts, users=b, n_requests=2 * b, max_tokens=max_tokens, label=f"{b} streams")
            )
    return SlotsSweep(streams, tuple(runs))


# ---- 2. prefix caching ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrefixCaching:
    """TTFT of requests sharing a system prompt, with the engine's prompt cache on and off."""

    system_tokens: int
    question_tokens: int
    on: loadgen.LoadResult
    off: loadgen.LoadResult
    prefilled_on: int  # prompt tokens the engine computed for one request, cache on (its own count)
    prefilled_off: int

    def report(self) -> str:
        on, off = self.on.percentile_ms("ttft", 50), self.off.percentile_ms("ttft", 50)
        predicted = self.prefilled_on / self.prefilled_off
        return (
            f"shared system prompt of {self.system_tokens} tokens + a question of {self.question_tokens}\n"
            f"cache off: TTFT p50 {off:6.1f} ms, the engine prefilled {self.prefilled_off} tokens\n"
            f"cache on:  TTFT p50 {on:6.1f} ms, the engine prefilled {self.prefilled_on} tokens\n"
            f"TTFT on / off: measured {on / off:.2f}; tokens prefilled on / off (the prefill model: TTFT "
            f"proportional to tokens computed) {predicted:.2f}"
        )

    def plot(self):
        return loadgen.plot_latency_cdfs({"prompt cache off": self.off, "prompt cache on": self.on}, "ttft")


def prefix_caching(
    system_tokens: int = 384,
    question_tokens: int = 16,
    n_requests: int = 6,
    precision: str = DEFAULT_PRECISION,
) -> PrefixCaching:
    """One slot; requests that share a system prompt and differ in their question, one after the other."""
    system_tokens = arguments.count("system_tokens", system_tokens, "tokens")
    question_tokens = arguments.count("question_tokens", question_tokens, "tokens")
    n_requests = arguments.count("n_requests", n_requests, "items")
    system = prompt(system_tokens, 20_000)
    prompts = [system + prompt(question_tokens, 40_000 + 97 * i) for i in range(n_requests)]
    results, prefilled = {}, {}
    with trained_server(precision=precision, parallel=1) as server:
        _warm(server)
        for cached in (False, True):
            server.complete(prompts[-1], 1, cache_prompt=cached)  # the slot holds the system prompt (or not)
            results[cached] = _load(
                server,
                prompts,
                users=1,
                max_tokens=4,
                extra={"cache_prompt": cached},
                label=f"cache {'on' if cached else 'off'}",
            )
            answer = server.complete(prompts[0], 1, cache_prompt=cached)
            prefilled[cached] = int(answer["timings"]["prompt_n"])
    return PrefixCaching(
        system_tokens, question_tokens, results[True], results[False], prefilled[True], prefilled[False]
    )


# ---- 3. chunked prefill: the batch and the micro-batch against the worst gap between tokens ---------------


@dataclass(frozen=True)
class ChunkedPrefill:
    """Streams decoding while a long prompt arrives, per (batch, micro-batch) of the engine: the worst gap
    between two tokens of the decoding streams, and the long prompt's TTFT."""

    configs: tuple[tuple[int, int], ...]  # (batch_size, ubatch_size) tokens
    long_prompt_tokens: int
    runs: tuple[loadgen.LoadResult, ...]
    predicted_gap_ms: tuple[float, ...]  # lesson 8's simulate_chunked_prefill on the mixed-step roofline

    def worst_gap_ms(self, i: int) -> float:
        """The longest gap between two tokens of a decoding stream in run i (ms)."""
        i = arguments.between("i", i, 0, len(self.runs) - 1, integer=True)
        return max(float(np.max(r.itl_s)) * 1000 for r in self.runs[i].ok[:-1] if r.itl_s.size)

    def long_ttft_ms(self, i: int) -> float:
        """TTFT of the long prompt in run i (ms)."""
        i = arguments.between("i", i, 0, len(self.runs) - 1, integer=True)
        return self.runs[i].ok[-1].ttft_s * 1000

    def report(self) -> str:
        lines = [
            f"{'batch':>6s}{'micro':>7s}{'worst gap (ms)':>16s}{'predicted':>11s}{'long TTFT (ms)':>16s}"
        ]
        for i, (b, ub) in enumerate(self.configs):
            lines.append(
                f"{b:6d}{ub:7d}{self.worst_gap_ms(i):16.1f}{self.predicted_gap_ms[i]:11.1f}"
                f"{self.long_ttft_ms(i):16.1f}"
            )
        return "\n".join(lines)

    def plot_timeline(self, i: int = 0, ax=None):
        """When each token of each request arrived in run i (a dot per token), the long prompt last."""
        i = arguments.between("i", i, 0, len(self.configs) - 1, integer=True)
        b, ub = self.configs[i]
        ax = plots.axes("time (s)", "request", ax=ax, title=f"batch {b}, micro-batch {ub}")
        for row, record in enumerate(self.runs[i].records):
            label = "long prompt" if row == len(self.runs[i].records) - 1 else f"stream {row + 1}"
            ax.plot(
                record.token_times_s,
                [row] * len(record.token_times_s),
                "|",
                markersize=12,
                color=plots.color(row),
            )
            ax.plot([record.due_s], [row], "o", mfc="none", color=plots.color(row))
            ax.text(record.due_s, row + 0.25, label, fontsize=8)
        ax.set_yticks([])
        return plots.finish(ax, legend=False)

    def plot(self):
        ax = plots.axes("prefill chunk: logical batch (tokens)", "worst gap between tokens (ms)", logx=True)
        same = [i for i, (b, ub) in enumerate(self.configs) if b == ub]
        ax.plot(
            [self.configs[i][0] for i in same],
            [self.worst_gap_ms(i) for i in same],
            "o-",
            color=plots.color(0),
            label="measured, micro-batch = batch",
        )
        ax.plot(
            [self.configs[i][0] for i in same],
            [self.predicted_gap_ms[i] for i in same],
            "--",
            color=plots.color(1),
            label="lesson 8's model (mixed step)",
        )
        for i, (b, ub) in enumerate(self.configs):
            if b != ub:
                ax.plot([b], [self.worst_gap_ms(i)], "s", color=plots.color(2), label=f"micro-batch {ub}")
        return plots.finish(ax)


def chunked_prefill(
    configs=((32, 32), (512, 512), (512, 32)),
    streams: int = 3,
    long_prompt_tokens: int = 400,
    max_tokens: int = 40,
    costs: tuple[float, float, float] | None = None,
    precision: str = DEFAULT_PRECISION,
) -> ChunkedPrefill:
    """streams decode while a long prompt arrives 0.1 s later; one server per (batch, micro-batch) config.
    costs: (weight read per step, compute per token, KV read per decoding sequence) in ms for lesson 8's
    mixed-step simulation (default: the first run's median decode step as the weight read, and the long
    prompt's TTFT per token as the compute per token)."""
    arguments.instance("configs", configs, (list, tuple))
    if not configs:
        raise ValueError("configs must hold at least one (batch_size, ubatch_size) pair")
    for i, pair in enumerate(configs):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"configs[{i}] must be a (batch_size, ubatch_size) pair of token counts; "
                             f"got {pair!r}")
    configs = tuple(
        (arguments.count(f"configs[{i}][0]", b, "tokens"), arguments.count(f"configs[{i}][1]", ub, "tokens"))
        for i, (b, ub) in enumerate(configs)
    )
    streams = arguments.count("streams", streams, "batch")
    long_prompt_tokens = arguments.count("long_prompt_tokens", long_prompt_tokens, "tokens")
    max_tokens = arguments.count("max_tokens", max_tokens, "tokens")
    prompts = [prompt(8, 3000 + 40 * i) for i in range(streams)] + [prompt(long_prompt_tokens, 60_000)]
    arrivals = [0.0] * streams + [0.1]
    runs = []
    for b, ub in configs:
        with trained_server(
            precision=precision, parallel=streams + 1, ctx_per_slot=512, batch_size=b, ubatch_size=ub
        ) as server:
            _warm(server)
            run = _load(
                server,
                prompts,
                arrivals_s=arrivals,
                max_tokens=max_tokens,
                label=f"batch {b}, micro-batch {ub}",
            )
            runs.append(run)
    if costs is None:
        decode_ms = float(np.median(np.concatenate([r.itl_s for r in runs[0].ok[:-1]]))) * 1000
        per_token = (
            runs[-1].ok[-1].ttft_s * 1000 / long_prompt_tokens
            if configs[-1][0] >= long_prompt_tokens
            else runs[0].ok[-1].ttft_s * 1000 / long_prompt_tokens
        )
        costs = (decode_ms, per_token, 0.0)
    weight_read_ms, token_compute_ms, kv_read_per_seq_ms = costs
    predicted = []
    for b, _ in configs:
        sim = serving.simulate_chunked_prefill(
            np.array(arrivals) * 1000,
            [8] * streams + [long_prompt_tokens],
            [max_tokens] * (streams + 1),
            streams + 1,
            weight_read_ms,
            token_compute_ms,
            chunk_tokens=b,
            kv_read_per_seq_ms=kv_read_per_seq_ms,
        )
        predicted.append(sim.percentile("tpot", 100))
    return ChunkedPrefill(configs, long_prompt_tokens, tuple(runs), tuple(predicted))


# ---- 4. speculative decoding with the trained draft -------------------------------------------------------


@dataclass(frozen=True)
class SpeculativeRun:
    """Decode speed of the target alone, the draft alone, and the target with the draft proposing
    draft_max tokens per step; the draft's acceptance rate as the engine counted it."""

    draft_max: int
    target_tokens_per_s: float
    draft_tokens_per_s: float
    speculative_tokens_per_s: float
    drafted: int
    accepted: int

    @property
    def acceptance(self) -> float:
        """Accepted / drafted tokens."""
        return self.accepted / max(self.drafted, 1)

    @property
    def cost_ratio(self) -> float:
        """A draft step's time / a target step's (measured alone)."""
        return self.target_tokens_per_s / self.draft_tokens_per_s

    @property
    def predicted_speedup(self) -> float:
        """Lesson 10's model: E[tokens per step] / (1 + k c), with the measured acceptance and cost ratio."""
        return speculative.predicted_speedup(min(self.acceptance, 1.0), self.draft_max, self.cost_ratio)

    @property
    def measured_speedup(self) -> float:
        return self.speculative_tokens_per_s / self.target_tokens_per_s

    def report(self) -> str:
        return (
            f"target alone {self.target_tokens_per_s:,.0f} tokens/s; draft alone "
            f"{self.draft_tokens_per_s:,.0f} tokens/s (cost ratio c = {self.cost_ratio:.2f})\n"
            f"with the draft proposing up to {self.draft_max} tokens: {self.speculative_tokens_per_s:,.0f} "
            f"tokens/s; the target accepted {self.accepted} of {self.drafted} drafted tokens "
            f"({self.acceptance:.0%})\n"
            f"speed-up: measured {self.measured_speedup:.2f}x, lesson 10's model "
            f"{self.predicted_speedup:.2f}x"
        )


def _decode_speed(server: LlamaServer, prompts, max_tokens: int) -> tuple[float, int, int]:
    """(decode tokens/s by the engine's own clock, drafted, accepted) over prompts, one at a time."""
    tokens = ms = drafted = accepted = 0
    for text in prompts:
        timings = server.complete(text, max_tokens)["timings"]
        tokens += timings["predicted_n"]
        ms += timings["predicted_ms"]
        drafted += int(timings.get("draft_n", 0))
        accepted += int(timings.get("draft_n_accepted", 0))
    return 1000 * tokens / ms, drafted, accepted


def speculative_decoding(
    draft_max: int = 4, n_prompts: int = 2, max_tokens: int = 64, precision: str = DEFAULT_PRECISION
) -> SpeculativeRun:
    """Greedy decoding of n_prompts prompts: target alone, draft alone, target with the draft."""
    draft_max = arguments.count("draft_max", draft_max, "tokens")
    prompts = [prompt(24, 70_000 + 300 * i) for i in range(arguments.count("n_prompts", n_prompts, "items"))]
    max_tokens = arguments.count("max_tokens", max_tokens, "tokens")
    speeds = {}
    for name, model, draft in (
        ("target", "target", None),
        ("draft", "draft", None),
        ("both", "target", model_file("draft", precision)),
    ):
        with trained_server(model, precision, draft=draft, draft_max=draft_max) as server:
            _warm(server)
            speeds[name] = _decode_speed(server, prompts, max_tokens)
    return SpeculativeRun(
        draft_max,
        speeds["target"][0],
        speeds["draft"][0],
        speeds["both"][0],
        speeds["both"][1],
        speeds["both"][2],
    )


# ---- 5 and 6. bytes per step: the KV cache's format and the weights' format -------------------------------


@dataclass(frozen=True)
class FormatRun:
    """Decode speed (batch 1) per format of the KV cache or the weights, against the bytes a step reads."""

    what: str  # "KV cache" or "weights"
    precisions: tuple[str, ...]
    context_tokens: int
    tpot_ms: tuple[float, ...]  # the engine's own time per output token
    step_bytes: tuple[float, ...]  # weights + KV cache read per decode step (the cost model's)
    kv_bytes: tuple[float, ...]

    def report(self) -> str:
        base_t, base_b = self.tpot_ms[0], self.step_bytes[0]
        lines = [
            f"{self.what} format, batch 1, context ~{self.context_tokens} tokens",
            f"{'format':>10s}{'MB/step':>9s}{'KV MB':>8s}{'TPOT (ms)':>11s}{'time ratio':>12s}"
            f"{'bytes ratio':>13s}",
        ]
        for p, t, b, kv in zip(self.precisions, self.tpot_ms, self.step_bytes, self.kv_bytes, strict=True):
            lines.append(
                f"{GGML_TYPES[p]:>10s}{b / 1e6:9.2f}{kv / 1e6:8.2f}{t:11.3f}{t / base_t:12.2f}"
                f"{b / base_b:13.2f}"
            )
        return "\n".join(lines)

    def plot(self):
        ax = plots.axes("MB read per decode step (cost model)", "time per output token (ms)")
        for i, (p, t, b) in enumerate(zip(self.precisions, self.tpot_ms, self.step_bytes, strict=True)):
            ax.plot([b / 1e6], [t], "o", color=plots.color(i), label=f"{self.what} {GGML_TYPES[p]}")
        slope = self.tpot_ms[0] / self.step_bytes[0]
        xs = np.linspace(0, max(self.step_bytes) * 1.1, 20)
        ax.plot(xs / 1e6, slope * xs, ":", color="grey", label="time proportional to bytes")
        return plots.finish(ax)


def _format_run(what: str, precisions, prompt_tokens: int, max_tokens: int, weights_of, kv_of) -> FormatRun:
    arguments.instance("precisions", precisions, (list, tuple))
    precisions = tuple(
        next(k for k, v in GGML_TYPES.items() if v == ggml_type(p, f"precisions[{i}]"))
        for i, p in enumerate(precisions)
    )
    prompt_tokens = arguments.count("prompt_tokens", prompt_tokens, "tokens")
    max_tokens = arguments.count("max_tokens", max_tokens, "tokens")
    text = prompt(prompt_tokens, 90_000)
    model_shape = shape()
    tpot, step_bytes, kv_bytes = [], [], []
    for p in precisions:
        with trained_server(precision=weights_of(p), kv_precision=kv_of(p)) as server:
            _warm(server)
            timings = [server.complete(text, max_tokens, cache_prompt=False)["timings"] for _ in range(2)]
        tpot.append(min(t["predicted_per_token_ms"] for t in timings))
        context = prompt_tokens + max_tokens // 2
        cost = phases.decode_cost(model_shape, context, 1, weights_of(p), kv_of(p))
        step_bytes.append(cost.bytes)
        kv_bytes.append(cost.kv_bytes)
    return FormatRun(
        what, precisions, prompt_tokens + max_tokens // 2, tuple(tpot), tuple(step_bytes), tuple(kv_bytes)
    )


def kv_cache(precisions=("fp16", "int8_g32"), prompt_tokens: int = 384, max_tokens: int = 48) -> FormatRun:
    """Batch-1 decode at a long context with the KV cache in fp16 (F16) and int8 (Q8_0); weights Q8_0."""
    return _format_run(
        "KV cache", precisions, prompt_tokens, max_tokens, lambda p: DEFAULT_PRECISION, lambda p: p
    )


def weight_formats(precisions=WEIGHT_PRECISIONS, prompt_tokens: int = 16, max_tokens: int = 48) -> FormatRun:
    """Batch-1 decode with the weights in F16, Q8_0 and Q4_0; KV cache fp16."""
    return _format_run("weights", precisions, prompt_tokens, max_tokens, lambda p: p, lambda p: "fp16")


# ---- 7. open loop against closed loop ---------------------------------------------------------------------


@dataclass(frozen=True)
class LoopComparison:
    """The same server measured closed-loop (users) and open-loop (Poisson, faster than the closed loop
    went): what the closed loop's latencies leave out."""

    closed: loadgen.LoadResult
    opened: loadgen.LoadResult

    @property
    def runs(self) -> dict:
        return {self.closed.describe(): self.closed, self.opened.describe(): self.opened}

    def report(self) -> str:
        return loadgen.comparison_table(self.runs, SLO_TTFT_MS, SLO_TPOT_MS)

    def plot(self):
        return loadgen.plot_latency_cdfs(self.runs, "ttft")


def open_vs_closed(
    users: int = 4,
    n_requests: int = 16,
    load_factor: float = 1.5,
    max_tokens: int = 32,
    precision: str = DEFAULT_PRECISION,
) -> LoopComparison:
    """Closed loop with `users`, then open loop at load_factor x the closed loop's requests/s."""
    users = arguments.count("users", users, "batch")
    n_requests = arguments.count("n_requests", n_requests, "items")
    load_factor = arguments.positive("load_factor", load_factor, maximum=100)
    max_tokens = arguments.count("max_tokens", max_tokens, "tokens")
    prompts = [prompt(48, 110_000 + 60 * i) for i in range(n_requests)]
    with trained_server(precision=precision, parallel=users, ctx_per_slot=128) as server:
        _warm(server)
        closed = _load(server, prompts, users=users, max_tokens=max_tokens, label="closed")
        rate = load_factor * closed.requests_per_s
        opened = _load(server, prompts, rate_per_s=rate, max_tokens=max_tokens, label="open")
    return LoopComparison(closed, opened)


# ---- explore, summarize, record --------------------------------------------------------------------------


def slo_explorer(runs: dict):
    """Sliders (TTFT and TPOT objectives, ms) -> goodput of every run {label: LoadResult} measured above."""
    arguments.instance("runs", runs, dict)

    def show(ttft_ms, tpot_ms):
        print(loadgen.comparison_table(runs, ttft_ms, tpot_ms))
        ax = plots.axes("run", "goodput (requests/s meeting the SLO)")
        labels = list(runs)
        ax.bar(
            range(len(labels)),
            [r.goodput(ttft_ms, tpot_ms) for r in runs.values()],
            color=plots.color(0),
            label="goodput",
        )
        ax.bar(
            range(len(labels)),
            [r.requests_per_s for r in runs.values()],
            fill=False,
            edgecolor=plots.color(1),
            label="all answered requests/s",
        )
        ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
        return plots.finish(ax)

    return widgets.explore(
        show,
        ttft_ms=widgets.log_slider("TTFT objective", 10, 5000, SLO_TTFT_MS, unit="ms"),
        tpot_ms=widgets.log_slider("TPOT objective", 1, 200, SLO_TPOT_MS, unit="ms"),
    )


def lesson_summary(run: dict) -> str:
    """Lesson 11's summary, from the results of its run {name: result}."""
    arguments.instance("run", run, dict)
    lines = []
    if "slots" in run:
        s = run["slots"]
        lines.append(
            f"- Continuous batching: {s.streams[0]} stream {s.tokens_per_s[0]:,.0f} tokens/s, "
            f"{s.streams[-1]} streams {s.tokens_per_s[-1]:,.0f} tokens/s "
            f"({s.tokens_per_s[-1] / s.tokens_per_s[0]:.1f}x), TPOT {s.tpot_ms[0]:.1f} -> "
            f"{s.tpot_ms[-1]:.1f} ms."
        )
    if "prefix" in run:
        p = run["prefix"]
        lines.append(
            f"- Prefix caching: TTFT p50 {p.off.percentile_ms('ttft', 50):.0f} ms off, "
            f"{p.on.percentile_ms('ttft', 50):.0f} ms on ({p.prefilled_off} vs {p.prefilled_on} tokens "
            "prefilled)."
        )
    if "chunks" in run:
        c = run["chunks"]
        gaps = ", ".join(f"batch {b}/{ub}: {c.worst_gap_ms(i):.0f} ms" for i, (b, ub) in enumerate(c.configs))
        lines.append(
            f"- Chunked prefill, worst gap between tokens while a {c.long_prompt_tokens}-token prompt "
            f"arrives: {gaps}."
        )
    if "speculative" in run:
        sp = run["speculative"]
        lines.append(
            f"- Speculative decoding with the trained draft: {sp.target_tokens_per_s:,.0f} -> "
            f"{sp.speculative_tokens_per_s:,.0f} tokens/s ({sp.measured_speedup:.2f}x, acceptance "
            f"{sp.acceptance:.0%}; lesson 10's model {sp.predicted_speedup:.2f}x)."
        )
    for key in ("kv", "weights"):
        if key in run:
            f = run[key]
            said = ", ".join(
                f"{GGML_TYPES[p]} {t:.2f} ms" for p, t in zip(f.precisions, f.tpot_ms, strict=True)
            )
            lines.append(f"- {f.what} format, TPOT at batch 1: {said}.")
    if "loops" in run:
        lo = run["loops"]
        lines.append(
            f"- Open vs closed loop: TTFT p99 {lo.opened.percentile_ms('ttft', 99):,.0f} ms open at "
            f"{lo.opened.rate_per_s:.1f} requests/s, {lo.closed.percentile_ms('ttft', 99):,.0f} ms closed "
            f"({lo.closed.users} users); goodput at TTFT <= {SLO_TTFT_MS:g} ms and TPOT <= "
            f"{SLO_TPOT_MS:g} ms: {lo.opened.goodput(SLO_TTFT_MS, SLO_TPOT_MS):.2f} requests/s open."
        )
    return "\n".join(lines)


_TYPES = {
    cls.__name__: cls
    for cls in (
        SlotsSweep,
        PrefixCaching,
        ChunkedPrefill,
        SpeculativeRun,
        FormatRun,
        LoopComparison,
        loadgen.LoadResult,
        loadgen.RequestRecord,
    )
}


def _encode(value):
    if dataclasses.is_dataclass(value):
        return {
            "__type__": type(value).__name__,
            **{f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init},
        }
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _decode(value, as_tuple: bool = True):
    if isinstance(value, dict) and "__type__" in value:
        cls = _TYPES[value["__type__"]]
        return cls(**{k: _decode(v) for k, v in value.items() if k != "__type__"})
    if isinstance(value, list):
        items = [_decode(v) for v in value]
        return tuple(tuple(i) if isinstance(i, list) else i for i in items) if as_tuple else items
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    return value


def save(run: dict, path) -> Path:
    """Write a lesson run {name: result} to path as JSON, with this machine's description and the date."""
    arguments.instance("run", run, dict)
    path = Path(arguments.instance("path", path, (str, Path)))
    path.parent.mkdir(parents=True, exist_ok=True)
    info = hardware.cpu_info()
    meta = {
        "cpu": info.get("cpu_model", ""),
        "cores": info.get("physical_cores"),
        "date": time.strftime("%Y-%m-%d"),
        "engine": f"llama.cpp from {llama_build.SDIST} {llama_build.SDIST_VERSION}",
    }
    path.write_text(json.dumps({"machine": meta, "results": _encode(run)}, indent=1))
    return path


def load_run(path=RECORDED_RUN) -> tuple[dict, dict]:
    """(results {name: result}, the machine it ran on) of a run saved by `save`."""
    path = Path(arguments.instance("path", path, (str, Path)))
    if not path.is_file():
        raise ValueError(f"path must be a run saved by serving_engine.save; {str(path)!r} does not exist")
    data = json.loads(path.read_text())
    return _decode(data["results"]), data["machine"]
