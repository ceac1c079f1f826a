"""A course on a JupyterHub, end to end: the instructor releases through nbgrader's exchange, two students
fetch, work, submit and fetch their feedback, all through their own servers on a real JupyterHub.

The hub runs deploy/hub/jupyterhub_config.py (tests/pipelines/jupyterhub_test_config.py sets its addresses and
accounts) on 127.0.0.1 with configurable-http-proxy, PAM's local accounts and the local-process spawner: every
user's server runs as their own account, so the exchange's file permissions are real. The accounts exist only
in a private mount namespace of the hub (its own /etc/passwd and /etc/group), with /srv (the exchange and the
homes) bound from the test's folder: nothing of the machine changes. Students act through the REST endpoints
that nbgrader's Assignments tab calls (/assignments, /assignments/fetch, /submit, /fetch_feedback) and save
their work through Jupyter's contents API, as JupyterLab does; the instructor releases, collects and releases
feedback through the formgrader's API and grades in a shell on the hub (`python -m hwopt.course.grading
grade`). The due date is set through the formgrader between the two submissions: the second is late, and the
late-penalty policy of nbgrader_config.py takes its points, which its feedback explains. Before the
collection, in a terminal on the hub, the late student forges an on-time submission (a folder of her own
claiming an early time, with a link to the instructor's gradebook) and her classmate forges one in her name:
the exchange's collect (hwopt.course.grading.exchange) takes neither the time, the classmate's folder nor
the link. The hub, the proxy
and every server are stopped at the end, and no process of the test's accounts is left.
"""

import csv
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import pytest

from hwopt.course.grading import course, samples, settings
from tests.support import skip_outside_ci

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grading_sandbox")]

HERE = Path(__file__).resolve().parent
INSTRUCTOR, STUDENTS = "hwopt-prof", ("hwopt-ada", "hwopt-grace")
ASSIGNMENT = "batching"
COURSE_ID = "hwopt"
ENV_BIN = Path(sys.executable).parent
SECRET = "hub round trip: not a secret"


def why_no_hub() -> str | None:
    """What this machine lacks for the round trip, or None."""
    if os.geteuid() != 0:
        return "the JupyterHub round trip runs the hub as root (its users' servers run as their own accounts)"
    for tool in ("unshare", "nsenter", "mount", "setpriv"):
        if shutil.which(tool) is None:
            return f"the JupyterHub round trip needs {tool} (util-linux)"
    search = f"{ENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    if shutil.which("configurable-http-proxy", path=search) is None:
        return "the JupyterHub round trip needs configurable-http-proxy: run `make hub-deps` (npm)"
    if not (ENV_BIN / "jupyterhub").exists():
        return "jupyterhub is not installed in the course environment (make env)"
    return None


def reachable(stash: Path, paths) -> list[str]:
    """Shell commands that make the paths reachable by every account in a mount namespace: a folder on the
    way that this machine keeps private (an interpreter under /root) is replaced there by an empty one that
    holds only the entries on the way (bound from the original, through a stash)."""
    private: dict[Path, set[str]] = {}
    for path in paths:
        for folder in reversed(Path(path).parents):
            child = Path(path).parts[len(folder.parts)]
            if folder != Path("/") and not os.stat(folder).st_mode & 0o001:
                private.setdefault(folder, set()).add(child)
    commands = []
    for i, (folder, children) in enumerate(sorted(private.items())):
        kept = stash / f"private-{i}"
        kept.mkdir()
        commands += [f"mount --bind {folder} {kept}", f"mount -t tmpfs -o mode=755 tmpfs {folder}"]
        for child in sorted(children):
            kind = "mkdir" if Path(folder, child).is_dir() else "touch"
            commands += [f"{kind} {folder / child}", f"mount --bind {kept / child} {folder / child}"]
    return commands


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accounts_files(base: Path, names) -> dict[str, tuple[int, Path]]:
    """The hub's /etc/passwd and /etc/group: this machine's, plus one account per name (uid, home) with its
    own group; returns {name: (uid, home as the hub sees it)}."""
    passwd, group = Path("/etc/passwd").read_text(), Path("/etc/group").read_text()
    taken = {int(line.split(":")[2]) for text in (passwd, group) for line in text.splitlines()
             if line.count(":") >= 3}
    uids = [uid for uid in range(61000, 62000) if uid not in taken][: len(names)]
    accounts = {}
    for name, uid in zip(names, uids, strict=True):
        home = Path("/srv/home") / name
        passwd += f"{name}:x:{uid}:{uid}::{home}:/bin/bash\n"
        group += f"{name}:x:{uid}:\n"
        (base / "home" / name).mkdir(parents=True)
        os.chown(base / "home" / name, uid, uid)
        os.chmod(base / "home" / name, 0o700)
        accounts[name] = (uid, home)
    (base / "etc").mkdir()
    (base / "etc" / "passwd").write_text(passwd)
    (base / "etc" / "group").write_text(group)
    return accounts


class Hub:
    """A JupyterHub in a private mount namespace; call() speaks to its REST API and its users' servers."""

    def __init__(self, base: Path):
        self.base, self.token = base, secrets.token_hex(16)
        self.accounts = accounts_files(base, (INSTRUCTOR, *STUDENTS))
        (base / "nbgrader" / "exchange").mkdir(parents=True)
        os.chmod(base / "nbgrader" / "exchange", 0o777)  # nbgrader's documented set-up of the exchange
        (base / "state").mkdir(mode=0o700)
        self.port = free_port()
        env = {**os.environ, "HUB_TEST_PORT": str(self.port), "HUB_TEST_HUB_PORT": str(free_port()),
               "HUB_TEST_PROXY_API_PORT": str(free_port()), "HUB_TEST_STATE": str(base / "state"),
               "HUB_TEST_USERS": " ".join(self.accounts), "HUB_TEST_INSTRUCTORS": INSTRUCTOR,
               "HUB_TEST_TOKEN": self.token, "PATH": f"{ENV_BIN}{os.pathsep}{os.environ['PATH']}"}
        mounts = " && ".join([
            f"mount --bind {base}/etc/passwd /etc/passwd", f"mount --bind {base}/etc/group /etc/group",
            *reachable(base / "state", [Path(sys.executable).resolve(), Path(sys.prefix), course.ROOT]),
            f"mount --bind {base} /srv", f"exec {ENV_BIN}/jupyterhub -f {HERE}/jupyterhub_test_config.py"])
        self.log = (base / "state" / "hub.log").open("w")
        self.process = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", mounts], cwd=base / "state",
            env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        self.wait(lambda: self.call("GET", "/hub/api/", check=False) is not None, "the hub to answer")

    def call(self, method: str, path: str, body=None, token: str | None = None, check: bool = True):
        """One request to the hub or a user's server (path from the hub's root); the JSON it returns."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"token {token or self.token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                text = response.read().decode()
        except (urllib.error.URLError, ConnectionError) as err:
            if check:
                detail = err.read().decode()[:2000] if isinstance(err, urllib.error.HTTPError) else ""
                raise AssertionError(f"{method} {path}: {err} {detail}\n{self.log_tail()}") from None
            return None
        return json.loads(text) if text.strip() else {}

    def wait(self, ready, what: str, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"gave up waiting for {what}\n{self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self) -> str:
        self.log.flush()
        return (self.base / "state" / "hub.log").read_text()[-4000:]

    def start_servers(self) -> dict[str, str]:
        """Every account's server started (at once); each account's own API token."""
        for name in self.accounts:
            self.call("POST", f"/hub/api/users/{name}/server")
        tokens = {name: self.call("POST", f"/hub/api/users/{name}/tokens", {"note": "round trip"})["token"]
                  for name in self.accounts}
        for name in self.accounts:
            self.wait(lambda name=name: self.call("GET", f"/hub/api/users/{name}")["servers"].get("", {}).get(
                "ready"), f"{name}'s server")
        return tokens

    def as_user(self, name: str, *command: str, env: dict) -> subprocess.CompletedProcess:
        """A command run as the account on the hub's machine (its namespace), as in a terminal there."""
        uid, home = self.accounts[name]
        argv = ["nsenter", "--mount", f"--target={self.process.pid}", "setpriv", f"--reuid={uid}",
                f"--regid={uid}", "--clear-groups", "env", "-i", f"HOME={home}", f"USER={name}",
                f"PATH={ENV_BIN}:/usr/bin:/bin", *(f"{k}={v}" for k, v in env.items()), *command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd="/")

    def stop(self) -> list[int]:
        """Stop the hub (it stops the servers and the proxy); kill what is left; the pids that were left."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()
        uids = {uid for uid, _ in self.accounts.values()}
        left = [pid for pid, uid in processes() if uid in uids]
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left


def processes() -> list[tuple[int, int]]:
    """(pid, real uid) of every process of this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            uid = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid:"))
            found.append((int(entry.name), uid))
    return found


def instructor_course(hub: Hub) -> Path:
    """The instructor's course folder (~/hwopt): the course's nbgrader_config.py pointed at it."""
    uid, home = hub.accounts[INSTRUCTOR]
    folder = hub.base / "home" / INSTRUCTOR / "hwopt"
    course.prepare_course(folder)
    (folder / "nbgrader_config.py").write_text(
        f"load_subconfig({str(course.ROOT / course.CONFIG)!r})\n"
        f"c.CourseDirectory.root = {str(home / 'hwopt')!r}\n"
        f"c.CourseDirectory.db_url = 'sqlite:///{home / 'hwopt' / 'gradebook.db'}'\n")
    for path in [folder, *folder.iterdir()]:
        os.lchown(path, uid, uid)
    return folder


# Run as a student in a terminal on the hub: a folder in the exchange's inbound that claims to be `student`'s
# submission of the assignment, newest of all (its name's time) yet made on time (its timestamp.txt), with the
# student's notebook, a link to the instructor's gradebook, and the secret of the forger's last submission
# (nbgrader's cache keeps it; feedback is found by it) if they have one.
FORGE = """
import glob, os, sys, shutil
student, notebook, target = sys.argv[1:]
inbound = "/srv/nbgrader/exchange/{COURSE_ID}/inbound"
folder = f"{inbound}/{student}+{ASSIGNMENT}+2099-01-01 00:00:00.000000 UTC+{os.environ['USER']}"
os.mkdir(folder)
shutil.copy(notebook, f"{folder}/{ASSIGNMENT}.ipynb")
open(f"{folder}/timestamp.txt", "w").write("2000-01-01 00:00:00.000000 UTC")
os.symlink(target, f"{folder}/notes.txt")
cache = os.path.expanduser("~/.local/share/jupyter/nbgrader_cache/{COURSE_ID}")
for secret in sorted(glob.glob(f"{cache}/{student}+{ASSIGNMENT}+*/submission_secret.txt"))[-1:]:
    shutil.copy(secret, f"{folder}/submission_secret.txt")
os.chmod(folder, 0o755)
""".replace("{COURSE_ID}", COURSE_ID).replace("{ASSIGNMENT}", ASSIGNMENT)


def forge(hub: Hub, by: str, student: str, notebook: str) -> None:
    """`by` puts a forged submission for `student` into the exchange (FORGE)."""
    gradebook = hub.accounts[INSTRUCTOR][1] / "hwopt" / "gradebook.db"
    done = hub.as_user(by, "python", "-c", FORGE, student, notebook, str(gradebook), env={})
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def hub():
    reason = why_no_hub()
    if reason:
        skip_outside_ci(reason)
    base = Path(tempfile.mkdtemp(prefix="hwopt-hub-"))
    os.chmod(base, 0o755)  # the hub's /srv
    hub = Hub(base)
    try:
        yield hub
    finally:
        left = hub.stop()
        shutil.rmtree(base, ignore_errors=True)
        assert not left, f"processes of the hub's accounts were still running: {left}"


def test_release_fetch_submit_collect_grade_and_feedback_through_the_hub(hub):
    start = time.perf_counter()
    folder = instructor_course(hub)
    tokens = hub.start_servers()
    prof = f"/user/{INSTRUCTOR}"

    def student(name, method, path, body=None):
        return hub.call(method, f"/user/{name}{path}", body, token=tokens[name])

    # the instructor: generate and release the assignment to the exchange (formgrader's buttons)
    hub.call("POST", f"{prof}/formgrader/api/assignment/{ASSIGNMENT}/assign", {}, token=tokens[INSTRUCTOR])
    released = hub.call("POST", f"{prof}/formgrader/api/assignment/{ASSIGNMENT}/release", {},
                        token=tokens[INSTRUCTOR])
    assert released["success"], released

    # students: the Assignments tab lists it; fetch, work (save through the contents API), submit
    for name in STUDENTS:
        listed = student(name, "GET", f"/assignments?course_id={COURSE_ID}")
        assert [a["status"] for a in listed["value"] if a["assignment_id"] == ASSIGNMENT] == ["released"]
        student(name, "POST", "/assignments/fetch", {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT})
        work = nbformat.writes(samples.solved(ASSIGNMENT))
        student(name, "PUT", f"/api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb",
                {"type": "notebook", "format": "json", "content": json.loads(work)})
        if name == STUDENTS[1]:  # the instructor sets the due date now: the second student is late
            due = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
            hub.call("PUT", f"{prof}/formgrader/api/assignment/{ASSIGNMENT}",
                     {"duedate_notimezone": due, "duedate_timezone": "UTC"}, token=tokens[INSTRUCTOR])
        submitted = student(name, "POST", "/assignments/submit",
                            {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT})
        assert submitted["success"], submitted

    # in a terminal on the hub: the late student forges an on-time submission, and a classmate one in her name
    # with an empty notebook; the exchange's collect takes neither time nor folder nor link
    late_home = hub.accounts[STUDENTS[1]][1]
    forge(hub, STUDENTS[1], STUDENTS[1], str(late_home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"))
    forge(hub, STUDENTS[0], STUDENTS[1], "/dev/null")

    # the instructor: collect, grade in a shell on the hub, release the feedback
    collected = hub.call("POST", f"{prof}/formgrader/api/assignment/{ASSIGNMENT}/collect", {},
                         token=tokens[INSTRUCTOR])
    assert collected["success"], collected
    kept = folder / "submitted" / STUDENTS[1] / ASSIGNMENT
    assert not (kept / "notes.txt").exists()  # the link to the gradebook was not followed
    assert not (kept / "timestamp.txt").read_text().startswith("2000"), "the forged time was believed"
    assert f"names {STUDENTS[1]} but is owned by {STUDENTS[0]}" in collected["log"]
    assert "claims to be submitted at 2000-01-01 00:00:00" in collected["log"]
    assert "Not collected from" in collected["log"] and "notes.txt" in collected["log"]
    graded = hub.as_user(INSTRUCTOR, "python", "-m", "hwopt.course.grading", "grade", "--course",
                         str(hub.accounts[INSTRUCTOR][1] / "hwopt"), "--assignments", ASSIGNMENT,
                         env={settings.SECRET.name: SECRET, "TMPDIR": str(hub.accounts[INSTRUCTOR][1])})
    assert graded.returncode == 0, graded.stdout + graded.stderr
    released = hub.call("POST", f"{prof}/formgrader/api/assignment/{ASSIGNMENT}/release_feedback", {},
                        token=tokens[INSTRUCTOR])
    assert released["success"], released

    with (folder / "grades_report.csv").open() as f:
        report = {row["student"]: row for row in csv.DictReader(f) if row["assignment"] == ASSIGNMENT}
    on_time, late = (report[name] for name in STUDENTS)
    assert (float(on_time["score"]), float(on_time["late_penalty"]), on_time["status"]) == (9.0, 0.0, "ok")
    assert (float(late["raw_score"]), float(late["late_penalty"]), float(late["score"])) == (9.0, 0.9, 8.1)

    # students fetch their feedback: the late one reads why points were taken
    for name in STUDENTS:
        listed = student(name, "POST", "/assignments/fetch_feedback",
                         {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT})
        mine = [s for a in listed["value"] if a["status"] == "submitted" for s in a["submissions"]]
        assert [s["has_local_feedback"] for s in mine] == [True], mine
        page = next(p for p in (hub.base / "home" / name / ASSIGNMENT / "feedback").glob("*/*.html"))
        text = page.read_text()
        if name == STUDENTS[1]:
            assert "after the due date" in text and "Late penalty: 0.9 points" in text
        else:
            assert "before the due date" in text and "No late penalty" in text
    print(f"JupyterHub round trip: {time.perf_counter() - start:.1f} s")
