"""Tensor parallelism for decode (lesson 12): the smallest TP degree that fits, and a decode step's bound with
its all-reduces, on the chips of the chip table.

Megatron-style TP splits every layer over tp chips: attention by heads, the MLP (and every expert) by its
hidden size, so each chip holds and reads 1/tp of the weights, and each layer ends its attention and its MLP
with an all-reduce of the activations (batch x d_model values). The KV cache splits with the KV heads, over
min(tp, n_kv_heads) chips (vLLM copies KV heads when tp is larger); MLA's latent, shared by all heads, is
copied on every chip. A decode step on tp chips:
    memory_s = (weight and activation bytes / tp + KV bytes per chip) / memory bandwidth
    compute_s = FLOP / tp / peak FLOP/s
    communication_s = 2 * n_layers all-reduces of batch * d_model activations (cost.communication)
    step_s = max(memory_s, compute_s) + communication_s   (an all-reduce waits for its layer: no overlap)
Activations and the runtime's own memory are left out of the fit, beyond reserve_fraction of each chip. The
chip table's interconnect figure holds inside one NVLink or ICI domain (8 GPUs of an HGX board, 72 of a GB200
NVL72, a TPU slice); beyond it chips talk over the data-center network, much slower.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt

from hwopt import arguments, formats, plots, widgets
from hwopt.cost import communication, footprint, phases
from hwopt.machine import specs

__all__ = ["TP_DEGREES", "degrees", "memory_per_chip_bytes", "smallest_tp", "sizing_table", "DecodeBound",
           "decode_bound", "plot_tp_scaling", "tp_explorer"]

TP_DEGREES = (1, 2, 4, 8, 16, 32, 64)


def _shape(shape) -> footprint.ModelShape:
    return arguments.instance("shape", shape, footprint.ModelShape)


def degrees(shape: footprint.ModelShape, max_tp: int = 64) -> list[int]:
    """The TP degrees (powers of two up to max_tp) that split this model's heads evenly: tp divides n_heads,
    and divides n_kv_heads or is a multiple of it (then KV heads are copied)."""
    shape = _shape(shape)
    max_tp = arguments.count("max_tp", max_tp, "threads")
    return [tp for tp in TP_DEGREES if tp <= max_tp and not shape.n_heads % tp
            and (not shape.n_kv_heads % tp or not tp % shape.n_kv_heads)]


def _kv_split(shape: footprint.ModelShape, tp: int) -> int:
    """Chips the KV cache splits over: MLA's latent is copied on each; KV heads split over up to tp chips."""
    return 1 if shape.attention == "MLA" else min(tp, shape.n_kv_heads)


def _tp(shape, tp) -> int:
    tp = arguments.count("tp", tp, "threads")
    if tp not in degrees(shape, max(TP_DEGREES)):
        raise ValueError(f"tp must split {shape.name}'s {shape.n_heads} heads and {shape.n_kv_heads} KV "
                         f"heads evenly: one of {degrees(shape)}; got {tp}")
    return tp


def memory_per_chip_bytes(shape: footprint.ModelShape, tp: int, context_len: int, batch_size: int = 1,
                          precision: str = "bf16", kv_precision: str | None = None) -> float:
    """Bytes each of tp chips holds: weights / tp + the KV cache of batch_size sequences of context_len
    tokens / the chips it splits over."""
    shape = _shape(shape)
    tp = _tp(shape, tp)
    context_len = arguments.count("context_len", context_len, "tokens")
    batch_size = arguments.count("batch_size", batch_size, "batch")
    kv_precision = footprint.kv_precision_for(precision, kv_precision)
    kv = footprint.kv_cache_bytes(shape, batch_size, context_len, kv_precision)
    return footprint.weights_bytes(shape, precision) / tp + kv / _kv_split(shape, tp)


def _chip(chip):
    return arguments.instance("chip", chip, specs.Chip)


def smallest_tp(shape: footprint.ModelShape, chip, context_len: int, batch_size: int = 1,
                precision: str = "bf16", kv_precision: str | None = None, *, reserve_fraction: float = 0.1,
                max_tp: int = 64) -> int | None:
    """The smallest TP degree whose share of weights and KV cache fits in each chip's memory, keeping
    reserve_fraction of it free; None when even max_tp chips are not enough."""
    shape, chip = _shape(shape), _chip(chip)
    reserve = arguments.fraction("reserve_fraction", reserve_fraction, allow_zero=True, allow_one=False)
    if chip.memory_bytes is None:
        raise ValueError(f"chip must list its memory; {chip.name} has no memory_gib in the chip table")
    usable = chip.memory_bytes * (1 - reserve)
    for tp in degrees(shape, max_tp):
        if memory_per_chip_bytes(shape, tp, context_len, batch_size, precision, kv_precision) <= usable:
            return tp
    return None


def sizing_table(shapes, chip, context_len: int, batch_size: int = 1,
                 precisions=("bf16", "fp8_e4m3")) -> str:
    """One line per model: its attention, parameters (all, and active per token), KV bytes per token and the
    smallest TP degree on `chip` for batch_size sequences of context_len tokens, in each weight precision
    (the KV cache in bf16)."""
    arguments.instance("shapes", shapes, (list, tuple))
    if not shapes:
        raise ValueError("shapes must hold at least one ModelShape")
    chip = _chip(chip)
    context_len = arguments.count("context_len", context_len, "tokens")
    batch_size = arguments.count("batch_size", batch_size, "batch")
    arguments.instance("precisions", precisions, (list, tuple))
    if not precisions:
        raise ValueError("precisions must name at least one weight format")
    names = [formats.get(p, argument="precisions").name for p in precisions]
    lines = [f"{batch_size} sequences x {context_len:,} tokens on {chip.name} ({chip.memory_gib:g} GiB, 10% "
             "kept free), KV cache in bf16; the smallest TP degree for each weight format:",
             f"{'model':18} {'attention':>9} {'params':>9} {'active':>8} {'KV/token':>9}"
             + "".join(f" {n:>9}" for n in names)]
    for i, shape in enumerate(shapes):
        arguments.instance(f"shapes[{i}]", shape, footprint.ModelShape)
        kv = footprint.kv_cache_bytes(shape, 1, 1, "bf16")
        tps = [smallest_tp(shape, chip, context_len, batch_size, n, "bf16") for n in names]
        lines.append(f"{shape.name:18} {shape.attention:>9} {shape.n_params / 1e9:>8.1f}B "
                     f"{shape.active_params / 1e9:>7.1f}B {kv / 1024:>5,.0f} KiB"
                     + "".join(f" {tp if tp else '>64':>9}" for tp in tps))
    return "\n".join(lines)


@dataclass(frozen=True)
class DecodeBound:
    """The roofline bound of one decode step on tp chips (seconds per step; tokens/s of the whole batch)."""

    model: str
    chip: str
    tp: int
    batch_size: int
    memory_s: float
    compute_s: float
    communication_s: float

    @property
    def step_s(self) -> float:
        """max(memory, compute) + communication: seconds per decode step (one token for each sequence)."""
        return max(self.memory_s, self.compute_s) + self.communication_s

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second of the whole batch: batch_size / step_s."""
        return self.batch_size / self.step_s

    @property
    def communication_share(self) -> float:
        """The all-reduces' share of the step."""
        return self.communication_s / self.step_s

    def __str__(self) -> str:
        bound = "memory" if self.memory_s >= self.compute_s else "compute"
        work_ms = max(self.memory_s, self.compute_s) * 1e3
        return (f"{self.model} on {self.tp} x {self.chip}, batch {self.batch_size}: "
                f"{self.step_s * 1e3:,.2f} ms per step ({bound} {work_ms:,.2f} ms + all-reduces "
                f"{self.communication_s * 1e3:,.2f} ms = {self.communication_share:.0%}), "
                f"{self.tokens_per_s:,.0f} tokens/s")


def decode_bound(shape: footprint.ModelShape, chip, tp: int, context_len: int, batch_size: int = 1,
                 precision: str = "bf16", kv_precision: str | None = None, *, act_precision: str = "bf16",
                 latency_s: float = 0.0, link_gbs: float | None = None) -> DecodeBound:
    """The decode step's bound on tp chips of the chip table (see the module's formulas). link_gbs: one-way
    GB/s between chips (default: the chip's interconnect_one_way_gbs); latency_s: per all-reduce message."""
    shape, chip = _shape(shape), _chip(chip)
    tp = _tp(shape, tp)
    step = phases.decode_cost(shape, context_len, batch_size, precision, kv_precision)
    peak = chip.peak_flops(precision)
    memory_s = ((step.bytes - step.kv_bytes) / tp + step.kv_bytes / _kv_split(shape, tp)) / (
        chip.bandwidth_gbs * 1e9)
    communication_s = 0.0
    if tp > 1:
        if link_gbs is None and chip.interconnect_one_way_gbs is None:
            raise ValueError(f"chip: {chip.name} lists no interconnect in the chip table; give link_gbs")
        link = chip.interconnect_one_way_gbs if link_gbs is None else arguments.positive("link_gbs", link_gbs)
        per_value = formats.get(act_precision, argument="act_precision").bytes_per_weight
        message = batch_size * shape.d_model * per_value
        communication_s = 2 * shape.n_layers * communication.allreduce_time_s(message, tp, link, latency_s)
    compute_s = step.flops / tp / peak
    return DecodeBound(shape.name, chip.name, tp, batch_size, memory_s, compute_s, communication_s)


def plot_tp_scaling(shape: footprint.ModelShape, chip, context_len: int = 4096, batch_size: int = 1,
                    precision: str = "bf16", latency_us: float = 0.0, max_tp: int = 8):
    """Step time (memory or compute, and all-reduces, stacked) and tokens/s for every TP degree that fits, up
    to max_tp (8: one HGX board); returns the Figure."""
    shape, chip = _shape(shape), _chip(chip)
    latency_s = arguments.positive("latency_us", latency_us, allow_zero=True) / 1e6
    first = smallest_tp(shape, chip, context_len, batch_size, precision, max_tp=max_tp)
    tps = [tp for tp in degrees(shape, max_tp) if first is not None and tp >= first
           and (tp == 1 or chip.interconnect_one_way_gbs is not None)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    title = f"{shape.name}, {precision}, batch {batch_size}, {context_len:,} tokens of context on {chip.name}"
    if not tps:
        reason = (f"does not fit on {max_tp} chips" if first is None
                  else f"needs {first} chips, and the chip lists no interconnect")
        left.text(0.5, 0.5, f"{shape.name} {reason}", ha="center", va="center", transform=left.transAxes)
        fig.suptitle(title)
        plt.close(fig)
        return fig
    bounds = [decode_bound(shape, chip, tp, context_len, batch_size, precision, latency_s=latency_s)
              for tp in tps]
    x = [str(tp) for tp in tps]
    plots.axes("tensor-parallel degree (chips)", "ms per decode step", ax=left)
    work = [max(b.memory_s, b.compute_s) * 1e3 for b in bounds]
    left.bar(x, work, color=plots.color(0), label="weights and KV (or compute), per chip")
    left.bar(x, [b.communication_s * 1e3 for b in bounds], bottom=work, color=plots.color(1),
             label="all-reduces")
    for i, b in enumerate(bounds):
        left.annotate(f"{b.communication_share:.0%}", (i, b.step_s * 1e3), ha="center", va="bottom")
    plots.axes("tensor-parallel degree (chips)", "tokens/s (whole batch)", ax=right)
    right.plot(x, [b.tokens_per_s for b in bounds], marker="o", color=plots.color(2))
    fig.suptitle(title)
    plots.finish(left)
    return plots.finish(right)


def tp_explorer(shapes=None, chips=None):
    """Selectors (model, chip, precision) and sliders (batch, context, all-reduce latency) over
    plot_tp_scaling."""
    shapes = list(arguments.instance("shapes", shapes, (list, tuple))) if shapes is not None \
        else footprint.load_shapes()
    for i, s in enumerate(shapes):
        arguments.instance(f"shapes[{i}]", s, footprint.ModelShape)
    if chips is None:
        chips = [c for c in specs.load_chips() if c.interconnect_gbs and c.memory_gib and c.peaks()]
    chips = list(arguments.instance("chips", chips, (list, tuple)))
    for i, c in enumerate(chips):
        arguments.instance(f"chips[{i}]", c, specs.Chip)
    if not shapes or not chips:
        raise ValueError("shapes and chips must each hold at least one row")
    default_shape = next((s for s in shapes if s.name == "Llama-3.1-70B"), shapes[0])
    default_chip = next((c for c in chips if c.name == "NVIDIA H100 SXM"), chips[0])
    return widgets.explore(
        lambda model, chip, **kw: plot_tp_scaling(model, chip, **kw),
        model=widgets.dropdown("model", [(s.name, s) for s in shapes], default_shape),
        chip=widgets.dropdown("chip", [(c.name, c) for c in chips], default_chip),
        precision=widgets.toggle("weights", ["bf16", "fp8_e4m3", "int4_g128"], "bf16"),
        batch_size=widgets.int_slider("batch", 1, 256, 1),
        context_len=widgets.int_slider("context", 256, 131072, 4096, step=256, unit="tokens"),
        latency_us=widgets.float_slider("all-reduce latency", 0.0, 50.0, 0.0, step=1.0, unit="us"),
    )
