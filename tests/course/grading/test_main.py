"""`python -m hwopt.course.grading`: the instructor's commands, their options and defaults."""

import re
from types import SimpleNamespace

from hwopt.course.grading import __main__ as cli
from hwopt.course.grading import course, demo, settings


def test_every_command_is_there_with_its_options():
    parser = cli.parser()
    grade = parser.parse_args(["grade", "--workers", "2", "--db-url", "postgresql://g@h/db", "--no-force",
                               "--scheduler", "tcp://h:8786", "--timeout", "30"])
    assert (grade.run, grade.course, grade.workers, grade.no_force, grade.timeout) == (
        cli._grade, course.ROOT, 2, True, 30)
    demo_args = parser.parse_args(["demo", "--students", "40"])
    assert (demo_args.run, demo_args.course, demo_args.students) == (cli._demo, demo.DEMO_COURSE, 40)
    assert parser.parse_args(["secret"]).run is cli._secret
    assert parser.parse_args(["sandbox"]).run is cli._sandbox
    assert parser.parse_args(["settings", "--readme"]).readme


def test_settings_prints_every_variable_with_its_default(capsys):
    assert cli.main(["settings"]) == 0
    printed = capsys.readouterr().out
    assert printed.strip() == settings.markdown_table()
    assert all(s.name in printed for s in settings.SETTINGS)


def test_make_grade_demo_runs_the_demo():
    makefile = (course.ROOT / "Makefile").read_text()
    recipe = re.search(r"^grade-demo:[^\n]*\n\t([^\n]*)", makefile, re.M)[1]
    assert recipe.startswith("$(PY) -m hwopt.course.grading demo")


def test_the_demo_names_every_sample_graded_otherwise_than_expected():
    row = SimpleNamespace
    rows = [row(student="s1", assignment="batching", score=9.0, status="ok"),
            row(student="s2", assignment="batching", score=9.0, status="ok"),
            row(student="s3", assignment="quiz", score=0.0, status="invalid notebook"),
            row(student="s4", assignment="quiz", score=10.0, status="ok")]
    students = {"s1": "correct", "s2": "wrong", "s3": "invalid_json", "s4": "raises"}  # s4: not its target
    assert demo.unexpected(rows, students) == ["s2 (wrong) batching: got 9 (ok), expected 7 (ok)"]


def test_the_demo_checks_a_chance_score_only_under_the_samples_own_name():
    row = SimpleNamespace
    rows = [row(student="s5", assignment="quiz", score=2.0, status="ok"),
            row(student="quiz_guess", assignment="quiz", score=2.0, status="ok")]
    students = {"s5": "quiz_guess", "quiz_guess": "quiz_guess"}  # s5 draws another quiz: its score is chance
    assert demo.unexpected(rows, students) == ["quiz_guess (quiz_guess) quiz: got 2 (ok), expected 0 (ok)"]
