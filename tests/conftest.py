"""Shared test setup: plots render off-screen; the session's temporary files are its own and checked.

Every temporary file of the session (this process, the kernels and subprocesses it starts) goes to one fresh
folder, so the check at the end sees what this session left and nothing of another run on the same machine:
an `hwopt-*` entry left there fails the run, naming it.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from benchmarks import postgres
from hwopt.course.grading import sandbox
from hwopt.kernels import ort
from tests.support import skip_outside_ci

os.environ.setdefault("MPLBACKEND", "Agg")

LEFT_BEHIND_PATTERN = "hwopt-*"  # what the toolkit names its temporary folders
SESSION_TMP = Path(tempfile.mkdtemp(prefix="course-tests-"))
os.environ["TMPDIR"] = str(SESSION_TMP)  # subprocesses and kernels inherit it
tempfile.tempdir = None  # tempfile reads TMPDIR again on next use


def left_behind(folder: Path = SESSION_TMP) -> list[str]:
    """Names of the toolkit's temporary entries still in folder."""
    return sorted(p.name for p in folder.glob(LEFT_BEHIND_PATTERN))


def pytest_sessionfinish(session, exitstatus):
    # Lesson kernels are killed when nbval is done with them (no exit handlers run): their ONNX folders are
    # removed the way the toolkit removes a killed kernel's folders on a learner's machine, by the next use.
    ort.remove_stale_temp_dirs(SESSION_TMP)
    leaked = left_behind()
    shutil.rmtree(SESSION_TMP, ignore_errors=True)
    if leaked:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = (f"the test session left {len(leaked)} temporary entries behind: {', '.join(leaked[:10])}"
                   + (" ..." if len(leaked) > 10 else ""))
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(f"ERROR: {message}", red=True, bold=True)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def grading_sandbox():
    """Grading kernels start only in the sandbox (bubblewrap, Linux): without it, skipped saying how to get
    it (macOS, Windows, a Linux without bubblewrap), but fails in CI."""
    reason = sandbox.why_unavailable()
    if reason:
        skip_outside_ci(f"grading tests need the grading sandbox: {reason}")


@pytest.fixture(scope="session")
def postgres_server():
    """A private PostgreSQL server for the session (stopped after); no server: skipped, but fails in CI."""
    reason = postgres.why_no_server()
    if reason:
        skip_outside_ci(reason)
    with postgres.LocalServer() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server):
    """A fresh, empty database of the session's PostgreSQL server for one test: its SQLAlchemy URL."""
    postgres_server.databases = getattr(postgres_server, "databases", 0) + 1
    return postgres_server.create_database(f"test{postgres_server.databases}")

