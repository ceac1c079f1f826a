"""cost.phases: prefill and decode FLOPs, bytes, intensity and roofline time, checked by hand counts."""

import math

import pytest

from hwopt.cost import footprint, phases

SMALL = footprint.ModelShape("small", 2, 64, 4, 2, 128, 100)  # gated MLP, grouped KV (2 of 4 heads)


def test_kv_bytes_per_token_of_real_shapes_follow_their_kv_heads():
    llama2, llama3 = footprint.get_shape("Llama-2-7B"), footprint.get_shape("Llama-3-8B")
    assert phases.kv_bytes_per_token(llama2, "fp16") == 2 * 32 * 32 * 128 * 2 == 512 * 1024
    assert phases.kv_bytes_per_token(llama3, "fp16") == 2 * 32 * 8 * 128 * 2 == 128 * 1024
    assert phases.kv_bytes_per_token(llama3, "fp8_e4m3") == phases.kv_bytes_per_token(llama3, "fp16") / 2


def test_matmul_params_leave_out_the_input_embedding_unless_it_is_the_head():
    assert phases.matmul_params(SMALL) == SMALL.n_params - 100 * 64
    tied = footprint.get_shape("GPT-2 small")
    assert phases.matmul_params(tied) == tied.n_params  # the tied head reads the whole table


def test_prefill_counts_by_hand():
    cost = phases.prefill_cost(SMALL, prompt_len=10, batch_size=3, precision="fp16")
    n = phases.matmul_params(SMALL)
    assert cost.flops == 2 * n * 30 + 2 * 2 * 3 * 10**2 * 64
    kv = 2 * 2 * 3 * 10 * 2 * 16 * 2  # K and V, layers, batch, tokens, kv heads, head_dim, bytes
    assert cost.kv_bytes == kv and cost.bytes == n * 2 + kv and cost.tokens == 30


def test_decode_counts_by_hand():
    cost = phases.decode_cost(SMALL, context_len=10, batch_size=3, precision="fp16")
    n = phases.matmul_params(SMALL)
    attention_flops = 4 * 10 * 16 * 4  # q.K and p.V over 10 positions, 4 heads of 16
    attention_bytes = (2 * 10 * 2 + 2 * 4) * 16 * 2  # K, V of 2 kv heads; q and output of 4 heads
    assert cost.flops == 3 * (2 * n + 2 * attention_flops)
    assert cost.bytes == n * 2 + 3 * 2 * attention_bytes
    assert cost.kv_bytes == footprint.kv_cache_bytes(SMALL, 3, 10, "fp16") and cost.tokens == 3


def test_prefill_intensity_grows_with_the_prompt_and_decode_stays_near_one_at_fp16():
    shape = footprint.get_shape("Llama-3-8B")
    intensities = [phases.prefill_cost(shape, p).intensity for p in (1, 16, 256, 2048)]
    assert intensities == sorted(intensities) and intensities[-1] > 100 * intensities[0]
    assert 0.9 < phases.decode_cost(shape, 1).intensity < 1.1
    assert phases.decode_cost(shape, 1, precision="fp32").intensity == pytest.approx(0.5, rel=0.1)


def test_time_is_the_larger_roof_and_the_bound_names_it():
    cost = phases.PhaseCost("decode", 1e9, 1e9, 1, 0.0)
    assert cost.time_s(1e12, 1.0) == pytest.approx(1.0)  # 1 GB at 1 GB/s beats 1 GFLOP at 1 TFLOP/s
    assert cost.bound(1e12, 1.0) == "memory" and cost.bound(1e9, 1000.0) == "compute"
    assert "decode" in str(cost) and "FLOP/byte" in str(cost)


def test_tokens_per_s_bound_is_bandwidth_over_bytes_and_falls_with_context_and_batch():
    shape = footprint.get_shape("Llama-2-7B")
    step = phases.decode_cost(shape, 4096, 8)
    assert phases.decode_tokens_per_s_bound(shape, 4096, 100.0, 8) == pytest.approx(100e9 / step.bytes)
    rates = [phases.decode_tokens_per_s_bound(shape, c, 100.0, b) for c, b in ((1, 1), (4096, 1), (4096, 8))]
    assert rates == sorted(rates, reverse=True)
    fp8 = phases.decode_tokens_per_s_bound(shape, 4096, 100.0, 8, "fp16", "fp8_e4m3")
    assert fp8 > rates[-1]


def test_kv_crossover_is_where_the_kv_bytes_pass_the_weights():
    for shape in (footprint.get_shape("Llama-2-7B"), footprint.get_shape("Llama-3-8B")):
        for batch in (1, 16):
            c = phases.kv_crossover_context(shape, batch)
            weights = phases.matmul_params(shape) * 2
            assert batch * c * phases.kv_bytes_per_token(shape) >= weights
            assert batch * (c - 1) * phases.kv_bytes_per_token(shape) < weights
    mha, gqa = (phases.kv_crossover_context(footprint.get_shape(n)) for n in ("Llama-2-7B", "Llama-3-8B"))
    assert gqa > 4 * mha * 0.9  # 4x fewer KV heads push it out ~4x (the models' sizes differ a little)


def test_tables_and_reports_name_every_model():
    shapes = [footprint.get_shape("Llama-2-7B"), SMALL]
    table = phases.phase_table(shapes, 64, 64)
    assert "Llama-2-7B" in table and "small" in table and "prefill ms" not in table
    assert "prefill ms" in phases.phase_table(shapes, 64, 64, peak_flops=1e12, bandwidth_gbs=10.0)
    line = phases.kv_report(footprint.get_shape("Llama-3-8B"), "fp16", (1, 16))
    assert "131 kB per token" in line and "at batch 16" in line  # 131,072 bytes: kB are 1000 bytes


def test_lessons_2_and_8_crossover_for_llama_2_7b_counts_the_weights_a_token_reads():
    """One function for both lessons: the embedding table is looked up (one row a token), not read whole."""
    shape = footprint.get_shape("Llama-2-7B")
    assert phases.kv_bytes_per_token(shape) == 2 * 32 * 32 * 128 * 2 == 524_288
    assert phases.kv_crossover_context(shape) == 25_204
    assert phases.kv_crossover_context(shape, 1, "int4", "fp16") == 6_301  # int4 weights: 4x sooner
    assert "524 kB per token" in phases.kv_report(shape)


def test_serving_step_costs_are_the_rooflines_terms():
    shape = footprint.get_shape("Llama-3-8B")
    c = phases.serving_step_costs(shape, 3350.0, 989e12, "fp16", 1024)
    one = phases.decode_cost(shape, 1024, 1, "fp16")
    assert c["weight_read_ms"] + c["kv_read_per_seq_ms"] == pytest.approx(1e3 * one.bytes / 3350e9)
    assert c["token_compute_ms"] == pytest.approx(1e3 * one.flops / 989e12)
    assert c["weight_read_ms"] == pytest.approx(1e3 * phases.matmul_params(shape) * 2 / 3350e9)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="prompt_len"):
        phases.prefill_cost(SMALL, 0)
    with pytest.raises(ValueError, match="kv_precision"):
        phases.decode_cost(SMALL, 8, kv_precision="fp7")
    with pytest.raises(ValueError, match="shapes"):
        phases.phase_table([], 8, 8)
    with pytest.raises(ValueError, match="bandwidth_gbs"):
        phases.phase_table([SMALL], 8, 8, peak_flops=1e12)
    with pytest.raises(ValueError, match="phase"):
        phases.PhaseCost("train", 1.0, 1.0, 1, 0.0)
    assert math.isfinite(phases.prefill_cost(SMALL, 1).intensity)
