"""Deadlines that count, end to end: due date in the gradebook, submission times from the exchange's timestamp
files and a Canvas zip's LATE marker, an extension given with `extend`, the course's late-penalty policy
applied by autograde, and the scores in grades_report.csv, canvas_grades.csv and lms_grades.csv; each feedback
page says why points were taken. Then the same submissions under the other policies (none, a percentage per
day only, zero after N days only) through autograde's late-penalty step and the LMS export.
"""

import csv
import os
import subprocess
import sys
import zipfile
from datetime import datetime, timedelta
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from hwopt.course.grading import __main__ as cli
from hwopt.course.grading import course, deadlines, grade, lms, samples, settings

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grading_sandbox")]

ASSIGNMENT = "batching"
DUE = datetime(2027, 2, 1, 17, 0)  # UTC
# student: (submitted, how it arrives), and the score under the course's policy (10% per started day late,
# 0 points after 7 days; 9 automatic points for a correct solution)
CLASS = {
    "ada": (DUE - timedelta(hours=2), 9.0),  # on time
    "bob": (DUE + timedelta(days=1, hours=12), 7.2),  # 2 started days late
    "cy": (DUE + timedelta(days=9), 0.0),  # more than 7 days late
    "dee": (DUE + timedelta(days=2), 9.0),  # inside her 3-day extension
    "eve": (None, 8.1),  # Canvas marked it LATE, with no time: 1 started day
}


def lms_id(student: str) -> str:
    return f"{1000 + sorted(CLASS).index(student)}"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded once by the function behind `python -m hwopt.course.grading grade`."""
    folder = course.prepare_course(tmp_path_factory.mktemp("deadlines") / "course")
    api = course.make_api(folder, timeout_s=10)
    course.release(api, folder, [ASSIGNMENT])
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        gb.update_or_create_assignment(ASSIGNMENT, duedate=DUE)
        for student in CLASS:
            gb.update_or_create_student(student, first_name=student.title(), last_name="Student",
                                        lms_user_id=lms_id(student))
    work = nbformat.writes(samples.solved(ASSIGNMENT))
    for student, (submitted, _) in CLASS.items():
        if submitted is not None:  # what nbgrader's collect writes from the exchange
            target = folder / "submitted" / student / ASSIGNMENT
            target.mkdir(parents=True)
            (target / f"{ASSIGNMENT}.ipynb").write_text(work)
            (target / "timestamp.txt").write_text(f"{submitted:%Y-%m-%d %H:%M:%S.%f} UTC")
    archive = folder / "downloaded" / ASSIGNMENT / "archive"
    archive.mkdir(parents=True)
    with zipfile.ZipFile(archive / "submissions.zip", "w") as zf:
        zf.writestr(f"eve_LATE_{lms_id('eve')}_5005_{ASSIGNMENT}.ipynb", work)
    bin_dir = Path(sys.executable).parent
    collected = subprocess.run(
        [bin_dir / "nbgrader", "zip_collect", ASSIGNMENT, f"--CourseDirectory.root={folder}",
         f"--CourseDirectory.db_url={api.coursedir.db_url}"], cwd=course.ROOT, capture_output=True, text=True,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, timeout=300)
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert cli.main(["extend", "dee", ASSIGNMENT, "3", "--course", str(folder)]) == 0
    os.environ[settings.SECRET.name] = "deadlines test"
    try:
        rows = grade.grade_class(folder, assignments=[ASSIGNMENT], timeout_s=10, log=lambda *_: None)
    finally:
        os.environ.pop(settings.SECRET.name)
    return folder, {row.student: row for row in rows}


def read_csv(path: Path) -> list[list[str]]:
    with path.open(newline="") as f:
        return list(csv.reader(f))


def test_grades_report_takes_each_late_penalty_and_says_why(graded):
    folder, rows = graded
    assert {s: rows[s].score for s in CLASS} == {s: score for s, (_, score) in CLASS.items()}
    assert {s: rows[s].raw_score for s in CLASS} == dict.fromkeys(CLASS, 9.0)
    assert rows["bob"].late_penalty == pytest.approx(1.8) and rows["bob"].due_at == "2027-02-01 17:00 UTC"
    assert rows["bob"].submitted_at == "2027-02-03 05:00 UTC"
    assert rows["dee"].due_at == "2027-02-04 17:00 UTC"  # her extension
    assert any("2 started days late" in note for note in rows["bob"].notes)
    assert any("the LMS marked it late" in note for note in rows["eve"].notes)
    with (folder / "grades_report.csv").open() as f:
        report = {row["student"]: row for row in csv.DictReader(f)}
    assert {s: float(report[s]["score"]) for s in CLASS} == {s: score for s, (_, score) in CLASS.items()}
    assert float(report["cy"]["late_penalty"]) == 9.0


def test_feedback_says_when_it_was_submitted_and_why_points_were_taken(graded):
    folder, _ = graded
    page = {s: (folder / "feedback" / s / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text() for s in CLASS}
    assert "before the due date 2027-02-01 17:00 UTC" in page["ada"] and "No late penalty" in page["ada"]
    assert "2 started days late" in page["bob"] and "Late penalty: 1.8 points" in page["bob"]
    assert "more than 7 days late" in page["cy"] and "Late penalty: 9 points" in page["cy"]
    assert "your extension of 3 d included" in page["dee"] and "No late penalty" in page["dee"]
    assert "The LMS marked it late" in page["eve"] and "Late penalty: 0.9 points" in page["eve"]


def test_canvas_export_is_in_canvas_gradebook_import_format(graded):
    folder, _ = graded
    rows = read_csv(folder / lms.CANVAS_FILE)
    assert rows[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assignments = rows[0][5:]
    assert assignments[0] == ASSIGNMENT and len(assignments) == len(set(assignments))
    assert rows[1][0].strip() == "Points Possible" and rows[1][5] == "12"  # 9 automatic, 3 written
    by_id = {row[1]: row for row in rows[2:]}
    assert {s: float(by_id[lms_id(s)][5]) for s in CLASS} == {s: score for s, (_, score) in CLASS.items()}
    assert by_id[lms_id("bob")][:5] == ["Student, Bob", lms_id("bob"), "", "bob", ""]


def test_generic_export_has_the_lms_ids_and_one_column_per_assignment(graded):
    folder, _ = graded
    rows = read_csv(folder / lms.GENERIC_FILE)
    assert rows[0][:6] == ["lms_id", "student_id", "last_name", "first_name", "email", ASSIGNMENT]
    expected = {lms_id(s): score for s, (_, score) in CLASS.items()}
    assert {row[0]: float(row[5]) for row in rows[1:]} == expected


def test_the_lms_command_reuses_a_canvas_rosters_identities_and_assignment_header(graded, tmp_path):
    folder, _ = graded
    roster = tmp_path / "canvas_export.csv"
    roster.write_text("Student,ID,SIS User ID,SIS Login ID,Section,batching (777)\n"
                      "    Points Possible,,,,,12\n"
                      + "".join(f'"{s.title()}",{lms_id(s)},SIS-{s},{s},Sec 1,\n' for s in CLASS))
    assert cli.main(["lms", "--course", str(folder), "--roster", str(roster)]) == 0
    rows = read_csv(folder / lms.CANVAS_FILE)
    assert rows[0][5] == f"{ASSIGNMENT} (777)"  # Canvas's own column: the import updates it
    by_id = {row[1]: row for row in rows[2:]}
    assert by_id[lms_id("bob")][:6] == ["Bob", lms_id("bob"), "SIS-bob", "bob", "Sec 1", "7.2"]


@pytest.mark.parametrize("percent_per_day, zero_after_days, scores", [
    (0, None, dict.fromkeys(CLASS, 9.0)),  # no penalty
    (10, None, {"ada": 9.0, "bob": 7.2, "cy": 0.9, "dee": 9.0, "eve": 8.1}),  # 9 days: 90% taken
    (0, 2, {"ada": 9.0, "bob": 9.0, "cy": 0.0, "dee": 9.0, "eve": 9.0}),  # zero only after 2 days
])
def test_each_policy_through_autogrades_late_penalty_step_and_the_export(graded, percent_per_day,
                                                                        zero_after_days, scores):
    folder, _ = graded
    config = course.load_config(folder)
    config.LatePenalty.percent_per_day = percent_per_day
    config.LatePenalty.zero_after_days = zero_after_days
    db_url = config.CourseDirectory.db_url
    step = deadlines.AssignDeadlinePenalties(config=config)
    for student in CLASS:
        nb = nbformat.read(folder / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
        info = {"notebook": ASSIGNMENT, "assignment": ASSIGNMENT, "student": student, "db_url": db_url}
        step.preprocess(nb, {"nbgrader": info})
    _, _, exported = lms.grade_table(db_url, config.CourseDirectory.course_id, [ASSIGNMENT])
    assert {s: exported[s, ASSIGNMENT] for s in CLASS} == scores
