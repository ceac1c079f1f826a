"""course.grading.plugins: what a judged grade cell shows, and the score nbgrader reads from it."""

import contextlib
import io
from pathlib import Path

import jinja2
import nbformat
import pytest
from nbconvert.exporters import HTMLExporter
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from nbgrader.utils import determine_grade

from hwopt.course.grading import course, judge, plugins


def grade_cell(outputs):
    meta = {"nbgrader": {"grade": True, "solution": False, "locked": True, "grade_id": "t", "points": 2}}
    return new_code_cell("assert f(1) == 2", outputs=outputs, metadata=meta)


STUDENT_OUTPUTS = [  # what a student's kernel may leave in a grade cell, a score among them
    new_output("stream", name="stderr", text="Warning: noisy\n"),
    new_output("execute_result", data={"text/plain": "2"}, execution_count=1),
    new_output("error", ename="AssertionError", evalue="f(1) should be 2", traceback=["..."]),
]


@pytest.mark.parametrize("points", [0.0, 2.0])
def test_the_judge_alone_decides_the_score_nbgrader_reads(points):
    result = judge.verdict(2.0, [] if points else [("a case", "wrong value")], 3)
    cell = grade_cell(plugins.judged_outputs(STUDENT_OUTPUTS, result))
    assert determine_grade(cell) == (points, 2.0)
    kinds = [o.output_type for o in cell.outputs]
    assert kinds[:3] == ["stream", "display_data", "stream"], "the student's outputs become text"
    assert "Visible check: AssertionError: f(1) should be 2" in cell.outputs[2].text
    assert "Graded outside your notebook" in cell.outputs[3].text


def test_collect_code_reports_the_outcomes_from_a_namespace():
    ns = {"f": lambda x: x + 1}
    code = plugins.collect_code("f(x)", [judge.case("one", x=1), judge.case("two", x=41)], "m:")
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(code, ns)
    assert judge.parse_report(out.getvalue(), "m:", 2) == [{"value": 2}, {"value": 42}]
    assert "__hwopt_judge" not in ns, "the probe leaves nothing in the student's namespace"


def test_a_cell_that_loses_its_kernel_scores_zero():
    result = judge.verdict(2.0, [], 0, "not run: the kernel was lost")
    cell = grade_cell(plugins.judged_outputs([], result))
    assert determine_grade(cell) == (0.0, 2.0)
    nbformat.validate(nbformat.v4.new_notebook(cells=[cell]))


@pytest.fixture
def compiles(monkeypatch):
    """How many templates Jinja compiles from source (a list, one entry per compile)."""
    seen, compile_source = [], jinja2.Environment.compile

    def counted(self, *args, **kwargs):
        seen.append(args[1:2])
        return compile_source(self, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, "compile", counted)
    return seen


def test_the_feedback_exporter_writes_nbconverts_page_and_compiles_its_templates_once(compiles):
    nb = new_notebook(cells=[new_markdown_cell("# Part 1"), new_code_cell("x = 1\nprint(x)")])
    page, _ = HTMLExporter().from_notebook_node(nb)
    assert compiles, "nbconvert compiles its templates for every new exporter"
    compiles.clear()
    first, _ = plugins.FeedbackExporter().from_notebook_node(nb)
    compiles.clear()
    again, _ = plugins.FeedbackExporter().from_notebook_node(nb)  # nbgrader: a new exporter for every page
    assert first == again == page
    assert compiles == [], "the second page compiled its templates again"


def test_the_feedback_exporter_recompiles_a_template_whose_source_changed(tmp_path, compiles):
    template = tmp_path / "page.html.j2"
    nb = new_notebook(cells=[new_code_cell("pass")])

    def render() -> str:
        exporter = plugins.FeedbackExporter(template_paths=[str(tmp_path)], template_file=template.name)
        return exporter.from_notebook_node(nb)[0]

    template.write_text("first {{ nb.cells | length }}")
    assert "first 1" in render() and "first 1" in render()
    template.write_text("second {{ nb.cells | length }}")
    assert "second 1" in render()


def test_a_reference_is_run_once_per_process_whichever_course_folder_links_to_it(tmp_path, monkeypatch):
    loaded = []
    monkeypatch.setattr(plugins, "_references", {})
    monkeypatch.setattr(plugins.Reference, "load", classmethod(lambda cls, path: loaded.append(path) or path))
    first, second = (course.prepare_course(tmp_path / name) for name in ("first", "second"))
    notebook = Path("source") / "batching" / "batching.ipynb"
    assert plugins.load_reference(first / notebook) == plugins.load_reference(second / notebook)
    assert loaded == [(course.ROOT / notebook).resolve()]
