"""experiments.speculative_decoding: speculative greedy decoding returns the target's greedy tokens."""

import pytest
import torch

from hwopt.experiments import speculative_decoding as sd
from hwopt.models import tiny_decoder as td

pytestmark = pytest.mark.filterwarnings("ignore::hwopt.machine.bench.NoisyMeasurementWarning")
SMALL = {"vocab_size": 64, "d_model": 32, "draft_layers": 1, "extra_layers": 2, "n_heads": 4}


@pytest.mark.parametrize("difference", [0.0, 0.5, 3.0])
@pytest.mark.parametrize("draft_len", [1, 3, 6])
def test_output_equals_the_target_greedy_output(difference, draft_len):
    draft, target = sd.make_draft_and_target(difference=difference, **SMALL)
    prompt = sd.random_prompt(64, 5, seed=2)
    run = sd.speculative_generate(draft, target, prompt, 20, draft_len)
    assert torch.equal(run.tokens, td.generate(target, prompt, 20))
    checked, same = sd.checked_run(draft, target, prompt, 20, draft_len)
    assert same is True and torch.equal(checked.tokens, run.tokens)
    assert sum(n + 1 for n in run.accepted_per_step) >= 20 - 1  # every target step yields n + 1 tokens


def test_draft_is_the_targets_first_layers_and_difference_zero_makes_them_agree():
    draft, target = sd.make_draft_and_target(difference=0.0, **SMALL)
    assert draft.head is target.head and draft.blocks[0] is target.blocks[0] and len(draft.blocks) == 1
    run = sd.speculative_generate(draft, target, sd.random_prompt(64, 4), 16, 4)
    assert run.acceptance == 1.0 and run.tokens_per_step == pytest.approx(5.0, abs=1.0)


def test_acceptance_falls_as_the_target_moves_away_from_the_draft():
    runs = sd.acceptance_by_difference([0.0, 3.0], draft_len=3, new_tokens=30, **SMALL)
    assert runs[0.0].acceptance == 1.0 and runs[3.0].acceptance < 0.9


def test_verification_in_one_pass_matches_one_token_at_a_time():
    """The target scoring k + 1 tokens over its cache (the causal mask after a cache) equals k + 1 steps."""
    _, target = sd.make_draft_and_target(**SMALL)
    tokens = sd.random_prompt(64, 9, seed=3)
    with torch.inference_mode():
        _, cache = target(tokens[:, :5])
        together, _ = target(tokens[:, 5:], cache, start=5)
        full, _ = target(tokens)
    assert torch.allclose(together, full[:, 5:], atol=1e-5)
    assert td.truncate_caches(cache, 3)[0][0].shape[2] == 3


def test_step_costs_and_report_are_measured():
    draft, target = sd.make_draft_and_target(**SMALL)
    costs = sd.measure_step_costs(draft, target, 3, context_len=8, repeats=3)
    assert costs.cost_ratio > 0 and costs.verify_ratio > 0 and costs.draft_len == 3
    prompt = sd.random_prompt(64, 4)
    run = sd.speculative_generate(draft, target, prompt, 12, 3)
    timings = sd.compare_generation(draft, target, prompt, 12, 3, repeats=2)
    ratios = sd.predicted_over_measured(run, costs, timings)
    plain, fast = timings["target greedy"], timings["speculative"]
    assert ratios["measured"] == pytest.approx(plain.median_s / fast.median_s)
    assert "predicted / measured" in sd.speedup_report(run, costs, timings)
    plain_ms = timings["target greedy"].median_ms
    assert f"{plain_ms:,.1f} ms plain" in sd.speedup_report(run, costs, timings)  # absolute figures


def test_bad_pairs_are_refused():
    draft, target = sd.make_draft_and_target(**SMALL)
    other = td.make_tiny_decoder(vocab_size=65, d_model=32, n_layers=1, n_heads=4)
    with pytest.raises(ValueError, match="vocabulary"):
        sd.speculative_generate(other, target, sd.random_prompt(64), 4)
    with pytest.raises(ValueError, match="new_tokens"):
        sd.speculative_generate(draft, target, sd.random_prompt(64), target.max_len, 4)
