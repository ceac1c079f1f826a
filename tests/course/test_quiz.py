"""course.quiz and the quiz's bank: every lesson covered, a key for every question, a draw per student."""

import itertools
import json
import re
import string

import pytest

from hwopt.course import quiz
from hwopt.course.grading import judge, samples
from hwopt.course.grading.course import ROOT, load_notebook
from hwopt.course.grading.reference import Reference

BANK_PATH = ROOT / "source" / "quiz" / "question_bank.json"
KEY_PATH = ROOT / samples.QUIZ_KEY
BANK = quiz.load_bank(BANK_PATH)
KEY = quiz.AnswerKey(KEY_PATH)
IDS = [f"student{i:03d}" for i in range(200)]


def computed(question) -> bool:
    return isinstance(question["choices"], dict)


def every_setting(question):
    names = list(question.get("parameters", {}))
    for values in itertools.product(*(question["parameters"][n] for n in names)):
        yield dict(zip(names, values, strict=True))


def test_the_bank_has_30_questions_over_every_lesson_and_llm_inference():
    questions = BANK["questions"]
    assert len(questions) >= 30
    lessons = {q["lesson"] for q in questions}
    assert lessons == {1, 2, 3, 4, 5, 6, 7, 8} and set(BANK["lessons"]) == {str(n) for n in lessons}
    assert "LLM" in BANK["lessons"]["8"]
    for lessons_of_cell, count in quiz.GROUPS:
        for lesson in lessons_of_cell:  # enough questions that students draw different ones
            assert sum(q["lesson"] == lesson for q in questions) > count, lesson
    assert sum(computed(q) for q in questions) >= 10, "numeric questions with each student's own numbers"


def test_every_question_is_well_formed_and_names_every_parameter_it_uses():
    for q in BANK["questions"]:
        assert q["topic"] and q["text"].strip() and len(q["choices"]) == 4, q["id"]
        used = {name for _, name, _, _ in string.Formatter().parse(q["text"]) if name}
        assert used == set(q.get("parameters", {})), q["id"]
        assert all(values and len(set(values)) == len(values) for values in q.get("parameters", {}).values())


def test_every_question_has_an_answer_in_the_key_and_the_key_nothing_else():
    assert set(KEY.right) == {q["id"] for q in BANK["questions"]}
    for q in BANK["questions"]:
        allowed = set(q["choices"]) if computed(q) else set(quiz.LETTERS)
        assert KEY.right[q["id"]] in allowed, q["id"]
    answers = [KEY.right[q["id"]] for q in BANK["questions"] if not computed(q)]
    assert len(set(answers)) == 4, "the right choice of fixed questions is not always the same letter"


def test_no_answer_reaches_students():
    forbidden = {"answer", "answers", "right", "correct", "solution", "key"}
    assert not any(forbidden & set(q) for q in BANK["questions"]), "the bank names no right choice"
    assert not (ROOT / "source" / "quiz" / KEY_PATH.name).exists()
    released = sorted(p.name for p in (ROOT / "release" / "quiz").iterdir())
    assert released == ["question_bank.json", "quiz.ipynb"]
    assert (ROOT / "release" / "quiz" / "question_bank.json").read_text() == BANK_PATH.read_text()
    notebook = (ROOT / "release" / "quiz" / "quiz.ipynb").read_text()
    assert KEY_PATH.name not in notebook and "AnswerKey" not in notebook
    assert json.dumps(KEY.right) not in BANK_PATH.read_text()


def test_numeric_choices_are_distinct_for_every_setting_and_every_draw():
    for q in filter(computed, BANK["questions"]):
        for setting in every_setting(q):
            shown = {quiz.shown(quiz.evaluate(f, setting)) for f in q["choices"].values()}
            assert len(shown) == 4, (q["id"], setting, shown)
    for student in IDS:
        for posed in quiz.draw(BANK, student):
            assert len(set(posed["choices"])) == 4, (student, posed["id"])


def test_the_key_picks_the_right_choice_as_each_student_sees_it():
    for student in IDS[:50]:
        for posed in quiz.draw(BANK, student):
            q = next(b for b in BANK["questions"] if b["id"] == posed["id"])
            chosen = posed["choices"][quiz.LETTERS.index(KEY.letter(posed))]
            if computed(q):
                right = quiz.evaluate(q["choices"][KEY.right[q["id"]]], posed["parameters"])
                assert chosen == f"{quiz.shown(right)} {q['unit']}".strip()
            else:
                assert chosen == q["choices"][quiz.LETTERS.index(KEY.right[q["id"]])]


def test_a_draw_covers_every_lesson_and_belongs_to_its_student():
    ada = quiz.draw(BANK, "ada")
    assert ada == quiz.draw(BANK, "ada") == quiz.draw(BANK, " ada ")
    assert [q["lesson"] for q in ada] == [1, 2, 3, 4, 5, 6, 7, 7, 8, 8]
    assert len({q["id"] for q in ada}) == 10
    sets = {tuple(q["id"] for q in quiz.draw(BANK, s)) for s in IDS}
    assert len(sets) > 150, "students draw different questions"
    assert quiz.draw(BANK, "grace") != ada
    letters = {tuple(KEY.letter(q) for q in quiz.draw(BANK, s)) for s in IDS}
    assert len(letters) > 150, "copying a classmate's letters does not answer your own quiz"


def test_numeric_questions_give_students_their_own_numbers():
    for q in filter(computed, BANK["questions"]):
        texts = {quiz.pose(q, s)["text"] for s in IDS[:40]}
        assert len(texts) > 1, q["id"]


def test_answers_to_reads_the_students_letters_or_the_key():
    picked = [q for q in quiz.draw(BANK, "ada") if q["lesson"] in (1, 2)]
    first, second = (q["id"] for q in picked)
    assert quiz.answers_to(BANK, "ada", [1, 2], {first: " C ", "other": "a"}) == {first: "c", second: None}
    assert quiz.answers_to(BANK, "ada", [1, 2], KEY) == {q["id"]: KEY.letter(q) for q in picked}
    with pytest.raises(ValueError, match="lessons"):
        quiz.answers_to(BANK, "ada", 1, {})
    with pytest.raises(ValueError, match="answers"):
        quiz.answers_to(BANK, "ada", [1], ["a"])
    with pytest.raises(ValueError, match="student_id"):
        quiz.draw(BANK, "  ")


def test_assert_answered_names_the_questions_left_to_answer():
    quiz.assert_answered({"x": "a", "y": "d"})
    with pytest.raises(AssertionError, match="y"):
        quiz.assert_answered({"x": "a", "y": None})


def test_formulas_are_arithmetic_only_and_choices_print_three_digits():
    assert quiz.evaluate("floor((b - o) / p) + 1", {"b": 50, "o": 10, "p": 2}) == 21
    for bad in ("__import__('os').system('true')", "x.real", "open('f')", "[1]"):
        with pytest.raises(ValueError, match="formula"):
            quiz.evaluate(bad, {"x": 1})
    assert [quiz.shown(v) for v in (71.428, 1536, 0.01234, 5.0, 12345)] == ["71.4", "1,540", "0.0123", "5",
                                                                              "12,300"]
    with pytest.raises(ValueError, match="path"):
        quiz.load_bank(ROOT / "missing.json")


def test_the_reference_grades_the_draw_of_the_id_it_grades_and_the_samples_answer_it():
    ref = Reference.load(ROOT / "source" / "quiz" / "quiz.ipynb")
    solution = samples.quiz_solution("grace")
    assert solution["student_id"] == "STUDENT_ID = 'grace'"
    typed = eval(solution["answers"].removeprefix("answers = "))  # noqa: S307 (our own sample's dict)
    for gid, (check,) in ref.checks.items():
        cases = judge.draw(check, judge.case_rng(b"k", assignment="quiz", notebook="quiz", grade_id=gid,
                                                 student="grace"))
        assert [c.variables["student_id"] for c in cases] == ["grace"]
        (expected,) = ref.expected(check, cases)
        assert expected["value"] and all(typed[q] == letter for q, letter in expected["value"].items())


def test_the_grade_cells_are_the_groups_of_the_draw_one_point_per_question():
    nb = load_notebook("source", "quiz")
    cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    lessons = [json.loads(re.search(r"lessons=(\[[\d, ]+\])\)", c.source)[1]) for c in cells]
    assert lessons == [list(group) for group, _ in quiz.GROUPS]
    points = [c.metadata["nbgrader"]["points"] for c in cells]
    assert points == [len(group) * count for group, count in quiz.GROUPS]
