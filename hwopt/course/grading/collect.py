"""Evaluate a call on each case, print the outcomes as a JSON line (this source runs in the student's kernel).

The grader sends this module's source into the student's kernel, followed by one call of ``report``; the
judge runs ``outcome`` on the reference solution in the grading process, so both sides turn values into
JSON the same way. Nothing here is trusted: whatever line comes back is only data for the judge.
"""

import json


def _as_json(value):
    """numpy scalars and arrays as Python numbers and lists (json's default hook)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(type(value).__name__)


def outcome(call: str, variables: dict, namespace: dict) -> dict:
    """{"value": JSON data}, {"raised": [exception class names], "message": str} or {"unplain": type name}."""
    try:
        value = eval(call, {**namespace, **variables})  # noqa: S307 (the call is the instructor's)
    except (Exception, SystemExit) as err:
        try:
            message = str(err)[:500]
        except Exception:
            message = ""
        return {"raised": [c.__name__ for c in type(err).__mro__], "message": message}
    try:
        return {"value": json.loads(json.dumps(value, default=_as_json))}
    except (TypeError, ValueError, RecursionError):
        return {"unplain": type(value).__name__}


def report(call: str, cases_json: str, namespace: dict, mark: str) -> None:
    """Print mark + the JSON list of outcomes of call on each case (a JSON list of variable dicts)."""
    print(mark + json.dumps([outcome(call, variables, namespace) for variables in json.loads(cases_json)]))
