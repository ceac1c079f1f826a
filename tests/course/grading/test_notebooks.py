"""course.grading.notebooks: hidden regions of grade cells, LMS/Colab notebook names."""

import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

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


def test_written_answers_are_the_markdown_grade_cells_each_with_its_question():
    def nbgrader(**meta):
        return {"nbgrader": {"grade": False, "solution": False, "locked": True, **meta}}

    nb = new_notebook(cells=[
        new_markdown_cell("Why did the prediction miss?", metadata=nbgrader(grade_id="question")),
        new_markdown_cell("**Model answer.** ...", metadata=nbgrader(grade_id="answer", grade=True,
                                                                      solution=True, locked=False, points=3)),
        new_code_cell("assert True", metadata=nbgrader(grade_id="test", grade=True, points=1)),
    ])
    assert notebooks.written_answers(nb) == [{"grade_id": "answer", "points": 3.0,
                                              "question": "Why did the prediction miss?",
                                              "answer": "**Model answer.** ..."}]
