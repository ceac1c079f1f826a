"""Thin widget helpers for the lessons: sliders with units, and `explore` over a pure function.

Only APIs common to ipywidgets 7.7.1 (Colab) and 8 are used. Sliders default to continuous_update=False, so
a slow callback runs once when the learner lets go, not on every pixel of a drag.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import ipywidgets as w
from IPython.display import display

_STYLE = {"description_width": "initial"}  # show the whole label, units included


def _label(label: str, unit: str) -> str:
    if not isinstance(label, str) or not label.strip():
        raise ValueError(f"label must be a non-empty string; got {label!r}")
    return f"{label} ({unit})" if unit else label


def _check_range(lo, hi, value, step):
    for name, v in (("min", lo), ("max", hi), ("step", step)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number; got {v!r}")
    if not lo < hi:
        raise ValueError(f"min must be below max; got min={lo!r}, max={hi!r}")
    if step <= 0:
        raise ValueError(f"step must be positive; got {step!r}")
    if value is not None and not (lo <= value <= hi):
        raise ValueError(f"value must lie in [min, max] = [{lo}, {hi}]; got {value!r}")


def int_slider(
    label: str,
    min: int,
    max: int,
    value: int | None = None,
    *,
    step: int = 1,
    unit: str = "",
    continuous_update: bool = False,
) -> w.IntSlider:
    """An IntSlider described as 'label (unit)'; value defaults to min."""
    _check_range(min, max, value, step)
    return w.IntSlider(
        value=min if value is None else value,
        min=min,
        max=max,
        step=step,
        description=_label(label, unit),
        continuous_update=continuous_update,
        style=_STYLE,
    )


def float_slider(
    label: str,
    min: float,
    max: float,
    value: float | None = None,
    *,
    step: float | None = None,
    unit: str = "",
    readout_format: str = ".3g",
    continuous_update: bool = False,
) -> w.FloatSlider:
    """A FloatSlider described as 'label (unit)'; step defaults to 1/100 of the range, value to min."""
    _check_range(min, max, value, 1 if step is None else step)
    step = (max - min) / 100 if step is None else step
    return w.FloatSlider(
        value=min if value is None else value,
        min=min,
        max=max,
        step=step,
        description=_label(label, unit),
        readout_format=readout_format,
        continuous_update=continuous_update,
        style=_STYLE,
    )


def log_slider(
    label: str,
    min: float,
    max: float,
    value: float | None = None,
    *,
    unit: str = "",
    steps_per_decade: int = 10,
    continuous_update: bool = False,
) -> w.FloatLogSlider:
    """A FloatLogSlider (base 10) between min and max > 0, for values spanning decades (sizes, rates)."""
    _check_range(min, max, value, steps_per_decade)
    if min <= 0:
        raise ValueError(f"min must be > 0 for a log slider; got {min!r}")
    return w.FloatLogSlider(
        value=min if value is None else value,
        base=10,
        min=math.log10(min),
        max=math.log10(max),
        step=1 / steps_per_decade,
        description=_label(label, unit),
        readout_format=".3g",
        continuous_update=continuous_update,
        style=_STYLE,
    )


def dropdown(label: str, options: Sequence, value=None, *, unit: str = "") -> w.Dropdown:
    """A Dropdown of options (values, or (text, value) pairs); value defaults to the first."""
    options = list(options) if not isinstance(options, dict) else list(options.items())
    if not options:
        raise ValueError("options must hold at least one choice")
    values = [o[1] if isinstance(o, tuple) and len(o) == 2 else o for o in options]
    if value is not None and value not in values:
        raise ValueError(f"value must be one of the options {values}; got {value!r}")
    return w.Dropdown(
        options=options,
        value=values[0] if value is None else value,
        description=_label(label, unit),
        style=_STYLE,
    )


def toggle(label: str, options: Sequence, value=None) -> w.ToggleButtons:
    """ToggleButtons for a few choices (e.g. precisions); value defaults to the first."""
    options = list(options)
    if not options:
        raise ValueError("options must hold at least one choice")
    if value is not None and value not in options:
        raise ValueError(f"value must be one of the options {options}; got {value!r}")
    return w.ToggleButtons(
        options=options,
        value=options[0] if value is None else value,
        description=_label(label, ""),
        style=_STYLE,
    )


def explore(fn: Callable[..., object], *, horizontal: bool = False, **controls) -> w.VBox:
    """Controls + an Output re-running fn(**values) on every change; a returned value (figure, text) is shown.

    A control is a widget, a list/tuple of choices (becomes a dropdown), or a constant passed through.
    The returned box has `.controls` (name -> widget) and `.output` (the Output widget).
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable; got {type(fn).__name__}")
    if not controls:
        raise ValueError(
            "controls must name at least one keyword argument of fn, e.g. batch_size=int_slider(...)"
        )
    widgets, constants = {}, {}
    for name, c in controls.items():
        if isinstance(c, w.ValueWidget):
            widgets[name] = c
        elif isinstance(c, list | tuple):
            widgets[name] = dropdown(name.replace("_", " "), c)
        else:
            constants[name] = c
    if not widgets:
        raise ValueError("controls must include at least one widget or list of choices")

    def show(**values):
        result = fn(**values, **constants)
        if result is not None:
            display(result)

    out = w.interactive_output(show, widgets)
    row = (w.HBox if horizontal else w.VBox)(list(widgets.values()))
    box = w.VBox([row, out])
    box.controls, box.output = widgets, out
    return box
