"""Perplexity and top-1 agreement of the course's draft in each format: deterministic, cached, bytes per
weight with scales; any local LLaMA folder through the same function; a tokenizer that does not match is
refused."""

import shutil

import matplotlib.pyplot as plt
import pytest
import torch

from hwopt.experiments import llm_accuracy
from hwopt.models import checkpoint, tokenizer
from hwopt.models.llama import Llama, LlamaConfig

SHORT = {"seq_len": 128, "max_windows": 3, "progress": False}  # a slice of the validation text: seconds


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HWOPT_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def draft():
    return llm_accuracy.load("draft")[0]


def test_full_precision_agrees_with_itself_and_is_deterministic():
    first = llm_accuracy.evaluate("draft", "fp32", cache=False, **SHORT)
    again = llm_accuracy.evaluate("draft", "fp32", cache=False, **SHORT)
    assert first["top1_agreement"] == 1.0 and first["bytes_per_weight"] == 4.0
    assert first["perplexity"] == again["perplexity"] and first["tokens"] == 3 * 128
    assert 1 < first["perplexity"] < 4096 / 10  # trained: far below a uniform guess over 4096 tokens


def test_a_result_is_computed_once_then_read_from_the_cache():
    first = llm_accuracy.evaluate("draft", "int4_g128", **SHORT)
    second = llm_accuracy.evaluate("draft", "int4_g128", **SHORT)
    assert (first["cached"], second["cached"]) == (False, True)
    assert second["perplexity"] == first["perplexity"]
    other = llm_accuracy.evaluate("draft", "int4_g128", **{**SHORT, "max_windows": 2})
    assert not other["cached"]  # another evaluation set is another key


@pytest.mark.parametrize(("precision", "bytes_per_weight"), [
    ("bf16", 2.0), ("fp8_e4m3", 1.0), ("int4_g128", 0.5 + 2 / 128), ("int4_g32", 0.5 + 4 / 32),
    ("mxfp4", 0.5 + 1 / 32), ("nvfp4", 0.5 + 1 / 16), ("gguf_q8_0", 34 / 32), ("gguf_q4_k", 144 / 256)])
def test_bytes_per_weight_include_the_scales(draft, precision, bytes_per_weight):
    _, measured = llm_accuracy.quantize_weights(draft, precision)
    assert measured == pytest.approx(bytes_per_weight, rel=1e-3)


def test_int8_has_one_scale_per_output_channel(draft):
    quantized, bytes_per_weight = llm_accuracy.quantize_weights(draft, "int8")
    w, q = draft.layers[0].mlp.down_proj.weight, quantized.layers[0].mlp.down_proj.weight
    scales = w.abs().amax(dim=1, keepdim=True) / 127
    assert torch.allclose(q, torch.round(w / scales) * scales, atol=1e-6)
    assert 1.0 < bytes_per_weight < 1.02


def test_fewer_bits_agree_less_with_full_precision():
    rows = llm_accuracy.table("draft", ["fp16", "gguf_q4_0"], **SHORT)
    assert rows[0]["top1_agreement"] > 0.99 > rows[1]["top1_agreement"]
    assert isinstance(llm_accuracy.plot_frontier(rows), plt.Figure)
    plt.close("all")


def test_any_local_llama_folder_goes_through_the_same_function(tmp_path):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=tokenizer.VOCAB_SIZE, d_model=64, n_layers=1, n_heads=4, n_kv_heads=2,
                         hidden=128, max_seq_len=128)
    model = Llama(config)
    checkpoint.save(model, tmp_path / "mine")
    shutil.copy(checkpoint.WEIGHTS_DIR / "tokenizer.json", tmp_path / "mine")
    result = llm_accuracy.evaluate(tmp_path / "mine", "bf16", **SHORT)
    assert result["perplexity"] > 1000  # random weights: about the vocabulary's size


def test_a_tokenizer_of_another_vocabulary_is_named(tmp_path):
    folder = tmp_path / "draft"
    shutil.copytree(checkpoint.WEIGHTS_DIR / "draft", folder)
    tokenizer.train(["def f(x):\n    return x\n"] * 20, vocab_size=300).save(str(folder / "tokenizer.json"))
    with pytest.raises(ValueError, match="tokenizer.json.*config.json"):
        llm_accuracy.evaluate(folder, "fp32", **SHORT)


def test_unknown_precisions_are_refused():
    with pytest.raises(ValueError, match="precision"):
        llm_accuracy.evaluate("draft", "int3", **SHORT)
    with pytest.raises(ValueError, match="seq_len"):
        llm_accuracy.evaluate("draft", "fp32", seq_len=100_000)


def test_frontier_keeps_the_rows_nothing_beats_and_slices_are_described():
    rows = [{"precision": p, "bytes_per_weight": b, "perplexity": q, "top1_agreement": 1.0}
            for p, b, q in [("fp32", 4.0, 10.0), ("bf16", 2.0, 10.0), ("int8", 1.0, 10.1), ("x", 1.0, 12.0),
                            ("int4", 0.5, 11.0)]]
    assert [r["precision"] for r in llm_accuracy.frontier(rows)] == ["int4", "int8", "bf16"]
    row = {"tokens": 1024, "seq_len": 512, "eval_set": "validation", "available_tokens": 4096}
    assert llm_accuracy.describe_slice(row) == ("the first 2 windows of 512 tokens of the validation text: "
                                                "1,024 of its 4,096 tokens")
    assert llm_accuracy.describe_slice({**row, "tokens": 4096}).startswith("all 8 windows")
