"""The course's draft as GGUF: every tensor read back as written, llama.cpp's metadata and tokenizer, the
module's logits from the F16 file; a GGUF of another architecture or a file that is none is refused."""

import json

import gguf
import numpy as np
import pytest
import torch

from hwopt import quantization
from hwopt.experiments import fake_quant
from hwopt.models import checkpoint, gguf_export


@pytest.fixture(scope="module")
def draft():
    return checkpoint.load("draft")


@pytest.fixture(scope="module")
def files(draft, tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    return {t: gguf_export.write(draft, folder / f"draft-{t}.gguf", t) for t in gguf_export.TYPES}


def test_metadata_lets_llama_cpp_run_it_as_a_llama(files, draft):
    reader = gguf.GGUFReader(str(files["Q4_0"]))
    field = {k: f.contents() for k, f in reader.fields.items()}
    spec = json.loads((checkpoint.WEIGHTS_DIR / "tokenizer.json").read_text())
    c = draft.config
    assert field["general.architecture"] == "llama"
    assert field["general.file_type"] == gguf.LlamaFileType.MOSTLY_Q4_0
    assert (field["llama.block_count"], field["llama.embedding_length"], field["llama.feed_forward_length"],
            field["llama.attention.head_count"], field["llama.attention.head_count_kv"]) == (
        c.n_layers, c.d_model, c.hidden, c.n_heads, c.n_kv_heads)
    assert field["llama.rope.dimension_count"] == c.dim_per_head
    assert (field["tokenizer.ggml.model"], field["tokenizer.ggml.pre"]) == ("gpt2", "gpt-2")
    assert len(field["tokenizer.ggml.tokens"]) == c.vocab_size
    assert field["tokenizer.ggml.tokens"][0] == "<|endoftext|>"
    assert field["tokenizer.ggml.token_type"][0] == gguf.TokenType.CONTROL
    assert len(field["tokenizer.ggml.merges"]) == len(spec["model"]["merges"])
    assert field["tokenizer.ggml.eos_token_id"] == 0
    assert "output.weight" not in {t.name for t in reader.tensors}  # tied: llama.cpp reuses token_embd
    assert field["tokenizer.chat_template"] == gguf_export.CHAT_TEMPLATE


def test_the_chat_template_turns_a_chat_into_a_python_file():
    jinja2 = pytest.importorskip("jinja2")
    messages = [{"role": "system", "content": "a sorting helper"}, {"role": "user", "content": "sort xs"},
                {"role": "assistant", "content": "xs.sort()"}]
    text = jinja2.Template(gguf_export.CHAT_TEMPLATE).render(messages=messages)
    assert text == "# a sorting helper\n# sort xs\nxs.sort()\n"


def test_the_course_model_is_written_once_into_the_cache():
    path = gguf_export.cached("draft", "Q8_0")
    modified = path.stat().st_mtime_ns
    assert gguf_export.cached("draft", "Q8_0") == path and path.stat().st_mtime_ns == modified
    assert path.parent.name == "gguf" and gguf_export.read(path)[2]["layers.0.mlp.up_proj.weight"] == "Q8_0"
    with pytest.raises(ValueError, match="tensor_type"):
        gguf_export.cached("draft", "Q3_K")


def test_every_tensor_reads_back_as_written(files, draft):
    weights = {k: v.float().numpy() for k, v in draft.state_dict().items() if k != "lm_head.weight"}
    qtypes = {"Q8_0": gguf.GGMLQuantizationType.Q8_0, "Q4_0": gguf.GGMLQuantizationType.Q4_0}
    for tensor_type, path in files.items():
        config, tensors, types = gguf_export.read(path)
        assert config == draft.config and set(tensors) == set(weights)
        for name, w in weights.items():
            back = tensors[name]
            if w.ndim == 1:
                assert types[name] == "F32" and np.array_equal(back, w)
            elif tensor_type == "F16":
                assert np.array_equal(back, w.astype(np.float16).astype(np.float32)), name
            elif tensor_type in qtypes:  # gguf-py's own round trip, Q/K rows back in rotate-half order
                qtype = qtypes[tensor_type]
                expected = gguf.quants.dequantize(gguf.quants.quantize(w, qtype), qtype)
                assert np.array_equal(back, expected), name
            else:
                assert types[name] == "Q4_K"
                assert fake_quant.relative_rmse(back, w) < 1.1 * fake_quant.relative_rmse(
                    quantization.fake_quantize(w, "int4_g32"), w), name


def test_q4_k_blocks_decode_within_half_a_step():
    w = np.random.default_rng(0).standard_normal((4, 512)).astype(np.float32)
    blocks = gguf_export.quantize_q4_k(w)
    assert blocks.shape == (4, 2 * 144)
    back = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q4_K)
    step = (w.reshape(-1, 32).max(1) - np.minimum(w.reshape(-1, 32).min(1), 0)) / 15
    error = np.abs(back - w).reshape(-1, 32).max(1)
    assert (error <= 0.5 * step * 1.2 + 0.02).all()  # half a step, plus the 6-bit scale's rounding


def test_the_f16_file_gives_the_modules_logits(files, draft):
    tokens = torch.randint(0, draft.config.vocab_size, (1, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        from_file = gguf_export.load(files["F16"])(tokens)
        torch.testing.assert_close(from_file, draft(tokens), atol=0.05, rtol=0.01)


def test_another_architecture_and_non_gguf_files_are_named(tmp_path):
    other = tmp_path / "gpt2.gguf"
    writer = gguf.GGUFWriter(str(other), "gpt2")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match="gpt2.gguf.*expected architecture 'llama'"):
        gguf_export.read(other)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    with pytest.raises(ValueError, match="junk.gguf.*not a readable GGUF"):
        gguf_export.read(junk)
    with pytest.raises(ValueError, match="tensor_type"):
        gguf_export.write(checkpoint.load("draft"), tmp_path / "x.gguf", "Q2_K")


def test_permuted_rows_under_llama_cpps_adjacent_pair_rope_give_the_same_attention_scores():
    """llama.cpp's llama rotates pairs (2i, 2i+1); Hugging Face rotates (i, i + head_dim/2): the permuted
    Q and K projections must give every query-key product of the original under its own RoPE."""
    rng = np.random.default_rng(0)
    n_heads, head_dim, d_model, theta = 2, 8, 16, 10_000.0
    wq, wk = (rng.standard_normal((n_heads * head_dim, d_model)) for _ in range(2))
    x_q, x_k = rng.standard_normal(d_model), rng.standard_normal(d_model)
    speeds = theta ** (-np.arange(0, head_dim, 2) / head_dim)

    def rope_halves(v, pos):
        a, b = v[:head_dim // 2], v[head_dim // 2:]
        cos, sin = np.cos(pos * speeds), np.sin(pos * speeds)
        return np.concatenate([a * cos - b * sin, b * cos + a * sin])

    def rope_pairs(v, pos):
        a, b = v[0::2], v[1::2]
        cos, sin = np.cos(pos * speeds), np.sin(pos * speeds)
        return np.stack([a * cos - b * sin, b * cos + a * sin], axis=1).ravel()

    def scores(q_rows, k_rows, rope):
        q, k = (q_rows @ x_q).reshape(n_heads, head_dim), (k_rows @ x_k).reshape(n_heads, head_dim)
        return [rope(q[h], 7) @ rope(k[h], 3) for h in range(n_heads)]

    permuted = [gguf_export._permute(w, n_heads) for w in (wq, wk)]
    np.testing.assert_allclose(scores(*permuted, rope_pairs), scores(wq, wk, rope_halves), rtol=1e-12)
