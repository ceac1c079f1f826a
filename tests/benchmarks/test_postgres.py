"""benchmarks.postgres: a private PostgreSQL server, for the report's parallel rounds and the tests."""

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import create_engine, inspect, text

from benchmarks import postgres


@pytest.mark.slow
def test_a_local_server_takes_parallel_writers_and_leaves_nothing_behind(postgres_url):
    engine = create_engine(postgres_url, pool_size=4)
    try:
        with engine.begin() as db:
            db.execute(text("CREATE TABLE grades (student TEXT PRIMARY KEY, score REAL)"))

        def write(i):
            with engine.begin() as db:
                db.execute(text("INSERT INTO grades VALUES (:s, :v)"), {"s": f"s{i}", "v": float(i)})

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(write, range(40)))
        with engine.connect() as db:
            assert db.execute(text("SELECT COUNT(*), SUM(score) FROM grades")).one() == (40, sum(range(40)))
            db.execute(text("DROP TABLE grades"))
            db.commit()
    finally:
        engine.dispose()
    assert postgres_url.startswith("postgresql://postgres@127.0.0.1:")

@pytest.mark.slow
def test_a_database_made_from_a_template_starts_as_its_copy(postgres_server):
    template = postgres_server.create_database("template_copied")
    engine = create_engine(template)
    try:
        with engine.begin() as db:
            db.execute(text("CREATE TABLE grades (student TEXT PRIMARY KEY)"))
            db.execute(text("INSERT INTO grades VALUES ('ada')"))
    finally:
        engine.dispose()  # nothing may be connected to a template while it is copied
    copy = create_engine(postgres_server.create_database("from_template", template="template_copied"))
    try:
        with copy.connect() as db:
            assert db.execute(text("SELECT student FROM grades")).scalars().all() == ["ada"]
    finally:
        copy.dispose()
    with pytest.raises(ValueError, match="template must be a plain name"):
        postgres_server.create_database("another", template="x; DROP")


@pytest.mark.slow
def test_each_test_gets_a_database_of_its_own(postgres_url):
    engine = create_engine(postgres_url)
    try:
        assert inspect(engine).get_table_names() == []  # nothing of another test's
    finally:
        engine.dispose()

@pytest.mark.slow
def test_stopping_a_server_removes_its_folder():
    if postgres.why_no_server():
        pytest.skip(postgres.why_no_server())
    server = postgres.LocalServer("scratch").start()
    folder = server.folder
    assert (folder / "data" / "postmaster.pid").exists()
    server.stop()
    assert not folder.exists() and server.folder is None
    with pytest.raises(RuntimeError, match="not running"):
        assert server.url

def test_a_database_name_is_a_plain_name():
    with pytest.raises(ValueError, match="database must be a plain name"):
        postgres.LocalServer("grades; DROP TABLE")
    with pytest.raises(RuntimeError, match="not running"):
        postgres.LocalServer().create_database("another")

def test_the_server_programs_are_found_where_debian_puts_them():
    found = postgres.server_bin_dir()
    assert found is None or (found / "initdb").exists()
    if os.environ.get("CI", "").lower() == "true":
        assert postgres.why_no_server() is None  # `make test` installs postgresql
