"""The gradebook's database: SQLite for one grader, a PostgreSQL server when a class is graded in parallel.

nbgrader keeps its grades through SQLAlchemy, so its db_url takes any SQLAlchemy URL. SQLite takes one
writer at a time (parallel graders fail with "database is locked"); a server such as PostgreSQL takes many.
LocalServer starts a private PostgreSQL server (Debian's `postgresql` package) for tests and benchmarks:
its data folder in a temporary directory, listening on 127.0.0.1 at a free port only, trusting local
connections, stopped and removed afterwards. A class is graded against the instructor's own server (README).
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
from pathlib import Path

SERVER_USER = "postgres"  # the account Debian's package creates: PostgreSQL refuses to run as root
DRIVER = "psycopg"  # SQLAlchemy 2.1's default PostgreSQL driver (the course group installs psycopg[binary])
INSTALL_HINT = "install it (Debian/Ubuntu: apt-get install postgresql; or `make gradebook-deps`)"


def takes_parallel_writers(db_url: str) -> bool:
    """True when the gradebook at db_url (an SQLAlchemy URL) is a server that takes parallel writers."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

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
    2-3 ms to plan and under 0.2 ms to run, a dozen times per notebook: planning was most of the server's
    CPU (0.15 s per notebook, two workers on a 2-core EPYC). On psycopg a grading connection prepares each
    query at its first run (prepare_threshold 0) and plans it once (PostgreSQL >= 12's plan_cache_mode):
    0.06 s per notebook, the same rows. Elsewhere (SQLite, other drivers): {}.
    """
    from sqlalchemy.engine import make_url

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

    For grading in a trusted process (students run only in sandboxed kernels; grade_class holds it for a
    class, a worker for each task): on PostgreSQL a fresh engine costs a connection, a server process and
    schema queries, ~25 ms of which this keeps ~3. Gradebook.close still ends its session; the connection
    goes back to the pool; on psycopg, its connections plan each query once (connect_args). When the last
    block ends, the engines are disposed and nbgrader is as it was (a gradebook deleted afterwards and made
    anew at the same path is not mistaken for the old one)."""
    import nbgrader.api as api

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


def server_bin_dir() -> Path | None:
    """The folder of PostgreSQL's server programs (initdb, pg_ctl): on PATH, else Debian's newest."""
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).resolve().parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def why_no_server() -> str | None:
    """Why LocalServer cannot start here (a message naming what is missing), or None if it can."""
    if server_bin_dir() is None:
        return f"a PostgreSQL gradebook needs PostgreSQL's server (initdb, pg_ctl), not found: {INSTALL_HINT}"
    if importlib.util.find_spec(DRIVER) is None:
        return f"a PostgreSQL gradebook needs the {DRIVER} driver: pip install 'psycopg[binary]' (course)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"PostgreSQL run by root needs the user {SERVER_USER!r} (the postgresql package makes it)"
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def traversable_by_all(path: Path) -> bool:
    """True when every folder from / down to path lets other users pass (the server's user must)."""
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [path, *path.parents])


class LocalServer:
    """A private PostgreSQL server on 127.0.0.1 with one database; `with LocalServer() as s: s.url`."""

    def __init__(self, database: str = "gradebook"):
        if not database.isidentifier():
            raise ValueError(f"database must be a plain name (letters, digits, _); got {database!r}")
        self.database, self.port, self.folder = database, None, None

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the database (postgresql://postgres@127.0.0.1:<port>/<database>)."""
        return self.database_url(self.database)

    def database_url(self, database: str) -> str:
        """The SQLAlchemy URL of one of the server's databases."""
        if self.port is None:
            raise RuntimeError("the server is not running: start() it first")
        return f"postgresql://{SERVER_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, database: str) -> str:
        """A new, empty database on the running server; its SQLAlchemy URL."""
        if not database.isidentifier():
            raise ValueError(f"database must be a plain name (letters, digits, _); got {database!r}")
        url = self.database_url(database)  # RuntimeError when not running
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", SERVER_USER, database)
        return url

    def _run(self, program: str, *args: str) -> None:
        as_user = ["runuser", "-u", SERVER_USER, "--"] if os.geteuid() == 0 else []
        cmd = [*as_user, str(server_bin_dir() / program), *args]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=self.folder)
        if out.returncode != 0:
            log = self.folder / "server.log"
            tail = log.read_text()[-800:] if log.exists() else ""
            raise RuntimeError(f"{program} failed: {(out.stderr or out.stdout).strip()[-800:]}\n{tail}")

    def start(self) -> LocalServer:
        """initdb a fresh data folder, start the server on a free port, create the database."""
        reason = why_no_server()
        if reason:
            raise RuntimeError(reason)
        base = Path(tempfile.gettempdir()).resolve()
        if os.geteuid() == 0 and not traversable_by_all(base):
            base = Path("/tmp")  # the server's user must reach its folder
        self.folder = Path(tempfile.mkdtemp(prefix="hwopt-postgres-", dir=base))
        try:
            if os.geteuid() == 0:
                user = pwd.getpwnam(SERVER_USER)
                os.chown(self.folder, user.pw_uid, user.pw_gid)
            data = self.folder / "data"
            self._run("initdb", "-D", str(data), "-U", SERVER_USER, "-A", "trust", "--no-sync", "-E", "UTF8")
            for attempt in range(3):  # the free port may be taken meanwhile: try another
                self.port = free_port()
                options = f"-h 127.0.0.1 -p {self.port} -k {self.folder}"
                try:
                    self._run("pg_ctl", "-D", str(data), "-l", str(self.folder / "server.log"), "-o", options,
                              "-w", "-t", "60", "start")
                    break
                except RuntimeError:
                    if attempt == 2:
                        raise
            self.create_database(self.database)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (if it runs) and remove its folder."""
        if self.folder is None:
            return
        if (self.folder / "data" / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop")
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder, self.port = None, None

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
