"""cost.disaggregation: sending a prompt's KV cache against prefilling it again, by hand."""

import pytest

from hwopt.cost import disaggregation, footprint, phases
from hwopt.machine import specs

H100 = specs.get_chip("NVIDIA H100 SXM")


def test_transfer_and_recompute_by_hand():
    llama = footprint.get_shape("Llama-3.1-70B")  # 320 KiB of bf16 K and V per token
    assert disaggregation.kv_transfer_s(llama, 1000, 10.0, latency_s=1e-3) == pytest.approx(
        1000 * 327_680 / 10e9 + 1e-3)
    step = phases.prefill_cost(llama, 2048, 1, "bf16")
    assert disaggregation.prefill_s(llama, 2048, H100) == pytest.approx(
        max(step.flops / 989.4e12, step.bytes / 3350e9))


def test_the_breakeven_link_separates_the_cheaper_side_for_long_prompts():
    for name in ("Llama-2-7B", "Llama-3.1-70B", "DeepSeek-V3"):
        shape = footprint.get_shape(name)
        link = disaggregation.breakeven_link_gbs(shape, H100)
        slower, faster = disaggregation.compare(shape, H100, [32768], link / 2)[0], \
            disaggregation.compare(shape, H100, [32768], link * 2)[0]
        assert faster.cheaper == "transfer", name
        assert slower.transfer_s > faster.transfer_s
    # multi-head attention caches 4x what grouped-query attention does: it needs a much faster link
    mha = disaggregation.breakeven_link_gbs(footprint.get_shape("Llama-2-7B"), H100)
    mla = disaggregation.breakeven_link_gbs(footprint.get_shape("DeepSeek-V3"), H100)
    assert mha > 10 * mla


def test_recompute_wins_for_mha_over_a_slow_link_and_transfer_for_gqa():
    rows = disaggregation.compare(footprint.get_shape("Llama-2-7B"), H100, [1024, 8192], 12.5)
    assert [r.cheaper for r in rows] == ["recompute", "recompute"]
    rows = disaggregation.compare(footprint.get_shape("Llama-3.1-70B"), H100, [1024, 8192], 12.5)
    assert [r.cheaper for r in rows] == ["transfer", "transfer"]


def test_the_plot_has_a_line_per_link_and_one_for_recompute():
    shape = footprint.get_shape("Llama-3.1-70B")
    rows = {name: disaggregation.compare(shape, H100, [128, 1024, 8192], gbs)
            for name, gbs in (("NVLink", 450.0), ("a 100 Gb/s network", 12.5))}
    fig = disaggregation.plot_handoff(rows, "Llama-3.1-70B")
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels == ["send the KV cache over NVLink", "send the KV cache over a 100 Gb/s network",
                      "prefill it again on the decode chip"]


@pytest.mark.parametrize(("call", "match"), [
    (lambda: disaggregation.kv_transfer_s(footprint.get_shape("Llama-3-8B"), 100, 0), "link_gbs"),
    (lambda: disaggregation.kv_transfer_s(footprint.get_shape("Llama-3-8B"), 0, 1), "prompt_len"),
    (lambda: disaggregation.kv_transfer_s(footprint.get_shape("Llama-3-8B"), 9, 1, "fp7"), "kv_precision"),
    (lambda: disaggregation.prefill_s(footprint.get_shape("Llama-3-8B"), 10, "H100"), "chip"),
    (lambda: disaggregation.prefill_s(footprint.get_shape("Llama-3-8B"), 10, specs.get_chip("T4")),
     "precision"),
    (lambda: disaggregation.compare(footprint.get_shape("Llama-3-8B"), H100, [], 1), "prompt_lens"),
    (lambda: disaggregation.compare(footprint.get_shape("Llama-3-8B"), H100, [1.5], 1), "prompt_lens"),
    (lambda: disaggregation.plot_handoff({}), "rows_by_link"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
