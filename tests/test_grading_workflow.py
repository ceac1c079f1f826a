"""The instructor's nbgrader commands, as the README gives them, work from the repository root.

An LMS zip (Canvas-style names, one file downloaded from Colab and renamed by the browser) goes through
db student import, zip_collect, autograde, generate_feedback and export; a student who signals the grading
process does not stop the batch; without the instructor secret, or with a kernel setting that is not valid,
autograde grades nobody and says why.
"""

import csv
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "autograder"))
import grade_class  # noqa: E402
import samples  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grading_sandbox")]


def nbgrader(course: Path, *args: str, secret: str | None = "workflow test", check: bool = True,
             **settings: str) -> str:
    """Run one nbgrader command from the repository root against the course folder (settings: more
    environment variables); return its output."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "HWOPT_GRADER_TIMEOUT_S": "10", "HWOPT_GRADER_SECRET_FILE": str(course / "no-secret-file"),
           **settings}
    env.pop("HWOPT_GRADER_SECRET", None)
    if secret:
        env["HWOPT_GRADER_SECRET"] = secret
    out = subprocess.run([bin_dir / "nbgrader", *args, f"--CourseDirectory.root={course}",
                          f"--CourseDirectory.db_url=sqlite:///{course / 'gradebook.db'}"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 or not check, out.stdout + out.stderr
    return out.stdout + out.stderr


def test_lms_zip_with_a_colab_download_is_collected_graded_and_exported(tmp_path):
    course = grade_class.prepare_course(tmp_path / "course")
    good = samples.solved("latency_budget")
    archive = course / "downloaded" / "latency_budget" / "archive"
    archive.mkdir(parents=True)
    with zipfile.ZipFile(archive / "submissions.zip", "w") as zf:
        zf.writestr("ada_1001_5001_latency_budget.ipynb", nbformat.writes(good))
        zf.writestr("grace_LATE_1002_5002_Copy of latency_budget (1).ipynb", samples.colab_download(good))
        zf.writestr("alan_1003_5003_notes.txt", "not a notebook")
    (course / "students.csv").write_text("id,first_name,last_name,email\nada,Ada,Lovelace,ada@example.org\n"
                                         "grace,Grace,Hopper,grace@example.org\n")

    nbgrader(course, "generate_assignment", "latency_budget")
    nbgrader(course, "db", "student", "import", str(course / "students.csv"))
    log = nbgrader(course, "zip_collect", "latency_budget")
    assert "2 files collected, 1 files skipped" in log
    for student in ("ada", "grace"):
        assert (course / "submitted" / student / "latency_budget" / "latency_budget.ipynb").exists()
    nbgrader(course, "autograde", "latency_budget")
    nbgrader(course, "generate_feedback", "latency_budget")
    nbgrader(course, "export", f"--CsvExportPlugin.to={course / 'grades.csv'}")

    with (course / "grades.csv").open() as f:
        scores = {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}
    assert scores == {"ada": 12.0, "grace": 12.0}
    for student in ("ada", "grace"):
        page = (course / "feedback" / student / "latency_budget" / "latency_budget.html").read_text()
        assert not grade_class.feedback_leaks(page, grade_class.hidden_lines("latency_budget"))


def test_a_student_who_signals_the_grader_does_not_stop_the_batch(tmp_path):
    course = grade_class.prepare_course(tmp_path / "course")
    nbgrader(course, "generate_assignment", "batching")
    # nbgrader autograde takes students in order: the attacker first, then a classmate
    samples.write_submissions(course / "submitted", {"a_signal": "signal", "b_next": "signal_next"},
                              targets_only=True)
    for student in ("a_signal", "b_next"):
        for other in samples.ASSIGNMENTS[1:]:
            shutil.rmtree(course / "submitted" / student / other, ignore_errors=True)
    nbgrader(course, "autograde", "batching")
    nbgrader(course, "export", f"--CsvExportPlugin.to={course / 'grades.csv'}")
    with (course / "grades.csv").open() as f:
        scores = {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}
    assert scores == {"a_signal": 8.0, "b_next": 8.0}


def test_autograde_without_the_instructor_secret_grades_nobody(tmp_path):
    course = grade_class.prepare_course(tmp_path / "course")
    nbgrader(course, "generate_assignment", "batching")
    samples.write_submissions(course / "submitted", {"ada": "correct"}, targets_only=False)
    log = nbgrader(course, "autograde", "batching", secret=None, check=False)
    assert "No grading secret" in log and "python -m hwopt.course.grading secret" in log
    assert not (course / "autograded" / "ada" / "batching" / "batching.ipynb").exists()


def test_a_bad_kernel_setting_stops_grading_and_is_named(tmp_path, monkeypatch):
    course = grade_class.prepare_course(tmp_path / "course")
    nbgrader(course, "generate_assignment", "batching")
    samples.write_submissions(course / "submitted", {"ada": "correct"}, targets_only=False)
    log = nbgrader(course, "autograde", "batching", check=False, HWOPT_GRADER_THREADS="two")
    assert "HWOPT_GRADER_THREADS must be a positive whole number of threads; got 'two'" in log
    assert not (course / "autograded" / "ada" / "batching" / "batching.ipynb").exists()
    monkeypatch.setenv("HWOPT_GRADER_SECRET", "workflow test")
    monkeypatch.setenv("HWOPT_GRADER_MEMORY_GB", "-1")
    with pytest.raises(SystemExit, match="HWOPT_GRADER_MEMORY_GB must be a positive finite number"):
        grade_class.grade_class(course, assignments=["batching"], log=lambda *_: None)
