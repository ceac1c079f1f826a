"""Attention as fusion (lesson 10): the N x N score matrix that naive attention writes, and the tiling that
removes it.

Naive attention, softmax(Q K^T / sqrt(d)) V, materialises the scores S = Q K^T (heads x N x N) and the
probabilities P = softmax(S), each as big: written by the first matmul, read and written by the softmax, read
by the second matmul (SCORE_PASSES), and two fresh buffers of that size (SCORE_BUFFERS). A fused kernel
(torch.nn.functional.scaled_dot_product_attention, FlashAttention) works on tiles of keys with an online
softmax, so the N x N matrix never exists. tiled_attention is that algorithm in plain torch, the explanation.
Shapes: q, k, v (batch, heads, seq_len, head_dim), float32.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from hwopt import arguments, plots
from hwopt.machine import bench

SCORE_PASSES = 4  # S written; S read, P written (softmax); P read (P V)
SCORE_BUFFERS = 2  # S and P alive together while the softmax runs
BLOCK = 256  # rows and columns of one tile of tiled_attention
VARIANTS = ("naive", "sdpa", "tiled")


def score_matrix_bytes(seq_len: int, n_heads: int = 4, batch: int = 1, bytes_per_element: int = 4) -> int:
    """Bytes of one N x N score matrix for every head: batch x heads x N^2 x bytes per element."""
    n = arguments.count("seq_len", seq_len, "tokens")
    h = arguments.count("n_heads", n_heads, "dimension")
    b = arguments.count("batch", batch, "batch")
    e = arguments.between("bytes_per_element", bytes_per_element, 1, 8, integer=True)
    return b * h * n * n * e


def attention_inputs(seq_len: int, n_heads: int = 4, head_dim: int = 64, batch: int = 1, seed: int = 0,
                     device="cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded random fp32 q, k, v of shape (batch, n_heads, seq_len, head_dim) on device."""
    n = arguments.count("seq_len", seq_len, "tokens")
    h = arguments.count("n_heads", n_heads, "dimension")
    d = arguments.count("head_dim", head_dim, "dimension")
    b = arguments.count("batch", batch, "batch")
    generator = torch.Generator().manual_seed(arguments.count("seed", seed, "seed", minimum=0))
    device = bench.resolve_device(device)
    return tuple(torch.randn(b, h, n, d, generator=generator).to(device) for _ in range(3))


def _check_qkv(q, k, v) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        arguments.instance(name, t, torch.Tensor)
        if t.dim() != 4 or not t.is_floating_point():
            raise ValueError(f"{name} must be a floating (batch, heads, seq_len, head_dim) tensor; "
                             f"got {t.dtype} of shape {tuple(t.shape)}")
        arguments.finite_array(name, t, ndim=4)
    if q.shape[:2] != k.shape[:2] or k.shape != v.shape or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q, k and v must agree in batch, heads and head_dim (k and v in everything); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v, materialising the (batch, heads, N, N) scores and probabilities."""
    _check_qkv(q, k, v)
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-1, -2)
    return torch.softmax(scores, dim=-1) @ v


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention: the fused kernel (flash-style where available)."""
    _check_qkv(q, k, v)
    return F.scaled_dot_product_attention(q, k, v)


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int = BLOCK) -> torch.Tensor:
    """FlashAttention's algorithm in plain torch: for each tile of queries, walk the tiles of keys keeping a
    running row maximum m, a running sum l of exp(s - m) and an unnormalised output o; rescale all three
    when m grows. Memory: one block x block tile of scores per head, never N x N."""
    _check_qkv(q, k, v)
    block = arguments.count("block", block, "tokens")
    scale, n = q.shape[-1] ** -0.5, k.shape[-2]
    out = torch.empty_like(q)
    for i in range(0, q.shape[-2], block):
        qi = q[..., i:i + block, :] * scale
        m = torch.full(qi.shape[:-1] + (1,), -math.inf, dtype=q.dtype, device=q.device)
        l = torch.zeros_like(m)  # noqa: E741 - the paper's name
        o = torch.zeros_like(qi)
        for j in range(0, n, block):
            s = qi @ k[..., j:j + block, :].transpose(-1, -2)  # (batch, heads, block, block): one tile
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            p = torch.exp(s - m_new)
            correction = torch.exp(m - m_new)  # earlier tiles were summed against a smaller maximum
            l = l * correction + p.sum(dim=-1, keepdim=True)  # noqa: E741
            o = o * correction + p @ v[..., j:j + block, :]
            m = m_new
        out[..., i:i + block, :] = o / l
    return out


ATTENTION: dict[str, Callable] = {"naive": naive_attention, "sdpa": sdpa, "tiled": tiled_attention}


def max_abs_difference(q, k, v) -> dict[str, float]:
    """{variant: max |variant - oracle|} on the same inputs; the oracle is naive attention in float64."""
    _check_qkv(q, k, v)
    with torch.inference_mode():
        oracle = naive_attention(q.double(), k.double(), v.double())
        return {name: float((fn(q, k, v).double() - oracle).abs().max()) for name, fn in ATTENTION.items()}


@contextlib.contextmanager
def _quiet_stderr():
    """Send the profiler's start and stop log lines (C++ writes them to descriptor 2) to /dev/null."""
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def peak_memory_bytes(fn: Callable[[], object], device="cpu") -> int:
    """Peak bytes PyTorch's allocator held during fn() beyond what it held before: on CUDA from
    torch.cuda.max_memory_allocated; on a CPU by replaying the allocations and frees torch.profiler records
    (profile_memory=True). Both count tensors (and kernels' scratch buffers) the allocator hands out, not the
    process's RSS."""
    arguments.function("fn", fn)
    device = bench.resolve_device(device)
    if device.startswith("cuda"):
        bench.sync(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = fn()
        bench.sync(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del result
        return int(peak)

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    del result
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    held = peak = 0
    for e in events:
        held += e.nbytes()  # negative for a free
        peak = max(peak, held)
    return int(peak)


@dataclass(frozen=True)
class AttentionPoint:
    """One sequence length: interleaved timings and measured peak memory of each variant."""

    seq_len: int
    n_heads: int
    head_dim: int
    times: dict[str, bench.Measurement]
    peak_bytes: dict[str, int]

    @property
    def score_bytes(self) -> int:
        """Bytes of the N x N scores of every head (batch 1, fp32)."""
        return score_matrix_bytes(self.seq_len, self.n_heads)

    def speedup(self, variant: str = "sdpa") -> float:
        """How many times faster variant is than naive attention (medians of the same run)."""
        arguments.one_of("variant", variant, self.times)
        return bench.speedup(self.times["naive"], self.times[variant])


def measure_attention(seq_lens: Sequence[int] = (512, 1024, 2048, 4096), n_heads: int = 4,
                      head_dim: int = 64, variants: Sequence[str] = ("naive", "sdpa"), device="cpu",
                      repeats: int = 3) -> list[AttentionPoint]:
    """For each sequence length: time the variants interleaved (bench.compare), measure their peak memory."""
    lens = arguments.finite_array("seq_lens", seq_lens, ndim=1, integer=True, minimum=1, maximum=1 << 15)
    arguments.instance("variants", variants, (list, tuple))
    for i, name in enumerate(variants):
        arguments.one_of(f"variants[{i}]", name, VARIANTS)
    if "naive" not in variants:
        raise ValueError("variants must include 'naive', the baseline")
    arguments.count("repeats", repeats, "repeats")
    points = []
    for n in lens.tolist():
        q, k, v = attention_inputs(n, n_heads, head_dim, device=device)
        fns = {name: (lambda f=ATTENTION[name], q=q, k=k, v=v: f(q, k, v)) for name in variants}
        with torch.inference_mode():
            times = bench.compare(fns, device=device, warmup=1, repeats=repeats, number=1)
            peaks = {name: peak_memory_bytes(fn, device) for name, fn in fns.items()}
        points.append(AttentionPoint(n, n_heads, head_dim, times, peaks))
    return points


def fresh_memory_gbs(n_bytes: int = 1 << 27, device="cpu", repeats: int = 3) -> float | None:
    """GB/s at which a fresh tensor of n_bytes is first written (page faults on a CPU), beyond the time to
    write one that is already mapped: n_bytes / (fresh fill time - reused fill time); None when a fresh
    tensor cost nothing measurable (a caching allocator reused memory, as on a GPU)."""
    n = arguments.count("n_bytes", n_bytes, "bytes", minimum=4) // 4
    device = bench.resolve_device(device)
    arguments.count("repeats", repeats, "repeats")
    reused = torch.empty(n, device=device)
    fns = {"fresh": lambda: torch.empty(n, device=device).fill_(1.0), "reused": lambda: reused.fill_(1.0)}
    m = bench.compare(fns, device=device, warmup=1, repeats=repeats, number=1)
    extra_s = m["fresh"].median_s - m["reused"].median_s
    return 4 * n / extra_s / 1e9 if extra_s > 0 else None


def predicted_naive_extra_s(seq_len: int, n_heads: int, bandwidth_gbs: float,
                            fresh_gbs: float | None = None) -> float:
    """Seconds naive attention spends on its score matrix beyond a fused kernel: SCORE_PASSES passes over it
    at the memory bandwidth, plus SCORE_BUFFERS fresh buffers of it at fresh_gbs (None: memory reused)."""
    nbytes = score_matrix_bytes(seq_len, n_heads)
    bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    fresh_s = 0.0
    if fresh_gbs is not None:
        fresh_s = SCORE_BUFFERS * nbytes / (arguments.positive("fresh_gbs", fresh_gbs) * 1e9)
    return SCORE_PASSES * nbytes / (bandwidth_gbs * 1e9) + fresh_s


def attention_table(points: Sequence[AttentionPoint], bandwidth_gbs: float,
                    fresh_gbs: float | None = None) -> str:
    """Per sequence length: score-matrix MB, each variant's time and peak MB, sdpa's speedup, and the naive
    extra time predicted from the score bytes against the one measured (naive - sdpa)."""
    arguments.instance("points", points, (list, tuple))
    if not points or not all(isinstance(p, AttentionPoint) for p in points):
        raise ValueError("points must be a non-empty list of AttentionPoint (from measure_attention)")
    predicted_naive_extra_s(1, 1, bandwidth_gbs, fresh_gbs)  # checks both rates
    names = list(points[0].times)
    head = f"{'N':>6}{'scores MB':>11}" + "".join(f"{n + ' ms':>11}{n + ' MB':>11}" for n in names)
    lines = [head + f"{'sdpa x':>8}{'extra ms pred':>15}{'meas':>8}"]
    for p in points:
        row = f"{p.seq_len:>6}{p.score_bytes / 1e6:>11.1f}"
        row += "".join(f"{p.times[n].median_ms:>11.1f}{p.peak_bytes[n] / 1e6:>11.1f}" for n in names)
        predicted = predicted_naive_extra_s(p.seq_len, p.n_heads, bandwidth_gbs, fresh_gbs) * 1e3
        measured = p.times["naive"].median_ms - p.times["sdpa"].median_ms
        lines.append(row + f"{p.speedup('sdpa'):>7.2f}x{predicted:>15.1f}{measured:>8.1f}")
    return "\n".join(lines)


def attention_sentence(points: Sequence[AttentionPoint]) -> str:
    """What the largest measured length says: speed and memory of the fused kernel against naive attention."""
    arguments.instance("points", points, (list, tuple))
    if not points or not all(isinstance(p, AttentionPoint) for p in points):
        raise ValueError("points must be a non-empty list of AttentionPoint (from measure_attention)")
    p = max(points, key=lambda p: p.seq_len)
    x = p.speedup("sdpa")
    memory = p.peak_bytes["naive"] / max(p.peak_bytes["sdpa"], 1)
    speed = (f"the fused kernel ran {x:.1f}x faster than naive attention" if x > 1.1 else
             f"the fused kernel was not faster here ({x:.2f}x): on this device the matmuls, not the score "
             "matrix, dominate at this length")
    return (f"At N = {p.seq_len}: {speed}, and needed {memory:,.0f}x less memory at its peak "
            f"({p.peak_bytes['sdpa'] / 1e6:,.1f} MB against {p.peak_bytes['naive'] / 1e6:,.0f} MB; the "
            f"scores of every head alone are {p.score_bytes / 1e6:,.0f} MB).")


def plot_attention(points: Sequence[AttentionPoint]):
    """Time (median with IQR) and peak memory of each variant against sequence length, log-log."""
    arguments.instance("points", points, (list, tuple))
    if not points or not all(isinstance(p, AttentionPoint) for p in points):
        raise ValueError("points must be a non-empty list of AttentionPoint (from measure_attention)")

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10.0, 4.0))
    x = [p.seq_len for p in points]
    plots.axes("sequence length N (tokens)", "time per call (ms)", logx=True, logy=True, ax=ax_t)
    plots.axes("sequence length N (tokens)", "peak memory (MB)", logx=True, logy=True, ax=ax_m)
    for i, name in enumerate(points[0].times):
        plots.measurement_band(ax_t, x, [p.times[name] for p in points], label=name, color=plots.color(i))
        ax_m.plot(x, [max(p.peak_bytes[name], 1) / 1e6 for p in points], marker="o", label=name,
                  color=plots.color(i))
    ax_m.plot(x, [p.score_bytes / 1e6 for p in points], "k:", label="one N x N score matrix")
    plots.finish(ax_t)
    return plots.finish(ax_m)
