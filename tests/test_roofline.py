"""roofline: formulas against hand-computed numbers, bad input, the plot."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from hwopt import roofline as rl  # noqa: E402


def test_elementwise_add_fp32_is_one_flop_per_12_bytes():
    assert rl.intensity_elementwise() == pytest.approx(1 / 12)
    assert rl.flops_bytes_elementwise(1000) == (1000.0, 12000.0)


def test_elementwise_stream_triad_fp64():
    # a = b + s*c: 2 FLOP per element, 3 arrays of 8 bytes
    assert rl.intensity_elementwise(flops_per_element=2, bytes_per_element=8) == pytest.approx(2 / 24)
    assert rl.flops_bytes_elementwise(10, n_inputs=1, n_outputs=1, flops_per_element=8) == (80.0, 80.0)


def test_gemv_4096_fp32_and_int4_by_hand():
    # fp32: 2*4096*4096 = 33,554,432 FLOP; 4096*4096*4 + (4096 + 4096)*4 = 67,141,632 bytes
    flops, nbytes = rl.flops_bytes_gemv(4096, 4096)
    assert (flops, nbytes) == (33_554_432.0, 67_141_632.0)
    assert rl.intensity_gemv(4096, 4096) == pytest.approx(33_554_432 / 67_141_632)
    # int4 weights: 4096*4096*0.5 + 8192*4 = 8,421,376 bytes -> ~3.98 FLOP/byte
    assert rl.intensity_gemv(4096, 4096, 0.5) == pytest.approx(33_554_432 / 8_421_376)
    assert rl.intensity_gemv(4096, 4096, bytes_per_weight=1.0) == pytest.approx(
        33_554_432 / (16_777_216 + 32_768)
    )


def test_gemv_batch_scales_intensity():
    flops, nbytes = rl.flops_bytes_gemv(
        100, 200, batch_size=8, bytes_per_weight=2.0, bytes_per_activation=2.0
    )
    assert flops == 2 * 100 * 200 * 8 and nbytes == 100 * 200 * 2 + 8 * 300 * 2
    assert rl.intensity_gemv(4096, 4096, batch_size=16) > 7 * rl.intensity_gemv(4096, 4096)


def test_gemm_square_and_rectangular_by_hand():
    # 1024^3: 2*1024^3 FLOP over 3*1024^2*4 bytes = 2*1024/12 = 170.67 FLOP/byte
    assert rl.intensity_gemm(1024, 1024, 1024) == pytest.approx(2048 / 12)
    assert rl.flops_bytes_gemm(2, 3, 4, bytes_per_element=2) == (48.0, (8 + 12 + 6) * 2.0)


def test_attention_decode_by_hand():
    # seq 1024, head_dim 128, 32 heads, fp16: 4*1024*128*32 FLOP; (2*1024 + 2)*128*32*2 bytes
    flops, nbytes = rl.flops_bytes_attention_decode(1024, 128, 32)
    assert flops == 16_777_216.0 and nbytes == 16_793_600.0
    assert rl.intensity_attention_decode(1024, 128, 32) == pytest.approx(0.99905, rel=1e-4)
    # grouped-query attention with 8 KV heads reads 4x less cache
    assert rl.intensity_attention_decode(1024, 128, 32, n_kv_heads=8) == pytest.approx(
        16_777_216 / ((2 * 1024 * 8 + 64) * 128 * 2)
    )


def test_ridge_attainable_and_bound():
    # 186 GFLOP/s over 24.6 GB/s -> ridge 7.56 FLOP/byte
    assert rl.ridge_point(186e9, 24.6) == pytest.approx(7.5610, rel=1e-4)
    assert rl.attainable_flops(1.0, 186e9, 24.6) == pytest.approx(24.6e9)
    assert rl.attainable_flops(100.0, 186e9, 24.6) == 186e9
    arr = rl.attainable_flops(np.array([0.5, 1000.0]), 186e9, 24.6)
    assert arr.tolist() == pytest.approx([12.3e9, 186e9])
    assert rl.bound(0.5, 186e9, 24.6) == "memory"
    assert rl.bound(170.0, 186e9, 24.6) == "compute"
    assert rl.bound(rl.ridge_point(186e9, 24.6), 186e9, 24.6) == "compute"


def test_elementwise_roofs_take_the_slower_roof_by_hand():
    # 403 MB at 27.6 GB/s = 14.6 ms; 33.5 M erfs at 3.8 G/s = 8.83 ms -> memory binds
    roofs = rl.elementwise_roofs(402.7e6, 27.6, 33.55e6, 3.8e9)
    assert roofs.memory_s == pytest.approx(14.59e-3, rel=1e-3)
    assert roofs.transcendental_s == pytest.approx(8.829e-3, rel=1e-3)
    assert roofs.time_s == roofs.memory_s and roofs.bound == "memory"
    # erf at half the rate (a CPU without AVX-512): 17.7 ms -> the transcendentals bind
    slow = rl.elementwise_roofs(402.7e6, 27.6, 33.55e6, 1.9e9)
    assert slow.bound == "transcendental" and slow.time_s == pytest.approx(17.66e-3, rel=1e-3)
    assert rl.elementwise_roofs(0, 10.0, 5, 1e9).bound == "transcendental"
    assert rl.elementwise_roofs(12, 10.0, 0, 1e9).bound == "memory"
    # the two roofs meet at bandwidth / rate bytes per evaluation: 27.6e9 / 3.8e9 = 7.26 B
    assert rl.transcendental_ridge_bytes(27.6, 3.8e9) == pytest.approx(7.263, rel=1e-3)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: rl.elementwise_roofs(-1, 10.0, 1, 1e9), "n_bytes"),
        (lambda: rl.elementwise_roofs(1, 0, 1, 1e9), "bandwidth_gbs"),
        (lambda: rl.elementwise_roofs(1, 10.0, float("inf"), 1e9), "n_transcendentals"),
        (lambda: rl.elementwise_roofs(1, 10.0, 1, 0), "transcendentals_per_s"),
        (lambda: rl.elementwise_roofs("1", 10.0, 1, 1e9), "n_bytes"),
        (lambda: rl.transcendental_ridge_bytes(10.0, -1), "transcendentals_per_s"),
        (lambda: rl.intensity_gemv(0, 10), "rows"),
        (lambda: rl.intensity_gemv(10, 2.5), "cols"),
        (lambda: rl.intensity_gemv(10, 10, -1), "bytes_per_weight"),
        (lambda: rl.intensity_gemv(10, 10, batch_size=0), "batch_size"),
        (lambda: rl.intensity_gemm(1, 1, 0), "k"),
        (lambda: rl.intensity_gemm(1, 1, 1, bytes_per_element=float("nan")), "bytes_per_element"),
        (lambda: rl.intensity_elementwise(n_inputs=0), "n_inputs"),
        (lambda: rl.flops_bytes_elementwise(True), "n_elements"),
        (lambda: rl.intensity_attention_decode(0, 128, 32), "seq_len"),
        (lambda: rl.intensity_attention_decode(8, 128, 32, n_kv_heads=0), "n_kv_heads"),
        (lambda: rl.ridge_point(0, 10), "peak_flops"),
        (lambda: rl.ridge_point(1e9, -1), "bandwidth_gbs"),
        (lambda: rl.attainable_flops(-1, 1e9, 10), "intensity"),
        (lambda: rl.attainable_flops([], 1e9, 10), "intensity"),
        (lambda: rl.bound("high", 1e9, 10), "intensity"),
        (lambda: rl.Ceiling("x", 1e9, 0), "bandwidth_gbs"),
        (lambda: rl.KernelPoint("x", 1.0, 0), "achieved_flops"),
    ],
)
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_ceiling_ridge_point():
    assert rl.Ceiling("cpu", 186e9, 24.6).ridge_point == pytest.approx(rl.ridge_point(186e9, 24.6))


def test_plot_roofline_draws_spec_and_measured_roofs_and_points():
    spec = rl.Ceiling("EPYC spec", 400e9, 200.0)
    measured = ("this machine", 141e9, 24.6, True)
    fig = rl.plot_roofline([spec, measured], [("GEMV fp32", 0.5, 11e9), rl.KernelPoint("GEMM", 170.0, 130e9)])
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "FLOP/byte" in ax.get_xlabel() and "GFLOP/s" in ax.get_ylabel()
    labels = ax.get_legend_handles_labels()[1]
    assert any("EPYC spec (spec" in s for s in labels) and any("this machine (measured" in s for s in labels)
    assert "GEMV fp32" in labels and "GEMM" in labels
    styles = {line.get_label(): line.get_linestyle() for line in ax.get_lines()}
    assert styles[next(s for s in labels if s.startswith("this machine"))] == "--"
    # the measured roof's flat part sits at 141 GFLOP/s
    roof = next(line for line in ax.get_lines() if line.get_label().startswith("this machine"))
    assert max(roof.get_ydata()) == pytest.approx(141.0)


def test_plot_roofline_accepts_a_single_ceiling_and_no_points():
    fig = rl.plot_roofline(rl.Ceiling("one", 1e12, 100.0))
    assert len(fig.axes[0].get_lines()) == 2  # roof + ridge marker


def test_plot_roofline_bad_input():
    with pytest.raises(ValueError, match="ceilings"):
        rl.plot_roofline([])
    with pytest.raises(ValueError, match="ceilings"):
        rl.plot_roofline([42])
    with pytest.raises(ValueError, match="points"):
        rl.plot_roofline([("a", 1e9, 1.0)], ["bad"])
