"""Weights in Hugging Face's layout: the course's models load in transformers with the same logits; a saved
model loads back; missing, corrupt or foreign files are refused naming the file."""

import json
import shutil

import pytest
import torch
from transformers import LlamaForCausalLM

from hwopt.models import checkpoint, corpus, tokenizer
from hwopt.models.llama import Llama, LlamaConfig

SMALL = LlamaConfig(vocab_size=300, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden=128,
                    max_seq_len=64)


def validation_tokens(n: int) -> torch.Tensor:
    tok = tokenizer.load(checkpoint.WEIGHTS_DIR / "tokenizer.json")
    text = corpus.read_validation(checkpoint.WEIGHTS_DIR / "validation.txt")[1]
    return torch.tensor([tok.encode(text).ids[:n]])


@pytest.mark.parametrize("name", checkpoint.MODELS)
def test_transformers_llama_gives_the_course_modules_logits(name):
    tokens = validation_tokens(200)
    ours = checkpoint.load(name)
    theirs = LlamaForCausalLM.from_pretrained(checkpoint.WEIGHTS_DIR / name, dtype=torch.float32).eval()
    with torch.no_grad():
        a, b = ours(tokens), theirs(tokens).logits
    torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-4)


def test_course_models_carry_the_course_tokenizer():
    shipped = (checkpoint.WEIGHTS_DIR / "tokenizer.json").read_bytes()
    for name in checkpoint.MODELS:
        assert (checkpoint.WEIGHTS_DIR / name / "tokenizer.json").read_bytes() == shipped
        config = json.loads((checkpoint.WEIGHTS_DIR / name / "config.json").read_text())
        assert config["torch_dtype"] == "bfloat16"


def test_save_then_load_gives_the_same_model(tmp_path):
    torch.manual_seed(0)
    model = Llama(SMALL).eval()
    checkpoint.save(model, tmp_path, dtype=torch.float32)
    loaded = checkpoint.load(tmp_path)
    tokens = torch.randint(0, SMALL.vocab_size, (1, 16))
    with torch.no_grad():
        assert torch.equal(model(tokens), loaded(tokens))
    assert loaded.lm_head.weight is loaded.embed_tokens.weight


@pytest.fixture
def saved(tmp_path):
    checkpoint.save(Llama(SMALL), tmp_path)
    return tmp_path


def test_missing_weights_are_named(saved):
    (saved / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="model.safetensors"):
        checkpoint.load(saved)


def test_corrupt_weights_are_named(saved):
    data = (saved / "model.safetensors").read_bytes()
    (saved / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="model.safetensors.*not a readable safetensors"):
        checkpoint.load(saved)


def test_another_architecture_is_named(saved):
    config = json.loads((saved / "config.json").read_text())
    (saved / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(ValueError, match="config.json.*expected 'llama'"):
        checkpoint.load(saved)


def test_weights_of_another_shape_are_named(saved, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(saved, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "intermediate_size": 256}))
    with pytest.raises(ValueError, match="gate_proj.*config.json expects"):
        checkpoint.load(other)


def test_a_model_that_is_nowhere_is_refused(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="not a folder"):
        checkpoint.load(tmp_path / "absent")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="no-such-org/no-such-model"):
        checkpoint.load("no-such-org/no-such-model")
