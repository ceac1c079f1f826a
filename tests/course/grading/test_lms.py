"""course.grading.lms: submission times and late markers from LMS file names, and the two grade exports."""

import csv
from pathlib import Path

import pytest
from nbgrader.apps import ZipCollectApp
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config

from hwopt.course.grading import deadlines, lms

ASSIGNMENT = "batching"


def collector(root: Path, **settings) -> lms.LmsSubmissionCollector:
    """The collector as zip_collect makes it, for ASSIGNMENT in the course folder root."""
    (root / "release" / ASSIGNMENT).mkdir(parents=True, exist_ok=True)
    (root / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").write_text("{}")
    config = Config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.assignment_id = ASSIGNMENT
    app = ZipCollectApp(config=config)
    app.coursedir = CourseDirectory(config=config)  # what zip_collect's start-up does
    return lms.LmsSubmissionCollector(parent=app, **settings)


CANVAS = r".*/(?P<student_id>[A-Za-z0-9.-]+)_(?:LATE_)?(?:\d+_)*(?P<file_id>[^/]+)$"
BLACKBOARD = r".*/(?P<student_id>[a-z]+)_attempt_(?P<timestamp>[\d-]+)_(?P<file_id>[^/]+)$"


def test_a_blackboard_time_in_the_file_name_becomes_the_submission_time(tmp_path):
    found = collector(tmp_path, named_regexp=BLACKBOARD, timestamp_format="%Y-%m-%d-%H-%M-%S",
                      timezone="America/New_York").collect(f"/x/ada_attempt_2027-02-01-17-05-00_{ASSIGNMENT}"
                                                           ".ipynb")
    assert found == {"student_id": "ada", "timestamp": "2027-02-01 17:05:00-05:00", "file_id": ASSIGNMENT}


@pytest.mark.parametrize("settings, named", [
    ({"timestamp_format": "%d.%m.%Y"}, "timestamp_format"),
    ({"timestamp_format": "%Y-%m-%d-%H-%M-%S", "timezone": "Mars/Olympus"}, "Mars/Olympus"),
])
def test_a_time_that_does_not_read_is_refused_naming_the_file_and_setting(tmp_path, settings, named):
    with pytest.raises(ValueError, match=named) as err:
        collector(tmp_path, named_regexp=BLACKBOARD, **settings).collect(
            f"/x/ada_attempt_2027-02-01-17-05-00_{ASSIGNMENT}.ipynb")
    assert "ada_attempt_2027-02-01-17-05-00" in str(err.value)


def test_canvas_late_markers_are_recorded_afresh_by_each_collection(tmp_path):
    first = collector(tmp_path, named_regexp=CANVAS)
    assert first.collect(f"/x/eve_LATE_1004_5005_{ASSIGNMENT}.ipynb")["student_id"] == "eve"
    assert first.collect(f"/x/ada_1000_5001_{ASSIGNMENT}.ipynb")["student_id"] == "ada"
    assert first.collect(f"/x/bob_LATE_1001_5002_Copy of {ASSIGNMENT} (1).ipynb")["file_id"] == ASSIGNMENT
    assert deadlines.late_marked(tmp_path, ASSIGNMENT) == {"eve", "bob"}
    collector(tmp_path, named_regexp=CANVAS).collect(f"/x/bob_LATE_1001_5002_{ASSIGNMENT}.ipynb")
    assert deadlines.late_marked(tmp_path, ASSIGNMENT) == {"bob"}  # a new download: its own markers only
    collector(tmp_path, named_regexp=CANVAS).collect(f"/x/bob_1001_5002_{ASSIGNMENT}.ipynb")
    assert deadlines.late_marked(tmp_path, ASSIGNMENT) == set()  # none late: none left from before


STUDENTS = [{"id": "ada", "first_name": "Ada", "last_name": "Lovelace", "email": "ada@example.org",
             "lms_user_id": "1000"},
            {"id": "bob", "first_name": None, "last_name": None, "email": None, "lms_user_id": None}]
TABLE = (STUDENTS, [(ASSIGNMENT, 8.0), ("quiz", 10.0)],
         {("ada", ASSIGNMENT): 7.2, ("ada", "quiz"): 10.0, ("bob", ASSIGNMENT): 0.0, ("bob", "quiz"): 9.5})
# A Canvas gradebook export (its columns, a Points Possible row, the assignment's id in its header)
ROSTER = ('Student,ID,SIS User ID,SIS Login ID,Section,Quiz 0 (111),batching (12345),Current Score\n'
          '    Points Possible,,,,,5,8,\n'
          '"Lovelace, Ada",1000,S-17,ada,Sec 1,5,,\n'
          '"Byron, Bob",1001,S-18,bob,Sec 2,4,,\n')


def rows(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_the_canvas_export_reuses_the_rosters_identities_and_assignment_headers(tmp_path):
    (tmp_path / "roster.csv").write_text(ROSTER)
    roster = lms.read_roster(tmp_path / "roster.csv")
    assert [r["ID"] for r in roster] == ["1000", "1001"]  # Points Possible left out
    written = rows(lms.write_canvas(tmp_path / lms.CANVAS_FILE, TABLE, roster))
    assert written[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", f"{ASSIGNMENT} (12345)",
                          "quiz"]
    assert written[1] == ["    Points Possible", "", "", "", "", "8", "10"]
    assert written[2] == ["Lovelace, Ada", "1000", "S-17", "ada", "Sec 1", "7.2", "10"]  # matched on ID
    assert written[3] == ["Byron, Bob", "1001", "S-18", "bob", "Sec 2", "0", "9.5"]  # on SIS Login ID


def test_without_a_roster_the_canvas_export_names_students_from_the_gradebook(tmp_path):
    written = rows(lms.write_canvas(tmp_path / lms.CANVAS_FILE, TABLE))
    assert written[2][:5] == ["Lovelace, Ada", "1000", "", "ada", ""]
    assert written[3][:5] == ["bob", "", "", "bob", ""]  # no name, no LMS id: Canvas matches SIS Login ID


def test_the_generic_export_has_the_lms_ids_and_one_column_per_assignment(tmp_path):
    written = rows(lms.write_generic(tmp_path / lms.GENERIC_FILE, TABLE))
    assert written == [["lms_id", "student_id", "last_name", "first_name", "email", ASSIGNMENT, "quiz"],
                       ["1000", "ada", "Lovelace", "Ada", "ada@example.org", "7.2", "10"],
                       ["bob", "bob", "", "", "", "0", "9.5"]]


def test_a_roster_that_is_not_a_canvas_export_is_refused(tmp_path):
    (tmp_path / "roster.csv").write_text("name,score\nada,3\n")
    with pytest.raises(ValueError, match="roster must be a Canvas gradebook export"):
        lms.read_roster(tmp_path / "roster.csv")
