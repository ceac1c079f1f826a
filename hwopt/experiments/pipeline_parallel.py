"""Pipeline parallelism measured (lesson 12): a stack of layers cut into stages, one process per stage.

Stage s receives each micro-batch's activations from stage s - 1 (torch.distributed recv), runs its layers,
and sends the result on (isend: it does not wait for the next stage to take it); the first stage slices the
batch, the last keeps the output. Every stage records the time it computes; the makespan runs from a common
start (a barrier) until the last stage finishes. The measured bubble, 1 - busy / (stages x makespan), is set
against (p - 1) / (m + p - 1) of cost.pipeline, which assumes equal stages and free hand-offs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from hwopt import arguments, plots
from hwopt.cost import pipeline
from hwopt.experiments import distributed
from hwopt.machine import bench

__all__ = ["make_stack", "run_stack", "PipelineRun", "measure_pipeline"]


def make_stack(n_layers: int = 8, width: int = 1024, seed: int = 0, device: str = "cpu") -> list:
    """n_layers random fp32 (width x width) weights of a stack of Linear + ReLU layers."""
    n_layers = arguments.count("n_layers", n_layers, "layers")
    width = arguments.count("width", width, "dimension")
    seed = arguments.count("seed", seed, "seed", minimum=0)
    device = bench.resolve_device(device)
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(width, width, generator=g) / width**0.5).to(device) for _ in range(n_layers)]


def run_stack(layers: list, x):
    """x (rows, width) through the layers: ReLU(x W^T) each."""
    arguments.instance("layers", layers, list)
    return _run_stack(layers, arguments.finite_array("x", x, ndim=2))


def _run_stack(layers: list, x):
    """run_stack() without its checks, for the timed loop."""
    for w in layers:
        x = torch.relu(x @ w.T)
    return x


def _pipeline_task(group, n_layers, width, batch, microbatch_counts, repeats, seed):
    """This stage's busy seconds and the makespan (slowest rank) per run, for every micro-batch count."""
    layers = make_stack(n_layers, width, seed, group.device)
    per_stage = n_layers // group.world_size
    mine = layers[group.rank * per_stage:(group.rank + 1) * per_stage]
    first, last = group.rank == 0, group.rank == group.world_size - 1
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(seed + 1)).to(group.device)
    runs = {}
    with torch.inference_mode():
        _run_stack(mine, x[: batch // max(microbatch_counts)])  # warm-up
        for m in microbatch_counts:
            rows = batch // m
            busy_runs, makespans = [], []
            for _ in range(repeats):
                inbox = [torch.empty(rows, width, device=group.device) for _ in range(m)]
                group.barrier()
                start, busy, sends = time.perf_counter(), 0.0, []
                for i in range(m):
                    if not first:
                        dist.recv(inbox[i], src=group.rank - 1)
                    begin = time.perf_counter()
                    y = _run_stack(mine, x[i * rows:(i + 1) * rows] if first else inbox[i])
                    group.sync()
                    busy += time.perf_counter() - begin
                    if not last:
                        sends.append(dist.isend(y, dst=group.rank + 1))
                for work in sends:
                    work.wait()
                end = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=group.device)
                dist.all_reduce(end, op=dist.ReduceOp.MAX)
                busy_runs.append(busy)
                makespans.append(float(end))
            runs[m] = {"busy": busy_runs, "makespan": makespans}
    return runs


@dataclass(frozen=True)
class PipelineRun:
    """Per micro-batch count: each stage's busy seconds per run, and the runs' makespans."""

    n_stages: int
    n_layers: int
    width: int
    batch: int
    backend: str
    busy_s: dict  # {m: [[stage 0's busy seconds per run], [stage 1's], ...]}
    makespans: dict  # {m: bench.Measurement of the makespan}

    @property
    def microbatch_counts(self) -> tuple[int, ...]:
        return tuple(self.makespans)

    def measured_bubble(self, m: int) -> float:
        """The median over runs of 1 - (the stages' busy seconds) / (stages * the run's makespan)."""
        arguments.one_of("m", m, self.microbatch_counts)
        runs = zip(zip(*self.busy_s[m], strict=True), self.makespans[m].times_s, strict=True)
        return bench.quantile([pipeline.measured_bubble(busy, makespan) for busy, makespan in runs], 0.5)

    def predicted_bubble(self, m: int) -> float:
        """(p - 1) / (m + p - 1)."""
        return pipeline.bubble_fraction(self.n_stages, arguments.one_of("m", m, self.microbatch_counts))

    def report(self) -> str:
        """One line per micro-batch count: makespan, stage busy times, bubble measured and predicted."""
        lines = [f"{self.batch} rows through {self.n_layers} layers of {self.width}, {self.n_stages} stages "
                 f"({self.backend})",
                 f"{'micro-batches':>13} {'makespan ms':>12} {'busy ms per stage':>20} {'bubble':>7} "
                 f"{'(p-1)/(m+p-1)':>14}"]
        for m in self.microbatch_counts:
            busy = " / ".join(f"{bench.quantile(s, 0.5) * 1e3:.1f}" for s in self.busy_s[m])
            lines.append(f"{m:>13} {self.makespans[m].median_ms:>12.1f} {busy:>20} "
                         f"{self.measured_bubble(m):>7.0%} {self.predicted_bubble(m):>14.0%}")
        return "\n".join(lines)

    def plot(self):
        """The bubble against the number of micro-batches: measured points, the formula's curve."""
        ax = plots.axes("micro-batches m", "bubble (idle share of the stages)", logx=True,
                        title=f"{self.n_stages} pipeline stages in {self.n_stages} processes")
        ms = self.microbatch_counts
        ax.plot(ms, [self.predicted_bubble(m) for m in ms], linestyle="--", color=plots.color(1),
                label="(p - 1) / (m + p - 1)")
        ax.plot(ms, [self.measured_bubble(m) for m in ms], marker="o", color=plots.color(0), label="measured")
        ax.set_ylim(0, 1)
        return plots.finish(ax)


def measure_pipeline(n_stages: int = 2, microbatch_counts=(1, 2, 4, 8), *, n_layers: int = 8,
                     width: int = 1024, batch: int = 256, repeats: int = 5, seed: int = 0,
                     device: str = "cpu", timeout_s: float = 120.0) -> PipelineRun:
    """The stack split into n_stages processes, run with each number of micro-batches `repeats` times."""
    counts = arguments.finite_array("microbatch_counts", microbatch_counts, ndim=1, integer=True, minimum=1,
                                    maximum=arguments.LIMITS["batch"])
    n_stages = arguments.between("n_stages", n_stages, 2, distributed.MAX_WORLD, integer=True)
    n_layers = arguments.count("n_layers", n_layers, "layers")
    batch = arguments.count("batch", batch, "batch")
    arguments.count("width", width, "dimension")
    arguments.count("seed", seed, "seed", minimum=0)
    repeats = arguments.between("repeats", repeats, 3, 100, integer=True)
    if n_layers % n_stages:
        raise ValueError(f"n_layers must be a multiple of n_stages ({n_stages}); got {n_layers}")
    bad = [int(m) for m in counts if batch % m]
    if bad:
        raise ValueError(f"microbatch_counts must divide batch ({batch}); {bad} do not")
    backend, _, _ = distributed.backend_for(device, n_stages)
    counts = tuple(int(m) for m in counts)
    stages = distributed.run(_pipeline_task, n_stages, device=device, timeout_s=timeout_s, n_layers=n_layers,
                             width=width, batch=batch, microbatch_counts=counts, repeats=repeats, seed=seed)
    busy = {m: [stage[m]["busy"] for stage in stages] for m in counts}
    makespans = {m: bench.Measurement(f"pipeline, {m} micro-batches", tuple(stages[0][m]["makespan"]))
                 for m in counts}
    return PipelineRun(n_stages, n_layers, width, batch, backend, busy, makespans)
