"""course.grading.course: a course folder, its gradebook's URL, and nbgrader's configuration for it."""

from hwopt.course.grading import course, settings


def test_the_gradebook_is_the_given_url_else_the_setting_else_sqlite_in_the_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(settings.DB_URL.name, raising=False)
    assert course.gradebook_url(tmp_path) == f"sqlite:///{tmp_path / 'gradebook.db'}"
    monkeypatch.setenv(settings.DB_URL.name, "postgresql://grader@db/hwopt")
    assert course.gradebook_url(tmp_path) == "postgresql://grader@db/hwopt"
    assert course.gradebook_url(tmp_path, "postgresql://other@db/x") == "postgresql://other@db/x"


def test_a_course_folder_links_the_repositorys_source_and_takes_its_configuration(tmp_path, monkeypatch):
    monkeypatch.delenv(settings.DB_URL.name, raising=False)
    folder = course.prepare_course(tmp_path / "a" / "course")
    assert (folder / "source").resolve() == (course.ROOT / "source").resolve()
    assert course.prepare_course(folder) == folder  # again: nothing changes
    config = course.load_config(folder, timeout_s=7)
    assert config.CourseDirectory.root == str(folder) and config.Execute.timeout == 7
    assert config.Execute.kernel_name == "hwopt-grader"  # the repository's nbgrader_config.py
    assert config.CourseDirectory.db_url == f"sqlite:///{folder / 'gradebook.db'}"


def test_every_assignment_has_its_notebook_in_source_and_release():
    for assignment in course.ASSIGNMENTS:
        for kind in ("source", "release"):
            nb = course.load_notebook(kind, assignment)
            assert nb.cells and course.notebook_name(assignment) == assignment
    folders = sorted(p.name for p in (course.ROOT / "source").iterdir() if p.is_dir())
    assert folders == sorted(course.ASSIGNMENTS)
