"""cost.tensor_parallel: the smallest TP degree that fits and the decode bound with all-reduces, by hand."""

import dataclasses

import pytest

from hwopt import widgets
from hwopt.cost import footprint, phases, tensor_parallel
from hwopt.machine import specs

H100 = specs.get_chip("NVIDIA H100 SXM")
LLAMA = footprint.get_shape("Llama-3.1-70B")


def test_degrees_split_heads_and_kv_heads_evenly():
    assert tensor_parallel.degrees(LLAMA) == [1, 2, 4, 8, 16, 32, 64]  # beyond 8, KV heads are copied
    odd = footprint.ModelShape("odd", 2, 96, 12, 4, 64, 100)
    assert tensor_parallel.degrees(odd) == [1, 2, 4]  # 8 does not divide 12 heads
    assert tensor_parallel.degrees(LLAMA, max_tp=8) == [1, 2, 4, 8]


def test_smallest_tp_by_hand_for_llama_3_1_70b_on_h100():
    # bf16 weights 141 GB; KV of 16 x 8192 tokens 43 GB split by KV heads; 80 GiB x 0.9 = 77.3 GB per chip
    weights, kv = LLAMA.n_params * 2, footprint.kv_cache_bytes(LLAMA, 16, 8192, "bf16")
    usable = 80 * 2**30 * 0.9
    assert (weights + kv) / 2 > usable and (weights + kv) / 4 < usable
    assert tensor_parallel.smallest_tp(LLAMA, H100, 8192, 16) == 4
    assert tensor_parallel.memory_per_chip_bytes(LLAMA, 4, 8192, 16) == pytest.approx((weights + kv) / 4)
    assert tensor_parallel.smallest_tp(LLAMA, H100, 8192, 16, "fp8_e4m3") == 2  # half the weight bytes
    assert tensor_parallel.smallest_tp(footprint.get_shape("Llama-3-8B"), H100, 4096, 1) == 1
    assert tensor_parallel.smallest_tp(footprint.get_shape("Llama-3.1-405B"), H100, 4096, 1, max_tp=4) is None


def test_mla_copies_its_latent_on_every_chip_and_kv_heads_stop_splitting_at_their_count():
    deepseek = footprint.get_shape("DeepSeek-V3")
    kv = footprint.kv_cache_bytes(deepseek, 8, 4096, "bf16")
    per_chip = tensor_parallel.memory_per_chip_bytes(deepseek, 8, 4096, 8)
    assert per_chip == pytest.approx(footprint.weights_bytes(deepseek, "bf16") / 8 + kv)
    kv = footprint.kv_cache_bytes(LLAMA, 1, 4096, "bf16")
    at_16 = tensor_parallel.memory_per_chip_bytes(LLAMA, 16, 4096)
    assert at_16 == pytest.approx(LLAMA.n_params * 2 / 16 + kv / 8)  # 8 KV heads: copied twice


def test_decode_bound_by_hand_with_the_all_reduces():
    tp, batch = 4, 8
    bound = tensor_parallel.decode_bound(LLAMA, H100, tp, 4096, batch, latency_s=5e-6)
    step = phases.decode_cost(LLAMA, 4096, batch, "bf16")
    memory_s = ((step.bytes - step.kv_bytes) / tp + step.kv_bytes / tp) / 3350e9
    message = batch * 8192 * 2  # bf16 activations after attention and after the MLP
    allreduce = 2 * 3 * 5e-6 + 2 * 3 / 4 * message / 450e9  # ring over 4 chips, NVLink 900 GB/s both ways
    assert bound.memory_s == pytest.approx(memory_s)
    assert bound.compute_s == pytest.approx(step.flops / tp / 989.4e12)
    assert bound.communication_s == pytest.approx(2 * 80 * allreduce)
    assert bound.step_s == pytest.approx(max(bound.memory_s, bound.compute_s) + bound.communication_s)
    assert bound.tokens_per_s == pytest.approx(batch / bound.step_s)
    assert 0 < bound.communication_share < 1 and "4 x NVIDIA H100 SXM" in str(bound)
    single = tensor_parallel.decode_bound(footprint.get_shape("Llama-3-8B"), H100, 1, 4096)
    assert single.communication_s == 0.0


def test_more_chips_read_less_each_but_pay_more_latency():
    fast = [tensor_parallel.decode_bound(LLAMA, H100, tp, 4096, 1) for tp in (2, 4, 8)]
    assert fast[0].step_s > fast[1].step_s > fast[2].step_s  # no latency: bandwidth adds up
    slow = [tensor_parallel.decode_bound(LLAMA, H100, tp, 4096, 1, latency_s=20e-6) for tp in (2, 4, 8)]
    assert slow[2].step_s > slow[1].step_s and slow[2].communication_share > 0.5


def test_a_chip_without_an_interconnect_needs_a_link_figure():
    no_link = dataclasses.replace(H100, interconnect="", interconnect_gbs=None)
    with pytest.raises(ValueError, match="no interconnect"):
        tensor_parallel.decode_bound(LLAMA, no_link, 4, 4096)
    over_network = tensor_parallel.decode_bound(LLAMA, no_link, 4, 4096, link_gbs=50)
    assert over_network.communication_s > tensor_parallel.decode_bound(LLAMA, H100, 4, 4096).communication_s


def test_the_plot_and_the_explorer(monkeypatch):
    fig = tensor_parallel.plot_tp_scaling(LLAMA, H100, 8192, 16, latency_us=5)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["4", "8"]
    assert "no" not in fig.axes[0].texts[0].get_text()  # bars are annotated with the all-reduce share
    huge = tensor_parallel.plot_tp_scaling(footprint.get_shape("Llama-3.1-405B"), specs.get_chip("L4"))
    assert "does not fit on 8 chips" in huge.axes[0].texts[0].get_text()
    shown = []
    monkeypatch.setattr(widgets, "display", shown.append)
    box = tensor_parallel.tp_explorer()
    box.controls["batch_size"].value = 64
    box.controls["model"].value = footprint.get_shape("gpt-oss-120b")
    assert len(shown) == 3 and "gpt-oss-120b" in shown[-1].texts[0].get_text()


@pytest.mark.parametrize(("call", "match"), [
    (lambda: tensor_parallel.decode_bound(LLAMA, H100, 3, 4096), "tp must split"),
    (lambda: tensor_parallel.decode_bound(LLAMA, "H100", 2, 4096), "chip"),
    (lambda: tensor_parallel.decode_bound(LLAMA, H100, 2, 0), "context_len"),
    (lambda: tensor_parallel.decode_bound(LLAMA, H100, 2, 4096, latency_s=-1), "latency_s"),
    (lambda: tensor_parallel.decode_bound(LLAMA, specs.get_chip("T4"), 1, 4096, 1, "bf16"), "precision"),
    (lambda: tensor_parallel.smallest_tp(LLAMA, H100, 4096, reserve_fraction=1.0), "reserve_fraction"),
    (lambda: tensor_parallel.smallest_tp(LLAMA, specs.get_chip("M2 Max"), 4096, max_tp=0), "max_tp"),
    (lambda: tensor_parallel.memory_per_chip_bytes("Llama", 2, 4096), "shape"),
    (lambda: tensor_parallel.degrees(LLAMA, max_tp=-2), "max_tp"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_sizing_table_lists_each_model_with_its_smallest_degree():
    table = tensor_parallel.sizing_table([LLAMA, footprint.get_shape("DeepSeek-V3")], H100, 8192, 16)
    llama, deepseek = table.splitlines()[2:]
    assert llama.split()[-2:] == ["4", "2"] and deepseek.split()[1] == "MLA"  # bf16: 4 H100s, fp8: 2
    assert "NVIDIA H100 SXM (80 GiB" in table
    assert tensor_parallel.sizing_table([footprint.get_shape("Llama-3.1-405B")], H100, 8192, 16,
                                        ("bf16",)).split()[-1] == "16"
    with pytest.raises(ValueError, match="precisions"):
        tensor_parallel.sizing_table([LLAMA], H100, 8192, 16, ())
