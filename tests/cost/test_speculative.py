"""cost.speculative: the tokens-per-step formula against a Monte-Carlo simulation; speedup and best k."""

import math

import numpy as np
import pytest

from hwopt import widgets
from hwopt.cost import speculative as sp


@pytest.mark.parametrize(("a", "k"), [(0.0, 4), (0.3, 1), (0.6, 4), (0.8, 7), (0.95, 16), (1.0, 5)])
def test_formula_agrees_with_monte_carlo(a, k):
    n = 40_000
    simulated = sp.simulate_tokens_per_step(a, k, n_steps=n, seed=1)
    # tokens per step lie in 1..k+1: the mean's standard error is at most (k / 2) / sqrt(n); allow 4 of them
    tolerance = 4 * (k / 2) / math.sqrt(n) + 1e-12
    assert simulated == pytest.approx(sp.expected_tokens_per_step(a, k), abs=tolerance)


def test_monte_carlo_detects_a_wrong_formula():
    """The tolerance above is tight enough to reject the formula without the target's own token (E - 1)."""
    a, k, n = 0.6, 4, 40_000
    wrong = sp.expected_tokens_per_step(a, k) - 1
    assert abs(sp.simulate_tokens_per_step(a, k, n_steps=n, seed=1) - wrong) > 4 * (k / 2) / math.sqrt(n)


def test_formula_limits():
    assert sp.expected_tokens_per_step(0.0, 8) == 1.0  # nothing accepted: the target's own token only
    assert sp.expected_tokens_per_step(1.0, 8) == 9.0  # everything accepted
    assert sp.expected_tokens_per_step(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert sp.expected_tokens_per_step(0.999999, 3) == pytest.approx(4.0, rel=1e-5)  # continuous at a = 1


def test_speedup_and_best_draft_length():
    assert sp.predicted_speedup(0.8, 4, 0.0) == pytest.approx(sp.expected_tokens_per_step(0.8, 4))
    assert sp.predicted_speedup(0.8, 4, 0.1) == pytest.approx(3.3616 / 1.4)
    assert sp.predicted_speedup(0.8, 4, 0.1, verify_ratio=2.0) == pytest.approx(3.3616 / 2.4)
    assert sp.predicted_speedup(0.0, 3, 0.2) < 1  # a useless draft only costs time
    assert sp.best_draft_len(0.0, 0.1) == 0
    assert sp.best_draft_len(0.9, 0.05) > sp.best_draft_len(0.6, 0.05) > 0
    assert "best k here" in sp.speedup_summary(0.7, 4, 0.2)


def test_acceptance_estimate_recovers_the_rate_of_simulated_steps():
    rng = np.random.default_rng(0)
    k, a = 4, 0.7
    accepted = np.cumprod(rng.random((20_000, k)) < a, axis=1).sum(axis=1)
    assert sp.acceptance_rate(accepted, k) == pytest.approx(a, abs=0.01)
    assert sp.acceptance_rate([4, 4], 4) == 1.0 and sp.acceptance_rate([0, 0], 4) == 0.0
    with pytest.raises(ValueError, match="accepted_per_step"):
        sp.acceptance_rate([5], 4)


def test_bad_rates_are_refused():
    with pytest.raises(ValueError, match="acceptance"):
        sp.expected_tokens_per_step(1.5, 2)
    with pytest.raises(ValueError, match="draft_len"):
        sp.predicted_speedup(0.5, -1, 0.1)


def test_explorer_follows_the_sliders(monkeypatch, capsys):
    shown = []
    monkeypatch.setattr(widgets, "display", shown.append)
    box = sp.speculative_explorer(0.2)
    assert set(box.controls) == {"acceptance", "draft_len", "cost_ratio"}
    box.controls["acceptance"].value = 0.9
    box.controls["draft_len"].value = 8
    text = capsys.readouterr().out.splitlines()
    assert text[-1].startswith("a = 0.90, k = 8, c = 0.20") and len(shown) == 3
    box.controls["cost_ratio"].value = 1.0
    assert "slower than plain decoding" in capsys.readouterr().out
