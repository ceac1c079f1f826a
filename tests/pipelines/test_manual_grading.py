"""Written answers graded by people, end to end: autograded through the course's pipeline (they wait in
grades_report.csv, the automatic points are scored), a grade and a comment written through nbgrader's
gradebook as formgrader's grade and comment handlers write them, then `grade --no-force` (feedback and
exports again, nothing regraded): the manual points and the comment in the feedback page, grades_report.csv,
grades.csv and the LMS exports, and every autograded cell with its score as before."""

import csv
import os

import nbformat
import pytest
from nbgrader.api import Gradebook

from hwopt.course.grading import __main__ as cli
from hwopt.course.grading import course, grade, lms, samples, settings
from tests.pipelines.support import grade_cells

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grading_sandbox")]

ASSIGNMENT = "bandwidth_precision"
WRITTEN = "written_answer"
ANSWER = ("The bound reads every weight once per token at full bandwidth; the KV cache and launches are left "
          "out. <script>window.stolen = document.cookie</script>")
COMMENT = "Right bound; the KV cache grows with the context, say by how much."
MANUAL_POINTS = 2.0


def submit(folder, student: str, nb) -> None:
    target = folder / "submitted" / student / ASSIGNMENT
    target.mkdir(parents=True)
    nbformat.write(nb, target / f"{ASSIGNMENT}.ipynb")


def rows_by_student(rows) -> dict:
    return {row.student: row for row in rows}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """ada answers in words, bob hands in the release unanswered, cy deleted the written answer's cell; all
    autograded, then ada's answer graded by hand and the class given feedback and exports again."""
    folder = course.prepare_course(tmp_path_factory.mktemp("manual") / "course")
    answered = samples.solved(ASSIGNMENT)
    samples.cell(answered, WRITTEN).source = ANSWER
    deleted = samples.solved(ASSIGNMENT)
    deleted.cells = [c for c in deleted.cells if samples._grade_id(c) != WRITTEN]
    for student, nb in (("ada", answered), ("bob", course.load_notebook("release", ASSIGNMENT)),
                        ("cy", deleted)):
        submit(folder, student, nb)
    os.environ[settings.SECRET.name] = "manual grading test"
    try:
        autograded = grade.grade_class(folder, assignments=[ASSIGNMENT], timeout_s=10, log=lambda *_: None)
        with (folder / "grades_report.csv").open() as f:
            first_report = {row["student"]: row for row in csv.DictReader(f)}
        cells_before = grade_cells(folder)
        api = course.make_api(folder)
        with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:  # formgrader's PUT handlers
            answer = gb.find_grade(WRITTEN, ASSIGNMENT, ASSIGNMENT, "ada")
            answer.manual_score = MANUAL_POINTS
            answer.needs_manual_grade = answer.manual_score is None and answer.auto_score is None
            gb.find_comment(WRITTEN, ASSIGNMENT, ASSIGNMENT, "ada").manual_comment = COMMENT
            gb.db.commit()
        assert cli.main(["grade", "--no-force", "--course", str(folder), "--assignments", ASSIGNMENT]) == 0
    finally:
        os.environ.pop(settings.SECRET.name)
    with (folder / "grades_report.csv").open() as f:
        report = {row["student"]: row for row in csv.DictReader(f)}
    return folder, rows_by_student(autograded), first_report, cells_before, report


def written_points() -> float:
    nb = course.load_notebook("source", ASSIGNMENT)
    return float(samples.cell(nb, WRITTEN).metadata["nbgrader"]["points"])


def test_autograding_scores_the_automatic_points_and_leaves_the_written_answer_to_people(graded):
    _, rows, first_report, cells, _ = graded
    full, written = samples.FULL[ASSIGNMENT], written_points()
    assert {s: (rows[s].score, rows[s].status) for s in rows} == {
        "ada": (full, "ok"), "bob": (0.0, "ok"), "cy": (full, "ok")}
    assert {s: rows[s].max_score for s in rows} == dict.fromkeys(rows, full + written)
    assert rows["ada"].needs_manual_grading == [f"{WRITTEN}: {written:g} points to grade"]
    assert first_report["ada"]["needs_manual_grading"] == f"{WRITTEN}: {written:g} points to grade"
    assert first_report["ada"]["status"] == "ok"
    # an unanswered written answer scores 0 without anyone grading it, a deleted one comes back unanswered
    assert rows["bob"].needs_manual_grading == [] and rows["cy"].needs_manual_grading == []
    assert "a deleted written answer restored, unanswered" in rows["cy"].notes
    assert cells["cy", ASSIGNMENT, ASSIGNMENT, WRITTEN][:2] == (0.0, None)
    assert cells["ada", ASSIGNMENT, ASSIGNMENT, WRITTEN][:2] == (None, None)


def test_the_manual_grade_reaches_the_report_and_every_export(graded):
    folder, _, _, _, report = graded
    full = samples.FULL[ASSIGNMENT]
    assert float(report["ada"]["score"]) == full + MANUAL_POINTS and report["ada"]["status"] == "ok"
    assert report["ada"]["needs_manual_grading"] == ""
    assert {s: float(report[s]["score"]) for s in ("bob", "cy")} == {"bob": 0.0, "cy": full}
    with (folder / "grades.csv").open() as f:
        exported = {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}
    assert exported["ada"] == full + MANUAL_POINTS and exported["bob"] == 0.0
    with (folder / lms.GENERIC_FILE).open() as f:
        generic = {row["student_id"]: float(row[ASSIGNMENT]) for row in csv.DictReader(f)}
    assert generic == {"ada": full + MANUAL_POINTS, "bob": 0.0, "cy": full}
    with (folder / lms.CANVAS_FILE).open() as f:
        canvas = {row["SIS Login ID"]: row[ASSIGNMENT] for row in csv.DictReader(f)}
    assert canvas["ada"] == f"{full + MANUAL_POINTS:g}"


def test_feedback_shows_the_manual_points_and_the_comment_and_no_student_script(graded):
    folder, *_ = graded
    page = (folder / "feedback" / "ada" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    full, written = samples.FULL[ASSIGNMENT], written_points()
    assert COMMENT in page
    assert f'"#{WRITTEN}">Written response</a> (Score: {MANUAL_POINTS:.1f} / {written:.1f})' in page
    assert f"{ASSIGNMENT} (Score: {full + MANUAL_POINTS:.1f} / {full + written:.1f})" in page
    assert "The bound reads every weight once per token" in page
    assert "<script>window" not in page  # the student's HTML is shown as text, never run


def test_autograded_cells_keep_their_scores_after_grading_by_hand(graded):
    folder, _, _, before, _ = graded
    after = grade_cells(folder)
    changed = {key for key in before if before[key] != after[key]}
    assert changed == {("ada", ASSIGNMENT, ASSIGNMENT, WRITTEN)}
    assert after["ada", ASSIGNMENT, ASSIGNMENT, WRITTEN][:2] == (None, MANUAL_POINTS)


def test_the_rubric_command_prints_each_question_model_answer_and_rubric(capsys):
    assert cli.main(["rubric", ASSIGNMENT]) == 0
    printed = capsys.readouterr().out
    written = samples.cell(course.load_notebook("source", ASSIGNMENT), WRITTEN).source
    assert written in printed and "**Rubric (" in printed and "## Written answer" in printed
