"""experiments.parallel_summary: lesson 12's summary from the results its experiments return."""

import pytest

from hwopt.experiments import moe_layer, parallel_summary, pipeline_parallel
from hwopt.experiments import tensor_parallel_block as tp
from hwopt.machine import bench, power


def times(*seconds):
    return bench.Measurement("t", seconds)


def results():
    sweep = tp.AllReduceSweep((1024, 1 << 20), (times(1e-4, 1e-4, 1e-4), times(1.1e-3, 1.1e-3, 1.1e-3)), 2,
                              "gloo")
    block = tp.BlockTimes(2, "gloo", 64, 4, 128, 1e-6, 3.0, {
        b: {v: times(*(b * 1e-3,) * 3) for v in tp.VARIANTS} for b in (1, 16)})
    run = pipeline_parallel.PipelineRun(2, 4, 64, 32, "gloo", {1: [[0.01] * 3, [0.01] * 3],
                                                               8: [[0.012] * 3, [0.012] * 3]},
                                        {1: times(0.02, 0.02, 0.02), 8: times(0.0135, 0.0135, 0.0135)})
    experts = moe_layer.measure_moe(moe_layer.make_moe(32, 16, 8, 2), (1, 4), repeats=3, trials=10)
    return sweep, block, run, experts


def test_the_summary_names_every_measurement_with_its_figures():
    text = parallel_summary.lesson_summary(*results())
    lines = text.splitlines()
    assert len(lines) == 5 and all(line.startswith("- ") for line in lines)
    assert "2 processes (gloo)" in lines[0] and "equalled the unsplit one to 1.0e-06" in lines[1]
    assert "idled 50% of the time with 1 micro-batch(es)" in lines[2]
    assert "(p-1)/(m+p-1): 50% and 11%" in lines[2]
    assert "read 2 of 8 experts at batch 1" in lines[3]
    assert lines[4].startswith("- Energy was not measured here") or "Measured energy" in lines[4]


def test_a_measured_energy_is_given_per_token():
    reading = power.EnergyReading({"RAPL package-0": 50.0}, 2.0)
    text = parallel_summary.lesson_summary(*results(), reading, 1000)
    assert "50.0 J for 1,000 tokens = 0.050 J per token (25 W)" in text


def test_bad_input():
    with pytest.raises(ValueError, match="sweep"):
        parallel_summary.lesson_summary(None, *results()[1:])
    with pytest.raises(ValueError, match="energy_tokens"):
        parallel_summary.lesson_summary(*results(), None, 0)
