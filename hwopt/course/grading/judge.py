"""The judge: a grade cell's points, decided in the grading process from plain values, never by student code.

A grade cell of source/ holds its spec between the hidden-test markers; the grader runs that region here,
never in the student's kernel:

    from hwopt.course.grading.judge import case, check
    check("throughput_per_s(batch_size, latency_ms)", lambda rng: [
        case("the example above", batch_size=10, latency_ms=100.0),
        case("a sub-millisecond latency", batch_size=rng.randint(1, 9), latency_ms=rng.uniform(0.05, 0.95)),
    ])

Each case's variables are drawn with an RNG seeded by the instructor secret and the student id, so every
student gets their own numbers and regrading reproduces them. The RNG also carries the id being graded,
`rng.student` (INSTRUCTOR in the instructor's own notebook), for a case that depends on who answers it,
e.g. `case("your questions", student_id=rng.student)` when each student draws their own questions.
The student's kernel evaluates the call on each case and prints the outcomes as JSON (grading.collect);
the reference solution, run here, gives the expected outcomes. A part earns its points only when every
case is right; a missing, malformed or duplicated report earns 0 (fail closed).

Where a right answer is not one value (a quantized layer: many codes are right, some better than others),
`check(..., accept=f)` decides instead of equality: f(expected, got, variables) runs here, in the grading
process, on the reference's value, the student's plain value and the case's variables, and returns None to
accept or a phrase saying why not (shown in the feedback: it must not hold a hidden value). It computes what
it judges itself (e.g. rebuilds the student's weights and measures their error here), never trusting a
number the student reports about their own work; a value it cannot read is wrong, never an error of grading.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import json
import math
import os
import random
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hwopt.course.grading import collect, settings

MAX_REPORT_CHARS = 1_000_000
PLAIN_SCALARS = (str, int, float, bool, type(None))
INSTRUCTOR = "instructor"  # rng.student where no student is graded (the instructor's notebook, validate)


class MissingSecret(RuntimeError):
    """The instructor secret that seeds the hidden cases is not set."""


def secret_path(environ=os.environ) -> Path:
    """Where the instructor secret is read from: the SECRET_FILE setting."""
    return Path(settings.SECRET_FILE.text(environ)).expanduser()


def load_secret(environ=os.environ) -> bytes:
    """The instructor secret: the SECRET setting, else the secret file (MissingSecret: how to make one)."""
    if environ.get(settings.SECRET.name):  # as given: a secret's spaces are part of it
        return environ[settings.SECRET.name].encode()
    path = secret_path(environ)
    if path.is_file() and path.read_text().strip():
        return path.read_text().strip().encode()
    raise MissingSecret(
        f"No grading secret: the hidden cases are drawn from it, so grading stops. Create one with "
        f"`python -m hwopt.course.grading secret` (writes {path}), or set {settings.SECRET.name}. Keep it "
        f"out of the repository and keep the same one for the whole course: regrading then reproduces every "
        f"score.")


def create_secret(path: Path | None = None) -> Path:
    """Write a new random secret (readable by its owner only) unless one exists; returns its path."""
    path = Path(path or secret_path()).expanduser()
    if path.exists():
        raise FileExistsError(f"{path} exists: keep it (a new secret changes every student's hidden cases)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return path


# ---- specs: what the hidden region of a grade cell says ---------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One input of a graded call: what it tests (for the feedback), its variables, names an error gives."""

    about: str
    variables: dict = field(default_factory=dict)
    must_name: tuple[str, ...] = ()  # an expected error's message must name one of these


def case(about: str, *, must_name: str | tuple[str, ...] = (), **variables) -> Case:
    """A case of a check: `about` is shown to the student, the variables never are."""
    if not isinstance(about, str) or not about.strip():
        raise ValueError(f"about must say in words what the case tests; got {about!r}")
    names = (must_name,) if isinstance(must_name, str) else tuple(must_name)
    if not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"must_name must be argument names (strings); got {must_name!r}")
    return Case(about, variables, names)


def letter(value):
    """Normalise a multiple-choice answer: ' C ' and 'c' are the same letter."""
    return value.strip().lower() if isinstance(value, str) else value


@dataclass(frozen=True)
class Check:
    """A call judged on cases: every case's outcome must match the reference's."""

    call: str
    cases: Callable[[random.Random], list[Case]] | list[Case] | None = None
    rel_tol: float = 1e-6
    abs_tol: float = 1e-9
    normalise: Callable | None = None  # applied to expected and student values before comparing
    accept: Callable | None = None  # (expected, got, variables) -> None if right, else why not (see above)

    def __post_init__(self):
        if not isinstance(self.call, str) or not self.call.strip():
            raise ValueError(f"call must be an expression to evaluate, e.g. 'f(x)'; got {self.call!r}")
        for name in ("rel_tol", "abs_tol"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise ValueError(f"{name} must be a finite number >= 0; got {value!r}")
        if not (self.cases is None or callable(self.cases) or isinstance(self.cases, list | tuple)):
            raise ValueError(f"cases must be a function of rng, a list of cases or None; got {self.cases!r}")
        if self.accept is not None and not callable(self.accept):
            raise ValueError(f"accept must be a function (expected, got, variables) -> None or why not; got "
                             f"{self.accept!r}")


_declared: list[Check] | None = None  # while read_checks runs a hidden region, its checks go here


def check(call: str, cases=None, **options) -> None:
    """Declare a check (in a hidden region): the grader collects it; run in a notebook, it tries it there.

    In the instructor's notebook (Jupyter, or `nbgrader validate source/...`), the check runs on that
    notebook's own functions with fixed cases, and fails if the reference gives no plain value where one is
    expected, or no error where a case says which argument the error must name.
    """
    declared = Check(call, cases, **options)
    if _declared is not None:
        _declared.append(declared)
        return
    namespace = sys._getframe(1).f_globals
    rng = random.Random(0)
    rng.student = INSTRUCTOR
    for one in draw(declared, rng):
        got = collect.outcome(call, one.variables, namespace)
        if one.must_name:
            assert "raised" in got, f"{call}: {one.about}: expected an error, got {got}"
        else:
            assert "value" in got, f"{call}: {one.about}: expected a plain value, got {got}"


def read_checks(hidden_code: str, namespace: dict) -> list[Check]:
    """The checks a hidden region declares, run here in namespace (reference names; keeps helpers)."""
    global _declared
    _declared = found = []
    try:
        exec(hidden_code, namespace)  # noqa: S102
    finally:
        _declared = None
    return found


def case_rng(secret: bytes, *, assignment: str, notebook: str, grade_id: str, student: str,
             index: int = 0) -> random.Random:
    """The RNG of one check of one student: the same secret and student give the same cases.

    rng.student is the student id, for cases that pass it on (a quiz drawn per student).
    """
    message = "\0".join((assignment, notebook, grade_id, str(index), student)).encode()
    rng = random.Random(int.from_bytes(hmac.new(secret, message, hashlib.sha256).digest(), "big"))
    rng.student = student
    return rng


def is_plain(value) -> bool:
    """True for JSON-like data only: str, int, float, bool, None, and lists/dicts (str keys) of them."""
    if type(value) in PLAIN_SCALARS:
        return True
    if type(value) in (list, tuple):
        return all(is_plain(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and is_plain(v) for k, v in value.items())
    return False


def draw(check: Check, rng: random.Random) -> list[Case]:
    """The check's cases for this RNG; variables pass through JSON so both sides see the same values."""
    cases = check.cases(rng) if callable(check.cases) else check.cases
    cases = [case("your answer")] if cases is None else list(cases)
    for c in cases:
        if not isinstance(c, Case) or not is_plain(c.variables):
            raise ValueError(f"{check.call}: every case must be case(about, name=plain value...); got {c!r}")
    return [Case(c.about, json.loads(json.dumps(c.variables)), c.must_name) for c in cases]


# ---- the verdict ------------------------------------------------------------------------------------------

def _kind(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, int | float):
        return "a number"
    return {str: "a string", list: "a list (or tuple)", dict: "a dict"}[type(value)]


def same_value(expected, got, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """Plain values equal, numbers within the tolerances (NaN equals NaN), structure and types alike."""
    if _kind(expected) != _kind(got):
        return False
    if isinstance(expected, int | float) and not isinstance(expected, bool):
        if math.isnan(expected) or math.isnan(got):
            return math.isnan(expected) and math.isnan(got)
        return math.isclose(expected, got, rel_tol=rel_tol, abs_tol=abs_tol)
    if isinstance(expected, list):
        return len(expected) == len(got) and all(
            same_value(e, g, rel_tol, abs_tol) for e, g in zip(expected, got, strict=True))
    if isinstance(expected, dict):
        return expected.keys() == got.keys() and all(
            same_value(v, got[k], rel_tol, abs_tol) for k, v in expected.items())
    return expected == got


BUILTIN_EXCEPTIONS = frozenset(name for name, value in vars(builtins).items()
                               if isinstance(value, type) and issubclass(value, BaseException))


def raised_kind(names: list[str]) -> str:
    """The exception a student's code raised, as feedback names it: the first built-in class among its classes
    (names, most derived first), else 'an exception'. Never the student's own text: a class of the student's
    could carry a hidden case's values in its name, an exception's message certainly can."""
    return next((name for name in names if name in BUILTIN_EXCEPTIONS), "an exception")


def judge_case(check: Check, one: Case, expected: dict, got) -> str | None:
    """Why the student's outcome of one case is wrong (a phrase for the feedback, made here from the kind of
    failure alone, never from the student's text), or None if it is right."""
    if not isinstance(got, dict) or not (got.keys() == {"value"} or got.keys() == {"raised", "message"}
                                         or got.keys() == {"unplain"}):
        return "no usable result came back"
    if "unplain" in got:
        return "returned an object that is not a plain value (a number, string, list...)"
    if "raised" in got:
        names, message = got["raised"], got["message"]
        if not (isinstance(names, list) and names and all(type(n) is str for n in names)
                and type(message) is str):
            return "no usable result came back"
        if "value" in expected:
            return f"raised {raised_kind(names)}"
        if expected["raised"][0] not in names:
            return f"raised {raised_kind(names)}; expected {expected['raised'][0]}"
        if one.must_name and not any(name in message for name in one.must_name):
            return f"the {expected['raised'][0]} message should name {' or '.join(one.must_name)}"
        return None
    if "raised" in expected:
        return f"returned a value; expected {expected['raised'][0]}"
    want, have = expected["value"], got["value"]
    if check.normalise is not None:
        want, have = check.normalise(want), check.normalise(have)
    if _kind(want) != _kind(have):
        return f"returned {_kind(have)}, expected {_kind(want)}"
    if check.accept is not None:
        return accepted(check.accept, want, have, one.variables)
    return None if same_value(want, have, check.rel_tol, check.abs_tol) else "wrong value"


def accepted(accept: Callable, expected, got, variables: dict) -> str | None:
    """accept's verdict on a value: None if right, else its phrase; a failure to judge fails the case, with a
    phrase of the judge's own (an exception's text could carry the student's values or a hidden one)."""
    try:
        why = accept(expected, got, variables)
    except Exception:
        return "returned a value that could not be judged (wrong shape or kind of numbers)"
    if why is None:
        return None
    return why if isinstance(why, str) and why.strip() else "wrong value"


def parse_report(text: str, mark: str, n_cases: int) -> list | str:
    """The outcomes in the kernel's output (exactly one line starting with mark), or why there are none."""
    lines = [line for line in text.splitlines() if line.startswith(mark)]
    if not lines:
        return "no result came back from your notebook (it timed out, crashed or printed nothing)"
    if len(lines) > 1:
        return "more than one result came back from your notebook"
    body = lines[0][len(mark):]
    if len(body) > MAX_REPORT_CHARS:
        return "the result was too large"
    try:
        outcomes = json.loads(body)
    except (ValueError, RecursionError):
        return "the result was not valid JSON"
    if not isinstance(outcomes, list) or len(outcomes) != n_cases:
        return "the result did not have one outcome per case"
    return outcomes


@dataclass
class Verdict:
    """A grade cell's judged score and the lines of feedback that explain it."""

    points: float
    max_points: float
    lines: list[str]

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def verdict(max_points: float, wrong: list[tuple[str, str]], n_cases: int,
            problem: str | None = None) -> Verdict:
    """All cases right earns max_points, anything else 0; wrong lists (what the case tests, why it failed)."""
    head = f"Graded outside your notebook on {n_cases} case{'s' if n_cases != 1 else ''}"
    if problem:
        return Verdict(0.0, max_points, [f"{head}: {problem}. 0 of {max_points:g} points."])
    if not wrong:
        return Verdict(max_points, max_points,
                       [f"{head}: all right, {max_points:g} of {max_points:g} points."])
    lines = [f"{head}: {n_cases - len(wrong)} right, {len(wrong)} wrong, so 0 of {max_points:g} points "
             "(every case must be right):"]
    return Verdict(0.0, max_points, lines + [f"  - {about}: {why}" for about, why in wrong])
