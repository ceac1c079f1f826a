"""cost.communication: the alpha-beta fit recovers synthetic timings; ring all-reduce, all-to-all by hand."""

import numpy as np
import pytest

from hwopt.cost import communication

SIZES = np.array([2**k for k in range(10, 25, 2)], dtype=float)  # 1 KiB .. 16 MiB


@pytest.mark.parametrize(("latency_s", "bandwidth_gbs"), [(200e-6, 1.2), (5e-6, 300.0), (0.0, 10.0)])
def test_the_fit_recovers_latency_and_bandwidth_from_noisy_synthetic_timings(latency_s, bandwidth_gbs):
    rng = np.random.default_rng(1)
    exact = latency_s + SIZES / (bandwidth_gbs * 1e9)
    fit = communication.fit_alpha_beta(SIZES, exact * (1 + 0.03 * rng.standard_normal(SIZES.size)))
    assert fit.bandwidth_gbs == pytest.approx(bandwidth_gbs, rel=0.05)
    assert fit.latency_s == pytest.approx(latency_s, rel=0.1, abs=1e-7)
    assert fit.time_s(1e6) == pytest.approx(latency_s + 1e6 / (bandwidth_gbs * 1e9), rel=0.05)


def test_the_fit_weighs_relative_error_so_latency_survives_large_messages():
    """Plain least squares would let the 16 MiB points swallow a 50 us latency; the relative fit keeps it."""
    times = 50e-6 + SIZES / 10e9
    fit = communication.fit_alpha_beta(SIZES, times)
    assert fit.latency_s == pytest.approx(50e-6, rel=1e-6)
    assert fit.bandwidth_gbs == pytest.approx(10, rel=1e-6)
    assert "50.0 us" in str(fit) and fit.half_bandwidth_bytes == pytest.approx(500e3)


def test_a_negative_latency_is_clamped_to_zero():
    times = SIZES / 5e9 - 1e-7 * (SIZES < 1e5)  # small messages faster than bandwidth alone allows
    fit = communication.fit_alpha_beta(SIZES, np.maximum(times, 1e-9))
    assert fit.latency_s == 0.0 and fit.bandwidth_gbs > 0


@pytest.mark.parametrize(("sizes", "times", "match"), [
    ([1e3, 1e3], [1e-4, 2e-4], "two different sizes"),
    ([1e3, 1e6], [1e-3, 1e-4], "grow"),
    ([1e3, 1e6, 1e7], [1e-4, 2e-4], "same length"),
    ([1e3, float("nan")], [1e-4, 2e-4], "sizes_bytes"),
    ([1e3, 1e6], [0.0, 1e-3], "times_s"),
    ("big", [1e-4], "sizes_bytes"),
])
def test_bad_timings_are_refused_naming_the_argument(sizes, times, match):
    with pytest.raises(ValueError, match=match):
        communication.fit_alpha_beta(sizes, times)


def test_ring_all_reduce_and_all_to_all_by_hand():
    # 8 chips, 1 MB, 100 GB/s one way, 2 us a message: 14 x 2 us + 2 x 7/8 x 10 us
    assert communication.allreduce_time_s(1e6, 8, 100, 2e-6) == pytest.approx(14 * 2e-6 + 1.75 * 1e-5)
    assert communication.allreduce_time_s(1e6, 1, 100, 2e-6) == 0.0  # one chip: nothing to reduce
    assert communication.all_to_all_time_s(1e6, 4, 100, 1e-6) == pytest.approx(3e-6 + 0.75 * 1e-5)
    two = communication.allreduce_time_s(1e9, 2, 1.0)
    assert two == pytest.approx(1.0)  # 2 chips: each sends half and receives half, twice
    assert communication.AlphaBeta(0.0, 1.0).time_s(0) == 0.0


@pytest.mark.parametrize(("call", "match"), [
    (lambda: communication.allreduce_time_s(-1, 2, 10), "n_bytes"),
    (lambda: communication.allreduce_time_s(1, 0, 10), "n_chips"),
    (lambda: communication.allreduce_time_s(1, 2, 0), "link_gbs"),
    (lambda: communication.all_to_all_time_s(1, 2, 10, float("inf")), "latency_s"),
    (lambda: communication.AlphaBeta(-1e-6, 1.0), "latency_s"),
    (lambda: communication.AlphaBeta(0.0, True), "bandwidth_gbs"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
