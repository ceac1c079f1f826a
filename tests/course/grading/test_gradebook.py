"""course.grading.gradebook: which gradebooks take parallel writers; one engine per gradebook in a run."""

import os
import sys
from types import SimpleNamespace

import nbgrader.api as api
import pytest
from sqlalchemy import event, text

from hwopt.course.grading import gradebook


def test_sqlite_takes_one_writer_and_a_server_many():
    assert not gradebook.takes_parallel_writers("sqlite:///gradebook.db")
    assert gradebook.takes_parallel_writers("postgresql://grader@db.example.org/hwopt")
    assert gradebook.takes_parallel_writers("postgresql+psycopg://grader@127.0.0.1:5432/hwopt")
    for bad in ("", "gradebook.db", None):
        with pytest.raises(ValueError, match="db_url must be an SQLAlchemy URL"):
            gradebook.takes_parallel_writers(bad)


def test_kept_connections_give_every_gradebook_of_a_url_one_engine_for_the_block(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    url, other = (f"sqlite:///{tmp_path / name}" for name in ("a.db", "b.db"))
    nbgraders_own = api.create_engine, api.Base.metadata.create_all, api.Gradebook.close
    with api.Gradebook(url) as gb:
        fresh = gb.engine
    with api.Gradebook(url) as gb:
        assert gb.engine is not fresh  # nbgrader's own: an engine per gradebook
    with gradebook.kept_connections():
        with api.Gradebook(url) as gb:
            gb.add_student("ada")
            first = gb.engine
        with gradebook.kept_connections(), api.Gradebook(url) as gb:  # nested: the same engines
            assert gb.engine is first and gb.find_student("ada").id == "ada"
        with api.Gradebook(other) as gb:
            assert gb.engine is not first
            gb.add_student("bob")  # a new gradebook still gets its tables
        assert len(gradebook._engines) == 2 and gradebook._with_tables == set(gradebook._engines.values())
        statements = []
        event.listen(first, "before_cursor_execute", lambda *args: statements.append(args[2]))
        with api.Gradebook(url):
            pass
        assert "sqlite_master" in statements[0] and len(statements) == 2, statements  # tables, the course
        assert not [s for s in statements if "PRAGMA" in s]  # and no table's schema queried again
    assert (api.create_engine, api.Base.metadata.create_all, api.Gradebook.close) == nbgraders_own
    assert gradebook._engines == {} and gradebook._with_tables == set()
    (tmp_path / "a.db").unlink()  # a gradebook made anew at the same path afterwards is a new one
    with gradebook.kept_connections(), api.Gradebook(url) as gb:
        assert gb.engine is not first and gb.find_student  # its tables made again
        assert [s.id for s in gb.students] == []


def test_a_psycopg_connection_plans_each_query_once_keeping_the_urls_own_options():
    plan_once = {"prepare_threshold": 0, "options": gradebook.GENERIC_PLANS}
    assert gradebook.connect_args("postgresql://grader@db.example.org/hwopt") == plan_once
    assert gradebook.connect_args("postgresql+psycopg://grader@127.0.0.1/hwopt?sslmode=require") == plan_once
    mine = gradebook.connect_args("postgresql+psycopg://grader@127.0.0.1/hwopt?options=-c%20work_mem%3D8MB")
    assert mine["options"] == f"-c work_mem=8MB {gradebook.GENERIC_PLANS}"
    for elsewhere in ("sqlite:///gradebook.db", "postgresql+psycopg2://grader@127.0.0.1/hwopt"):
        assert gradebook.connect_args(elsewhere) == {}


@pytest.mark.slow
def test_kept_connections_to_a_server_plan_each_query_once(postgres_url, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    with gradebook.kept_connections(), api.Gradebook(postgres_url) as gb:
        gb.add_student("ada")
        assert gb.db.execute(text("SHOW plan_cache_mode")).scalar() == "force_generic_plan"
        assert gb.db.connection().connection.dbapi_connection.prepare_threshold == 0
        for _ in range(3):  # prepared at its first run, planned once, the same row each time
            assert gb.find_student("ada").id == "ada"
    with api.Gradebook(postgres_url) as gb:  # outside the block: nbgrader's own engine, the server's setting
        assert gb.db.execute(text("SHOW plan_cache_mode")).scalar() == "auto"


def test_awaiting_people_names_the_answers_to_grade_and_record_zero_keeps_a_graders_points(tmp_path,
                                                                                        monkeypatch):
    bin_dir = os.path.dirname(sys.executable)  # nbgrader makes a new gradebook with alembic
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with api.Gradebook(db_url, "course") as gb:
        gb.add_assignment("a")
        gb.add_notebook("a", "a")
        gb.add_grade_cell("test", "a", "a", max_score=2, cell_type="code")
        gb.add_grade_cell("written_answer", "a", "a", max_score=3, cell_type="markdown")
        gb.add_student("ada")
        gb.add_submission("a", "ada")
        for name, auto in (("test", 2.0), ("written_answer", None)):
            grade = gb.find_grade(name, "a", "a", "ada")
            grade.auto_score, grade.needs_manual_grade = auto, auto is None
        gb.db.commit()
    course = SimpleNamespace(coursedir=SimpleNamespace(db_url=db_url, course_id="course"))
    assert gradebook.awaiting_people(course, "a", "ada") == ["written_answer: 3 points to grade"]
    with api.Gradebook(db_url, "course") as gb:
        gb.find_grade("written_answer", "a", "a", "ada").manual_score = 2.0
        gb.db.commit()
    gradebook.record_zero(course, "a", "ada")  # a later submission that could not be graded
    assert gradebook.awaiting_people(course, "a", "ada") == ["written_answer: graded 2 of 3, to review"]
    assert gradebook.read_score(course, "a", "ada") == (2.0, 5.0)
