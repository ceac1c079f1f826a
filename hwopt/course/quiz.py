"""The practice quiz: a question bank (JSON, no answers), each student's own draw, and the grader's key.

The bank lists questions by lesson. A fixed question has four choices; a numeric one has {placeholders} in
its text, a list of values for each parameter, and four choices computed by formulas of those parameters
(the right computation and three misconceptions: bits for bytes, the KV cache forgotten, ...). The bank
names no choice. Which choice is right, and the misconception behind each other one, lives only in the
answer key, a separate file that students never get. A choice's place is no clue either: each student sees
the choices in their own order, and the bank puts the right choice at each of its four places equally often
within every slot's pool of questions (tests/course/test_quiz.py), so guessing by place scores chance.

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
# The draw, one tuple per grade cell; each slot in it is one question from the questions of its lessons.
# Lessons 8-11 (LLM inference and serving) get four of the ten questions, lesson 12 one, lessons 1-7 five.
GROUPS = (((1, 2), (3,)), ((4,), (5, 6)), ((7,), (8,)), ((9,), (10,)), ((11,), (12,)))
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.Pow: operator.pow, ast.USub: operator.neg}
_FUNCTIONS = {"ceil": math.ceil, "floor": math.floor, "log2": math.log2, "min": min, "max": max}


def lessons_of(group: tuple[tuple[int, ...], ...]) -> list[int]:
    """The lessons a grade cell's group of slots draws from, in order."""
    return [lesson for slot in group for lesson in slot]


def computed(question: dict) -> bool:
    """True for a numeric question: its choices are formulas of its parameters."""
    return "parameters" in question


def load_bank(path: str | Path = "question_bank.json") -> dict:
    """The question bank at path (JSON), checked: every question has an id, a lesson, text and 4 different
    choices."""
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
        choices = q.get("choices")
        if (not isinstance(choices, list) or len(choices) != len(LETTERS)
                or not all(isinstance(c, str) for c in choices)):
            raise ValueError(f"path: question {q['id']} needs a list of {len(LETTERS)} choices (strings)")
        if len(set(choices)) != len(choices):
            raise ValueError(f"path: question {q['id']} needs {len(LETTERS)} different choices")
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


def _setting(question: dict, student_id: str) -> tuple[dict, list[int]]:
    """student_id's parameters of the question and the order of its choices (bank positions, as shown)."""
    rng = _rng(student_id, question["id"])
    parameters = {name: rng.choice(values) for name, values in question.get("parameters", {}).items()}
    order = list(range(len(LETTERS)))
    rng.shuffle(order)
    return parameters, order


def pose(question: dict, student_id: str) -> dict:
    """One question as student_id sees it: its parameters filled in and its choices in their order.

    Returns {"id", "lesson", "topic", "text", "parameters", "choices": 4 strings}.
    """
    parameters, order = _setting(question, student_id)
    if computed(question):
        unit = question.get("unit", "")
        texts = [f"{shown(evaluate(f, parameters))} {unit}".strip() for f in question["choices"]]
    else:
        texts = question["choices"]
    return {"id": question["id"], "lesson": question["lesson"], "topic": question.get("topic", ""),
            "text": question["text"].format(**parameters), "parameters": parameters,
            "choices": [texts[i] for i in order]}


def _picked(bank: dict, student_id: str) -> list[dict]:
    """The bank's questions student_id draws: one per slot of GROUPS, from the questions of its lessons."""
    rng = _rng(student_id, "questions")
    picked = []
    for group in GROUPS:
        for slot in group:
            pool = sorted((q for q in bank["questions"] if q["lesson"] in slot), key=lambda q: q["id"])
            picked.append(rng.choice(pool))
    return picked


def draw(bank: dict, student_id: str) -> list[dict]:
    """The questions student_id answers, posed for them: one per slot of GROUPS, in order."""
    return [pose(q, student_id) for q in _picked(bank, student_id)]


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
    """The instructor's file: for each question id, the bank letter of its right choice ("right") and the
    misconception behind each other choice ("misconceptions": bank letter -> what a student who picks it
    believes)."""

    def __init__(self, path: str | Path):
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"path must be the answer key's JSON file; {path} does not exist")
        entries = json.loads(path.read_text())
        self.right = {qid: entry["right"] for qid, entry in entries.items()}
        self.misconceptions = {qid: entry["misconceptions"] for qid, entry in entries.items()}

    def letters(self, bank: dict, student_id: str) -> dict[str, str]:
        """{question id: the letter under which student_id's quiz shows its right choice}, in draw order."""
        right = {}
        for question in _picked(bank, student_id):
            _, order = _setting(question, student_id)
            right[question["id"]] = LETTERS[order.index(LETTERS.index(self.right[question["id"]]))]
        return right


def answers_to(bank: dict, student_id: str, lessons: list[int], answers) -> dict:
    """{question id: letter} for the questions student_id draws on these lessons, taken from answers.

    answers: the student's dict (question id -> letter; a missing answer is None), or an AnswerKey (the
    right letters).
    """
    if not isinstance(lessons, list | tuple) or not all(type(n) is int for n in lessons):
        raise ValueError(f"lessons must be a list of lesson numbers; got {lessons!r}")
    picked = [q for q in _picked(bank, student_id) if q["lesson"] in lessons]
    if isinstance(answers, AnswerKey):
        right = answers.letters(bank, student_id)
        return {q["id"]: right[q["id"]] for q in picked}
    if not isinstance(answers, dict):
        raise ValueError(f"answers must be a dict: question id -> letter; got {type(answers).__name__}")
    return {q["id"]: letter(answers.get(q["id"])) for q in picked}


def assert_answered(given: dict) -> None:
    """AssertionError naming each question whose answer is not one of the letters a-d (the format only)."""
    unanswered = [qid for qid, chosen in given.items() if chosen not in LETTERS]
    assert not unanswered, (f"answer {', '.join(unanswered)} in `answers`, each with one letter a, b, c or d "
                            f"(a string), e.g. answers = {{{unanswered[0]!r}: 'b', ...}}")
