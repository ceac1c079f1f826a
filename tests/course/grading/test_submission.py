"""course.grading.submission: a submitted notebook checked before grading, its feedback after."""

import nbformat

from hwopt.course.grading import course, samples, submission


def test_a_missing_or_broken_notebook_is_named_before_grading(tmp_path):
    assert submission.check_notebook(tmp_path / "none.ipynb") == "missing notebook"
    (tmp_path / "cut.ipynb").write_bytes(b'{"cells": [')
    assert submission.check_notebook(tmp_path / "cut.ipynb").startswith("invalid notebook (")
    (tmp_path / "text.ipynb").write_text('{"not": "a notebook"}')
    assert submission.check_notebook(tmp_path / "text.ipynb").startswith("invalid notebook (")
    nbformat.write(samples.solved("batching"), tmp_path / "good.ipynb")
    assert submission.check_notebook(tmp_path / "good.ipynb") is None


def test_edited_and_deleted_locked_cells_are_noted(tmp_path):
    released = tmp_path / "released.ipynb"
    nbformat.write(course.load_notebook("release", "latency_budget"), released)
    submitted = tmp_path / "submitted.ipynb"
    nbformat.write(samples.submission("edited_tests", "latency_budget"), submitted)
    assert submission.tampering(submitted, released) == [
        "edited locked cells restored: test_on_budget", "deleted locked cells restored: test_non_monotonic"]
    nbformat.write(samples.submission("correct", "latency_budget"), submitted)
    assert submission.tampering(submitted, released) == []


def test_a_feedback_page_showing_a_hidden_line_is_caught():
    hidden = submission.hidden_lines("latency_budget")
    assert hidden and all(len(line) >= submission.MIN_HIDDEN_LINE_CHARS for line in hidden)
    visible = course.load_notebook("release", "latency_budget")
    assert not any(line in cell.source for cell in visible.cells for line in hidden)
    line = sorted(hidden)[0]
    page = f"<pre><span>{line.replace('<', '&lt;')}</span></pre>"
    assert submission.feedback_leaks(page, hidden) == [line]
    assert submission.feedback_leaks("<p>all right, 2 of 2 points</p>", hidden) == []
