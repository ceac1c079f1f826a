"""The instructor's nbgrader commands, as the README gives them, work from the repository root.

An LMS zip (Canvas-style names, one file downloaded from Colab and renamed by the browser) goes through
db student import, zip_collect, autograde, generate_feedback and export.
"""

import csv
import os
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

pytestmark = pytest.mark.slow


def nbgrader(course: Path, *args: str) -> str:
    """Run one nbgrader command from the repository root against the course folder; return its output."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "HWOPT_GRADER_TIMEOUT_S": "10"}
    out = subprocess.run([bin_dir / "nbgrader", *args, f"--CourseDirectory.root={course}",
                          f"--CourseDirectory.db_url=sqlite:///{course / 'gradebook.db'}"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
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
