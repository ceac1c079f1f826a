"""Speculative decoding's cost model (lesson 10): tokens per target step, and the speedup they buy.

A cheap draft model proposes `draft_len` (k) tokens; the target model checks all k in one forward pass and
keeps the longest prefix it agrees with, plus one token of its own. If each proposed token is accepted with
probability a (independently), one target step yields on average
    E = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)   tokens (k + 1 when a = 1),
and costs one target step plus k draft steps. With c = draft step time / target step time:
    speedup over plain decoding = E / (1 + k c),
or E / (v + k c) where verifying k + 1 tokens costs v target steps (v = 1 while reading weights dominates).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hwopt import arguments, plots, widgets

MAX_DRAFT_LEN = 64  # longest draft the explorer and the searches consider


def _draft_len(draft_len) -> int:
    return arguments.between("draft_len", draft_len, 0, MAX_DRAFT_LEN, integer=True)


def expected_tokens_per_step(acceptance: float, draft_len: int) -> float:
    """(1 - a^(k+1)) / (1 - a): tokens one target step yields, a = acceptance rate, k = draft_len."""
    a = arguments.fraction("acceptance", acceptance, allow_zero=True)
    k = _draft_len(draft_len)
    return float(k + 1) if a == 1 else (1 - a ** (k + 1)) / (1 - a)


def simulate_tokens_per_step(acceptance: float, draft_len: int, n_steps: int = 10_000,
                             seed: int = 0) -> float:
    """Monte-Carlo mean of tokens per target step: each step draws k accept/reject coins of probability a,
    keeps the accepted prefix and adds the target's own token."""
    a = arguments.fraction("acceptance", acceptance, allow_zero=True)
    k = _draft_len(draft_len)
    n_steps = arguments.count("n_steps", n_steps, "items")
    rng = np.random.default_rng(arguments.count("seed", seed, "seed", minimum=0))
    accepted = rng.random((n_steps, k)) < a
    prefix = np.cumprod(accepted, axis=1).sum(axis=1) if k else np.zeros(n_steps)
    return float(prefix.mean() + 1)


def predicted_speedup(acceptance: float, draft_len: int, cost_ratio: float,
                      verify_ratio: float = 1.0) -> float:
    """E / (v + k c): speculative decoding's speed over plain decoding; c = draft / target step time,
    v = target verification of k + 1 tokens / one target step."""
    c = arguments.positive("cost_ratio", cost_ratio, allow_zero=True, maximum=1e3)
    v = arguments.positive("verify_ratio", verify_ratio, maximum=1e3)
    k = _draft_len(draft_len)
    return expected_tokens_per_step(acceptance, k) / (v + k * c)


def best_draft_len(acceptance: float, cost_ratio: float, max_draft_len: int = 16) -> int:
    """The draft length k (0 = no speculation) with the highest predicted speedup."""
    arguments.fraction("acceptance", acceptance, allow_zero=True)
    arguments.positive("cost_ratio", cost_ratio, allow_zero=True, maximum=1e3)
    top = arguments.between("max_draft_len", max_draft_len, 1, MAX_DRAFT_LEN, integer=True)
    return max(range(top + 1), key=lambda k: predicted_speedup(acceptance, k, cost_ratio))


def acceptance_rate(accepted_per_step: Sequence[int], draft_len: int) -> float:
    """Acceptance rate a estimated from measured steps (maximum likelihood): each step accepted n of k
    proposals; a step that stopped early (n < k) saw one rejection. a = accepted / (accepted + rejections)."""
    k = arguments.between("draft_len", draft_len, 1, MAX_DRAFT_LEN, integer=True)
    n = arguments.finite_array("accepted_per_step", accepted_per_step, ndim=1, integer=True, minimum=0,
                               maximum=k)
    accepted, rejections = int(n.sum()), int((n < k).sum())
    return accepted / (accepted + rejections) if accepted + rejections else 1.0


def plot_speedup(acceptance: float, cost_ratio: float, draft_len: int, ax=None):
    """Predicted speedup against draft length k for one acceptance rate and cost ratio; draft_len marked."""
    k = _draft_len(draft_len)
    ks = list(range(max(8, 2 * k) + 1))
    speedups = [predicted_speedup(acceptance, j, cost_ratio) for j in ks]
    ax = plots.axes("draft length k (tokens)", "predicted speedup (x)", ax=ax,
                    title=f"acceptance {acceptance:.2f}, draft/target cost {cost_ratio:.2f}")
    ax.plot(ks, speedups, marker="o", color=plots.color(0), label="E / (1 + k c)")
    ax.axhline(1.0, color="gray", linestyle=":", label="plain decoding")
    ax.plot([k], [speedups[k]], "o", color=plots.color(1), markersize=10, label=f"k = {k}")
    return plots.finish(ax)


def speedup_summary(acceptance: float, draft_len: int, cost_ratio: float) -> str:
    """One line: tokens per target step, predicted speedup, and the best k for these a and c."""
    tokens = expected_tokens_per_step(acceptance, draft_len)
    speedup = predicted_speedup(acceptance, draft_len, cost_ratio)
    best = best_draft_len(acceptance, cost_ratio)
    verdict = "faster than plain decoding" if speedup > 1 else "slower than plain decoding: drafts cost more"
    return (f"a = {acceptance:.2f}, k = {draft_len}, c = {cost_ratio:.2f}: {tokens:.2f} tokens per target "
            "step, "
            f"predicted speedup {speedup:.2f}x ({verdict}); best k here: {best} "
            f"({predicted_speedup(acceptance, best, cost_ratio):.2f}x)")


def speculative_explorer(cost_ratio: float):
    """Sliders over acceptance rate, draft length and cost ratio (starting at the measured c) -> speedup."""
    c = arguments.positive("cost_ratio", cost_ratio, allow_zero=True, maximum=1.0)

    def show(acceptance, draft_len, cost_ratio):
        print(speedup_summary(acceptance, draft_len, cost_ratio))
        return plot_speedup(acceptance, cost_ratio, draft_len)

    return widgets.explore(
        show,
        acceptance=widgets.float_slider("acceptance rate a", 0.0, 1.0, 0.7, step=0.01),
        draft_len=widgets.int_slider("draft length k", 1, 16, 4, unit="tokens"),
        cost_ratio=widgets.float_slider("draft / target step cost c", 0.0, 1.0, round(c, 2), step=0.01),
    )
