"""Speculative decoding with the course's trained models: the target's greedy output, fewer target steps,
acceptance counted per draft position, prompt lookup proposing what followed the last n-gram."""

import pytest

from hwopt.experiments import llm_accuracy, llm_speculative


@pytest.fixture(scope="module")
def models():
    return llm_accuracy.load("target")[0], llm_accuracy.load("draft")[0]


def test_prompt_lookup_proposes_what_followed_the_last_ngram():
    history = [1, 2, 3, 4, 5, 9, 1, 2, 3]
    assert llm_speculative.prompt_lookup(history, 2, ngram=3) == [4, 5]
    assert llm_speculative.prompt_lookup([7, 8, 9], 2) == []
    assert llm_speculative.prompt_lookup([5, 1, 6, 1], 3, ngram=3) == [6, 1]  # a shorter n-gram when needed


@pytest.mark.parametrize("drafter", llm_speculative.DRAFTERS)
def test_speculative_output_is_the_targets_greedy_output_in_fewer_steps(models, drafter):
    target, draft = models
    prompt = llm_speculative.validation_prompt("target", 96)
    run, agreeing = llm_speculative.checked_run(target, prompt, 32, 4, drafter, draft)
    assert agreeing == 32 and run.tokens.shape == (1, 96 + 32)
    assert run.target_steps < 32 and run.tokens_per_step == 32 / run.target_steps
    assert all(0 <= a <= p <= 4 for p, a in zip(run.proposed, run.accepted, strict=True))
    shares = run.acceptance_by_position()
    assert len(shares) == 4 and all(s is None or 0 <= s <= 1 for s in shares)
    assert 0 < run.acceptance <= 1


def test_the_trained_draft_is_accepted_more_often_than_chance(models):
    target, draft = models
    run = llm_speculative.speculative_generate(target, llm_speculative.validation_prompt("target", 96), 32, 4,
                                               "draft", draft)
    assert run.acceptance > 0.5 and run.tokens_per_step > 2  # measured: 0.79-0.91, 3.4-3.8 tokens per step


def test_step_costs_time_the_three_steps(models):
    costs = llm_speculative.step_costs(*models, context_len=16, draft_len=2, repeats=2)
    assert list(costs) == ["draft step", "target step", "target verifies 3 tokens"]
    with pytest.raises(ValueError, match="context_len"):
        llm_speculative.step_costs(*models, context_len=510, draft_len=4)
