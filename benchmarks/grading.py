"""Course cost of grading: autograde seconds per submission-notebook for a class of sample students."""

from __future__ import annotations

from benchmarks.effects import Unavailable, need


def measure(*, quick: bool, class_size: int | None = None) -> tuple[dict, list[dict], list[str]]:
    """Grading summary, the time-vs-class-size series, notes (summary says 'not available' and why if so)."""
    try:
        grading = need("grading")
    except Unavailable as exc:
        return {"available": False, "reason": str(exc)}, [], []
    raise NotImplementedError(grading)
