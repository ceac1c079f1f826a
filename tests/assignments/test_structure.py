"""The graded assignments (source/, release/): structure that keeps grading fair and hidden tests hidden."""

import re

import nbformat
import pytest

from hwopt.course import colab
from hwopt.course.grading import samples
from hwopt.course.grading.course import ASSIGNMENTS, ROOT, load_notebook
from hwopt.course.grading.notebooks import HIDDEN_BEGIN, hidden_region, strip_hidden_tests


def nbg(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def graded_cells(nb):
    return [c for c in nb.cells if nbg(c).get("grade") and c.cell_type == "code"]


def written_cells(nb):
    """The written answers: markdown cells that people grade in formgrader."""
    return [c for c in nb.cells if nbg(c).get("grade") and c.cell_type == "markdown"]


RUBRIC_LINE = re.compile(r"^- (\d+(?:\.\d+)?) points?: \S", re.M)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_written_answers_are_graded_by_people_on_a_rubric(assignment):
    """A written answer follows its question (a locked markdown cell); its source holds a model answer and
    a rubric whose lines ("- 1 point: ...") add up to the cell's points; FULL (automatic points) leaves it
    out."""
    nb = load_notebook("source", assignment)
    for i, cell in enumerate(nb.cells):
        if cell not in written_cells(nb):
            continue
        meta, before = nbg(cell), nb.cells[i - 1]
        assert meta.get("solution") and not meta.get("locked") and meta.get("points", 0) > 0, meta
        assert before.cell_type == "markdown" and nbg(before).get("locked"), f"{meta['grade_id']}: question"
        assert cell.source.startswith("**Model answer.**") and "**Rubric" in cell.source, meta["grade_id"]
        assert sum(float(p) for p in RUBRIC_LINE.findall(cell.source)) == meta["points"], meta["grade_id"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_setup_cell_comes_first_and_is_locked(assignment):
    for kind in ("source", "release"):
        first = load_notebook(kind, assignment).cells[0]
        assert "colab-setup" in first.metadata.get("tags", []), f"{kind}/{assignment}: setup cell first"
        assert nbg(first).get("locked"), f"{kind}/{assignment}: setup cell locked (restored at grading)"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_test_cell_has_points_and_judged_checks(assignment):
    cells = graded_cells(load_notebook("source", assignment))
    assert len(cells) >= 4, "questions are split into several graded cells (partial credit)"
    for cell in cells:
        assert nbg(cell)["locked"] and nbg(cell)["points"] > 0, nbg(cell)["grade_id"]
        assert re.search(r"^check\(", hidden_region(cell.source), re.M), nbg(cell)["grade_id"]
    assert sum(nbg(c)["points"] for c in cells) == samples.FULL[assignment]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_hidden_regions_only_declare_checks(assignment):
    """The hidden region is run by the judge, never by the student's kernel: no asserts, no answers there."""
    for cell in graded_cells(load_notebook("source", assignment)):
        assert not re.search(r"^\s*assert\b", hidden_region(cell.source), re.M), nbg(cell)["grade_id"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_has_no_solutions_and_no_hidden_tests(assignment):
    source, release = load_notebook("source", assignment), load_notebook("release", assignment)
    text = nbformat.writes(release)
    assert HIDDEN_BEGIN not in text and "BEGIN SOLUTION" not in text
    solutions = [c for c in release.cells if nbg(c).get("solution") and c.cell_type == "code"]
    assert solutions and all("raise NotImplementedError()" in c.source for c in solutions)
    assert all(c.source == "YOUR ANSWER HERE" for c in written_cells(release))
    for mine, theirs in zip(graded_cells(source), graded_cells(release), strict=True):
        assert theirs.source == strip_hidden_tests(mine.source)


def test_quiz_answers_cannot_be_read_from_the_visible_tests():
    quiz = load_notebook("source", "quiz")
    solutions = [nbg(c)["grade_id"] for c in quiz.cells if nbg(c).get("solution") and c.cell_type == "code"]
    assert solutions == ["student_id", "answers"], "the student types their id and their answers"
    for cell in graded_cells(load_notebook("release", "quiz")):
        assert "==" not in cell.source, "visible quiz checks test the format only"
        assert "hashlib" not in cell.source and "quiz_answers" not in cell.source
    for cell in graded_cells(quiz):  # each part is judged on the id it is graded under
        assert "student_id=rng.student" in hidden_region(cell.source), nbg(cell)["grade_id"]


def test_nothing_graded_depends_on_time_or_the_machine():
    for assignment in ASSIGNMENTS:
        text = nbformat.writes(load_notebook("source", assignment))
        for needle in ("import time", "perf_counter", "time.time", "torch.cuda", "probe",
                       "hwopt.machine.bench"):
            assert needle not in text, f"{assignment}: {needle}"


def test_every_lesson_is_practised_by_a_graded_assignment():
    """Lessons 1-12 each have an assignment besides the quiz whose **Lesson:** paragraph names it."""
    practised = set()
    for assignment in ASSIGNMENTS:
        if assignment != "quiz":
            lesson, _ = colab.assignment_facts(ROOT / "source" / assignment / f"{assignment}.ipynb")
            practised |= {int(n) for n in re.findall(r"(?:^|\band |, |with )(\d+) \(", lesson)}
    assert set(range(1, 13)) <= practised, sorted(set(range(1, 13)) - practised)


def test_assignments_compute_on_one_thread():
    """A grading worker has one core: a kernel that sets torch to more threads than that makes the two
    kernels of a 2-core machine spin on each other's core (number_formats on 2 threads graded 3x slower in
    parallel than serially). set_num_threads takes 1, or a name the cell binds to 1, or restores `threads`."""
    for assignment in ASSIGNMENTS:
        for cell in load_notebook("source", assignment).cells:
            for arg in re.findall(r"set_num_threads\((\w+)\)", cell.source):
                ones = arg == "1" or re.search(rf"^{arg} = 1\b", cell.source, re.M)
                assert ones or arg == "threads", f"{assignment}: set_num_threads({arg})"
