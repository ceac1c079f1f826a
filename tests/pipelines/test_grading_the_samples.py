"""The class-grading pipeline on the samples: fair scores, explicit failures, no leaks, safe reruns, attacks
that gain nothing and change nothing outside their own folder."""

import csv
import sqlite3
from pathlib import Path

import psutil
import pytest
from nbgrader.api import Gradebook

from hwopt.course.grading import course, demo, grade, samples, settings, submission
from hwopt.course.grading.course import ROOT
from tests.pipelines.support import TIMEOUT_S

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grading_sandbox")]


@pytest.fixture
def graded(graded_samples):
    """The session's graded samples (tests.pipelines.conftest)."""
    return graded_samples


def test_every_sample_gets_its_expected_score_and_status(graded):
    rows = graded.rows
    got = {key: (rows[key].score, rows[key].status) for key in samples.EXPECTED}
    assert got == samples.EXPECTED
    others = {key: row.status for key, row in rows.items() if key not in samples.EXPECTED}
    assert set(others.values()) == {"not submitted"}


def test_hangs_tampering_and_lost_metadata_are_noted_in_the_report(graded):
    rows = graded.rows
    notes = {key: "; ".join(row.notes) for key, row in rows.items()}
    assert "kernel restarted" in notes[("sigint_loop", "latency_budget")]
    assert "timed out" in notes[("infinite_loop", "latency_budget")]
    assert "edited locked cells restored: test_on_budget" in notes[("edited_tests", "latency_budget")]
    assert "deleted locked cells restored: test_non_monotonic" in notes[("edited_tests", "latency_budget")]
    assert "metadata restored" in notes[("stripped", "latency_budget")]
    assert "JSON" in notes[("invalid_json", "quiz")]
    report = []
    for folder in graded.folders:
        with (folder / "grades_report.csv").open() as f:
            report += list(csv.DictReader(f))
    assert len(report) == len(rows) and {"score", "max_score", "status", "notes"} <= set(report[0])


def test_feedback_never_shows_hidden_tests(graded):
    pages = [page for folder in graded.folders for page in (folder / "feedback").glob("*/*/*.html")]
    assert len(pages) == sum(row.status == "ok" for row in graded.rows.values())
    for page in pages:
        text = page.read_text()
        assert "HIDDEN TESTS" not in text
        assert not submission.feedback_leaks(text, submission.hidden_lines(page.parent.name)), page
    folder = graded.folder_of["wrong"]
    wrong = (folder / "feedback" / "wrong" / "latency_budget" / "latency_budget.html").read_text()
    assert "a batch size measured twice, once over the budget: wrong value" in wrong  # what a case tests


def test_export_lists_failed_submissions_with_zero_and_the_report_says_why(graded):
    exported = {}
    for folder in graded.folders:
        with (folder / "grades.csv").open() as f:
            exported |= {(r["student_id"], r["assignment"]): float(r["score"]) for r in csv.DictReader(f)}
    assert set(exported) == set(graded.rows)  # every student and assignment, graded or not
    assert exported[("invalid_json", "quiz")] == 0.0 and graded.rows[("invalid_json", "quiz")].status != "ok"
    assert exported[("correct", "latency_budget")] == 12.0


def test_regrading_is_idempotent_and_keeps_manual_grades(graded, monkeypatch):
    monkeypatch.setenv(settings.SECRET.name, demo.DEMO_SECRET)  # the demo class's secret
    folder = graded.folder_of["wrong"]
    api = course.make_api(folder, TIMEOUT_S)  # the timeout the class was graded with
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        on_budget = gb.find_grade("test_on_budget", "latency_budget", "latency_budget", "wrong")
        assert on_budget.auto_score == 0
        on_budget.manual_score = 1.0  # the instructor accepts "<" after reading the code
        gb.db.commit()
    first = grade.grade_one(api, folder, "latency_budget", "wrong", force=True)
    second = grade.grade_one(api, folder, "latency_budget", "wrong", force=True)
    assert (first.score, second.score, second.status) == (8.0, 8.0, "ok")
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        on_budget = gb.find_grade("test_on_budget", "latency_budget", "latency_budget", "wrong")
        assert on_budget.manual_score == 1.0


def owned_files(*folders: Path) -> list[Path]:
    """Files that an attack sample planted or wrote into (it writes "PW" + "NED")."""
    marker = b"PW" + b"NED"
    return [p for folder in folders for p in folder.rglob("*")
            if p.is_file() and (p.name == "owned.txt" or marker in p.read_bytes())]


def test_attacks_change_nothing_outside_their_own_folder(graded):
    assert owned_files(*graded.folders, ROOT / "source", ROOT / "release", ROOT / "autograder") == []
    for folder in graded.folders:
        with sqlite3.connect(folder / "gradebook.db") as con:
            assert con.execute("SELECT COUNT(*) FROM grade WHERE manual_score = 999").fetchone() == (0,)


def test_a_flood_of_output_is_capped_in_the_notebook_and_said_in_the_feedback(graded):
    folder, rows = graded.folder_of["flood"], graded.rows
    for assignment in samples.TARGETS["flood"]:
        notebook = folder / "autograded" / "flood" / assignment / f"{assignment}.ipynb"
        assert notebook.stat().st_size < 6_000_000
        page = (folder / "feedback" / "flood" / assignment / f"{assignment}.html").read_text()
        assert "[grader: output beyond" in page
        assert "output beyond the byte cap dropped" in "; ".join(rows[("flood", assignment)].notes)


def test_feedback_shows_the_verdict_of_every_part_without_hidden_values(graded):
    folder = graded.folder_of["wrong"]
    page = (folder / "feedback" / "wrong" / "latency_budget" / "latency_budget.html").read_text()
    assert "Graded outside your notebook" in page
    assert "a latency exactly equal to the budget: wrong value" in page


def test_a_fork_bomb_leaves_no_process_behind(graded):
    assert graded.rows["fork_bomb", "latency_budget"].status == "ok"
    grading_kernels = [p for p in psutil.process_iter(["cmdline"])
                       if "hwopt.course.grading.kernel" in (p.info["cmdline"] or [])]  # ours, and forks
    assert grading_kernels == []
