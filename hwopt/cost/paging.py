"""KV-cache allocation (lesson 8): contiguous reservation vs paged blocks, simulated for a mix of requests.

A server does not know how long an answer will be. Contiguous allocation reserves max_len tokens of KV cache
per sequence up front; whatever the sequence does not use is wasted (reservation). Paged allocation (vLLM's
PagedAttention) hands out blocks of block_size tokens as a sequence grows; only the unfilled part of each
sequence's last block is wasted (internal fragmentation). Memory is counted in tokens of KV cache here
(memory bytes / KV bytes per token, see hwopt.cost.phases.kv_bytes_per_token). Requests are admitted in order
while their allocation fits, at their final lengths (the most memory each will hold).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hwopt import arguments, plots, widgets
from hwopt.cost import serving

POLICIES = ("contiguous", "paged")


@dataclass(frozen=True)
class Allocation:
    """One policy's result: sequences admitted, KV tokens they use and hold (reserved or in blocks)."""

    policy: str
    sequences: int
    used_tokens: int
    held_tokens: int
    memory_tokens: int

    @property
    def wasted_tokens(self) -> int:
        """Held but never written: reservation beyond the length, or the unfilled end of the last block."""
        return self.held_tokens - self.used_tokens

    @property
    def waste_fraction(self) -> float:
        """Wasted share of the memory held (0 when nothing is held)."""
        return self.wasted_tokens / self.held_tokens if self.held_tokens else 0.0

    def __str__(self) -> str:
        return (f"{self.policy:<10}: {self.sequences:,} sequences fit; {self.used_tokens:,} of "
                f"{self.held_tokens:,} held tokens used, {self.waste_fraction:.0%} wasted; memory "
                f"{self.held_tokens / self.memory_tokens:.0%} held")


def request_lengths(n_requests: int, mean_tokens: float, max_len: int, seed: int = 0) -> np.ndarray:
    """Final lengths (prompt + answer, tokens) of n_requests: a geometric spread, capped at max_len."""
    max_len = arguments.count("max_len", max_len, "tokens")
    return np.minimum(serving.output_lengths(n_requests, mean_tokens, seed), max_len)


def held_tokens(lengths, policy: str, max_len: int, block_size: int = 16) -> np.ndarray:
    """KV tokens each sequence holds: max_len (contiguous) or its length rounded up to blocks (paged)."""
    lengths = arguments.finite_array("lengths", lengths, ndim=1, integer=True, minimum=1,
                                     maximum=arguments.LIMITS["tokens"])
    arguments.one_of("policy", policy, POLICIES)
    max_len = arguments.count("max_len", max_len, "tokens")
    block_size = arguments.count("block_size", block_size, "tokens")
    if lengths.size and lengths.max() > max_len:
        raise ValueError(f"lengths must be at most max_len={max_len:,}; got {int(lengths.max()):,}")
    if policy == "contiguous":
        return np.full(lengths.shape, max_len, dtype=np.int64)
    return -(-lengths.astype(np.int64) // block_size) * block_size


def allocate(lengths, memory_tokens: int, policy: str, max_len: int, block_size: int = 16) -> Allocation:
    """Admit requests in order while their KV allocation fits in memory_tokens; the Allocation."""
    held = held_tokens(lengths, policy, max_len, block_size)
    memory_tokens = arguments.count("memory_tokens", memory_tokens, "elements")
    used = np.asarray(lengths, dtype=np.int64)
    fits = int(np.searchsorted(np.cumsum(held), memory_tokens, side="right"))
    return Allocation(policy, fits, int(used[:fits].sum()), int(held[:fits].sum()), memory_tokens)


def compare_policies(lengths, memory_tokens: int, max_len: int,
                     block_size: int = 16) -> dict[str, Allocation]:
    """{policy: Allocation} for contiguous and paged allocation of the same requests and memory."""
    return {p: allocate(lengths, memory_tokens, p, max_len, block_size) for p in POLICIES}


def paging_report(lengths, memory_tokens: int, max_len: int, block_size: int = 16) -> str:
    """Both policies, and how many times more sequences paging fits (the slider's text)."""
    result = compare_policies(lengths, memory_tokens, max_len, block_size)
    contiguous, paged = result["contiguous"], result["paged"]
    if paged.sequences == len(np.asarray(lengths)):
        limit = f"every one of the {paged.sequences:,} requests fits with paging: give it more requests"
    elif contiguous.sequences == 0:
        limit = f"not one max_len reservation fits; paging fits {paged.sequences:,}"
    else:
        mean = float(np.mean(np.asarray(lengths)))
        limit = (f"paging fits {paged.sequences / contiguous.sequences:.1f}x as many sequences, for this "
                 f"workload: each reservation holds max_len = {max_len:,} tokens and these requests average "
                 f"{mean:,.0f}, so the ratio is at most about max_len / mean length = {max_len / mean:.1f}x; "
                 "requests of about max_len would leave paging no gain")
    return f"{contiguous}\n{paged}\n{limit}"


def plot_policies(result: dict[str, Allocation], ax=None):
    """Stacked bars per policy: KV tokens used, wasted and free, in units of memory_tokens; the Figure."""
    arguments.instance("result", result, dict)
    if not result or not all(isinstance(a, Allocation) for a in result.values()):
        raise ValueError("result must be compare_policies(...)'s {policy: Allocation}")
    ax = plots.axes("policy", "share of KV-cache memory", ax=ax)
    names = list(result)
    used = [a.used_tokens / a.memory_tokens for a in result.values()]
    wasted = [a.wasted_tokens / a.memory_tokens for a in result.values()]
    free = [1 - u - w for u, w in zip(used, wasted, strict=True)]
    ax.bar(names, used, color=plots.color(0), label="used")
    ax.bar(names, wasted, bottom=used, color=plots.color(1), label="reserved, never written")
    ax.bar(names, free, bottom=[u + w for u, w in zip(used, wasted, strict=True)], color="#dddddd",
           label="free")
    for i, a in enumerate(result.values()):
        ax.text(i, 1.01, f"{a.sequences:,} sequences", ha="center", va="bottom")
    ax.set_ylim(0, 1.12)
    return plots.finish(ax)


def paging_explorer(kv_bytes_per_token: float, mean_tokens: float = 300.0, n_requests: int = 2000,
                    seed: int = 0):
    """Sliders (block size, max length, memory GB) -> sequences that fit, contiguous vs paged."""
    kv_bytes_per_token = arguments.positive("kv_bytes_per_token", kv_bytes_per_token,
                                            maximum=arguments.LIMITS["bytes"])
    arguments.count("n_requests", n_requests, "items")
    arguments.between("mean_tokens", mean_tokens, 1, arguments.LIMITS["tokens"])
    arguments.count("seed", seed, "seed", minimum=0)

    def show(block_size, max_len, memory_gb):
        lengths = request_lengths(n_requests, mean_tokens, max_len, seed)
        memory_tokens = max(1, math.floor(memory_gb * 1e9 / kv_bytes_per_token))
        print(paging_report(lengths, memory_tokens, max_len, block_size))
        return plot_policies(compare_policies(lengths, memory_tokens, max_len, block_size))

    return widgets.explore(
        show,
        block_size=widgets.dropdown("block size", [1, 4, 8, 16, 32, 64, 128, 256], 16, unit="tokens"),
        max_len=widgets.dropdown("max length", [512, 1024, 2048, 4096, 8192, 16384], 4096, unit="tokens"),
        memory_gb=widgets.log_slider("KV memory", 0.5, 200.0, 16.0, unit="GB"),
    )
