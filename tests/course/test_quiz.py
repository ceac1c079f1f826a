"""course.quiz and the quiz's bank: every lesson covered, a key for every question, a draw per student, and
no way to score above chance without knowing the answers."""

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
SLOTS = [slot for group in quiz.GROUPS for slot in group]
computed = quiz.computed


def every_setting(question):
    names = list(question.get("parameters", {}))
    for values in itertools.product(*(question["parameters"][n] for n in names)):
        yield dict(zip(names, values, strict=True))


def pool(slot):
    return [q for q in BANK["questions"] if q["lesson"] in slot]


def test_the_bank_covers_every_lesson_and_a_draw_gives_lessons_8_to_11_four_questions_of_ten():
    questions = BANK["questions"]
    assert len(questions) >= 40
    lessons = {q["lesson"] for q in questions}
    assert lessons == set(range(1, 13)) and set(BANK["lessons"]) == {str(n) for n in lessons}
    assert sorted(lesson for slot in SLOTS for lesson in slot) == list(range(1, 13))
    assert len(SLOTS) == 10 and sum(set(slot) <= {8, 9, 10, 11} for slot in SLOTS) >= 4
    for slot in SLOTS:  # enough questions that students draw different ones
        assert len(pool(slot)) >= 4, slot
    assert sum(computed(q) for q in questions) >= 12, "numeric questions with each student's own numbers"


def test_every_question_is_well_formed_and_names_every_parameter_it_uses():
    for q in BANK["questions"]:
        assert q["topic"] and q["text"].strip() and len(q["choices"]) == 4, q["id"]
        used = {name for _, name, _, _ in string.Formatter().parse(q["text"]) if name}
        assert used == set(q.get("parameters", {})), q["id"]
        assert all(values and len(set(values)) == len(values) for values in q.get("parameters", {}).values())


def test_every_question_has_a_right_choice_and_a_named_misconception_for_each_other_one():
    assert set(KEY.right) == set(KEY.misconceptions) == {q["id"] for q in BANK["questions"]}
    for q in BANK["questions"]:
        named = KEY.misconceptions[q["id"]]
        assert set(named) == set(quiz.LETTERS) - {KEY.right[q["id"]]}, q["id"]
        assert len(set(named.values())) == 3 and all(len(m) >= 10 for m in named.values()), q["id"]


def test_the_right_choice_sits_at_each_place_of_the_bank_equally_often_in_every_slots_pool():
    # what a place-reading guess ("the first formula", "the bank's third choice") gets is then chance exactly:
    # each student's slot draws uniformly from the pool
    for slot in SLOTS:
        places = [KEY.right[q["id"]] for q in pool(slot)]
        assert all(places.count(x) == len(places) // 4 for x in quiz.LETTERS), (slot, places)
    formulas = [KEY.right[q["id"]] for q in BANK["questions"] if computed(q)]
    assert max(map(formulas.count, quiz.LETTERS)) - min(map(formulas.count, quiz.LETTERS)) <= 1


def test_in_every_slots_pool_the_first_formula_or_longest_choice_is_right_for_a_quarter_exactly():
    # the length-and-place guess of the quiz_guess sample, read off the bank: chance per slot, exactly
    for slot in SLOTS:
        hits = 0
        for q in pool(slot):
            if computed(q):
                hits += KEY.right[q["id"]] == "a"
            else:
                lengths = [len(c) for c in q["choices"]]
                assert lengths.count(max(lengths)) == 1, (q["id"], "one longest choice, no tie")
                hits += quiz.LETTERS[lengths.index(max(lengths))] == KEY.right[q["id"]]
        assert hits * 4 == len(pool(slot)), (slot, hits)


def test_choices_are_alike_in_length_and_the_right_one_is_the_longest_no_more_than_by_chance():
    fixed = [q for q in BANK["questions"] if not computed(q)]
    for q in fixed:
        lengths = [len(c) for c in q["choices"]]
        assert max(lengths) <= 1.4 * min(lengths), (q["id"], q["choices"])
    longest_right = sum(max(quiz.LETTERS, key=lambda x: len(q["choices"][quiz.LETTERS.index(x)]))
                        == KEY.right[q["id"]] for q in fixed)
    assert abs(longest_right / len(fixed) - 0.25) <= 0.05, longest_right


def test_no_answer_reaches_students():
    forbidden = {"answer", "answers", "right", "correct", "solution", "key", "misconceptions", "origins"}
    assert not any(forbidden & set(q) for q in BANK["questions"]), "the bank names no right choice"
    assert all(isinstance(q["choices"], list) for q in BANK["questions"]), "no choice has a name"
    bank_text = BANK_PATH.read_text()
    assert not any(m in bank_text for named in KEY.misconceptions.values() for m in named.values())
    posed = quiz.draw(BANK, "ada")[0]  # what a student's notebook can call: no origin of a shown choice
    assert set(posed) == {"id", "lesson", "topic", "text", "parameters", "choices"}
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
            shown = {quiz.shown(quiz.evaluate(f, setting)) for f in q["choices"]}
            assert len(shown) == 4, (q["id"], setting, shown)
    for student in IDS:
        for posed in quiz.draw(BANK, student):
            assert len(set(posed["choices"])) == 4, (student, posed["id"])


def test_the_key_picks_the_right_choice_as_each_student_sees_it():
    for student in IDS[:50]:
        letters = KEY.letters(BANK, student)
        for posed in quiz.draw(BANK, student):
            q = next(b for b in BANK["questions"] if b["id"] == posed["id"])
            chosen = posed["choices"][quiz.LETTERS.index(letters[q["id"]])]
            right = q["choices"][quiz.LETTERS.index(KEY.right[q["id"]])]
            if computed(q):
                right = f"{quiz.shown(quiz.evaluate(right, posed['parameters']))} {q['unit']}".strip()
            assert chosen == right


def test_a_draw_covers_every_lesson_and_belongs_to_its_student():
    ada = quiz.draw(BANK, "ada")
    assert ada == quiz.draw(BANK, "ada") == quiz.draw(BANK, " ada ")
    assert all(q["lesson"] in slot for q, slot in zip(ada, SLOTS, strict=True))
    assert len({q["id"] for q in ada}) == 10
    sets = {tuple(q["id"] for q in quiz.draw(BANK, s)) for s in IDS}
    assert len(sets) > 150, "students draw different questions"
    assert quiz.draw(BANK, "grace") != ada
    letters = {tuple(KEY.letters(BANK, s).values()) for s in IDS}
    assert len(letters) > 150, "copying a classmate's letters does not answer your own quiz"


def test_numeric_questions_give_students_their_own_numbers():
    for q in filter(computed, BANK["questions"]):
        texts = {quiz.pose(q, s)["text"] for s in IDS[:40]}
        assert len(texts) > 1, q["id"]


def test_answers_to_reads_the_students_letters_or_the_key():
    picked = [q for q in quiz.draw(BANK, "ada") if q["lesson"] in (1, 2, 3)]
    first, second = (q["id"] for q in picked)
    assert quiz.answers_to(BANK, "ada", [1, 2, 3], {first: " C ", "other": "a"}) == {first: "c", second: None}
    right = KEY.letters(BANK, "ada")
    assert quiz.answers_to(BANK, "ada", [1, 2, 3], KEY) == {q["id"]: right[q["id"]] for q in picked}
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
    cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"]
    lessons = [json.loads(re.search(r"lessons=(\[[\d, ]+\])\)", c.source)[1]) for c in cells]
    assert lessons == [quiz.lessons_of(group) for group in quiz.GROUPS]
    points = [c.metadata["nbgrader"]["points"] for c in cells]
    assert points == [len(group) for group in quiz.GROUPS]


def points(answers: dict, right: dict) -> int:
    """The quiz's score: each grade cell's points (one per question) when all its answers are right."""
    order = list(right)
    score, start = 0, 0
    for group in quiz.GROUPS:
        ids = order[start:start + len(group)]
        start += len(group)
        score += len(group) * all(answers.get(q) == right[q] for q in ids)
    return score


@pytest.mark.parametrize("strategy", list(samples.GUESSES))
def test_guessing_by_place_length_or_formula_order_scores_chance(strategy):
    # chance: each answer right with probability 1/4, so a cell of two with 1/16 and 10/16 = 0.625 points;
    # the bank's guessers scored 8.0 of 10 on average before its choices were balanced
    hits = scores = 0
    n = 2000
    high = 0
    for i in range(n):
        student = f"s{i:05d}"
        right = KEY.letters(BANK, student)
        guess = samples.quiz_guess(student, strategy)
        hits += sum(guess[q] == right[q] for q in right)
        score = points(guess, right)
        scores += score
        high += score >= 6
    assert abs(hits / (10 * n) - 0.25) < 0.03, hits / (10 * n)
    assert scores / n < 1.0 and high / n < 0.01, (scores / n, high / n)
