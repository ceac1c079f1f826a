"""A small mixture-of-experts layer measured (lesson 12): which experts a decode step reads, and its time.

The layer sends each token to the k experts its router scores highest (softmax over those k for the
weights); an expert is an MLP of d_ff hidden units. A step runs only the experts some token chose, each on
its tokens at once, so it reads the weights of the distinct experts chosen (and the router's): k experts'
at batch 1, towards all E as the batch grows (cost.moe.expected_distinct_experts).
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from hwopt import arguments, plots
from hwopt.cost import moe
from hwopt.machine import bench

__all__ = ["MoELayer", "make_moe", "route", "forward", "count_distinct", "MoESweep", "measure_moe"]

BYTES_PER_VALUE = 4  # fp32


@dataclass(frozen=True)
class MoELayer:
    """Router (E, d_model), experts' w_up (E, d_ff, d_model) and w_down (E, d_model, d_ff), k per token."""

    router: object
    w_up: object
    w_down: object
    experts_per_token: int

    @property
    def n_experts(self) -> int:
        return self.router.shape[0]

    @property
    def expert_bytes(self) -> int:
        """Bytes of one expert's two matrices."""
        return 2 * self.w_up[0].numel() * BYTES_PER_VALUE

    def step_bytes(self, distinct_experts: float) -> float:
        """Bytes a step reads: the router and distinct_experts experts."""
        distinct = arguments.between("distinct_experts", distinct_experts, 0, self.n_experts)
        return self.router.numel() * BYTES_PER_VALUE + distinct * self.expert_bytes


def make_moe(d_model: int = 1024, d_ff: int = 1024, n_experts: int = 32, experts_per_token: int = 2,
             seed: int = 0) -> MoELayer:
    """Random fp32 weights (the router's scores are random too, so routing is close to uniform)."""
    d_model = arguments.count("d_model", d_model, "dimension")
    d_ff = arguments.count("d_ff", d_ff, "dimension")
    n_experts = arguments.count("n_experts", n_experts, "dimension")
    k = arguments.between("experts_per_token", experts_per_token, 1, n_experts, integer=True)
    g = torch.Generator().manual_seed(arguments.count("seed", seed, "seed", minimum=0))
    return MoELayer(torch.randn(n_experts, d_model, generator=g) / d_model**0.5,
                    torch.randn(n_experts, d_ff, d_model, generator=g) / d_model**0.5,
                    torch.randn(n_experts, d_model, d_ff, generator=g) / d_ff**0.5, k)


def _tokens(layer: MoELayer, x):
    arguments.instance("layer", layer, MoELayer)
    x = arguments.finite_array("x", x, ndim=2)
    if x.shape[1] != layer.router.shape[1]:
        raise ValueError(f"x must be a (tokens, {layer.router.shape[1]}) tensor; got shape {tuple(x.shape)}")
    return x


def route(layer: MoELayer, x):
    """(experts (tokens, k), weights (tokens, k)): each token's top-k experts and their softmax weights."""
    return _route(layer, _tokens(layer, x))


def _route(layer: MoELayer, x):
    top, experts = torch.topk(x @ layer.router.T, layer.experts_per_token, dim=-1)
    return experts, torch.softmax(top, dim=-1)


def forward(layer: MoELayer, x):
    """(output (tokens, d_model), distinct experts run): each chosen expert runs once on its tokens."""
    return _forward(layer, _tokens(layer, x))


def _forward(layer: MoELayer, x):
    """forward() without its checks, for the timed loop."""
    experts, weights = _route(layer, x)
    out = torch.zeros_like(x)
    used = torch.unique(experts).tolist()
    for e in used:
        token, slot = torch.nonzero(experts == e, as_tuple=True)
        h = F.linear(F.gelu(F.linear(x[token], layer.w_up[e])), layer.w_down[e])
        out.index_add_(0, token, h * weights[token, slot].unsqueeze(1))
    return out, len(used)


def count_distinct(layer: MoELayer, batch_size: int, trials: int = 200, seed: int = 0) -> float:
    """Mean distinct experts the router picks for `trials` batches of random tokens (counted: no model)."""
    arguments.instance("layer", layer, MoELayer)
    batch_size = arguments.count("batch_size", batch_size, "batch")
    trials = arguments.count("trials", trials, "repeats")
    g = torch.Generator().manual_seed(arguments.count("seed", seed, "seed", minimum=0))
    x = torch.randn(trials, batch_size, layer.router.shape[1], generator=g)
    experts, _ = _route(layer, x.reshape(trials * batch_size, -1))
    experts = experts.reshape(trials, -1)
    return float(sum(len(torch.unique(row)) for row in experts) / trials)


@dataclass(frozen=True)
class MoESweep:
    """Per batch size: distinct experts counted over many random batches, and the timed batch's step."""

    n_experts: int
    experts_per_token: int
    expert_bytes: int
    counted: dict  # {batch: mean distinct experts over random batches}
    timed_distinct: dict  # {batch: distinct experts of the batch that was timed}
    router_bytes: int
    measurements: dict  # {batch: bench.Measurement of one step}

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return tuple(self.measurements)

    def expected(self, batch_size: int) -> float:
        """E (1 - (1 - k/E)^b), cost.moe.expected_distinct_experts."""
        return moe.expected_distinct_experts(self.n_experts, self.experts_per_token, batch_size)

    def step_bytes(self, batch_size: int) -> float:
        """Bytes the timed step at batch_size read: the router and its distinct experts."""
        arguments.one_of("batch_size", batch_size, self.batch_sizes)
        return self.router_bytes + self.timed_distinct[batch_size] * self.expert_bytes

    def slowdown(self, batch_size: int) -> tuple[float, float]:
        """(predicted, measured) step time over the smallest batch's: the ratio of bytes, of times."""
        first = self.batch_sizes[0]
        return (self.step_bytes(batch_size) / self.step_bytes(first),
                self.measurements[batch_size].median_s / self.measurements[first].median_s)

    def report(self) -> str:
        """One line per batch size: distinct experts expected and counted, bytes, time, slowdowns."""
        lines = [f"{self.n_experts} experts of {self.expert_bytes / 1e6:.1f} MB each, "
                 f"top-{self.experts_per_token}",
                 f"{'batch':>5} {'E(1-(1-k/E)^b)':>14} {'counted':>8} {'timed step':>11} {'MB read':>8} "
                 f"{'ms':>7} {'slowdown pred':>14} {'meas':>6}"]
        for b in self.batch_sizes:
            predicted, measured = self.slowdown(b)
            lines.append(f"{b:>5} {self.expected(b):>14.2f} {self.counted[b]:>8.2f} "
                         f"{self.timed_distinct[b]:>11} "
                         f"{self.step_bytes(b) / 1e6:>8.1f} {self.measurements[b].median_ms:>7.2f} "
                         f"{predicted:>14.2f} {measured:>6.2f}")
        return "\n".join(lines)

    def plot(self):
        """Distinct experts (formula and counted) and step time (measured and predicted from the bytes)
        against the batch size; returns the Figure."""
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        b = list(self.batch_sizes)
        plots.axes("batch (tokens)", "distinct experts read", logx=True, ax=left)
        left.plot(b, [self.expected(n) for n in b], color=plots.color(1), linestyle="--",
                  label="E (1 - (1 - k/E)^b)")
        left.plot(b, [self.counted[n] for n in b], "o", color=plots.color(0), label="counted (random tokens)")
        left.axhline(self.n_experts, color="k", linewidth=0.8, label=f"all {self.n_experts} experts")
        plots.axes("batch (tokens)", "ms per step", logx=True, logy=True, ax=right)
        plots.measurement_band(right, b, [self.measurements[n] for n in b], label="measured")
        first = self.measurements[b[0]].median_ms
        right.plot(b, [first * self.slowdown(n)[0] for n in b], color=plots.color(1), linestyle="--",
                   label="batch 1's time x bytes read / batch 1's")
        fig.suptitle(f"A mixture of {self.n_experts} experts, top-{self.experts_per_token}")
        plots.finish(left)
        return plots.finish(right)


def measure_moe(layer: MoELayer, batch_sizes=(1, 2, 4, 8, 16, 32, 64), *, repeats: int = 9,
                trials: int = 200, seed: int = 0, device: str = "cpu") -> MoESweep:
    """Time a step at each batch size (interleaved), and count the distinct experts over random batches."""
    arguments.instance("layer", layer, MoELayer)
    sizes = arguments.finite_array("batch_sizes", batch_sizes, ndim=1, integer=True, minimum=1,
                                   maximum=arguments.LIMITS["batch"])
    repeats = arguments.between("repeats", repeats, 3, 1000, integer=True)
    trials = arguments.count("trials", trials, "repeats")
    device = bench.resolve_device(device)
    sizes = tuple(int(b) for b in sizes)
    g = torch.Generator().manual_seed(arguments.count("seed", seed, "seed", minimum=0))
    inputs = {b: torch.randn(b, layer.router.shape[1], generator=g) for b in sizes}
    with torch.inference_mode():
        timed = {b: _forward(layer, x)[1] for b, x in inputs.items()}
        measured = bench.compare({f"batch {b}": (lambda x=x: _forward(layer, x)) for b, x in inputs.items()},
                                 device=device, repeats=repeats, warmup=2)
        counted = {b: count_distinct(layer, b, trials, seed + 1) for b in sizes}
    return MoESweep(layer.n_experts, layer.experts_per_token, layer.expert_bytes, counted, timed,
                    layer.router.numel() * BYTES_PER_VALUE, {b: measured[f"batch {b}"] for b in sizes})
