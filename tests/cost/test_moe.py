"""cost.moe: expected distinct experts against a simulation of routing, weights read per step, all-to-all."""

import numpy as np
import pytest

from hwopt.cost import footprint, moe, phases


@pytest.mark.parametrize(("n_experts", "k", "batch"), [(32, 2, 1), (32, 2, 8), (32, 2, 64), (256, 8, 16),
                                                       (8, 2, 3), (128, 4, 128)])
def test_the_formula_agrees_with_simulated_uniform_routing(n_experts, k, batch):
    simulated = moe.simulate_distinct_experts(n_experts, k, batch, trials=2000, seed=3)
    assert simulated == pytest.approx(moe.expected_distinct_experts(n_experts, k, batch), rel=0.02)


def test_the_formula_by_hand_and_its_limits():
    assert moe.expected_distinct_experts(32, 2, 1) == 2.0  # one token reads its k experts
    assert moe.expected_distinct_experts(32, 2, 2) == pytest.approx(32 * (1 - (30 / 32) ** 2))
    assert moe.expected_distinct_experts(8, 2, 10_000) == pytest.approx(8.0)  # a big batch reads them all
    assert moe.expected_distinct_experts(4, 4, 1) == 4.0


def test_popular_experts_mean_fewer_distinct_ones_than_uniform_routing():
    popularity = np.r_[np.full(4, 20.0), np.ones(28)]
    skewed = moe.simulate_distinct_experts(32, 2, 16, popularity=popularity, trials=500)
    assert skewed < moe.expected_distinct_experts(32, 2, 16) - 2


def test_weights_read_per_step_by_hand():
    dense = footprint.get_shape("Llama-3-8B")
    assert moe.weight_bytes_read(dense, 7, "fp16") == phases.matmul_params(dense) * 2  # any batch: all
    mixtral = footprint.get_shape("Mixtral-8x7B-v0.1")
    expert = 3 * 4096 * 14336
    one = moe.weight_bytes_read(mixtral, 1, "bf16")
    assert one == pytest.approx((phases.matmul_params(mixtral) - 32 * 6 * expert) * 2)  # 2 of 8 experts
    assert one == pytest.approx(phases.active_matmul_params(mixtral) * 2)
    many = moe.weight_bytes_read(mixtral, 64, "bf16")
    assert many == pytest.approx(phases.matmul_params(mixtral) * 2, rel=1e-6)  # every expert
    assert one < moe.weight_bytes_read(mixtral, 2, "bf16") < many


def test_a_moe_decode_step_reads_the_chosen_experts_not_all_of_them():
    deepseek = footprint.get_shape("DeepSeek-V3")
    one = phases.decode_cost(deepseek, 1024, 1, "fp8_e4m3")
    assert one.bytes < 0.1 * phases.matmul_params(deepseek)  # ~37B of 671B parameters, at one byte each
    attention = 61 * 4 * 1024 * 128 * 128  # q.K^T and p.V over 1024 positions, 128 heads of 128
    assert one.flops == pytest.approx(2 * phases.active_matmul_params(deepseek) + attention)


def test_expert_parallel_bytes_by_hand():
    mixtral = footprint.get_shape("Mixtral-8x7B-v0.1")
    # 32 layers x 2 (there and back) x 4 tokens x 2 experts x 4096 values x 2 bytes x 3/4 off-chip
    assert moe.expert_parallel_bytes(mixtral, 4, 4) == pytest.approx(32 * 2 * 4 * 2 * 4096 * 2 * 0.75)
    assert moe.expert_parallel_bytes(mixtral, 4, 1) == 0.0
    with pytest.raises(ValueError, match="dense"):
        moe.expert_parallel_bytes(footprint.get_shape("Llama-3-8B"), 4, 2)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: moe.expected_distinct_experts(8, 9, 1), "experts_per_token"),
    (lambda: moe.expected_distinct_experts(0, 1, 1), "n_experts"),
    (lambda: moe.expected_distinct_experts(8, 2, -1), "batch_size"),
    (lambda: moe.simulate_distinct_experts(8, 2, 4, popularity=[1.0] * 7), "popularity"),
    (lambda: moe.simulate_distinct_experts(8, 2, 4, popularity=[0.0] * 8), "popularity"),
    (lambda: moe.simulate_distinct_experts(8, 2, 4, trials=0), "trials"),
    (lambda: moe.weight_bytes_read("Mixtral", 1), "shape"),
    (lambda: moe.weight_bytes_read(footprint.get_shape("Mixtral-8x7B-v0.1"), 1, "fp7"), "precision"),
    (lambda: moe.expert_parallel_bytes(footprint.get_shape("Mixtral-8x7B-v0.1"), 1, 9), "ep_degree"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
