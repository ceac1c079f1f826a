"""cost.footprint: parameters from shapes, weights/KV/activation formulas, fits and max batch, widget."""

import csv

import pytest

from hwopt import widgets
from hwopt.cost import footprint


def test_parameter_counts_match_the_published_sizes():
    expected_billions = {
        "GPT-2 small": 0.124,
        "Llama-2-7B": 6.74,
        "Llama-2-13B": 13.0,
        "Mistral-7B-v0.1": 7.24,
        "Llama-3-8B": 8.03,
        "Llama-2-70B": 69.0,
    }
    shapes = {s.name: s for s in footprint.load_shapes()}
    assert set(expected_billions) <= set(shapes)
    for name, billions in expected_billions.items():
        assert shapes[name].n_params / 1e9 == pytest.approx(billions, rel=0.01), name
        assert shapes[name].source_url.startswith("https://")


def test_formulas_by_hand():
    s = footprint.ModelShape(
        "toy",
        n_layers=2,
        d_model=8,
        n_heads=2,
        n_kv_heads=1,
        d_ff=16,
        vocab_size=10,
        gated_mlp=False,
        tied_embeddings=True,
    )
    assert s.head_dim == 4
    assert s.n_params == 2 * (2 * 64 + 2 * 8 * 4 + 2 * 8 * 16) + 80
    assert footprint.weights_bytes(s, "fp32") == s.n_params * 4
    assert footprint.kv_cache_bytes(s, batch_size=3, seq_len=5, precision="fp16") == 2 * 2 * 3 * 5 * 1 * 4 * 2
    per_token = 2 * 8 + max(8 + 2 * 4, 16)
    assert footprint.activation_bytes(s, 3, 5, "fp16", naive_attention=False) == 3 * 5 * per_token * 2
    assert footprint.activation_bytes(s, 3, 5, "fp16") == (3 * 5 * per_token + 3 * 2 * 25) * 2


def test_breakdown_fits_and_max_batch():
    s = footprint.get_shape("llama-2-7b")
    b = footprint.memory_breakdown(s, 1, 4096, "fp16")
    assert b.weights_gb == pytest.approx(13.48, rel=0.01) and b.total_gb == pytest.approx(
        sum(v for k, v in b.as_dict().items() if k != "total_gb")
    )
    assert footprint.memory_breakdown(s, 1, 4096, "int4").weights_gb == pytest.approx(b.weights_gb / 4)
    assert footprint.fits(b, 80) and not footprint.fits(b, 16)
    best = footprint.max_batch_size(s, 4096, 80)
    assert best >= 1 and footprint.fits(footprint.memory_breakdown(s, best, 4096), 80)
    assert not footprint.fits(footprint.memory_breakdown(s, best + 1, 4096), 80)
    assert footprint.max_batch_size(footprint.get_shape("Llama-2-70B"), 4096, 24) == 0


def test_kv_cache_precision_is_its_own_choice():
    s = footprint.get_shape("Llama-2-7B")
    fp16 = footprint.memory_breakdown(s, 4, 4096, "fp16")
    int4_weights = footprint.memory_breakdown(s, 4, 4096, "int4_g128")
    # int weights compute in fp16: the cache stays fp16 unless chosen otherwise
    assert int4_weights.kv_cache_gb == fp16.kv_cache_gb and int4_weights.activations_gb == fp16.activations_gb
    assert int4_weights.weights_gb == pytest.approx(fp16.weights_gb * (4 + 16 / 128) / 16)  # scales counted
    fp8_kv = footprint.memory_breakdown(s, 4, 4096, "fp16", kv_precision="fp8_e4m3")
    assert fp8_kv.kv_cache_gb == pytest.approx(fp16.kv_cache_gb / 2) and fp8_kv.weights_gb == fp16.weights_gb
    for kv, ratio in (("fp32", 2), ("bf16", 1), ("int8", 0.5), ("int4", 0.25)):
        kv_gb = footprint.memory_breakdown(s, 4, 4096, "int8", kv_precision=kv).kv_cache_gb
        assert kv_gb == pytest.approx(fp16.kv_cache_gb * ratio), kv
    assert footprint.kv_precision_for("fp32") == "fp32" and footprint.kv_precision_for("int8") == "fp16"
    assert footprint.kv_precision_for("int8", "float8_e4m3fn") == "fp8_e4m3"
    narrow = footprint.max_batch_size(s, 4096, 24, "int8", kv_precision="fp8_e4m3", naive_attention=False)
    assert narrow > footprint.max_batch_size(s, 4096, 24, "int8", naive_attention=False) >= 1
    with pytest.raises(ValueError, match="kv_precision must be one of"):
        footprint.memory_breakdown(s, 1, 128, "int8", kv_precision="fp7")
    with pytest.raises(ValueError, match="kv_precision"):
        footprint.max_batch_size(s, 128, 24, kv_precision=8)


def test_oom_fix_tries_a_narrower_kv_cache_before_the_weights():
    s = footprint.get_shape("Llama-2-7B")
    assert footprint.oom_fix(s, 4, 4096, 24, kv_precision="fp32").endswith("fix: an FP8 KV cache with fused "
                                                                           "attention")
    assert footprint.oom_fix(s, 8, 4096, 24).endswith("int8 weights and an FP8 KV cache with fused attention")
    assert "the int4 KV cache" in footprint.oom_fix(s, 16, 4096, 24, kv_precision="int4")


def test_oom_fix_names_a_change():
    s = footprint.get_shape("Llama-2-7B")
    assert footprint.oom_fix(s, 1, 512, 80).startswith("fits")
    assert "fix:" in footprint.oom_fix(s, 8, 4096, 24)
    assert "bigger device" in footprint.oom_fix(footprint.get_shape("Llama-2-70B"), 1, 4096, 24)


def test_get_shape_typo_lists_close_names():
    with pytest.raises(ValueError, match="did you mean Llama-2-7B"):
        footprint.get_shape("lama-2-7b")


def test_memory_explorer_redraws(monkeypatch):
    shown = []
    monkeypatch.setattr(widgets, "display", shown.append)
    box = footprint.memory_explorer({"GPU 80 GB": 80.0, "GPU 16 GB": 16.0})
    box.controls["memory_gb"].value = 16.0
    box.controls["batch_size"].value = 64
    assert len(shown) == 3 and "OUT OF MEMORY" in shown[-1].axes[0].get_title()
    assert set(footprint.KV_PRECISIONS) >= {"fp32", "fp16", "bf16", "fp8_e4m3", "int8", "int4"}
    box.controls["precision"].value = "int4_g128"
    assert "int4_g128 weights, fp16 KV cache" in shown[-1].axes[0].get_title()
    box.controls["kv_precision"].value = "fp8_e4m3"
    assert "fp8_e4m3 KV cache" in shown[-1].axes[0].get_title()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: footprint.ModelShape("x", 0, 8, 2, 1, 16, 10), "n_layers"),
        (lambda: footprint.ModelShape("x", 1, 9, 2, 1, 16, 10), "divisible"),
        (lambda: footprint.load_shapes("missing.csv"), "path"),
        (lambda: footprint.kv_cache_bytes(footprint.get_shape("GPT-2 small"), 0, 10), "batch_size"),
        (lambda: footprint.activation_bytes(footprint.get_shape("GPT-2 small"), 1, 0), "seq_len"),
        (lambda: footprint.weights_bytes(footprint.get_shape("GPT-2 small"), "fp7"), "precision"),
        (lambda: footprint.fits(footprint.MemoryBreakdown(1, 1, 1), 0), "memory_gb"),
        (lambda: footprint.fits(footprint.MemoryBreakdown(1, 1, 1), 10, reserve_fraction=1),
         "reserve_fraction"),
        (lambda: footprint.memory_explorer({}), "memory_gb_by_device"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- the shapes of 2026: MoE, MLA, sliding windows, and the counts their publishers state ------------------

NEW_MODELS = ("Llama-3.1-70B", "Llama-3.1-405B", "Qwen3-32B", "Qwen3-30B-A3B", "Qwen3-235B-A22B",
              "Mixtral-8x7B-v0.1", "DeepSeek-V3", "gpt-oss-120b", "gpt-oss-20b")


def test_current_models_are_in_the_table_with_sources_and_published_counts():
    shapes = {s.name: s for s in footprint.load_shapes()}
    assert set(NEW_MODELS) <= set(shapes)
    for name in NEW_MODELS:
        s = shapes[name]
        assert s.source_url.startswith("https://") and s.source_url.endswith("config.json"), name
        assert s.params_source_url.startswith("https://") and s.total_params_b, name
        assert (s.active_params_b is not None) == s.is_moe, f"{name}: a MoE states its active parameters"
    assert {s.attention for s in shapes.values()} == {"MHA", "GQA", "MLA"}
    moe = ["Qwen3-30B-A3B", "Qwen3-235B-A22B", "Mixtral-8x7B-v0.1", "DeepSeek-V3", "gpt-oss-120b",
           "gpt-oss-20b"]
    assert [s.name for s in shapes.values() if s.is_moe] == moe


def test_counts_computed_from_the_shapes_agree_with_what_the_publishers_state():
    with open(footprint.SHAPES_CSV, encoding="utf-8") as f:
        notes = {r["name"]: r["notes"] for r in csv.DictReader(f)}
    for s in footprint.load_shapes():
        if s.total_params_b is None:
            continue
        assert s.n_params / 1e9 == pytest.approx(s.total_params_b, rel=0.02), s.name
        if s.active_params_b is not None:  # OpenAI's count leaves out the input embedding table, others not
            left_out = s.vocab_size * s.d_model if "leaves out the input embedding" in notes[s.name] else 0
            assert (s.active_params - left_out) / 1e9 == pytest.approx(s.active_params_b, rel=0.03), s.name
        assert s.active_params <= s.n_params and (s.active_params == s.n_params) == (not s.is_moe)


def test_moe_mla_and_sliding_window_formulas_by_hand():
    mixtral = footprint.get_shape("Mixtral-8x7B-v0.1")
    per_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 8 * 3 * 4096 * 14336 + 4096 * 8
    assert mixtral.n_params == 32 * per_layer + 2 * 32000 * 4096
    assert mixtral.n_params - mixtral.active_params == 32 * 6 * 3 * 4096 * 14336  # 6 of 8 experts idle
    deepseek = footprint.get_shape("DeepSeek-V3")  # MLA: 512 latent + 64 rope values per token and layer
    assert deepseek.attention == "MLA" and footprint.kv_values_per_token_layer(deepseek) == 576
    assert footprint.kv_cache_bytes(deepseek, 1, 1, "bf16") == 576 * 61 * 2  # 70,272 bytes, not 4 MB of MHA
    oss = footprint.get_shape("gpt-oss-120b")  # 18 of 36 layers keep only the last 128 tokens
    assert footprint.kv_cache_bytes(oss, 2, 100) == 2 * 8 * 64 * 36 * 100 * 2 * 2
    assert footprint.kv_cache_bytes(oss, 2, 32768) == 2 * 8 * 64 * (18 * 32768 + 18 * 128) * 2 * 2
    qwen = footprint.get_shape("Qwen3-32B")  # head_dim 128: the query heads are wider than d_model
    assert qwen.head_dim == 128 and qwen.attention_params == 2 * 5120 * 8192 + 2 * 5120 * 1024


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"n_experts": 8, "experts_per_token": 9, "d_ff_expert": 16}, "experts_per_token"),
    ({"n_experts": 8, "experts_per_token": 2}, "d_ff_expert"),
    ({"experts_per_token": 2}, "need n_experts"),
    ({"sliding_window": 128}, "together"),
    ({"n_sliding_layers": 3}, "n_sliding_layers"),
    ({"head_dim": -1}, "head_dim"),
    ({"total_params_b": float("nan")}, "total_params_b"),
    ({"kv_lora_rank": 1.5}, "kv_lora_rank"),
])
def test_bad_moe_mla_and_window_fields(kwargs, match):
    with pytest.raises(ValueError, match=match):
        footprint.ModelShape("x", 2, 8, 2, 1, 16, 10, **kwargs)


def test_a_bad_cell_in_the_shape_table_is_named(tmp_path):
    with open(footprint.SHAPES_CSV, encoding="utf-8") as f:
        header, *lines = f.readlines()
    row = next(line for line in lines if line.startswith("DeepSeek-V3,"))
    bad = tmp_path / "shapes.csv"
    bad.write_text(header + row.replace(",512,1536,", ",lots,1536,", 1))
    with pytest.raises(ValueError, match="kv_lora_rank of 'DeepSeek-V3' must be a number"):
        footprint.load_shapes(bad)


def test_a_token_budget_bounds_the_activations_not_the_kv_cache():
    llama = footprint.get_shape("Llama-2-7B")  # 16 prompts of 4,096 tokens: 65,536 prefilled at once
    per_token = 2 * 4096 + 2 * 11008  # residual + normed input, and the gated MLP's hidden (wider than q/k/v)
    at_once = footprint.activation_bytes(llama, 16, 4096, naive_attention=False)
    assert at_once == 16 * 4096 * per_token * 2
    bounded = footprint.activation_bytes(llama, 16, 4096, naive_attention=False, token_budget=8192)
    assert bounded == 8192 * per_token * 2
    short = footprint.activation_bytes(llama, 1, 1024, naive_attention=False, token_budget=8192)
    assert short == 1024 * per_token * 2  # fewer tokens than the budget: all of them
    naive = footprint.activation_bytes(llama, 16, 4096, token_budget=8192) - 8192 * per_token * 2
    assert naive == 8192 * 32 * 4096 * 2  # a chunk's query rows against the whole context
    kv_gb = footprint.memory_breakdown(llama, 16, 4096, kv_precision="fp8_e4m3").kv_cache_gb
    budget = footprint.memory_breakdown(llama, 16, 4096, kv_precision="fp8_e4m3", token_budget=8192)
    assert budget.kv_cache_gb == kv_gb
    fused = {"precision": "int8", "kv_precision": "fp8_e4m3", "naive_attention": False}
    assert footprint.max_batch_size(llama, 4096, 24, **fused) == 11
    assert footprint.max_batch_size(llama, 4096, 24, **fused, token_budget=8192) == 13
