"""course.grading.deadlines: lateness under each policy, extensions, LMS late markers, bad input refused."""

from datetime import datetime, timedelta

import pytest

from hwopt.course.grading import deadlines
from hwopt.course.grading.deadlines import Policy, assess

DUE = datetime(2027, 2, 1, 17, 0)
COURSE = Policy(percent_per_day=10, zero_after_days=7)


@pytest.mark.parametrize("policy, submitted, fraction", [
    (COURSE, DUE - timedelta(minutes=1), 0.0),  # on time
    (COURSE, DUE, 0.0),  # at the due date: on time
    (COURSE, DUE + timedelta(minutes=1), 0.1),  # a started day
    (COURSE, DUE + timedelta(days=1, seconds=1), 0.2),  # the second day started
    (COURSE, DUE + timedelta(days=7), 0.7),
    (COURSE, DUE + timedelta(days=7, seconds=1), 1.0),  # more than 7 days: zero
    (Policy(), DUE + timedelta(days=30), 0.0),  # no penalty at all
    (Policy(percent_per_day=10), DUE + timedelta(days=30), 1.0),  # capped at the whole score
    (Policy(percent_per_day=25), DUE + timedelta(days=2, hours=1), 0.75),
    (Policy(zero_after_days=0), DUE + timedelta(seconds=1), 1.0),  # zero for any lateness
    (Policy(zero_after_days=2), DUE + timedelta(days=2), 0.0),
])
def test_the_share_of_the_score_taken_under_each_policy(policy, submitted, fraction):
    result = assess(policy, DUE, submitted)
    assert result.fraction == pytest.approx(fraction)
    assert result.late == (submitted > DUE)


def test_the_reason_names_the_times_the_lateness_and_the_policy():
    why = assess(COURSE, DUE, DUE + timedelta(days=1, hours=2, minutes=5)).why
    assert why == ("submitted 2027-02-02 19:05 UTC, 1 d 2 h 5 min after the due date 2027-02-01 17:00 UTC: "
                   "2 started days late (10% of the score per started day late; 0 points when more than 7 "
                   "days late)")
    assert "before the due date" in assess(COURSE, DUE, DUE - timedelta(hours=1)).why


def test_an_extension_moves_the_due_date_for_that_student():
    late = DUE + timedelta(days=2)
    assert assess(COURSE, DUE, late, extension=timedelta(days=3)).fraction == 0
    result = assess(COURSE, DUE, late, extension=timedelta(days=1))
    assert result.fraction == pytest.approx(0.1)
    assert "your extension of 1 d included" in result.why and "2027-02-02 17:00 UTC" in result.why


def test_an_lms_late_marker_without_a_time_is_one_started_day_unless_there_is_an_extension():
    marked = assess(COURSE, DUE, None, lms_late=True)
    assert (marked.late, marked.fraction) == (True, pytest.approx(0.1))
    assert "the LMS marked it late" in marked.why and "charged as 1 started day late" in marked.why
    assert assess(COURSE, DUE, None, timedelta(days=1), lms_late=True).fraction == 0
    assert assess(COURSE, DUE, None).fraction == 0  # no time and no marker: nothing to go on
    assert assess(COURSE, None, DUE + timedelta(days=99)).why == "this assignment has no due date"


@pytest.mark.parametrize("kwargs, named", [
    ({"percent_per_day": -1}, "percent_per_day"), ({"percent_per_day": 101}, "percent_per_day"),
    ({"percent_per_day": float("nan")}, "percent_per_day"), ({"percent_per_day": "10"}, "percent_per_day"),
    ({"percent_per_day": True}, "percent_per_day"), ({"zero_after_days": -1}, "zero_after_days"),
    ({"zero_after_days": float("inf")}, "zero_after_days"), ({"zero_after_days": "7"}, "zero_after_days"),
])
def test_a_bad_policy_is_refused_naming_the_setting(kwargs, named):
    with pytest.raises(ValueError, match=named):
        Policy(**kwargs)


def test_the_nbgrader_plugin_takes_the_policy_share_of_the_score():
    plugin = deadlines.LatePenalty(percent_per_day=10, zero_after_days=7)
    assert plugin.late_submission_penalty("ada", 8.0, 3600) == pytest.approx(0.8)
    assert plugin.late_submission_penalty("ada", 8.0, 8 * 86_400) == pytest.approx(8.0)
    assert plugin.late_submission_penalty("ada", 8.0, 0) == 0


def test_extensions_are_written_read_back_and_removed(tmp_path):
    path = tmp_path / deadlines.EXTENSIONS
    assert deadlines.read_extensions(path) == {}
    deadlines.write_extension(path, "ada", "batching", 2)
    deadlines.write_extension(path, "grace", "quiz", 0.5)
    deadlines.write_extension(path, "ada", "batching", 3)  # replaces, does not stack
    assert deadlines.read_extensions(path) == {("ada", "batching"): timedelta(days=3),
                                               ("grace", "quiz"): timedelta(hours=12)}
    deadlines.write_extension(path, "ada", "batching", 0)
    assert deadlines.read_extensions(path) == {("grace", "quiz"): timedelta(hours=12)}


@pytest.mark.parametrize("text, named", [
    ("student,assignment,days\nada,batching,2\n", "expected the columns student_id,assignment,days"),
    ("student_id,assignment,days\nada,batching,two\n", "line 2"),
    ("student_id,assignment,days\nada,batching,-1\n", "line 2"),
    ("student_id,assignment,days\n,batching,1\n", "line 2"),
])
def test_a_bad_extensions_file_is_refused_naming_the_line(tmp_path, text, named):
    path = tmp_path / deadlines.EXTENSIONS
    path.write_text(text)
    with pytest.raises(ValueError, match=named):
        deadlines.read_extensions(path)


@pytest.mark.parametrize("args, named", [
    (("ada", "batching", -1), "days"), (("ada", "batching", float("nan")), "days"),
    (("ada", "batching", "2"), "days"), (("", "batching", 1), "student_id"), (("ada", None, 1), "assignment"),
])
def test_write_extension_refuses_bad_input(tmp_path, args, named):
    with pytest.raises(ValueError, match=named):
        deadlines.write_extension(tmp_path / deadlines.EXTENSIONS, *args)


def test_late_markers_are_read_from_the_lms_download(tmp_path):
    assert deadlines.late_marked(tmp_path, "batching") == set()
    marks = tmp_path / "downloaded" / "batching" / deadlines.LATE_MARKERS
    marks.parent.mkdir(parents=True)
    marks.write_text("student_id,file\neve,eve_LATE_1_2_batching.ipynb\n")
    assert deadlines.late_marked(tmp_path, "batching") == {"eve"}
