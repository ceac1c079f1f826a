"""course.grading.notebooks: hidden regions of grade cells, LMS/Colab notebook names."""

import pytest

from hwopt.course.grading import notebooks


def test_strip_hidden_tests_removes_the_region_and_delimiters():
    source = "a = 1\n### BEGIN HIDDEN TESTS\ncheck('f(x)')\n### END HIDDEN TESTS\nb = 2"
    assert notebooks.strip_hidden_tests(source) == "a = 1\nb = 2"


def test_hidden_region_is_what_strip_leaves_out():
    source = "a = 1\n### BEGIN HIDDEN TESTS\ncheck('f(x)')\nx = 2\n### END HIDDEN TESTS\nb = 2"
    assert notebooks.hidden_region(source) == "check('f(x)')\nx = 2"
    assert notebooks.hidden_region("a = 1") == ""


@pytest.mark.parametrize("filename, expected", [
    ("quiz.ipynb", "quiz"),
    ("Copy of quiz.ipynb", "quiz"),
    ("Copy of latency_budget (1).ipynb", "latency_budget"),
    ("latency_budget-2.ipynb", "latency_budget"),
    ("copy_of_latency_budget.ipynb", "latency_budget"),
    ("12345_latency_budget.ipynb", "latency_budget"),
    ("notes.ipynb", None),
])
def test_normalise_notebook_name_maps_lms_and_colab_names(filename, expected):
    assert notebooks.normalise_notebook_name(filename, ["latency_budget.ipynb", "quiz.ipynb"]) == expected
