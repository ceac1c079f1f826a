"""experiments.roofline_points: roofline points from measurements (intensity by hand);
the matmul sweep at tiny sizes."""

import pytest

from hwopt.experiments import roofline_points
from hwopt.machine import probe

pytestmark = pytest.mark.filterwarnings("ignore::hwopt.machine.bench.NoisyMeasurementWarning")


def test_gemm_point_intensity_by_hand():
    # n = 1024 fp32: 2n^3 FLOP over 3n^2 * 4 bytes = n / 6 = 170.67 FLOP/byte
    p = roofline_points.gemm_point(1024, 1e11)
    assert p.intensity == pytest.approx(1024 / 6) and p.achieved_flops == 1e11 and "1024" in p.label


def test_gemv_point_counts_all_layers():
    # one 4096 x 4096 fp32 GEMV: 33,554,432 FLOP; 4 layers in 10 ms -> 13.4 GFLOP/s
    p = roofline_points.gemv_point(4096, 4096, 0.010, layers=4)
    assert p.achieved_flops == pytest.approx(4 * 33_554_432 / 0.010)
    assert p.intensity == pytest.approx(33_554_432 / 67_141_632)
    assert roofline_points.gemv_point(4096, 4096, 0.01, bytes_per_weight=0.5).intensity == pytest.approx(
        33_554_432 / 8_421_376)
    with pytest.raises(ValueError, match="seconds"):
        roofline_points.gemv_point(8, 8, 0.0)


def test_triad_point_flops_follow_from_bandwidth():
    p = roofline_points.triad_point(24.0)  # 2 FLOP per 12 bytes at 24 GB/s = 4 GFLOP/s
    assert p.intensity == pytest.approx(1 / 6) and p.achieved_flops == pytest.approx(4e9)
    with pytest.raises(ValueError, match="bandwidth_gbs"):
        roofline_points.triad_point(0)


def test_predicted_matmul_flops_memory_then_compute_bound():
    # ridge of 100 GFLOP/s over 10 GB/s = 10 FLOP/byte; n=6 -> intensity 1 -> 10 GFLOP/s; n=600 -> peak
    assert roofline_points.predicted_matmul_flops(6, 100e9, 10) == pytest.approx(10e9)
    assert roofline_points.predicted_matmul_flops(600, 100e9, 10) == pytest.approx(100e9)


def test_intensity_table_rows_and_verdicts():
    points = [roofline_points.triad_point(10.0), roofline_points.gemm_point(1024, 50e9)]
    text = roofline_points.intensity_table(points, 100e9, 10)
    lines = text.splitlines()
    assert lines[1].endswith("memory") and lines[2].endswith("compute") and "100%" in lines[1]


def test_matmul_sweep_uses_the_probe_and_plots(monkeypatch):
    calls = []
    monkeypatch.setattr(probe, "matmul_flops", lambda dtype, device, n: calls.append(n) or float(n) * 1e9)
    assert roofline_points.matmul_sweep((8, 16), progress=False) == [8e9, 16e9] and calls == [8, 16]
    fig = roofline_points.plot_matmul_sweep((8, 16), {"cpu": [8e9, 16e9]}, predicted=[9e9, 17e9])
    assert "GFLOP/s" in fig.axes[0].get_ylabel()
    with pytest.raises(ValueError, match="one value per size"):
        roofline_points.plot_matmul_sweep((8, 16), {"cpu": [1.0]})
    with pytest.raises(ValueError, match="sizes"):
        roofline_points.matmul_sweep([0])

