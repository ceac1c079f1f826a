"""cost.costs: roofline time and USD per 1M inferences vs hand-computed numbers, chip choice, bad input."""

import dataclasses

import pytest

from hwopt import roofline
from hwopt.cost import costs
from hwopt.machine import specs


def chip(name, fp32=10.0, fp16=None, int8=None, bw=1000.0, mem=16.0, price=1.0, per_instance=1, **peaks):
    """A specs.Chip with round numbers (TFLOPS, GB/s, GiB, USD/hour); other peak columns as keywords."""
    base = specs.load_chips()[0]
    blank = {c: None for c in specs.PEAK_COLUMNS}
    return dataclasses.replace(base, name=name, **{**blank, "fp32_tflops": fp32, "fp16_tflops": fp16,
                                                     "int8_tops": int8, **peaks},
                               bandwidth_gbs=bw, memory_gib=mem, instance_price_per_hour_usd=price,
                               chips_per_instance=per_instance)


def test_roofline_time_is_the_slower_of_compute_and_memory():
    assert roofline.time_s(1e12, 1e9, 1e12, 1000) == pytest.approx(1.0)  # compute: 1 s vs 1 ms
    assert roofline.time_s(1e6, 1e9, 1e12, 1.0) == pytest.approx(1.0)  # memory: 1 GB at 1 GB/s
    with pytest.raises(ValueError, match="bandwidth_gbs"):
        roofline.time_s(1, 1, 1e12, 0)
    with pytest.raises(ValueError, match="peak_flops"):
        roofline.time_s(1, 1, -1, 10)
    with pytest.raises(ValueError, match="flop"):
        roofline.time_s(-1, 1, 1, 1)


def test_cost_per_million_by_hand():
    # 1 ms per inference at $3.60/hour: 1e6 * 1e-3 s = 1000 s = 1/3.6 hour -> $1.00
    assert costs.cost_per_million_usd(1e-3, 3.6) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="price_per_hour_usd"):
        costs.cost_per_million_usd(1e-3, 0)
    with pytest.raises(ValueError, match="seconds_per_inference"):
        costs.cost_per_million_usd(-1, 1)


def test_estimate_batch1_is_memory_bound_by_hand():
    # 1e9 params fp16 = 2 GB of weights at 1000 GB/s -> 2 ms; compute 2e9 FLOP at 100 TFLOP/s = 0.02 ms
    (row,) = costs.estimate(1e9, 1, "fp16", chips=[chip("A", fp16=100.0, price=3.6)])
    assert row.bound == "memory" and row.batch_latency_ms == pytest.approx(2.0)
    assert row.ms_per_inference == pytest.approx(2.0) and row.inferences_per_s == pytest.approx(500)
    assert row.cost_per_million_usd == pytest.approx(2.0)  # 2000 s at $3.60/h


def test_estimate_large_batch_turns_compute_bound_and_cheaper_per_item():
    one = costs.estimate(1e9, 1, "fp32", chips=[chip("A")])[0]
    many = costs.estimate(1e9, 1024, "fp32", chips=[chip("A")])[0]
    # batch 1024: 2.048e12 FLOP at 10 TFLOP/s = 204.8 ms vs 4 ms of weights
    assert many.bound == "compute" and many.batch_latency_ms == pytest.approx(204.8)
    assert many.cost_per_million_usd < one.cost_per_million_usd / 10


def test_each_format_uses_its_own_peak_and_only_sub_byte_integers_fall_back():
    a = chip("A", fp32=10.0, int8=40.0)
    assert a.peak("int8")[0] == pytest.approx(40e12)
    assert a.peak("int4")[0] == pytest.approx(40e12)  # int4 weights unpacked to int8 units
    assert "unpacked to int8" in a.peak("int4_g128")[1]
    assert chip("F", fp32=10.0).peak("int4")[0] == pytest.approx(10e12)  # ... or to fp32 ones
    assert a.peak("fp16")[0] is None and a.peak("fp8")[0] is None  # no silent fallback
    assert a.peak("fp8")[1] == "no fp8_tflops in the chip table"
    hopper = chip("H", fp16=100.0, bf16_tflops=100.0, fp8_tflops=200.0)
    assert hopper.peak("fp8_e4m3")[0] == pytest.approx(200e12)
    assert hopper.peak("nvfp4")[0] is None
    blackwell = chip("B", bf16_tflops=100.0, fp8_tflops=200.0, mxfp4_tflops=400.0, nvfp4_tflops=400.0)
    assert blackwell.peak("nvfp4")[0] == pytest.approx(400e12)
    assert blackwell.peak("mxfp4")[0] == pytest.approx(400e12)
    cdna4 = chip("C", bf16_tflops=100.0, fp8_tflops=200.0, mxfp4_tflops=400.0)  # MXFP4 units only
    assert cdna4.peak("mxfp4")[0] == pytest.approx(400e12)
    assert cdna4.peak("nvfp4")[0] is None
    assert chip("N", fp32=None).peak("fp32")[0] is None
    assert chip("N", fp32=None).peak("fp32")[1] == "no FLOP/s published (bandwidth and memory only)"


def test_bytes_per_weight_come_from_the_format_scales_included():
    a = chip("A", fp32=10.0, int8=40.0)
    fp32 = costs.estimate(1e9, 1, "fp32", chips=[a])[0]
    int4 = costs.estimate(1e9, 1, "int4", chips=[a])[0]
    assert int4.batch_latency_ms == pytest.approx(fp32.batch_latency_ms / 8)
    g32 = costs.estimate(1e9, 1, "int4_g32", chips=[a])[0]  # 0.5 + 4/32 bytes per weight
    assert g32.batch_latency_ms == pytest.approx(fp32.batch_latency_ms * 0.625 / 4)


def test_chips_without_a_peak_are_skipped_with_the_reason():
    table = [chip("old", fp16=100.0), chip("new", fp16=100.0, fp8_tflops=200.0), chip("bare", fp32=None)]
    assert [r.chip for r in costs.estimate(7e9, 1, "fp8", chips=table)] == ["new"]
    assert costs.skipped("fp8", table) == [("old", "no fp8_tflops in the chip table"),
                                           ("bare", "no FLOP/s published (bandwidth and memory only)")]
    report = costs.cost_report(7e9, 1, "fp8", chips=table)
    assert "skipped, no fp8_tflops in the chip table: old" in report and "bare" in report
    assert "skipped, no fp8_tflops in the chip table: old" in costs.chip_table(table, "fp8")


def test_real_table_prices_fp8_on_hopper_and_fp4_on_blackwell():
    fp8 = {r.chip: r for r in costs.estimate(70e9, 256, "fp8")}
    assert "NVIDIA H100 SXM" in fp8 and fp8["NVIDIA H100 SXM"].peak_basis == "fp8_tflops"
    assert "NVIDIA A100 80GB SXM" not in fp8 and "NVIDIA T4" not in fp8
    fp4 = {r.chip for r in costs.estimate(70e9, 256, "nvfp4")}
    assert {"NVIDIA B200", "NVIDIA B300", "NVIDIA GB200", "NVIDIA RTX 5090"} <= fp4
    assert "NVIDIA H100 SXM" not in fp4
    assert dict(costs.skipped("nvfp4"))["NVIDIA H100 SXM"] == "no nvfp4_tflops in the chip table"
    # AMD's MI355X computes MXFP4, not NVFP4: ranked at mxfp4, skipped at nvfp4
    assert "AMD Instinct MI355X" in {r.chip for r in costs.estimate(70e9, 256, "mxfp4")}
    assert dict(costs.skipped("nvfp4"))["AMD Instinct MI355X"] == "no nvfp4_tflops in the chip table"


def test_best_chip_skips_unpriced_and_too_small_chips():
    rows = costs.estimate(7e9, 1, "fp16", chips=[
        chip("cheap-but-small", fp16=100, mem=8, price=0.1),
        chip("unpriced", fp16=100, price=None),
        chip("fast", fp16=100, bw=3000, price=4.0),
        chip("slow", fp16=100, bw=300, price=1.0),
        chip("no-fp", fp32=None),
    ])
    names = [r.chip for r in rows]
    assert "no-fp" not in names
    best = costs.best_chip(rows)
    assert best.chip == "fast"  # 10x the bandwidth for 4x the price: cheaper per inference
    assert rows[0] is best and {r.chip for r in rows[-2:]} == {"cheap-but-small", "unpriced"}
    small = next(r for r in rows if r.chip == "cheap-but-small")
    assert not small.fits_memory and small.cost_per_million_usd is None
    assert costs.best_chip([r for r in rows if r.cost_per_million_usd is None]) is None


def test_instance_price_is_split_per_chip():
    (row,) = costs.estimate(1e9, 1, "fp16", chips=[chip("8x", fp16=100.0, price=28.8, per_instance=8)])
    assert row.price_per_hour_usd == pytest.approx(3.6)


def test_real_table_has_a_best_chip_for_a_7b_model():
    rows = costs.estimate(7e9, 1, "fp16")
    assert costs.best_chip(rows) is not None and len(rows) >= 10


def test_memory_is_gib_and_extra_bytes_count():
    (small,) = costs.estimate(17e9, 1, "int8", chips=[chip("S", int8=100.0, mem=16.0)])
    assert small.fits_memory  # 17e9 bytes < 16 GiB = 17.18e9 bytes
    (kv,) = costs.estimate(17e9, 1, "int8", chips=[chip("S", int8=100.0, mem=16.0)], extra_bytes=1e9)
    assert not kv.fits_memory and kv.batch_latency_ms == pytest.approx(18.0)
    with pytest.raises(ValueError, match="extra_bytes"):
        costs.estimate(1e9, 1, "int8", chips=[chip("S", int8=100.0)], extra_bytes=-1)


@pytest.mark.parametrize(("args", "word"), [
    ((0, 1, "fp32"), "params"), ((-5, 1, "fp32"), "params"), ((1e6, 0, "fp32"), "batch_size"),
    ((1e6, 1.5, "fp32"), "batch_size"), ((1e6, 1, "fp64"), "precision"), ((1e6, 1, "fp128"), "precision"),
])
def test_estimate_rejects_bad_input(args, word):
    with pytest.raises(ValueError, match=word):
        costs.estimate(*args, chips=[chip("A")])


def test_inference_definition_and_what_the_bound_leaves_out():
    text = costs.inference_definition(7e9, 64, "fp16")
    assert "ONE token" in text and "14.0 GFLOP" in text and "1/64" in text and "14.00 GB" in text
    assert max(map(len, text.splitlines())) <= 110
    a = chip("A", fp16=100.0, price=3.6)
    gaps = costs.beyond_the_bound(1e9, 1, "fp16", a, extra_bytes=2e9, utilisation=0.5, extra_label="KV cache")
    gaps = " ".join(gaps.split())  # one line: the sentences wrap at 110 characters
    # 2 GB of weights -> $2.00 per 1M; +2 GB of KV cache -> $4.00 (2.0x); at 50% -> $8.00 (4.0x)
    assert "$2.0000 per 1M" in gaps and "$4.0000 per 1M (2.0x" in gaps and "$8.0000 per 1M (4.0x" in gaps
    assert "KV cache" in gaps and "idle" in gaps
    with pytest.raises(ValueError, match="utilisation"):
        costs.beyond_the_bound(1e9, 1, "fp16", a, utilisation=1.5)
    with pytest.raises(ValueError, match="price"):
        costs.beyond_the_bound(1e9, 1, "fp16", chip("U", fp16=100.0, price=None))
    small = costs.beyond_the_bound(1e9, 1, "fp16", chip("S", fp16=100.0, mem=2.0, price=3.6), extra_bytes=2e9)
    assert "the 4.0 GB no longer fit in its 2 GiB" in " ".join(small.split())
    with pytest.raises(ValueError, match="no peak"):
        costs.beyond_the_bound(1e9, 1, "fp8", a)


def test_cost_report_marks_the_best_chip_and_says_what_an_inference_is():
    table = [chip("X", fp16=100, price=2.0), chip("Y", fp16=100, price=1.0), chip("Z", fp16=100, price=None)]
    text = costs.cost_report(7e9, 1, "fp16", chips=table)
    lines = text.splitlines()
    assert "14.00 GB of weights" in lines[0] and "one token" in lines[1]
    assert lines[3].startswith("Y") and lines[3].endswith("<- best") and "fp16_tflops" in lines[3]
    assert "no price" in text and "skipped" not in text


def test_plot_costs_and_chip_map():
    rows = costs.estimate(1e8, 1, "int8")
    fig = costs.plot_costs(rows)
    assert "USD" in fig.axes[0].get_xlabel()
    with pytest.raises(ValueError, match="price"):
        costs.plot_costs([r for r in rows if r.cost_per_million_usd is None])
    fig = costs.plot_chip_map(specs.load_chips(), machine=(20.0, 1.5e11))
    assert "GB/s" in fig.axes[0].get_xlabel()
