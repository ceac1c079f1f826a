"""widgets: controls build with units, and moving a control re-runs the pure function."""

import ipywidgets
import pytest

from hwopt import widgets


def test_int_slider_describes_units_and_defaults_to_no_continuous_update():
    s = widgets.int_slider("batch size", 1, 512, 32)
    assert isinstance(s, ipywidgets.IntSlider)
    assert (s.min, s.max, s.value, s.description) == (1, 512, 32, "batch size")
    assert s.continuous_update is False
    assert widgets.int_slider("budget", 1, 100, unit="ms").description == "budget (ms)"
    assert widgets.int_slider("n", 0, 9).value == 0


def test_float_slider_units_and_default_step():
    s = widgets.float_slider("bandwidth", 10.0, 110.0, 50.0, unit="GB/s")
    assert isinstance(s, ipywidgets.FloatSlider)
    assert s.description == "bandwidth (GB/s)" and s.value == 50.0 and s.step == pytest.approx(1.0)
    assert widgets.float_slider("x", 0, 1, step=0.5, continuous_update=True).continuous_update is True


def test_log_slider_spans_decades():
    s = widgets.log_slider("parameters", 1e6, 1e11, 7e9, unit="count")
    assert isinstance(s, ipywidgets.FloatLogSlider)
    assert (s.min, s.max, s.base) == (6, 11, 10) and s.value == pytest.approx(7e9, rel=0.15)
    assert s.description == "parameters (count)"


def test_dropdown_and_toggle():
    d = widgets.dropdown("precision", [("FP32", 4.0), ("INT8", 1.0)], 1.0, unit="bytes/weight")
    assert d.value == 1.0 and d.description == "precision (bytes/weight)"
    assert widgets.dropdown("chip", ["a", "b"]).value == "a"
    assert widgets.dropdown("bytes", {"fp16": 2, "int4": 0.5}).value == 2
    t = widgets.toggle("precision", ["fp32", "int8"], "int8")
    assert isinstance(t, ipywidgets.ToggleButtons) and t.value == "int8"
    assert widgets.toggle("p", ["a"]).value == "a"


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: widgets.int_slider("", 1, 2), "label"),
        (lambda: widgets.int_slider("n", 5, 2), "min must be below max"),
        (lambda: widgets.int_slider("n", 1, 5, 9), "value must be an integer from 1 to 5"),
        (lambda: widgets.int_slider("n", 1, 5, step=0), "step"),
        (lambda: widgets.float_slider("x", 0.0, float("inf")), "max"),
        (lambda: widgets.float_slider("x", "0", 1.0), "min"),
        (lambda: widgets.log_slider("x", 0, 10), "min must be a finite number > 0"),
        (lambda: widgets.dropdown("x", []), "options"),
        (lambda: widgets.dropdown("x", ["a"], "b"), "value must be one of"),
        (lambda: widgets.toggle("x", []), "options"),
        (lambda: widgets.toggle("x", ["a"], "z"), "value must be one of"),
    ],
)
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_explore_runs_the_function_now_and_again_on_each_change():
    calls = []

    def tokens_per_s(bandwidth_gbs, model_gb, precision, note):
        calls.append((bandwidth_gbs, model_gb, precision, note))
        return bandwidth_gbs / model_gb

    box = widgets.explore(
        tokens_per_s,
        bandwidth_gbs=widgets.float_slider("bandwidth", 10.0, 100.0, 50.0, unit="GB/s"),
        model_gb=widgets.int_slider("model", 1, 10, 5, unit="GB"),
        precision=["fp32", "int8"],
        note="constant",
    )
    assert isinstance(box, ipywidgets.VBox) and isinstance(box.output, ipywidgets.Output)
    assert set(box.controls) == {"bandwidth_gbs", "model_gb", "precision"}
    assert calls == [(50.0, 5, "fp32", "constant")]
    box.controls["model_gb"].value = 2
    box.controls["precision"].value = "int8"
    assert calls[-2:] == [(50.0, 2, "fp32", "constant"), (50.0, 2, "int8", "constant")]
    assert box.children[1] is box.output and len(box.children[0].children) == 3


def test_explore_horizontal_layout():
    box = widgets.explore(lambda n: None, horizontal=True, n=widgets.int_slider("n", 1, 3))
    assert isinstance(box.children[0], ipywidgets.HBox)


def test_explore_shows_what_the_function_returns(monkeypatch):
    shown = []
    monkeypatch.setattr(widgets, "display", shown.append)
    box = widgets.explore(lambda n: f"n={n}" if n > 1 else None, n=widgets.int_slider("n", 1, 3))
    assert shown == []  # None is not displayed
    box.controls["n"].value = 3
    assert shown == ["n=3"]


def test_explore_bad_input():
    with pytest.raises(ValueError, match="fn must be callable"):
        widgets.explore(3, n=widgets.int_slider("n", 1, 3))
    with pytest.raises(ValueError, match="controls"):
        widgets.explore(lambda: None)
    with pytest.raises(ValueError, match="controls"):
        widgets.explore(lambda n: None, n=5)
