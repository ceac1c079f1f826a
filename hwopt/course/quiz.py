"""The practice quiz: a question bank (JSON, no answers), each student's own draw, and the grader's key.

The bank lists questions by lesson. A fixed question has four choices; a numeric one has {placeholders} in
its text, a list of values for each parameter, and four choices computed by named formulas of those
parameters (the right computation and real misconceptions: bits for bytes, the KV cache forgotten, ...).
Which choice is right lives only in the answer key, a separate file that students never get.

A student's draw depends on their id alone (SHA-256 of it): the questions, the parameters and the order of
the choices. The same id always draws the same quiz; another id draws another one.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import operator
import random
import textwrap
from pathlib import Path

from hwopt.course.grading.judge import letter

LETTERS = ("a", "b", "c", "d")
# The draw: (lessons of one grade cell, how many questions from each of those lessons).
GROUPS = (((1, 2), 1), ((3, 4), 1), ((5, 6), 1), ((7,), 2), ((8,), 2))
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.Pow: operator.pow, ast.USub: operator.neg}
_FUNCTIONS = {"ceil": math.ceil, "floor": math.floor, "log2": math.log2, "min": min, "max": max}


def load_bank(path: str | Path = "question_bank.json") -> dict:
    """The question bank at path (JSON), checked: every question has an id, a lesson, text and 4 choices."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must be the question bank's JSON file; {path} does not exist")
    bank = json.loads(path.read_text())
    if not isinstance(bank, dict) or not isinstance(bank.get("questions"), list):
        raise ValueError(f"path must hold a bank: an object with a list of questions; got {path}")
    ids = [q.get("id") for q in bank["questions"]]
    if len(set(ids)) != len(ids) or not all(isinstance(i, str) and i for i in ids):
        raise ValueError(f"path: every question needs its own id; got {ids}")
    for q in bank["questions"]:
        if not isinstance(q.get("lesson"), int) or not isinstance(q.get("text"), str):
            raise ValueError(f"path: question {q['id']} needs a lesson number and a text")
        if len(q.get("choices", ())) != len(LETTERS):
            raise ValueError(f"path: question {q['id']} needs {len(LETTERS)} choices")
    return bank


def _rng(student_id: str, purpose: str) -> random.Random:
    if not isinstance(student_id, str) or not student_id.strip():
        raise ValueError(f"student_id must be the id you are graded under (a non-empty string); got "
                         f"{student_id!r}")
    digest = hashlib.sha256(f"hwopt-quiz\0{student_id.strip()}\0{purpose}".encode()).digest()
    return random.Random(int.from_bytes(digest, "big"))


def evaluate(formula: str, parameters: dict) -> float:
    """The value of an arithmetic formula (+ - * / **, numbers, parameter names, ceil/floor/log2/min/max)."""
    def value(node):
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.Name) and node.id in parameters:
            return parameters[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.operand))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
                and not node.keywords):
            return _FUNCTIONS[node.func.id](*map(value, node.args))
        raise ValueError(f"formula must be arithmetic on {sorted(parameters)}; got {formula!r}")
    return float(value(ast.parse(formula, mode="eval")))


def shown(value: float) -> str:
    """A computed choice as printed: 3 significant digits, thousands separated (12,300; 71.4; 0.0123)."""
    if not math.isfinite(value):
        raise ValueError(f"value must be finite; got {value!r}")
    if abs(value) >= 1000:
        return f"{round(value, -int(math.floor(math.log10(abs(value)))) + 2):,.0f}"
    return f"{float(f'{value:.3g}'):g}"


def pose(question: dict, student_id: str) -> dict:
    """One question as student_id sees it: its parameters filled in and its choices in their order.

    Returns {"id", "lesson", "topic", "text", "parameters", "choices": 4 strings, "origins": 4 keys}:
    origins name where each shown choice came from (the bank's letter of a fixed choice, or the formula of a
    computed one).
    """
    rng = _rng(student_id, question["id"])
    parameters = {name: rng.choice(values) for name, values in question.get("parameters", {}).items()}
    if isinstance(question["choices"], dict):  # computed: formula name -> formula
        unit = question.get("unit", "")
        texts = {name: f"{shown(evaluate(f, parameters))} {unit}".strip()
                 for name, f in question["choices"].items()}
    else:
        texts = dict(zip(LETTERS, question["choices"], strict=True))
    origins = list(texts)
    rng.shuffle(origins)
    return {"id": question["id"], "lesson": question["lesson"], "topic": question.get("topic", ""),
            "text": question["text"].format(**parameters), "parameters": parameters,
            "choices": [texts[o] for o in origins], "origins": origins}


def draw(bank: dict, student_id: str) -> list[dict]:
    """The questions student_id answers: from each group of GROUPS, its count from each of its lessons."""
    rng = _rng(student_id, "questions")
    picked = []
    for lessons, count in GROUPS:
        for lesson in lessons:
            pool = sorted((q for q in bank["questions"] if q["lesson"] == lesson), key=lambda q: q["id"])
            picked += rng.sample(pool, count)
    return [pose(q, student_id) for q in picked]


def show(questions: list[dict]) -> str:
    """The drawn questions as text to read: each with its id (the key of its answer) and lettered choices."""
    blocks = []
    for number, q in enumerate(questions, 1):
        choices = [textwrap.fill(f"{letter}) {text}", 100, initial_indent="   ", subsequent_indent="      ")
                   for letter, text in zip(LETTERS, q["choices"], strict=True)]
        text = textwrap.fill(q["text"], 100, initial_indent="   ", subsequent_indent="   ")
        head = f'{number}. [{q["id"]}] (lesson {q["lesson"]}: {q["topic"]})'
        blocks.append("\n".join([head, text, *choices]))
    return "\n\n".join(blocks)


class AnswerKey:
    """The right choice of every question (the instructor's file: question id -> bank letter or formula)."""

    def __init__(self, path: str | Path):
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"path must be the answer key's JSON file; {path} does not exist")
        self.right = json.loads(path.read_text())

    def letter(self, question: dict) -> str:
        """The letter under which the posed question shows its right choice."""
        return LETTERS[question["origins"].index(self.right[question["id"]])]


def answers_to(bank: dict, student_id: str, lessons: list[int], answers) -> dict:
    """{question id: letter} for the questions student_id draws on these lessons, taken from answers.

    answers: the student's dict (question id -> letter; a missing answer is None), or an AnswerKey (the
    right letters).
    """
    if not isinstance(lessons, list | tuple) or not all(type(n) is int for n in lessons):
        raise ValueError(f"lessons must be a list of lesson numbers; got {lessons!r}")
    picked = [q for q in draw(bank, student_id) if q["lesson"] in lessons]
    if isinstance(answers, AnswerKey):
        return {q["id"]: answers.letter(q) for q in picked}
    if not isinstance(answers, dict):
        raise ValueError(f"answers must be a dict: question id -> letter; got {type(answers).__name__}")
    return {q["id"]: letter(answers.get(q["id"])) for q in picked}


def assert_answered(given: dict) -> None:
    """AssertionError naming each question whose answer is not one of the letters a-d (the format only)."""
    unanswered = [qid for qid, chosen in given.items() if chosen not in LETTERS]
    assert not unanswered, (f"answer {', '.join(unanswered)} in `answers`, each with one letter a, b, c or d "
                            f"(a string), e.g. answers = {{{unanswered[0]!r}: 'b', ...}}")
