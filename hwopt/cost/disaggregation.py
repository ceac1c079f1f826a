"""Disaggregated prefill and decode (lesson 12): when moving a prompt's KV cache beats computing it again.

A disaggregated server prefills on one pool of chips and decodes on another, so each request's KV cache
crosses a link: kv_cache_bytes(prompt) / link bandwidth (+ latency). A colocated server prefills where it
decodes instead, at the prefill's roofline time on that chip (cost.phases). The transfer grows with the
prompt, the prefill faster (its attention grows with the prompt squared), so past a prompt length the
transfer is cheaper; a model with a small cache per token (grouped-query heads, MLA's latent) gets there
sooner.
vLLM's documentation says what disaggregation is for: tuning time to first token and inter-token latency
separately, and controlling tail inter-token latency; "Disaggregated prefill DOES NOT improve throughput"
(https://docs.vllm.ai/en/latest/features/disagg_prefill/).
"""

from __future__ import annotations

from dataclasses import dataclass

from hwopt import arguments, formats, plots
from hwopt.cost import footprint, phases
from hwopt.machine import specs

__all__ = ["kv_transfer_s", "prefill_s", "breakeven_link_gbs", "Handoff", "compare", "plot_handoff"]


def kv_transfer_s(shape: footprint.ModelShape, prompt_len: int, link_gbs: float, kv_precision: str = "bf16",
                  latency_s: float = 0.0) -> float:
    """Seconds to send one prompt's KV cache over a link of link_gbs one way: bytes / bandwidth + latency."""
    arguments.instance("shape", shape, footprint.ModelShape)
    prompt_len = arguments.count("prompt_len", prompt_len, "tokens")
    link = arguments.positive("link_gbs", link_gbs)
    kv_precision = formats.get(kv_precision, argument="kv_precision").name
    latency = arguments.positive("latency_s", latency_s, allow_zero=True)
    return footprint.kv_cache_bytes(shape, 1, prompt_len, kv_precision) / (link * 1e9) + latency


def prefill_s(shape: footprint.ModelShape, prompt_len: int, chip, precision: str = "bf16",
              kv_precision: str | None = None) -> float:
    """Roofline seconds of one prompt's prefill on a chip of the table: max(FLOP / peak, bytes / GB/s)."""
    chip = arguments.instance("chip", chip, specs.Chip)
    peak = chip.peak_flops(precision)
    return phases.prefill_cost(shape, prompt_len, 1, precision, kv_precision).time_s(peak, chip.bandwidth_gbs)


def breakeven_link_gbs(shape: footprint.ModelShape, chip, precision: str = "bf16",
                       kv_precision: str = "bf16") -> float:
    """The one-way link GB/s above which sending a long prompt's KV cache beats a compute-bound prefill:
    KV bytes per token * peak FLOP/s / (2 * active matmul parameters) (attention's FLOP, which only favour
    sending, left out)."""
    chip = arguments.instance("chip", chip, specs.Chip)
    peak = chip.peak_flops(precision)
    kv_precision = formats.get(kv_precision, argument="kv_precision").name
    per_token = footprint.kv_cache_bytes(shape, 1, 1, kv_precision)
    return per_token * peak / (2.0 * phases.active_matmul_params(shape)) / 1e9


@dataclass(frozen=True)
class Handoff:
    """One prompt length: seconds to send its KV cache, and to prefill it again on the decode chip."""

    prompt_len: int
    transfer_s: float
    recompute_s: float

    @property
    def cheaper(self) -> str:
        """'transfer' or 'recompute'."""
        return "transfer" if self.transfer_s < self.recompute_s else "recompute"


def compare(shape: footprint.ModelShape, chip, prompt_lens, link_gbs: float, precision: str = "bf16",
            kv_precision: str = "bf16", latency_s: float = 0.0) -> list[Handoff]:
    """Transfer against recompute for each prompt length (KV cache in kv_precision, weights in precision)."""
    arguments.instance("prompt_lens", prompt_lens, (list, tuple, range))
    if not prompt_lens:
        raise ValueError("prompt_lens must hold at least one prompt length")
    return [Handoff(n, kv_transfer_s(shape, n, link_gbs, kv_precision, latency_s),
                    prefill_s(shape, n, chip, precision, kv_precision))
            for n in (arguments.count(f"prompt_lens[{i}]", n, "tokens") for i, n in enumerate(prompt_lens))]


def plot_handoff(rows_by_link: dict, title: str = ""):
    """Milliseconds to send the KV cache (one line per link) and to prefill again, against the prompt length;
    rows_by_link: {link label: compare(...)} over the same prompt lengths. Returns the Figure."""
    arguments.instance("rows_by_link", rows_by_link, dict)
    if not rows_by_link:
        raise ValueError("rows_by_link must hold at least one link's rows")
    arguments.text("title", title, allow_empty=True)
    ax = plots.axes("prompt length (tokens)", "ms per request", logx=True, logy=True, title=title or None)
    for i, (label, rows) in enumerate(rows_by_link.items()):
        arguments.instance(f"rows_by_link[{label!r}]", rows, list)
        lengths = [r.prompt_len for r in rows]
        ax.plot(lengths, [r.transfer_s * 1e3 for r in rows], marker="o", color=plots.color(i + 1),
                label=f"send the KV cache over {label}")
    ax.plot(lengths, [r.recompute_s * 1e3 for r in rows], marker="s", color=plots.color(0), linestyle="--",
            label="prefill it again on the decode chip")
    return plots.finish(ax)
