"""plots: the shared plotting style."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from hwopt import plots  # noqa: E402
from hwopt.machine.bench import Measurement


def test_color_cycles_through_the_palette():
    assert plots.color(0) == plots.PALETTE[0]
    assert plots.color(len(plots.PALETTE) + 1) == plots.PALETTE[1]
    with pytest.raises(ValueError, match="i must be an integer"):
        plots.color("blue")


def test_axes_labels_units_and_log_scales():
    ax = plots.axes("size (MB)", "bandwidth (GB/s)", title="t", logx=True, logy=True)
    assert ax.get_xlabel() == "size (MB)" and ax.get_ylabel() == "bandwidth (GB/s)" and ax.get_title() == "t"
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    plt.close(ax.figure)


def test_axes_reuses_a_given_ax():
    fig, ax = plt.subplots()
    assert plots.axes("x (s)", "y (ms)", ax=ax) is ax and ax.get_xscale() == "linear"
    plt.close(fig)


@pytest.mark.parametrize(("xlabel", "ylabel", "name"), [("", "y (s)", "xlabel"), ("x (s)", None, "ylabel")])
def test_axes_requires_labels(xlabel, ylabel, name):
    with pytest.raises(ValueError, match=name):
        plots.axes(xlabel, ylabel)


def test_band_draws_median_line_and_shaded_range():
    ax = plots.axes("batch size", "latency (ms)")
    line = plots.band(ax, [1, 2, 4], [1.0, 2.0, 3.0], [0.9, 1.8, 2.7], [1.1, 2.2, 3.3], label="m", color="k")
    assert list(line.get_ydata()) == [1.0, 2.0, 3.0] and line.get_label() == "m"
    assert len(ax.collections) == 1  # the IQR band
    plt.close(ax.figure)


def test_band_rejects_mismatched_lengths():
    ax = plots.axes("x (s)", "y (s)")
    with pytest.raises(ValueError, match="same length"):
        plots.band(ax, [1, 2], [1.0], [1.0], [1.0])
    plt.close(ax.figure)


def test_finish_adds_legend_only_with_labels_and_returns_closed_figure():
    ax = plots.axes("x (s)", "y (s)")
    ax.plot([1, 2], [1, 2], label="a")
    fig = plots.finish(ax)
    assert fig is ax.figure and ax.get_legend() is not None
    assert fig.number not in plt.get_fignums()  # closed: Jupyter shows the returned figure once
    ax2 = plots.axes("x (s)", "y (s)")
    ax2.plot([1, 2], [1, 2])
    assert plots.finish(ax2).axes[0].get_legend() is None


def test_measurement_band_plots_medians_and_iqr_in_the_chosen_unit():
    ms = [Measurement("a", (1e-3, 2e-3, 3e-3)), Measurement("b", (2e-3, 4e-3, 6e-3))]
    ax = plots.axes("batch size", "latency (ms)")
    line = plots.measurement_band(ax, [1, 2], ms, label="model")
    assert list(line.get_ydata()) == [2.0, 4.0]
    path = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert min(path) == pytest.approx(1.5) and max(path) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="unit"):
        plots.measurement_band(ax, [1, 2], ms, unit="h")
    with pytest.raises(ValueError, match="measurements"):
        plots.measurement_band(ax, [1, 2], [1.0, 2.0])
    plt.close(ax.figure)
