"""A private PostgreSQL server for the report's parallel grading rounds and for the tests.

LocalServer starts Debian's `postgresql` server with its data folder in a temporary directory, listening on
127.0.0.1 at a free port only, trusting local connections, stopped and removed afterwards. It is not part of
the toolkit: an instructor grades into their own server (README, "Grading in parallel").
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

from hwopt.course.grading.gradebook import DRIVER

SERVER_USER = "postgres"  # the account Debian's package creates: PostgreSQL refuses to run as root
INSTALL_HINT = "install it (Debian/Ubuntu: apt-get install postgresql; or `make gradebook-deps`)"


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

    def create_database(self, database: str, template: str | None = None) -> str:
        """A new database on the running server, empty or a copy of the database `template` (which nothing may
        be connected to); its SQLAlchemy URL."""
        for arg, name in (("database", database), ("template", template)):
            plain = isinstance(name, str) and name.isidentifier()
            if not plain and not (arg == "template" and name is None):
                raise ValueError(f"{arg} must be a plain name (letters, digits, _); got {name!r}")
        url = self.database_url(database)  # RuntimeError when not running
        copy = ["-T", template] if template else []
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", SERVER_USER, *copy, database)
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
