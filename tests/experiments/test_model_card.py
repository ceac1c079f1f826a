"""The model card is written from its measurements: the shipped card is what render() makes of the shipped
facts, and the facts agree with the shipped weights and logs."""

import json

import pytest

from hwopt.experiments import llm_accuracy, model_card
from hwopt.models import checkpoint

FACTS = checkpoint.WEIGHTS_DIR / "MODEL_CARD.json"


@pytest.fixture(scope="module")
def facts():
    return json.loads(FACTS.read_text())


def test_the_shipped_card_is_rendered_from_the_shipped_facts(facts):
    assert model_card.CARD.read_text() == model_card.render(facts)


def test_the_facts_match_the_shipped_models(facts):
    for name in checkpoint.MODELS:
        log = json.loads((checkpoint.WEIGHTS_DIR / name / "training_log.json").read_text())
        assert facts["models"][name]["log"]["tokens_seen"] == log["tokens_seen"]
        assert facts["models"][name]["parameters"] == checkpoint.load(name).parameter_count()
    assert [row["precision"] for row in facts["formats"]] == list(llm_accuracy.PRECISIONS)
    target = facts["models"]["target"]["perplexity"]
    assert target < facts["models"]["draft"]["perplexity"] < facts["unigram_perplexity"]


def test_render_refuses_what_is_not_its_facts():
    with pytest.raises(ValueError, match="facts"):
        model_card.render({"models": {}})
