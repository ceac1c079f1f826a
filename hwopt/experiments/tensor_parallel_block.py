"""Tensor parallelism measured (lesson 12): a transformer block split Megatron-style over worker processes.

The block is x + attention(x), then h + MLP(h) (norms left out: they act on each token alone). Attention's
q, k and v projections are split by columns, so each of p ranks computes n_heads / p whole heads; its output
projection by rows. The MLP's first matrix is split by columns (GELU acts on each hidden unit alone, so
nothing is exchanged before it), its second by rows. A row-split product leaves a partial sum on every
rank: one all-reduce after attention and one after the MLP, of batch x seq x d_model values each. The
all-reduced output equals the unsplit block up to rounding (the additions happen in another order).

`measure_allreduce` times all-reduces of several sizes (for cost.communication.fit_alpha_beta);
`measure_block` times the unsplit block in this process with all its threads, then checks the split block
against the unsplit one in the workers and times there, per batch size and interleaved: each rank's share of
the compute alone, the two all-reduces alone, and the split block.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from hwopt import arguments, plots
from hwopt.cost import communication
from hwopt.experiments import distributed
from hwopt.machine import bench

__all__ = ["BlockWeights", "make_block", "shard", "block", "AllReduceSweep", "measure_allreduce",
           "check_split", "BlockTimes", "measure_block", "VARIANTS", "ALLREDUCE_SIZES"]

VARIANTS = ("unsplit", "compute", "all-reduces", "split")  # unsplit: in this process; the others: workers
ALLREDUCE_SIZES = tuple(4 * 2**k for k in range(8, 21, 2))  # 1 KiB .. 4 MiB of fp32
BYTES_PER_VALUE = 4  # the block runs in fp32


@dataclass(frozen=True)
class BlockWeights:
    """A block's weights in torch.nn.Linear layout (out_features, in_features) and its number of heads."""

    wq: object
    wk: object
    wv: object
    wo: object
    w_up: object
    w_down: object
    n_heads: int

    @property
    def d_model(self) -> int:
        return self.wo.shape[0]


def _check_shape(d_model, n_heads, d_ff) -> tuple[int, int, int]:
    d_model = arguments.count("d_model", d_model, "dimension")
    n_heads = arguments.count("n_heads", n_heads, "dimension")
    d_ff = arguments.count("d_ff", d_ff, "dimension")
    if d_model % n_heads:
        raise ValueError(f"d_model must be a multiple of n_heads ({n_heads}); got {d_model}")
    return d_model, n_heads, d_ff


def make_block(d_model: int = 1024, n_heads: int = 16, d_ff: int = 4096, seed: int = 0,
               device: str = "cpu") -> BlockWeights:
    """Random fp32 weights of one block (the same on every process for one seed), scaled like an init."""
    d_model, n_heads, d_ff = _check_shape(d_model, n_heads, d_ff)
    seed = arguments.count("seed", seed, "seed", minimum=0)
    device = bench.resolve_device(device)
    g = torch.Generator().manual_seed(seed)

    def weight(out_features, in_features):
        return (torch.randn(out_features, in_features, generator=g) / math.sqrt(in_features)).to(device)

    return BlockWeights(weight(d_model, d_model), weight(d_model, d_model), weight(d_model, d_model),
                        weight(d_model, d_model), weight(d_ff, d_model), weight(d_model, d_ff), n_heads)


def shard(weights: BlockWeights, rank: int, world_size: int) -> BlockWeights:
    """Rank's share: n_heads / p heads of q, k, v (rows) and o (columns); d_ff / p of the MLP."""
    arguments.instance("weights", weights, BlockWeights)
    world_size = arguments.count("world_size", world_size, "threads")
    rank = arguments.between("rank", rank, 0, world_size - 1, integer=True)
    d_ff = weights.w_up.shape[0]
    if weights.n_heads % world_size or d_ff % world_size:
        raise ValueError(f"world_size must divide n_heads ({weights.n_heads}) and d_ff ({d_ff}); "
                         f"got {world_size}")
    width, hidden = weights.d_model // world_size, d_ff // world_size
    cols, rows = slice(rank * width, (rank + 1) * width), slice(rank * hidden, (rank + 1) * hidden)
    return BlockWeights(weights.wq[cols].contiguous(), weights.wk[cols].contiguous(),
                        weights.wv[cols].contiguous(), weights.wo[:, cols].contiguous(),
                        weights.w_up[rows].contiguous(), weights.w_down[:, rows].contiguous(),
                        weights.n_heads // world_size)


def _attention(x, w: BlockWeights):
    """This shard's heads: causal attention over the sequence, projected by its columns of o (a partial)."""
    b, s, _ = x.shape
    head_dim = w.wq.shape[0] // w.n_heads

    def heads(weight):
        return F.linear(x, weight).view(b, s, w.n_heads, head_dim).transpose(1, 2)

    out = F.scaled_dot_product_attention(heads(w.wq), heads(w.wk), heads(w.wv), is_causal=True)
    return F.linear(out.transpose(1, 2).reshape(b, s, -1), w.wo)


def _mlp(x, w: BlockWeights):
    """This shard's hidden units: GELU(x W_up^T) W_down^T over its rows of W_up and columns of W_down."""
    return F.linear(F.gelu(F.linear(x, w.w_up)), w.w_down)


def block(x, weights: BlockWeights, all_reduce=None):
    """The block on x (batch, seq, d_model): x + attention(x), then + MLP; with all_reduce (a function that
    sums a tensor over the ranks in place), the partial sums of a shard are summed after each half."""
    arguments.instance("weights", weights, BlockWeights)
    if all_reduce is not None:
        arguments.function("all_reduce", all_reduce)
    x = arguments.finite_array("x", x, ndim=3)
    if x.shape[-1] != weights.d_model:
        raise ValueError(f"x must be a (batch, seq, {weights.d_model}) tensor; got shape {tuple(x.shape)}")
    return _block(x, weights, all_reduce)


def _block(x, weights: BlockWeights, all_reduce=None):
    """block() without its checks, for the timed loops (their inputs are made here)."""
    part = _attention(x, weights)
    if all_reduce is not None:
        all_reduce(part)
    h = x + part
    part = _mlp(h, weights)
    if all_reduce is not None:
        all_reduce(part)
    return h + part


# ---- the tasks the workers run ----------------------------------------------------------------------------


def _max_over_ranks(group, values: list[float]) -> list[float]:
    """Each value's maximum over the ranks (the slowest rank sets a step's time)."""
    t = torch.tensor(values, dtype=torch.float64, device=group.device)  # NCCL reduces GPU tensors only
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def _timed(group, fn, calls: int) -> float:
    """Seconds per call of fn, `calls` calls after a barrier, on this rank."""
    group.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    group.sync()
    return (time.perf_counter() - start) / calls


def _calls_for(group, fn, target_s: float = 0.02) -> int:
    """Calls per repeat so that one repeat lasts about target_s on the slowest rank (at least one)."""
    fn()
    per_call = _max_over_ranks(group, [_timed(group, fn, 1)])[0]
    return max(1, min(1000, round(target_s / max(per_call, 1e-6))))


def _allreduce_task(group, sizes_bytes, repeats):
    """Per size: seconds of one all-reduce, the slowest rank of each repeat, sizes interleaved."""
    buffers = [torch.ones(n // BYTES_PER_VALUE, device=group.device) for n in sizes_bytes]
    calls = [_calls_for(group, lambda b=b: dist.all_reduce(b)) for b in buffers]
    times = [[] for _ in buffers]
    for _ in range(repeats):
        mine = [_timed(group, lambda b=b: dist.all_reduce(b), n) for b, n in zip(buffers, calls, strict=True)]
        for i, t in enumerate(_max_over_ranks(group, mine)):
            times[i].append(t)
    return times


def _check_task(group, d_model, n_heads, d_ff, batch, seq_len, seed) -> tuple[float, float]:
    """(max |split - unsplit|, max |unsplit|) of the block on random sequences, on this rank."""
    full = make_block(d_model, n_heads, d_ff, seed, group.device)
    mine = shard(full, group.rank, group.world_size)
    x = torch.randn(batch, seq_len, d_model, generator=torch.Generator().manual_seed(seed + 1))
    with torch.inference_mode():
        x = x.to(group.device)
        reference = _block(x, full)
        return float((_block(x, mine, dist.all_reduce) - reference).abs().max()), float(reference.abs().max())


def _block_task(group, d_model, n_heads, d_ff, batch_sizes, repeats, seed):
    """Rank's check of the split block against the unsplit one, and per batch size the variants' times."""
    error, scale = _check_task(group, d_model, n_heads, d_ff, 2, 8, seed)  # 2 sequences of 8 tokens
    mine = shard(make_block(d_model, n_heads, d_ff, seed, group.device), group.rank, group.world_size)
    g = torch.Generator().manual_seed(seed + 2)
    times = {}
    for batch in batch_sizes:
        x = torch.randn(batch, 1, d_model, generator=g).to(group.device)  # one token per sequence
        with torch.inference_mode():
            times[batch] = _time_interleaved(group, _variants(mine, x), repeats)
    return {"error": error, "scale": scale, "times": times}


def _variants(mine: BlockWeights, x) -> dict:
    """The split block, its compute alone and its all-reduces alone on x, as zero-argument functions."""
    out = torch.empty_like(x)
    return {"compute": lambda: _block(x, mine),
            "all-reduces": lambda: (dist.all_reduce(out), dist.all_reduce(out)),
            "split": lambda: _block(x, mine, dist.all_reduce)}


def _time_interleaved(group, fns: dict, repeats: int) -> dict:
    """{name: seconds per call, one value per repeat}: the functions in turn each repeat, slowest rank's."""
    calls = {k: _calls_for(group, fn) for k, fn in fns.items()}
    per_variant = {k: [] for k in fns}
    for _ in range(repeats):
        measured = _max_over_ranks(group, [_timed(group, fn, calls[k]) for k, fn in fns.items()])
        for k, t in zip(fns, measured, strict=True):
            per_variant[k].append(t)
    return per_variant


# ---- what the lesson calls ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllReduceSweep:
    """All-reduce times per message size, measured on world_size processes over `backend`."""

    sizes_bytes: tuple[int, ...]
    measurements: tuple[bench.Measurement, ...]
    world_size: int
    backend: str

    @property
    def fit(self) -> communication.AlphaBeta:
        """The alpha-beta model fitted to the median times (cost.communication.fit_alpha_beta)."""
        return communication.fit_alpha_beta(self.sizes_bytes, [m.median_s for m in self.measurements])

    def table(self) -> str:
        """Size, measured median, the fit's time and their ratio, one line per size."""
        fit = self.fit
        lines = [f"{'message':>10} {'measured':>12} {'alpha-beta':>12} {'fit/meas':>9}"]
        for n, m in zip(self.sizes_bytes, self.measurements, strict=True):
            lines.append(f"{n / 1024:>7,.0f} KiB {m.median_s * 1e6:>9,.0f} us "
                         f"{fit.time_s(n) * 1e6:>9,.0f} us {fit.time_s(n) / m.median_s:>9.2f}")
        return "\n".join(lines + [f"fit: {fit} ({self.world_size} processes, {self.backend})"])

    def plot(self):
        """Measured all-reduce times (median and IQR) against the fitted line, log-log; returns the Figure."""
        ax = plots.axes("message (bytes)", "all-reduce time (ms)", logx=True, logy=True,
                        title=f"All-reduce on {self.world_size} processes ({self.backend})")
        plots.measurement_band(ax, self.sizes_bytes, list(self.measurements), label="measured")
        fit = self.fit
        ax.plot(self.sizes_bytes, [fit.time_s(n) * 1e3 for n in self.sizes_bytes], linestyle="--",
                color=plots.color(1), label=f"alpha-beta fit: {fit.latency_s * 1e6:,.0f} us + bytes / "
                                            f"{fit.bandwidth_gbs:,.2g} GB/s")
        return plots.finish(ax)


def measure_allreduce(world_size: int = 2, sizes_bytes=ALLREDUCE_SIZES, *, repeats: int = 7,
                      device: str = "cpu", timeout_s: float = 60.0) -> AllReduceSweep:
    """All-reduces of each size on world_size fresh processes, interleaved over `repeats` rounds."""
    sizes = arguments.finite_array("sizes_bytes", sizes_bytes, ndim=1, integer=True, minimum=BYTES_PER_VALUE,
                                   maximum=1 << 30)
    if len(set(sizes.tolist())) < 2:
        raise ValueError("sizes_bytes must hold at least two different sizes (the fit needs them)")
    repeats = arguments.between("repeats", repeats, 3, 100, integer=True)
    backend, _, _ = distributed.backend_for(device, world_size)
    sizes = tuple(int(n) // BYTES_PER_VALUE * BYTES_PER_VALUE for n in sizes)
    times = distributed.run(_allreduce_task, world_size, device=device, timeout_s=timeout_s,
                            sizes_bytes=sizes, repeats=repeats)[0]
    labels = [f"all-reduce {n / 1024:,.0f} KiB" for n in sizes]
    measured = tuple(bench.Measurement(k, tuple(t)) for k, t in zip(labels, times, strict=True))
    return AllReduceSweep(sizes, measured, world_size, backend)


@dataclass(frozen=True)
class BlockTimes:
    """The split block checked and timed: max |split - unsplit| and, per batch size, each variant's times."""

    world_size: int
    backend: str
    d_model: int
    n_heads: int
    d_ff: int
    max_error: float
    output_scale: float
    measurements: dict  # {batch size: {variant: bench.Measurement}}

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return tuple(self.measurements)

    def message_bytes(self, batch_size: int) -> int:
        """Bytes of one all-reduce at batch_size: batch x d_model fp32 values."""
        return arguments.count("batch_size", batch_size, "batch") * self.d_model * BYTES_PER_VALUE

    def median_s(self, batch_size: int, variant: str) -> float:
        """Median seconds of a variant (one of VARIANTS) at a measured batch size."""
        arguments.one_of("batch_size", batch_size, self.batch_sizes)
        return self.measurements[batch_size][arguments.one_of("variant", variant, VARIANTS)].median_s

    def predicted_s(self, batch_size: int, fit: communication.AlphaBeta) -> float:
        """Each rank's compute measured alone + two all-reduces from the alpha-beta fit."""
        arguments.instance("fit", fit, communication.AlphaBeta)
        return self.median_s(batch_size, "compute") + 2 * fit.time_s(self.message_bytes(batch_size))

    def ratio(self, batch_size: int, fit: communication.AlphaBeta) -> float:
        """Predicted / measured time of the split block."""
        return self.predicted_s(batch_size, fit) / self.median_s(batch_size, "split")

    def report(self, fit: communication.AlphaBeta) -> str:
        """One line per batch size: the variants' medians, the prediction and predicted / measured."""
        arguments.instance("fit", fit, communication.AlphaBeta)
        lines = [f"split block vs unsplit: max |difference| {self.max_error:.2e} on outputs up to "
                 f"{self.output_scale:.2f} (fp32 rounding)",
                 f"{'batch':>5} {'unsplit':>9} {'compute':>9} {'2 x AR':>9} {'AR share':>9} "
                 f"{'predicted':>10} {'split':>9} {'pred/meas':>9}   (ms; AR = all-reduce)"]
        for b in self.batch_sizes:
            ms = {v: self.median_s(b, v) * 1e3 for v in VARIANTS}
            predicted = self.predicted_s(b, fit) * 1e3
            share = ms["all-reduces"] / (ms["compute"] + ms["all-reduces"])
            lines.append(f"{b:>5} {ms['unsplit']:>9.3f} {ms['compute']:>9.3f} {ms['all-reduces']:>9.3f} "
                         f"{share:>9.0%} {predicted:>10.3f} {ms['split']:>9.3f} "
                         f"{predicted / ms['split']:>9.2f}")
        return "\n".join(lines)

    def verdict(self, fit: communication.AlphaBeta) -> str:
        """Sentences per batch size: predicted and measured milliseconds, their ratio, the all-reduces' share,
        and the split block against the unsplit one."""
        arguments.instance("fit", fit, communication.AlphaBeta)
        lines = []
        for b in self.batch_sizes:
            predicted, split = self.predicted_s(b, fit) * 1e3, self.median_s(b, "split") * 1e3
            compute, unsplit = self.median_s(b, "compute") * 1e3, self.median_s(b, "unsplit") * 1e3
            comm = 2 * fit.time_s(self.message_bytes(b)) * 1e3
            faster = f"{unsplit / split:.2f}x faster" if split < unsplit else f"{split / unsplit:.2f}x slower"
            lines.append(f"batch {b}: predicted {predicted:.3f} ms = each rank's compute alone "
                         f"{compute:.3f} ms "
                         f"+ 2 all-reduces of {self.message_bytes(b) / 1024:,.0f} KiB {comm:.3f} ms "
                         f"({comm / predicted:.0%} of it); measured {split:.3f} ms: predicted / measured "
                         f"{predicted / split:.2f}. The split block ran {faster} than the unsplit block on "
                         f"one process ({unsplit:.3f} ms).")
        return "\n".join(lines)

    def plot(self, fit: communication.AlphaBeta):
        """Per batch size: the split block measured beside its prediction (compute + all-reduces stacked)
        and the unsplit block; returns the Figure."""
        arguments.instance("fit", fit, communication.AlphaBeta)
        ax = plots.axes("batch (tokens)", "ms per block", title=f"One block split over {self.world_size} "
                        f"processes ({self.backend}) vs unsplit")
        x = np.arange(len(self.batch_sizes))
        compute = [self.median_s(b, "compute") * 1e3 for b in self.batch_sizes]
        comm = [2 * fit.time_s(self.message_bytes(b)) * 1e3 for b in self.batch_sizes]
        ax.bar(x - 0.27, compute, 0.27, color=plots.color(0), label="predicted: compute (measured alone)")
        ax.bar(x - 0.27, comm, 0.27, bottom=compute, color=plots.color(1),
               label="predicted: 2 all-reduces (fit)")
        ax.bar(x, [self.median_s(b, "split") * 1e3 for b in self.batch_sizes], 0.27, color=plots.color(2),
               label="split block, measured")
        ax.bar(x + 0.27, [self.median_s(b, "unsplit") * 1e3 for b in self.batch_sizes], 0.27,
               color=plots.color(4), label="unsplit, one process")
        ax.set_xticks(x, [str(b) for b in self.batch_sizes])
        ax.set_yscale("log")
        return plots.finish(ax)


def _unsplit_times(batch_sizes, d_model, n_heads, d_ff, repeats, seed, device) -> dict:
    """{batch: Measurement} of the unsplit block here, with all of this process's threads, interleaved."""
    weights = make_block(d_model, n_heads, d_ff, seed, device)
    g = torch.Generator().manual_seed(seed + 1)
    inputs = {b: torch.randn(b, 1, d_model, generator=g).to(device) for b in batch_sizes}
    with torch.inference_mode():
        measured = bench.compare({f"unsplit, batch {b}": (lambda x=x: _block(x, weights))
                                  for b, x in inputs.items()}, device=device, repeats=repeats, warmup=2)
    return {b: measured[f"unsplit, batch {b}"] for b in batch_sizes}


def check_split(world_size: int = 2, *, d_model: int = 256, n_heads: int = 8, d_ff: int = 1024,
                batch: int = 2, seq_len: int = 16, seed: int = 0, device: str = "cpu",
                timeout_s: float = 60.0) -> list:
    """Every rank's (max |split - unsplit|, max |unsplit|): the block split over world_size fresh processes
    against the unsplit block, on the same random sequences."""
    d_model, n_heads, d_ff = _check_shape(d_model, n_heads, d_ff)
    world_size = arguments.between("world_size", world_size, 1, distributed.MAX_WORLD, integer=True)
    if n_heads % world_size or d_ff % world_size:
        raise ValueError(f"world_size must divide n_heads ({n_heads}) and d_ff ({d_ff}); got {world_size}")
    return distributed.run(_check_task, world_size, device=device, timeout_s=timeout_s, d_model=d_model,
                           n_heads=n_heads, d_ff=d_ff, batch=arguments.count("batch", batch, "batch"),
                           seq_len=arguments.count("seq_len", seq_len, "tokens"),
                           seed=arguments.count("seed", seed, "seed", minimum=0))


def measure_block(world_size: int = 2, batch_sizes=(1, 128), *, d_model: int = 1024, n_heads: int = 16,
                  d_ff: int = 4096, repeats: int = 7, seed: int = 0, device: str = "cpu",
                  timeout_s: float = 120.0) -> BlockTimes:
    """The block split over world_size fresh processes: checked against the unsplit block, then timed."""
    batches = arguments.finite_array("batch_sizes", batch_sizes, ndim=1, integer=True, minimum=1,
                                     maximum=arguments.LIMITS["batch"])
    repeats = arguments.between("repeats", repeats, 3, 100, integer=True)
    d_model, n_heads, d_ff = _check_shape(d_model, n_heads, d_ff)
    seed = arguments.count("seed", seed, "seed", minimum=0)
    world_size = arguments.between("world_size", world_size, 1, distributed.MAX_WORLD, integer=True)
    if n_heads % world_size or d_ff % world_size:
        raise ValueError(f"world_size must divide n_heads ({n_heads}) and d_ff ({d_ff}); got {world_size}")
    backend, _, _ = distributed.backend_for(device, world_size)
    arguments.positive("timeout_s", timeout_s, maximum=arguments.LIMITS["seconds"])
    unsplit = _unsplit_times(tuple(int(b) for b in batches), d_model, n_heads, d_ff, repeats, seed,
                             "cuda" if backend == "nccl" else "cpu")
    result = distributed.run(_block_task, world_size, device=device, timeout_s=timeout_s, d_model=d_model,
                             n_heads=n_heads, d_ff=d_ff, batch_sizes=tuple(int(b) for b in batches),
                             repeats=repeats, seed=seed)[0]
    measurements = {b: {"unsplit": unsplit[b], **{v: bench.Measurement(f"{v}, batch {b}", tuple(t))
                                                  for v, t in per.items()}}
                    for b, per in result["times"].items()}
    return BlockTimes(world_size, backend, d_model, n_heads, d_ff, result["error"], result["scale"],
                      measurements)
