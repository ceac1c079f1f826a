"""cost.costs: roofline time and USD per 1M inferences vs hand-computed numbers, chip choice, bad input."""

import dataclasses

import pytest

from hwopt.cost import costs
from hwopt.machine import specs


def chip(name, fp32=10.0, fp16=None, int8=None, bw=1000.0, mem=16.0, price=1.0, per_instance=1):
    """A specs.Chip with round numbers (TFLOPS, GB/s, GB, USD/hour)."""
    base = specs.load_chips()[0]
    return dataclasses.replace(base, name=name, fp32_tflops=fp32, fp16_tflops=fp16, int8_tops=int8,
                               bandwidth_gbs=bw, memory_gb=mem, instance_price_per_hour_usd=price,
                               chips_per_instance=per_instance)


def test_roofline_time_is_the_slower_of_compute_and_memory():
    assert costs.roofline_time_s(1e12, 1e9, 1e12, 1000) == pytest.approx(1.0)  # compute: 1 s vs 1 ms
    assert costs.roofline_time_s(1e6, 1e9, 1e12, 1.0) == pytest.approx(1.0)  # memory: 1 GB at 1 GB/s
    with pytest.raises(ValueError, match="bandwidth_gbs"):
        costs.roofline_time_s(1, 1, 1e12, 0)
    with pytest.raises(ValueError, match="peak_flops_per_s"):
        costs.roofline_time_s(1, 1, -1, 10)
    with pytest.raises(ValueError, match="flop"):
        costs.roofline_time_s(-1, 1, 1, 1)


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


def test_precision_falls_back_to_a_wider_peak_and_halves_bytes():
    a = chip("A", fp32=10.0)
    assert costs.peak_flops(a, "int8") == pytest.approx(10e12)  # no int8/fp16 listed -> fp32 units
    assert costs.peak_flops(chip("B", fp32=None, fp16=None, int8=None), "fp32") is None
    fp32 = costs.estimate(1e9, 1, "fp32", chips=[a])[0]
    int4 = costs.estimate(1e9, 1, "int4", chips=[a])[0]
    assert int4.batch_latency_ms == pytest.approx(fp32.batch_latency_ms / 8)


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


@pytest.mark.parametrize(("args", "word"), [
    ((0, 1, "fp32"), "params"), ((-5, 1, "fp32"), "params"), ((1e6, 0, "fp32"), "batch_size"),
    ((1e6, 1.5, "fp32"), "batch_size"), ((1e6, 1, "fp64"), "precision"),
])
def test_estimate_rejects_bad_input(args, word):
    with pytest.raises(ValueError, match=word):
        costs.estimate(*args, chips=[chip("A")])


def test_cost_report_marks_the_best_chip():
    table = [chip("X", fp16=100, price=2.0), chip("Y", fp16=100, price=1.0), chip("Z", fp16=100, price=None)]
    text = costs.cost_report(7e9, 1, "fp16", chips=table)
    lines = text.splitlines()
    assert "14.00 GB of weights" in lines[0]
    assert lines[2].startswith("Y") and lines[2].endswith("<- best")
    assert "no price" in text


def test_plot_costs_and_chip_map():
    rows = costs.estimate(1e8, 1, "int8")
    fig = costs.plot_costs(rows)
    assert "USD" in fig.axes[0].get_xlabel()
    with pytest.raises(ValueError, match="price"):
        costs.plot_costs([r for r in rows if r.cost_per_million_usd is None])
    fig = costs.plot_chip_map(specs.load_chips(), machine=(20.0, 1.5e11))
    assert "GB/s" in fig.axes[0].get_xlabel()
