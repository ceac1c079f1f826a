"""The instructor's nbgrader commands, as the README gives them, work from the repository root.

An LMS zip (Canvas-style names, one file downloaded from Colab and renamed by the browser) goes through
db student import, zip_collect, autograde, generate_feedback and export; a student who signals the grading
process does not stop the batch; without the instructor secret, or with a kernel setting that is not valid,
autograde grades nobody and says why. generate_assignment releases the assignments once; each test grades in
a copy of that course folder.
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

from hwopt.course.grading import course, grade, samples, settings, submission

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grading_sandbox")]
RELEASED = ("latency_budget", "batching")


def nbgrader(folder: Path, *args: str, secret: str | None = "workflow test", check: bool = True,
             **variables: str) -> str:
    """Run one nbgrader command from the repository root against the course folder (variables: more of the
    environment); return its output."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           settings.TIMEOUT_S.name: "10", settings.SECRET_FILE.name: str(folder / "no-secret-file"),
           **variables}
    env.pop(settings.SECRET.name, None)
    if secret:
        env[settings.SECRET.name] = secret
    out = subprocess.run([bin_dir / "nbgrader", *args, f"--CourseDirectory.root={folder}",
                          f"--CourseDirectory.db_url=sqlite:///{folder / 'gradebook.db'}"],
                         cwd=course.ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 or not check, out.stdout + out.stderr
    return out.stdout + out.stderr


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> Path:
    """A course folder in which `nbgrader generate_assignment` released RELEASED (gradebook included)."""
    folder = course.prepare_course(tmp_path_factory.mktemp("released") / "course")
    for assignment in RELEASED:
        nbgrader(folder, "generate_assignment", assignment)
    return folder


@pytest.fixture
def folder(released, tmp_path) -> Path:
    """A copy of the released course folder for one test."""
    return Path(shutil.copytree(released, tmp_path / "course", symlinks=True))


def exported(folder: Path, assignment: str) -> dict[str, float]:
    """`nbgrader export`: each student's score in one assignment."""
    nbgrader(folder, "export", f"--CsvExportPlugin.to={folder / 'grades.csv'}")
    with (folder / "grades.csv").open() as f:
        return {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)
                if row["assignment"] == assignment}


def test_lms_zip_with_a_colab_download_is_collected_graded_and_exported(folder):
    good = samples.solved("latency_budget")
    archive = folder / "downloaded" / "latency_budget" / "archive"
    archive.mkdir(parents=True)
    with zipfile.ZipFile(archive / "submissions.zip", "w") as zf:
        zf.writestr("ada_1001_5001_latency_budget.ipynb", nbformat.writes(good))
        zf.writestr("grace_LATE_1002_5002_Copy of latency_budget (1).ipynb", samples.colab_download(good))
        zf.writestr("alan_1003_5003_notes.txt", "not a notebook")
    (folder / "students.csv").write_text("id,first_name,last_name,email\nada,Ada,Lovelace,ada@example.org\n"
                                         "grace,Grace,Hopper,grace@example.org\n")

    nbgrader(folder, "db", "student", "import", str(folder / "students.csv"))
    log = nbgrader(folder, "zip_collect", "latency_budget")
    assert "2 files collected, 1 files skipped" in log
    for student in ("ada", "grace"):
        assert (folder / "submitted" / student / "latency_budget" / "latency_budget.ipynb").exists()
    nbgrader(folder, "autograde", "latency_budget")
    nbgrader(folder, "generate_feedback", "latency_budget")

    full = samples.FULL["latency_budget"]
    assert exported(folder, "latency_budget") == {"ada": full, "grace": full}
    for student in ("ada", "grace"):
        page = (folder / "feedback" / student / "latency_budget" / "latency_budget.html").read_text()
        assert not submission.feedback_leaks(page, submission.hidden_lines("latency_budget"))


def test_a_student_who_signals_the_grader_does_not_stop_the_batch(folder):
    # nbgrader autograde takes students in order: the attacker first, then a classmate
    samples.write_submissions(folder / "submitted", {"a_signal": "signal", "b_next": "signal_next"},
                              targets_only=True)
    for student in ("a_signal", "b_next"):
        for other in course.ASSIGNMENTS:
            if other != "batching":
                shutil.rmtree(folder / "submitted" / student / other, ignore_errors=True)
    nbgrader(folder, "autograde", "batching")
    assert exported(folder, "batching") == dict.fromkeys(("a_signal", "b_next"), samples.FULL["batching"])


def test_autograde_without_the_instructor_secret_grades_nobody(folder):
    samples.write_submissions(folder / "submitted", {"ada": "correct"}, targets_only=False)
    log = nbgrader(folder, "autograde", "batching", secret=None, check=False)
    assert "No grading secret" in log and "python -m hwopt.course.grading secret" in log
    assert not (folder / "autograded" / "ada" / "batching" / "batching.ipynb").exists()


def test_a_bad_kernel_setting_stops_grading_and_is_named(folder, monkeypatch):
    samples.write_submissions(folder / "submitted", {"ada": "correct"}, targets_only=False)
    log = nbgrader(folder, "autograde", "batching", check=False, **{settings.THREADS.name: "two"})
    assert f"{settings.THREADS.name} must be a positive whole number of threads; got 'two'" in log
    assert not (folder / "autograded" / "ada" / "batching" / "batching.ipynb").exists()
    monkeypatch.setenv(settings.SECRET.name, "workflow test")
    monkeypatch.setenv(settings.MEMORY_GB.name, "-1")
    with pytest.raises(SystemExit, match=f"{settings.MEMORY_GB.name} must be a positive finite number"):
        grade.grade_class(folder, assignments=["batching"], log=lambda *_: None)
