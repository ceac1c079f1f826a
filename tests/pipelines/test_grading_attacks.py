"""Attacks on the grader, each graded end to end by the real pipeline (`python -m hwopt.course.grading grade`,
nbgrader's autograde and generate_feedback, the sandboxed kernel) and each failing if its defence is removed:
links and FIFOs in a submission, the grader's log reached through the kernel's inherited streams, output that
bypasses the caps (display updates), student HTML and JavaScript, writes past the scratch space, hidden case
values printed after the cases, files smuggled into the feedback folder, and a notebook that sleeps through
every cell (the wall-clock cap per notebook)."""

import csv
import os
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import nbformat
import pytest

from hwopt.course.grading import course, samples, settings
from hwopt.course.grading.course import ROOT
from tests.pipelines.support import TIMEOUT_S

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grading_sandbox")]

ASSIGNMENT = "batching"  # the quickest assignment to grade; every defence is the grader's, not the notebook's
FULL = samples.FULL[ASSIGNMENT]
SECRET = "attack tests: not a secret"
EARLIER_LOG = "an earlier student's line in the grader's log\n"
FORGED = "[AutogradeApp | ERROR] FORGED-BY-STUDENT"
# Spelled in pieces in the notebook: the page must not hold what the kernel displays (its source is shown).
SCRIPT = "<script>document.title='BY-STUDENT'</script>"
ONERROR = "<img src=x onerror=\"alert('BY-STUDENT')\">"
FLOOD_MIB = 8  # one display update of this size: above the notebook cap (5 MB) by far
SCRATCH_MIB = int(settings.SCRATCH_MB.default) + 64  # past the scratch space, in /tmp and in its folder
ATTACK_TIMEOUT_S = 15  # per cell: writing and sending that much takes seconds on a busy machine

CHANNELS = f"""
import os
from IPython.display import HTML, display

_read = []  # every regular file this kernel holds open (the grader's log, when the kernel inherits it)
for _fd in os.listdir("/proc/self/fd"):
    try:
        _target = os.readlink(f"/proc/self/fd/{{_fd}}")
        if _target.startswith("/") and os.path.isfile(f"/proc/self/fd/{{_fd}}"):
            with open(f"/proc/self/fd/{{_fd}}", "rb") as _f:
                _read.append(_f.read(300).decode(errors="replace"))
            with open(f"/proc/self/fd/{{_fd}}", "ab") as _f:
                _f.write(b"\\n{FORGED}\\n")
    except OSError:
        pass
print("LOG-READ:", _read)
display(HTML({SCRIPT[:4]!r} + {SCRIPT[4:] + ONERROR[:13]!r} + {ONERROR[13:]!r}))


def _write(path, mib):
    try:
        with open(path, "wb") as f:
            for _ in range(mib):
                f.write(bytes(2**20))
        return "wrote it all"
    except OSError as err:
        return type(err).__name__
    finally:
        if os.path.exists(path):
            os.remove(path)


print("SCRATCH:", _write("/tmp/big", {SCRATCH_MIB}), _write("big", {SCRATCH_MIB}))
_handle = display(HTML("a display to update"), display_id=True)
_handle.update("U" * {FLOOD_MIB} * 2**20)  # last: the cell's output past the cap is dropped
"""
CAPTURE = """
_captured = []
_fit_batch_latency = fit_batch_latency


def fit_batch_latency(*args, **kwargs):  # the graded function, keeping every argument the grader passes
    _captured.append((args, kwargs))
    return _fit_batch_latency(*args, **kwargs)
"""
PRINT_CAPTURED = "\nprint('CAPTURED:', _captured)\n"
SLEEP = "\nimport time\ntime.sleep({s})\n"
IGNORE_INTERRUPT = """
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    time.sleep(1)
"""


def solved():
    return samples.solved(ASSIGNMENT)


def appended(nb, grade_id: str, code: str):
    samples.cell(nb, grade_id).source += code
    return nb


def write(folder: Path, student: str, nb=None) -> Path:
    """submitted/<student>/<assignment>/ with nb (default: the correct solution) as its notebook."""
    target = folder / "submitted" / student / ASSIGNMENT
    target.mkdir(parents=True)
    nbformat.write(solved() if nb is None else nb, target / f"{ASSIGNMENT}.ipynb")
    return target


def grade_course(folder: Path, log: Path, **env) -> dict:
    """The course folder graded by the command an instructor runs, its stderr appended to log (holding an
    earlier line); the report's rows {student: Row}."""
    log.write_text(EARLIER_LOG)
    with log.open("a") as err:
        subprocess.run([sys.executable, "-m", "hwopt.course.grading", "grade", "--course", str(folder),
                        "--timeout", str(env.pop("timeout_s", TIMEOUT_S))], cwd=ROOT, stderr=err,
                       stdout=subprocess.DEVNULL, env={**os.environ, settings.SECRET.name: SECRET, **env},
                       timeout=1200, check=False)
    with (folder / "grades_report.csv").open() as f:
        return {r["student"]: r for r in csv.DictReader(f) if r["assignment"] == ASSIGNMENT}


def prepared(folder: Path) -> Path:
    course.prepare_course(folder)
    return folder


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """A class of attackers on one assignment, graded once: (course folder, rows, the grader's log)."""
    folder = prepared(tmp_path_factory.mktemp("attacks") / "course")
    secret_file = tmp_path_factory.mktemp("instructor") / "grading-secret"
    secret_file.write_text(SECRET)
    instructor_files = {"source.ipynb": ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb",
                        "quiz_answers.json": ROOT / samples.QUIZ_KEY, "secret": secret_file,
                        "gradebook.db": folder / "gradebook.db", "environ": Path("/proc/self/environ")}
    beside = write(folder, "link_beside")
    for name, target in instructor_files.items():
        (beside / name).symlink_to(target)
    link_notebook = folder / "submitted" / "link_notebook" / ASSIGNMENT
    link_notebook.mkdir(parents=True)
    (link_notebook / f"{ASSIGNMENT}.ipynb").symlink_to(instructor_files["source.ipynb"])
    os.mkfifo(write(folder, "fifo") / "pipe")
    linked_folder = folder / "submitted" / "linked_folder"
    linked_folder.mkdir()
    (linked_folder / ASSIGNMENT).symlink_to(ROOT / "source" / ASSIGNMENT, target_is_directory=True)
    extra = write(folder, "extra_files")
    (extra / "notes.txt").write_text("a file beside the notebook")
    (extra / "data").mkdir()
    (extra / "data" / "x.csv").write_text("1,2\n")
    write(folder, "channels", appended(solved(), "fit", CHANNELS))
    capture = appended(solved(), "fit", CAPTURE)
    write(folder, "capture", appended(capture, "misses", PRINT_CAPTURED))
    write(folder, "honest")
    log = folder.parent / "grader.log"
    rows = grade_course(folder, log, timeout_s=ATTACK_TIMEOUT_S)
    return folder, rows, log


def autograded(folder: Path, student: str) -> nbformat.NotebookNode:
    return nbformat.read(folder / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)


def feedback(folder: Path, student: str) -> str:
    return (folder / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()


def outputs_text(nb) -> str:
    return "\n".join(str(out) for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs)


@pytest.mark.parametrize("student, named", [
    ("link_beside", "a symbolic link"), ("link_notebook", "a symbolic link"), ("fifo", "a FIFO"),
    ("linked_folder", "a symbolic link")])
def test_a_submission_holding_a_link_or_fifo_is_refused_before_anything_copies_it(attacked, student, named):
    folder, rows, _ = attacked
    assert (float(rows[student]["score"]), rows[student]["status"]) == (0.0, "refused")
    assert named in rows[student]["notes"] and "only regular files are graded" in rows[student]["notes"]
    assert not (folder / "autograded" / student).exists()
    assert not (folder / "feedback" / student).exists()
    assert (float(rows["honest"]["score"]), rows["honest"]["status"]) == (FULL, "ok")  # the class is graded


def test_nbgraders_own_autograde_stops_at_a_link_before_copying(attacked, monkeypatch):
    folder, _, _ = attacked
    monkeypatch.setenv(settings.SECRET.name, SECRET)
    api = course.make_api(folder, TIMEOUT_S)
    result = api.autograde(ASSIGNMENT, "link_beside", force=True, create=True)
    assert not result["success"] and "only regular files are graded" in result["error"]
    assert not (folder / "autograded" / "link_beside").exists()


def test_feedback_returns_only_its_pages(attacked):
    folder, rows, _ = attacked
    assert (float(rows["extra_files"]["score"]), rows["extra_files"]["status"]) == (FULL, "ok")
    assert (folder / "autograded" / "extra_files" / ASSIGNMENT / "notes.txt").exists()  # nbgrader copied it
    returned = {p.relative_to(folder / "feedback" / "extra_files" / ASSIGNMENT).as_posix()
                for p in (folder / "feedback" / "extra_files" / ASSIGNMENT).rglob("*")}
    assert returned <= {f"{ASSIGNMENT}.html", "timestamp.txt"} and f"{ASSIGNMENT}.html" in returned


def test_a_correct_attacker_earns_its_work_and_the_graders_log_stays_intact(attacked):
    folder, rows, log = attacked
    assert (float(rows["channels"]["score"]), rows["channels"]["status"]) == (FULL, "ok")
    text = log.read_text()
    assert text.startswith(EARLIER_LOG) and "FORGED-BY-STUDENT" not in text
    shown = outputs_text(autograded(folder, "channels"))
    assert "LOG-READ:" in shown and "earlier student" not in shown  # the kernel ran, and read nothing of it


def test_display_updates_count_against_the_output_caps(attacked):
    folder, rows, _ = attacked
    graded = folder / "autograded" / "channels" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert graded.stat().st_size < 6_000_000
    assert (folder / "feedback" / "channels" / ASSIGNMENT / f"{ASSIGNMENT}.html").stat().st_size < 6_000_000
    assert "output beyond the byte cap dropped" in rows["channels"]["notes"]


def test_student_html_and_javascript_are_sanitised(attacked):
    folder, _, _ = attacked
    page, graded = feedback(folder, "channels"), outputs_text(autograded(folder, "channels"))
    for text in (page, graded):
        assert "<script>document.title" not in text and "<img src=x onerror" not in text  # escaped at most
    assert "LOG-READ:" in page  # the cell's plain output is shown


def test_writes_stop_at_the_scratch_space(attacked):
    folder, _, _ = attacked
    shown = outputs_text(autograded(folder, "channels"))
    assert "SCRATCH:" in shown and "wrote it all" not in shown


def test_feedback_withholds_what_the_kernel_printed_after_the_hidden_cases(attacked):
    folder, rows, _ = attacked
    assert (float(rows["capture"]["score"]), rows["capture"]["status"]) == (FULL, "ok")
    assert "CAPTURED: [((" in outputs_text(autograded(folder, "capture"))  # it kept and printed the cases
    page = feedback(folder, "capture")
    assert "CAPTURED: [(" not in page and "received hidden cases" in page


def test_a_notebook_that_sleeps_through_every_cell_stops_at_the_notebooks_time_cap(tmp_path):
    folder = prepared(tmp_path / "course")
    nb = solved()
    for grade_id in ("fit", "knee"):
        appended(nb, grade_id, SLEEP.format(s=6))
    write(folder, "sleeper", appended(nb, "misses", IGNORE_INTERRUPT))
    cap_s = 25
    rows = grade_course(folder, tmp_path / "grader.log", timeout_s=8,
                        **{settings.NOTEBOOK_TIMEOUT_S.name: str(cap_s)})
    row = rows["sleeper"]
    assert row["status"] == "ok" and "the notebook's time cap was reached" in row["notes"]
    assert float(row["score"]) < FULL  # the parts after the cap score 0
    assert float(row["seconds"]) < cap_s + 30  # the cap, plus the kernel's start, feedback and the gradebook
    last = samples.cell(autograded(folder, "sleeper"), "test_misses")
    assert f"the notebook's {cap_s} s ran out" in str(last.outputs)



def nbgrader(folder: Path, *args: str) -> str:
    """One nbgrader command against the course folder, as an instructor types it; its output."""
    bin_dir = Path(sys.executable).parent
    out = subprocess.run([bin_dir / "nbgrader", *args, f"--CourseDirectory.root={folder}",
                          f"--CourseDirectory.db_url=sqlite:///{folder / 'gradebook.db'}"], cwd=ROOT,
                         env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout + out.stderr


def test_the_exchange_collects_neither_a_link_nor_what_it_points_to(tmp_path):
    folder = prepared(tmp_path / "course")
    secret = tmp_path / "instructor-secret"
    secret.write_text(SECRET)
    inbound = tmp_path / "exchange" / "hwopt" / "inbound" / f"ada+{ASSIGNMENT}+2026-01-05 10:00:00.000000 UTC"
    inbound.mkdir(parents=True)
    nbformat.write(solved(), inbound / f"{ASSIGNMENT}.ipynb")
    (inbound / "timestamp.txt").write_text("2026-01-05 10:00:00.000000 UTC")
    (inbound / "secret").symlink_to(secret)  # a file the student could not read, were it copied
    nbgrader(folder, "db", "student", "add", "ada")
    log = nbgrader(folder, "collect", ASSIGNMENT, f"--Exchange.root={tmp_path / 'exchange'}")
    collected = folder / "submitted" / "ada" / ASSIGNMENT
    assert (collected / f"{ASSIGNMENT}.ipynb").is_file()
    assert not (collected / "secret").exists() and not (collected / "secret").is_symlink()
    assert "Not collected from" in log and "secret" in log
    assert not [p for p in collected.rglob("*") if p.is_file() and SECRET in p.read_text(errors="replace")]
    rows = grade_course(folder, tmp_path / "grader.log")
    assert rows["ada"]["status"] == "ok"


def test_zip_collect_never_brings_a_link_nor_what_it_points_to(tmp_path):
    folder = prepared(tmp_path / "course")
    secret = tmp_path / "instructor-secret"
    secret.write_text("the instructor's own")
    archive = folder / "downloaded" / ASSIGNMENT / "archive"
    archive.mkdir(parents=True)
    notebook = tmp_path / f"{ASSIGNMENT}.ipynb"
    nbformat.write(solved(), notebook)
    with tarfile.open(archive / "submissions.tar.gz", "w:gz") as tar:  # links as an LMS export cannot hold
        tar.add(notebook, arcname=f"ada_1001_{ASSIGNMENT}.ipynb")
        for name, target in ((f"grace_1002_{ASSIGNMENT}.ipynb", secret), ("grace_1002_secret", secret)):
            member = tarfile.TarInfo(name)
            member.type, member.linkname = tarfile.SYMTYPE, str(target)
            tar.addfile(member)
    with zipfile.ZipFile(archive / "more.zip", "w") as zf:
        entry = zipfile.ZipInfo(f"alan_1003_{ASSIGNMENT}.ipynb")
        entry.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(entry, str(secret))
    nbgrader(folder, "generate_assignment", ASSIGNMENT)  # zip_collect keeps the released notebooks' names
    log = nbgrader(folder, "zip_collect", ASSIGNMENT)
    collected = list((folder / "submitted").rglob("*"))
    assert (folder / "submitted" / "ada" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").is_file(), log
    assert not [p for p in collected if p.is_symlink()]
    assert not [p for p in collected if p.is_file() and "instructor's own" in p.read_text(errors="replace")]
