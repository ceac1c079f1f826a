"""The learner's predictions: written in a cell before a measurement prints, set beside it afterwards.

Where a lesson asks "why", the learner first writes down what they expect (`my_prediction = None` in a cell of
its own, to be replaced by a number or a choice), then the lesson measures, and `verdict(...)` says how the
prediction compares: a prediction made after seeing the answer teaches nothing.
"""

from __future__ import annotations

from hwopt import arguments

__all__ = ["verdict"]


def _shown(value: float, unit: str) -> str:
    return f"{value:,.3g} {unit}".rstrip()


def verdict(prediction: float | str | None, measured: float | str, what: str, unit: str = "") -> str:
    """One sentence setting the learner's prediction (None: not written, a number, or a choice such as
    'data') beside what was measured (a number in unit, or the choice that turned out right)."""
    what = arguments.text("what", what)
    unit = arguments.text("unit", unit, allow_empty=True)
    if isinstance(measured, str):
        measured = arguments.text("measured", measured)
        if prediction is None:
            return (f"You wrote no prediction of {what}; it was {measured!r}. Write yours in the cell "
                    "before the measurement, then run both again: a guess made after the answer teaches "
                    "nothing.")
        if not isinstance(prediction, str):
            raise ValueError(f"prediction and measured must be both numbers or both choices; "
                             f"got {prediction!r} and {measured!r}")
        prediction = arguments.text("prediction", prediction)
        right = prediction.strip().lower() == measured.strip().lower()
        return f"You predicted {what}: {prediction!r}; it was {measured!r}: {'right' if right else 'wrong'}."
    measured = arguments.number("measured", measured)
    if prediction is None:
        return (f"You wrote no prediction of {what}; measured {_shown(measured, unit)}. Write yours in the "
                "cell before the measurement, then run both again: a guess made after the answer teaches "
                "nothing.")
    prediction = arguments.number("prediction", prediction)
    ratio = f": the measurement is {measured / prediction:.2g}x your prediction" if prediction else ""
    return f"You predicted {what} = {_shown(prediction, unit)}; measured {_shown(measured, unit)}{ratio}."
