"""Thin widget helpers for the lessons: sliders with units, and `explore` over a pure function.

Only APIs common to ipywidgets 7.7.1 (Colab) and 8 are used. Sliders default to continuous_update=False, so
a slow callback runs once when the learner lets go, not on every pixel of a drag.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import ipywidgets as w
from IPython.display import display

from hwopt import arguments

_STYLE = {"description_width": "initial"}  # show the whole label, units included


def _label(label: str, unit: str) -> str:
    arguments.text("label", label)
    arguments.text("unit", unit, allow_empty=True)
    return f"{label} ({unit})" if unit else label


EXACT = 2**53  # the browser holds slider values as doubles: integers beyond this are not exact there


def _check_range(lo, hi, value, step, *, integer: bool = False, step_name: str = "step"):
    arguments.between("min", lo, -EXACT, EXACT, integer=integer)
    arguments.between("max", hi, -EXACT, EXACT, integer=integer)
    if not lo < hi:
        raise ValueError(f"min must be below max; got min={lo!r}, max={hi!r}")
    if integer:
        arguments.count(step_name, step, "items")
    else:
        arguments.positive(step_name, step)
    if value is not None:
        arguments.between("value", value, lo, hi, integer=integer)


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
    _check_range(min, max, value, step, integer=True)
    continuous_update = arguments.boolean("continuous_update", continuous_update)
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
    arguments.text("readout_format", readout_format)
    continuous_update = arguments.boolean("continuous_update", continuous_update)
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
    arguments.positive("min", min)
    _check_range(min, max, value, steps_per_decade, integer=False, step_name="steps_per_decade")
    arguments.between("steps_per_decade", steps_per_decade, 1, 1000, integer=True)
    continuous_update = arguments.boolean("continuous_update", continuous_update)
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
    arguments.instance("options", options, (list, tuple, dict, range))
    options = list(options) if not isinstance(options, dict) else list(options.items())
    if not options:
        raise ValueError("options must hold at least one choice")
    values = [o[1] if isinstance(o, tuple) and len(o) == 2 else o for o in options]
    if value is not None:
        arguments.one_of("value", value, values)
    return w.Dropdown(
        options=options,
        value=values[0] if value is None else value,
        description=_label(label, unit),
        style=_STYLE,
    )


def toggle(label: str, options: Sequence, value=None) -> w.ToggleButtons:
    """ToggleButtons for a few choices (e.g. precisions); value defaults to the first."""
    arguments.instance("options", options, (list, tuple))
    options = list(options)
    if not options:
        raise ValueError("options must hold at least one choice")
    if value is not None:
        arguments.one_of("value", value, options)
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
    arguments.function("fn", fn)
    horizontal = arguments.boolean("horizontal", horizontal)
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
