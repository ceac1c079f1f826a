"""The gradebook's database: SQLite for one grader, a PostgreSQL server when a class is graded in parallel.

nbgrader keeps its grades through SQLAlchemy, so its db_url takes any SQLAlchemy URL. SQLite takes one
writer at a time (parallel graders fail with "database is locked"); a server such as PostgreSQL takes many.
A class is graded against the instructor's own server (README); the tests and the performance report start
a private one (benchmarks/postgres.py). The gradebook's records of a submission that nbgrader could not grade
(a zero, so that exports list the student) and the scores read back are here too.
"""

from __future__ import annotations

import contextlib
import threading
import warnings

import nbgrader.api as api
from nbgrader.api import Gradebook
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

DRIVER = "psycopg"  # SQLAlchemy 2.1's default PostgreSQL driver (the course group installs psycopg[binary])


def takes_parallel_writers(db_url: str) -> bool:
    """True when the gradebook at db_url (an SQLAlchemy URL) is a server that takes parallel writers."""
    try:
        backend = make_url(db_url).get_backend_name()
    except (ArgumentError, TypeError, ValueError, AttributeError):
        raise ValueError(f"db_url must be an SQLAlchemy URL such as postgresql://user@host/db; "
                         f"got {db_url!r}") from None
    return backend != "sqlite"


GENERIC_PLANS = "-c plan_cache_mode=force_generic_plan"  # libpq options: a prepared query is planned once


def connect_args(db_url) -> dict:
    """The driver's connection arguments (SQLAlchemy's connect_args) for grading into the gradebook at db_url.

    nbgrader's ORM loads each Grade and Comment with a query of nested score subqueries that PostgreSQL takes
    far longer to plan than to run, a dozen times per notebook: planning was most of the server's CPU. On
    psycopg a grading connection prepares each query at its first run (prepare_threshold 0) and plans it
    once (PostgreSQL >= 12's plan_cache_mode), with the same rows. Elsewhere (SQLite, other drivers): {}.
    """
    url = make_url(db_url)
    if url.get_backend_name() != "postgresql" or url.get_driver_name() != DRIVER:
        return {}
    given = url.query.get("options", ())  # the URL's own libpq options are kept
    return {"prepare_threshold": 0,
            "options": " ".join([*([given] if isinstance(given, str) else given), GENERIC_PLANS])}


_engines: dict = {}  # the engine per gradebook URL while kept_connections is in force
_with_tables: set = set()  # the engines whose tables nbgrader has made (or found) meanwhile
_kept = {"users": 0, "nbgrader": None, "lock": threading.Lock()}  # blocks inside it; nbgrader's own functions


@contextlib.contextmanager
def kept_connections():
    """In the block, nbgrader's Gradebook reuses one SQLAlchemy engine (and its pooled connections) per URL
    and checks the gradebook's tables once per engine, instead of connecting anew and querying the schema
    of every table at each of the ~30 gradebook accesses that grading one submission makes.

    For grading in a trusted process (students run only in sandboxed kernels; grading.grade holds it for
    a class, a worker for each task): on PostgreSQL a fresh engine costs a connection, a server process and
    schema queries, which this pays once. Gradebook.close still ends its session; the connection
    goes back to the pool; on psycopg, its connections plan each query once (connect_args). When the last
    block ends, the engines are disposed and nbgrader is as it was (a gradebook deleted afterwards and made
    anew at the same path is not mistaken for the old one)."""
    with _kept["lock"]:
        if _kept["users"] == 0:
            _kept["nbgrader"] = api.create_engine, api.Base.metadata.create_all, api.Gradebook.close
            _share_engines(api, *_kept["nbgrader"][:2])
        _kept["users"] += 1
    try:
        yield
    finally:
        with _kept["lock"]:
            _kept["users"] -= 1
            if _kept["users"] == 0:
                api.create_engine, api.Base.metadata.create_all, api.Gradebook.close = _kept["nbgrader"]
                for engine in _engines.values():
                    engine.dispose()
                _engines.clear()
                _with_tables.clear()


def _share_engines(api, create_engine, create_all) -> None:
    def shared_engine(db_url, **options):
        key = (str(db_url), tuple(sorted(options.items())))
        if key not in _engines:
            given = options.pop("connect_args", {})
            _engines[key] = create_engine(db_url, connect_args={**connect_args(db_url), **given}, **options)
        return _engines[key]

    def create_tables_once(bind=None, **options):
        if bind not in _with_tables:
            create_all(bind=bind, **options)
            _with_tables.add(bind)

    api.create_engine = shared_engine
    api.Base.metadata.create_all = create_tables_once
    api.Gradebook.close = lambda self: self.db.remove()



def register_students(api, students) -> None:
    """Put every student in the gradebook before grading, so that parallel workers never create one twice."""
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        for student in students:
            gb.update_or_create_student(student)


def record_zero(api, assignment: str, student: str) -> None:
    """A gradebook submission with no automatic credit, so exports show the student (with 0, as the report
    explains). A grader's manual score is kept, flagged for review as nbgrader's autograde flags it."""
    with warnings.catch_warnings(), Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        warnings.simplefilter("ignore")  # SQLAlchemy autoflush chatter inside nbgrader's add_submission
        gb.update_or_create_student(student)
        gb.update_or_create_submission(assignment, student)
        for notebook in gb.find_submission(assignment, student).notebooks:
            for grade in notebook.grades:
                grade.auto_score = 0.0
                grade.needs_manual_grade = grade.manual_score is not None
        gb.db.commit()


def awaiting_people(api, assignment: str, student: str) -> list[str]:
    """The cells of a submission that a person must grade or review in formgrader ("written_answer: 3 points
    to grade", "written_answer: graded 2 of 3, to review" after a regrade)."""
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        found = []
        for notebook in gb.find_submission(assignment, student).notebooks:
            for grade in notebook.grades:
                if not grade.needs_manual_grade:
                    continue
                if grade.manual_score is None:
                    found.append(f"{grade.name}: {grade.max_score:g} points to grade")
                else:
                    found.append(f"{grade.name}: graded {grade.manual_score:g} of {grade.max_score:g}, "
                                 "to review")
        return found


def read_score(api, assignment: str, student: str) -> tuple[float, float]:
    """(score, max_score) of a submission from the gradebook (manual grades included)."""
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        sub = gb.find_submission(assignment, student)
        return float(sub.score), float(sub.max_score)


def max_score(api, assignment: str) -> float:
    """Points available in an assignment."""
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        return float(gb.find_assignment(assignment).max_score)
