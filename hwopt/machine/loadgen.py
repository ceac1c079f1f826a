"""A load generator for OpenAI-compatible servers (lesson 11): streamed requests sent open-loop (Poisson or a
trace of arrival times) or closed-loop (N users, each waiting for its answer before asking again), measured
per token as `vllm bench serve` and guidellm do.

Per request: TTFT (time to first token, from the moment the request was due), ITL (each gap between two
streamed tokens), TPOT (time per output token after the first: (end - first token) / (tokens - 1)) and
end-to-end latency. Per run: percentiles, output tokens/s, requests/s, and goodput: the requests/s that met an
SLO (TTFT <= x and TPOT <= y). Open loop keeps sending on schedule while the server is slow, so a stall shows
in every request that arrived during it; a closed loop sends less while the server is slow and measures from
when it sent, which hides the queue: coordinated omission. Requests go through httpx (asyncio), in a thread of
their own, so the generator also runs inside a notebook's event loop.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from hwopt import arguments, plots

__all__ = [
    "RequestRecord",
    "LoadResult",
    "LoadFailed",
    "poisson_arrivals_s",
    "percentile",
    "run_load",
    "plot_latency_cdfs",
    "comparison_table",
    "METRICS",
]

METRICS = {
    "ttft": "time to first token",
    "tpot": "time per output token",
    "itl": "inter-token latency",
    "e2e": "end-to-end latency",
}
QUANTILES = (50, 90, 99)


class LoadFailed(RuntimeError):
    """Every request of a run failed: the message gives the first error."""


@dataclass(frozen=True)
class RequestRecord:
    """One request's times, in s from the run's start: when it was due, sent, each streamed token, done."""

    due_s: float
    sent_s: float
    token_times_s: tuple[float, ...]
    end_s: float
    output_tokens: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the answer came whole, with at least one token."""
        return self.error is None and bool(self.token_times_s)

    @property
    def ttft_s(self) -> float:
        """Time to first token (s), from when the request was due: a client running late is counted."""
        return self.token_times_s[0] - self.due_s if self.ok else float("nan")

    @property
    def e2e_s(self) -> float:
        """End-to-end latency (s), from when the request was due to its last byte."""
        return self.end_s - self.due_s if self.ok else float("nan")

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first (s): (end - first token) / (tokens - 1); nan for one."""
        if not self.ok or self.output_tokens < 2:
            return float("nan")
        return (self.end_s - self.token_times_s[0]) / (self.output_tokens - 1)

    @property
    def itl_s(self) -> np.ndarray:
        """Every gap (s) between two streamed chunks of text."""
        return np.diff(self.token_times_s) if self.ok else np.empty(0)


def percentile(values, q: float) -> float:
    """The q-th percentile (0-100) of values (latencies, >= 0), linearly interpolated (numpy's default); nan
    for none."""
    values = arguments.finite_array("values", values, ndim=1, minimum=0, allow_empty=True)
    q = arguments.between("q", q, 0, 100)
    return float(np.percentile(values, q)) if len(values) else float("nan")


@dataclass(frozen=True)
class LoadResult:
    """A run: its requests, how they were sent ('open', at rate_per_s; or 'closed', with `users`), and the
    span
    from the first due time to the last answer (s)."""

    records: tuple[RequestRecord, ...]
    mode: str
    rate_per_s: float | None = None
    users: int | None = None
    label: str = ""
    span_s: float = field(init=False)

    def __post_init__(self):
        ends = [r.end_s for r in self.records]
        first = min((r.due_s for r in self.records), default=0.0)
        object.__setattr__(self, "span_s", max(max(ends, default=0.0) - first, 1e-9))

    @property
    def ok(self) -> list[RequestRecord]:
        """The requests answered whole."""
        return [r for r in self.records if r.ok]

    @property
    def errors(self) -> list[str]:
        """The errors of the failed requests."""
        return [r.error or "no token streamed" for r in self.records if not r.ok]

    def values_ms(self, metric: str) -> np.ndarray:
        """Every value (ms) of 'ttft', 'tpot', 'itl' or 'e2e' over the answered requests (itl: every gap)."""
        arguments.one_of("metric", metric, METRICS)
        if metric == "itl":
            gaps = [r.itl_s for r in self.ok]
            return 1000 * (np.concatenate(gaps) if gaps else np.empty(0))
        return 1000 * np.array([getattr(r, f"{metric}_s") for r in self.ok], dtype=float)

    def percentile_ms(self, metric: str, q: float) -> float:
        """The q-th percentile of metric (ms), over the requests where it is defined (TPOT needs 2 tokens)."""
        values = self.values_ms(metric)
        return percentile(values[np.isfinite(values)], q)

    @property
    def output_tokens_per_s(self) -> float:
        """Output tokens of the answered requests / the run's span."""
        return sum(r.output_tokens for r in self.ok) / self.span_s

    @property
    def requests_per_s(self) -> float:
        """Answered requests / the run's span."""
        return len(self.ok) / self.span_s

    def goodput(self, ttft_ms: float, tpot_ms: float) -> float:
        """Requests/s that met the SLO: TTFT <= ttft_ms and TPOT <= tpot_ms (one token meets any TPOT)."""
        ttft_ms = arguments.positive("ttft_ms", ttft_ms)
        tpot_ms = arguments.positive("tpot_ms", tpot_ms)
        met = [r for r in self.ok if 1000 * r.ttft_s <= ttft_ms and not 1000 * r.tpot_s > tpot_ms]
        return len(met) / self.span_s

    def describe(self) -> str:
        """How the requests were sent."""
        how = (
            f"open loop, {self.rate_per_s:g} requests/s"
            if self.mode == "open" and self.rate_per_s
            else "open loop, a trace"
            if self.mode == "open"
            else f"closed loop, {self.users} users"
        )
        return f"{self.label + ': ' if self.label else ''}{how}"

    def table(self) -> str:
        """p50/p90/p99 of each metric (ms), throughput and failures."""
        lines = [
            f"{self.describe()}: {len(self.ok)} of {len(self.records)} requests answered in "
            f"{self.span_s:.2f} s; {self.output_tokens_per_s:,.0f} output tokens/s, "
            f"{self.requests_per_s:.2f} requests/s",
            f"{'':24s}" + "".join(f"{'p' + str(q):>10s}" for q in QUANTILES) + f"{'max':>10s}",
        ]
        for metric, name in METRICS.items():
            values = [self.percentile_ms(metric, q) for q in (*QUANTILES, 100)]
            lines.append(f"{name + ' (ms)':24s}" + "".join(f"{v:10.1f}" for v in values))
        if self.errors:
            lines.append(f"{len(self.errors)} failed, first: {self.errors[0]}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def comparison_table(results: dict, ttft_ms: float | None = None, tpot_ms: float | None = None) -> str:
    """One row per run {label: LoadResult}: TTFT and TPOT p50/p99 (ms), tokens/s, and goodput at the SLO."""
    arguments.instance("results", results, dict)
    if ttft_ms is not None:
        arguments.positive("ttft_ms", ttft_ms)
    if tpot_ms is not None:
        arguments.positive("tpot_ms", tpot_ms)
    slo = ttft_ms is not None and tpot_ms is not None
    head = (
        f"{'run':30s}{'TTFT p50':>10s}{'p99':>8s}{'TPOT p50':>10s}{'p99':>8s}{'ITL max':>9s}{'tok/s':>8s}"
        + (f"{'goodput':>10s}" if slo else "")
    )
    rows = [head]
    for label, r in results.items():
        arguments.instance(f"results[{label!r}]", r, LoadResult)
        row = (
            f"{str(label)[:29]:30s}{r.percentile_ms('ttft', 50):10.1f}{r.percentile_ms('ttft', 99):8.1f}"
            f"{r.percentile_ms('tpot', 50):10.2f}{r.percentile_ms('tpot', 99):8.2f}"
            f"{r.percentile_ms('itl', 100):9.1f}{r.output_tokens_per_s:8.0f}"
        )
        rows.append(row + (f"{r.goodput(ttft_ms, tpot_ms):8.2f}/s" if slo else ""))
    if slo:
        rows.append(f"goodput: requests/s with TTFT <= {ttft_ms:g} ms and TPOT <= {tpot_ms:g} ms")
    return "\n".join(rows)


def poisson_arrivals_s(rate_per_s: float, n_requests: int, seed: int = 0) -> np.ndarray:
    """Due times (s, increasing, the first at 0) of n_requests from a Poisson process at rate_per_s."""
    rate_per_s = arguments.positive("rate_per_s", rate_per_s)
    n_requests = arguments.count("n_requests", n_requests, "items")
    seed = arguments.count("seed", seed, "seed", minimum=0)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_per_s, size=n_requests)
    return np.concatenate([[0.0], np.cumsum(gaps[:-1])])


def _body(endpoint: str, model: str, prompt: str, max_tokens: int, extra: dict) -> dict:
    base = {
        "model": model,
        "max_tokens": max_tokens,
        "stream": True,
        "temperature": 0.0,
        "stream_options": {"include_usage": True},
        **extra,
    }
    if endpoint == "chat":
        return {**base, "messages": [{"role": "user", "content": prompt}]}
    return {**base, "prompt": prompt}


def _text_of(chunk: dict) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    return choice.get("text") or (choice.get("delta") or {}).get("content") or ""


async def _one(client, url: str, body: dict, start: float, due_s: float, timeout_s: float) -> RequestRecord:
    """Send one streamed request at once; its record (times relative to start, a perf_counter)."""
    import httpx

    sent = time.perf_counter() - start
    times, usage, error = [], None, None
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", url, json=body) as answer:
                if answer.status_code != 200:
                    text = (await answer.aread()).decode(errors="replace")[:200]
                    error = f"HTTP {answer.status_code}: {text}"
                else:
                    async for line in answer.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        data = line[5:].strip()
                        if data == "[DONE]":
                            continue  # the stream ends when the server closes it
                        chunk = json.loads(data)
                        if _text_of(chunk):
                            times.append(time.perf_counter() - start)
                        usage = chunk.get("usage") or usage
    except TimeoutError:
        error = f"timed out: no complete answer within {timeout_s:g} s"
    except httpx.HTTPError as err:
        error = f"{type(err).__name__}: {err or 'the connection failed'}"
    end = time.perf_counter() - start
    tokens = int(usage["completion_tokens"]) if usage and usage.get("completion_tokens") else len(times)
    return RequestRecord(due_s, sent, tuple(times), end, tokens, error)


async def _run(url, bodies, due_s, users, timeout_s, progress) -> list[RequestRecord]:
    import httpx

    # A connection per request: a kept-alive one that the server closed meanwhile fails the next request
    # sent on it ("server disconnected without sending a response"); connecting on 127.0.0.1 takes ~0.1 ms.
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    records: list[RequestRecord] = []
    bar = tqdm(total=len(bodies), desc="requests", unit="req", disable=not progress, leave=False)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(timeout_s)) as client:
        start = time.perf_counter()

        async def done(coro):
            record = await coro
            records.append(record)
            bar.update(1)

        if users is None:  # open loop: each request at its due time, whatever the others do
            tasks = []
            for body, due in zip(bodies, due_s, strict=True):
                delay = due - (time.perf_counter() - start)
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(done(_one(client, url, body, start, due, timeout_s))))
            await asyncio.gather(*tasks)
        else:  # closed loop: each user sends its next request when its answer is done
            queue = iter(bodies)
            lock = asyncio.Lock()

            async def user():
                while True:
                    async with lock:
                        body = next(queue, None)
                    if body is None:
                        return
                    now = time.perf_counter() - start
                    await done(_one(client, url, body, start, now, timeout_s))

            await asyncio.gather(*(user() for _ in range(users)))
    bar.close()
    return sorted(records, key=lambda r: r.due_s)


def run_load(
    base_url: str,
    prompts,
    *,
    rate_per_s: float | None = None,
    arrivals_s=None,
    users: int | None = None,
    n_requests: int | None = None,
    max_tokens: int = 32,
    endpoint: str = "completions",
    model: str = "model",
    extra: dict | None = None,
    timeout_s: float = 60.0,
    seed: int = 0,
    progress: bool = True,
    check=None,
    label: str = "",
) -> LoadResult:
    """Send n_requests streamed requests (prompts taken in turn) to an OpenAI-compatible server at base_url
    (".../v1") and measure each token; a LoadResult.

    Open loop: rate_per_s (Poisson arrivals, seeded) or arrivals_s (a trace of due times, s). Closed loop:
    users (each sends its next request when its answer is done). endpoint: 'completions' or 'chat'. extra:
    more fields of every request body. check: called after a run with failures (LlamaServer.check, which
    says when the engine died). LoadFailed when every request failed.
    """
    base_url = arguments.text("base_url", base_url).rstrip("/")
    arguments.instance("prompts", prompts, (list, tuple))
    if not prompts:
        raise ValueError("prompts must hold at least one prompt")
    for i, prompt in enumerate(prompts):
        arguments.text(f"prompts[{i}]", prompt)
    modes = [rate_per_s is not None, arrivals_s is not None, users is not None]
    if sum(modes) != 1:
        raise ValueError(
            "give exactly one of rate_per_s (open loop, Poisson), arrivals_s (open loop, a trace) "
            "and users (closed loop)"
        )
    if arrivals_s is not None:
        due = arguments.finite_array("arrivals_s", arrivals_s, ndim=1, minimum=0)
        due = np.asarray(due, dtype=float)
        if due.size == 0 or np.any(np.diff(due) < 0):
            raise ValueError("arrivals_s must be a non-empty increasing array of due times (s)")
        n_requests = due.size if n_requests is None else n_requests
    n_requests = arguments.count(
        "n_requests", n_requests if n_requests is not None else len(prompts), "items"
    )
    if rate_per_s is not None:
        due = poisson_arrivals_s(rate_per_s, n_requests, seed)
    if arrivals_s is not None and due.size != n_requests:
        raise ValueError(f"n_requests must equal len(arrivals_s) ({due.size}); got {n_requests}")
    if users is not None:
        users = arguments.count("users", users, "batch")
    seed = arguments.count("seed", seed, "seed", minimum=0)
    max_tokens = arguments.count("max_tokens", max_tokens, "tokens")
    arguments.one_of("endpoint", endpoint, ("completions", "chat"))
    arguments.text("model", model)
    arguments.text("label", label, allow_empty=True)
    extra = dict(arguments.instance("extra", extra, dict)) if extra is not None else {}
    timeout_s = arguments.positive("timeout_s", timeout_s, maximum=arguments.LIMITS["seconds"])
    progress = arguments.boolean("progress", progress)
    if check is not None:
        arguments.function("check", check)
    url = f"{base_url}/{'chat/completions' if endpoint == 'chat' else 'completions'}"
    bodies = [_body(endpoint, model, prompts[i % len(prompts)], max_tokens, extra) for i in range(n_requests)]
    records = _in_thread(_run(url, bodies, None if users else due, users, timeout_s, progress))
    result = LoadResult(tuple(records), "closed" if users else "open", rate_per_s, users, label)
    if result.errors and check is not None:
        check()
    if not result.ok:
        raise LoadFailed(f"all {n_requests} requests to {url} failed; the first: {result.errors[0]}")
    return result


def _in_thread(coro):
    """Run coro on an event loop of its own thread (a notebook's kernel runs one already); Ctrl-C cancels."""
    box: dict = {}
    loop = asyncio.new_event_loop()

    def work():
        try:
            box["value"] = loop.run_until_complete(coro)
        except BaseException as error:  # handed to the caller
            box["error"] = error
        finally:
            loop.close()

    thread = threading.Thread(target=work, name="hwopt-loadgen", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.1)
    except KeyboardInterrupt:
        for task in asyncio.all_tasks(loop):
            loop.call_soon_threadsafe(task.cancel)
        thread.join(5)
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]


def plot_latency_cdfs(results: dict, metric: str = "ttft", ax=None):
    """The distribution (CDF) of metric (ms, log) for each run {label: LoadResult}; the Figure."""
    arguments.instance("results", results, dict)
    arguments.one_of("metric", metric, METRICS)
    ax = plots.axes(
        f"{METRICS[metric]} (ms)",
        "fraction of requests" if metric != "itl" else "fraction of gaps",
        logx=True,
        ax=ax,
    )
    for i, (label, result) in enumerate(results.items()):
        arguments.instance(f"results[{label!r}]", result, LoadResult)
        values = np.sort(result.values_ms(metric))
        values = values[np.isfinite(values)]  # TPOT of a one-token answer
        if values.size:
            ax.step(
                np.maximum(values, 1e-3),
                np.arange(1, values.size + 1) / values.size,
                where="post",
                color=plots.color(i),
                label=f"{label} (p99 {percentile(values, 99):,.1f} ms)",
            )
    return plots.finish(ax)
