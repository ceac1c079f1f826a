"""course.grading.judge and .collect: cases per student, plain values only, a verdict that fails closed."""

import json
import math
import os
import stat

import numpy as np
import pytest

from hwopt.course.grading import collect, judge, settings

WHO = {"assignment": "a", "notebook": "a", "grade_id": "test_f"}


def test_the_secret_comes_from_the_environment_or_its_file(tmp_path):
    assert judge.load_secret({settings.SECRET.name: "s3"}) == b"s3"
    path = judge.create_secret(tmp_path / "dir" / "secret")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert judge.load_secret({settings.SECRET_FILE.name: str(path)}) == path.read_text().strip().encode()
    with pytest.raises(FileExistsError, match="keep it"):
        judge.create_secret(path)


def test_no_secret_stops_grading_and_says_how_to_make_one(tmp_path):
    with pytest.raises(judge.MissingSecret, match="python -m hwopt.course.grading secret"):
        judge.load_secret({settings.SECRET_FILE.name: str(tmp_path / "none")})


def test_cases_are_the_same_for_the_same_secret_and_student_and_differ_otherwise():
    check = judge.Check("f(x)", lambda rng: [judge.case("x", x=rng.random()) for _ in range(3)])

    def cases(secret, student):
        return [c.variables for c in judge.draw(check, judge.case_rng(secret, student=student, **WHO))]

    assert cases(b"k", "ada") == cases(b"k", "ada")
    assert cases(b"k", "ada") != cases(b"k", "grace")
    assert cases(b"k", "ada") != cases(b"other", "ada")


def test_the_rng_carries_the_student_id_and_the_instructors_notebook_a_fixed_one():
    check = judge.Check("f(student_id)", lambda rng: [judge.case("yours", student_id=rng.student)])
    drawn = judge.draw(check, judge.case_rng(b"k", student="grace", **WHO))
    assert [c.variables for c in drawn] == [{"student_id": "grace"}]
    seen = []

    def f(student_id):
        seen.append(student_id)
        return student_id

    exec('from hwopt.course.grading.judge import case, check\n'  # noqa: S102 (the notebook's own run)
         'check("f(student_id)", lambda rng: [case("yours", student_id=rng.student)])', {"f": f})
    assert seen == [judge.INSTRUCTOR]


def test_cases_must_be_plain_data():
    with pytest.raises(ValueError, match="plain"):
        judge.draw(judge.Check("f(x)", [judge.case("x", x=np.float64(1.0))]), None)
    assert judge.draw(judge.Check("q1_answer"), None)[0].variables == {}  # an answer variable: one case
    (one,) = judge.draw(judge.Check("f(x)", [judge.case("t", x=(1, 2))]), None)
    assert one.variables == {"x": [1, 2]}  # what the student's kernel receives (JSON)


@pytest.mark.parametrize("value, plain", [
    (1, True), (1.5, True), ("a", True), (None, True), (True, True), ([1, {"a": [2.0]}], True),
    (np.float64(1), False), ({1: 2}, False), (type("F", (float,), {})(1.0), False), (object(), False)])
def test_is_plain_accepts_exact_json_types_only(value, plain):
    assert judge.is_plain(value) is plain


def test_same_value_compares_numbers_with_tolerance_and_structure_exactly():
    assert judge.same_value([16, 640.0], [16.0, 640.0000001])
    assert not judge.same_value([16, 640.0], [16, 641.0])
    assert not judge.same_value(1, True) and not judge.same_value(None, 0.0) and not judge.same_value("1", 1)
    assert judge.same_value(math.nan, math.nan) and not judge.same_value(math.nan, 1.0)
    assert not judge.same_value([1, 2], [1, 2, 3]) and not judge.same_value({"a": 1}, {"b": 1})


def test_collect_outcome_turns_values_into_json_and_errors_into_names():
    ns = {"np": np, "f": lambda x: (x, np.float32(0.5)), "g": lambda x: 1 / x, "h": lambda x: object()}
    assert collect.outcome("f(x)", {"x": 2}, ns) == {"value": [2, 0.5]}
    assert collect.outcome("g(x)", {"x": 0}, ns)["raised"][:2] == ["ZeroDivisionError", "ArithmeticError"]
    assert collect.outcome("h(x)", {"x": 0}, ns) == {"unplain": "object"}
    assert collect.outcome("missing(x)", {"x": 0}, ns)["raised"][0] == "NameError"


def test_an_object_equal_to_everything_is_not_a_value():
    class Anything:
        __eq__ = lambda self, other: True  # noqa: E731

    got = collect.outcome("f()", {}, {"f": Anything})
    expected = {"value": 14.0}
    why = judge.judge_case(judge.Check("f()"), judge.case("x"), expected, got)
    assert why == "returned an object that is not a plain value (a number, string, list...)"


@pytest.mark.parametrize("got, why", [
    ({"value": 14.0}, None),
    ({"value": 15.0}, "wrong value"),
    ({"value": None}, "returned None, expected a number"),
    ({"raised": ["TypeError", "Exception"], "message": "boom 3.14159"}, "raised TypeError"),  # never its text
    ({"raised": ["Leak_3_14159", "ValueError"], "message": "x"}, "raised ValueError"),  # built-in names only
    ({"raised": ["Leak_3_14159", "object"], "message": "x"}, "raised an exception"),
    ({"value": 14.0, "extra": 1}, "no usable result came back"),
    ("14.0", "no usable result came back"),
    ({"raised": "ValueError", "message": "x"}, "no usable result came back"),
])
def test_judge_case_says_why_a_value_is_wrong(got, why):
    assert judge.judge_case(judge.Check("f()"), judge.case("x"), {"value": 14.0}, got) == why


def test_an_expected_error_must_be_the_same_kind_and_name_the_argument():
    expected = {"raised": ["ValueError", "Exception"], "message": "precision must be one of ..."}
    one = judge.case("an unknown precision", must_name="precision")
    check = judge.Check("f()")
    named = {"raised": ["ValueError"], "message": "bad precision"}
    assert judge.judge_case(check, one, expected, named) is None
    assert "should name precision" in judge.judge_case(check, one, expected, {"raised": ["ValueError"],
                                                                               "message": "bad"})
    assert "expected ValueError" in judge.judge_case(check, one, expected, {"raised": ["KeyError"],
                                                                             "message": "x"})
    assert "expected ValueError" in judge.judge_case(check, one, expected, {"value": 1.0})


def test_normalise_makes_multiple_choice_letters_match():
    check = judge.Check("q1_answer", normalise=judge.letter)
    assert judge.judge_case(check, judge.case("q"), {"value": "c"}, {"value": " C "}) is None
    assert judge.judge_case(check, judge.case("q"), {"value": "c"}, {"value": "b"}) == "wrong value"


def _within_twice_the_reference(expected, got, variables):
    """An accept function: the student's error, computed here from their values, at most twice the
    reference's on the case's points."""
    error = sum((g - x) ** 2 for g, x in zip(got, variables["x"], strict=True))
    reference = sum((e - x) ** 2 for e, x in zip(expected, variables["x"], strict=True))
    return None if error <= 2 * reference else "the error is more than twice the reference's"


@pytest.mark.parametrize("got, why", [
    ([1.0, 2.1], None),  # not the reference's values, but as good
    ([1.0, 2.0], None),  # better than the reference
    ([1.0, 2.5], "the error is more than twice the reference's"),
    ([1.0], "returned a value that could not be judged (wrong shape or kind of numbers)"),  # accept raised
    (["1", 2.0], "returned a value that could not be judged (wrong shape or kind of numbers)"),
    (3.0, "returned a number, expected a list (or tuple)"),  # kinds are compared before accept runs
])
def test_accept_decides_a_value_in_the_grading_process_from_the_case(got, why):
    check = judge.Check("fit(x)", accept=_within_twice_the_reference)
    one = judge.case("a fit", x=[1.0, 2.0])
    assert judge.judge_case(check, one, {"value": [1.1, 2.0]}, {"value": got}) == why


@pytest.mark.parametrize("verdict, why", [(None, None), ("", "wrong value"), (0, "wrong value"),
                                          ("too far off", "too far off")])
def test_accept_says_why_or_wrong_value(verdict, why):
    check = judge.Check("f()", accept=lambda expected, got, variables: verdict)
    assert judge.judge_case(check, judge.case("q"), {"value": 1}, {"value": 2}) == why


def test_an_accept_failure_never_shows_its_message():
    def leaky(expected, got, variables):
        raise ValueError(f"hidden {variables['secret']}")
    check = judge.Check("f()", accept=leaky)
    why = judge.judge_case(check, judge.case("q", secret=3.14159), {"value": 1}, {"value": 1})
    assert why and "3.14159" not in why


def test_parse_report_takes_exactly_one_marked_line_with_one_outcome_per_case():
    mark = "m:"
    good = "student print\n" + mark + json.dumps([{"value": 1}, {"value": 2}])
    assert judge.parse_report(good, mark, 2) == [{"value": 1}, {"value": 2}]
    assert "no result" in judge.parse_report("nothing", mark, 2)
    assert "more than one" in judge.parse_report(good + "\n" + good, mark, 2)
    assert "not valid JSON" in judge.parse_report(mark + "[{", mark, 2)
    assert "one outcome per case" in judge.parse_report(mark + "[]", mark, 2)
    assert "too large" in judge.parse_report(mark + "[" + " " * judge.MAX_REPORT_CHARS + "]", mark, 1)


def test_collect_report_prints_the_marked_line_the_judge_parses(capsys):
    collect.report("f(x)", json.dumps([{"x": 1}, {"x": 2}]), {"f": lambda x: x * 10}, "m:")
    assert judge.parse_report(capsys.readouterr().out, "m:", 2) == [{"value": 10}, {"value": 20}]


def test_verdict_is_all_or_nothing_and_names_what_failed_without_values():
    assert judge.verdict(2.0, [], 5).points == 2.0
    wrong = judge.verdict(2.0, [("a latency exactly on the budget", "wrong value")], 5)
    assert wrong.points == 0.0 and "4 right, 1 wrong" in wrong.text()
    assert "a latency exactly on the budget: wrong value" in wrong.text()
    assert judge.verdict(1.0, [], 3, "no result came back").points == 0.0


@pytest.mark.parametrize("options, named", [
    ({"call": ""}, "call"), ({"call": 3}, "call"), ({"call": "f()", "rel_tol": -1}, "rel_tol"),
    ({"call": "f()", "abs_tol": math.nan}, "abs_tol"), ({"call": "f()", "rel_tol": math.inf}, "rel_tol"),
    ({"call": "f()", "rel_tol": "0.1"}, "rel_tol"), ({"call": "f()", "cases": 3}, "cases"),
    ({"call": "f()", "accept": 2.0}, "accept")])
def test_a_bad_check_names_its_argument(options, named):
    with pytest.raises(ValueError, match=named):
        judge.Check(**options)


@pytest.mark.parametrize("about, must_name, named", [("", (), "about"), (None, (), "about"),
                                                     ("x", (3,), "must_name")])
def test_a_bad_case_names_its_argument(about, must_name, named):
    with pytest.raises(ValueError, match=named):
        judge.case(about, must_name=must_name)
