"""benchmarks.course: what running the course costs; quick mode runs the assignments and skips the lessons."""

from pathlib import Path

from benchmarks import course, report

ROOT = Path(__file__).resolve().parents[2]


def test_quick_mode_runs_the_assignments_and_skips_the_lessons(monkeypatch, tmp_path):
    for path in ("notebooks/01_x.ipynb", "source/a/a.ipynb"):
        (tmp_path / path).parent.mkdir(parents=True)
        (tmp_path / path).write_text("{}")
    monkeypatch.setattr(course, "ROOT", tmp_path)
    monkeypatch.setattr(course, "course_notebooks", lambda: [tmp_path / "notebooks/01_x.ipynb",
                                                             tmp_path / "source/a/a.ipynb"])
    monkeypatch.setattr(course, "execute_notebook", lambda p, **kw: report.notebook_row(p.name, 1.0, "ok"))
    rows, _ = course.measure_notebooks(quick=True)
    assert [r["status"] for r in rows] == ["skipped", "ok"]
