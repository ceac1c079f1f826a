"""The class-grading pipeline on the samples: fair scores, explicit failures, no leaks, safe reruns, attacks
that gain nothing and change nothing outside their own folder; and the same class graded in parallel (Dask
workers on a PostgreSQL gradebook, or an instructor's own cluster started as the README says) gives every
grade cell the score serial grading gives, while a fork bomb in one worker's submission holds its processes.
Both halves compare against the one graded sample class of the session (tests/pipelines/conftest.py)."""

import csv
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from distributed import Client
from nbgrader.api import Gradebook

from hwopt.course.grading import cluster, course, demo, grade, samples, settings, submission
from hwopt.course.grading.course import ROOT
from tests.pipelines.support import TIMEOUT_S, grade_cells
from tests.support import dask_scheduler_saturation, dask_worker_settings

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grading_sandbox")]


@pytest.fixture
def graded(graded_samples):
    """The session's graded samples (tests.pipelines.conftest)."""
    return graded_samples


def test_every_sample_gets_its_expected_score_and_status(graded):
    rows = graded.rows
    got = {key: (rows[key].score, rows[key].status) for key in samples.EXPECTED}
    assert got == samples.EXPECTED
    others = {key: row.status for key, row in rows.items() if key not in samples.EXPECTED}
    assert set(others.values()) == {"not submitted"}


def test_hangs_tampering_and_lost_metadata_are_noted_in_the_report(graded):
    rows = graded.rows
    notes = {key: "; ".join(row.notes) for key, row in rows.items()}
    assert "kernel restarted" in notes[("sigint_loop", "latency_budget")]
    assert "timed out" in notes[("infinite_loop", "latency_budget")]
    assert "edited locked cells restored: test_on_budget" in notes[("edited_tests", "latency_budget")]
    assert "deleted locked cells restored: test_non_monotonic" in notes[("edited_tests", "latency_budget")]
    assert "metadata restored" in notes[("stripped", "latency_budget")]
    assert "JSON" in notes[("invalid_json", "quiz")]
    report = []
    for folder in graded.folders:
        with (folder / "grades_report.csv").open() as f:
            report += list(csv.DictReader(f))
    assert len(report) == len(rows) and {"score", "max_score", "status", "notes"} <= set(report[0])


def test_feedback_never_shows_hidden_tests(graded):
    pages = [page for folder in graded.folders for page in (folder / "feedback").glob("*/*/*.html")]
    assert len(pages) == sum(row.status == "ok" for row in graded.rows.values())
    for page in pages:
        text = page.read_text()
        assert "HIDDEN TESTS" not in text
        assert not submission.feedback_leaks(text, submission.hidden_lines(page.parent.name)), page
    folder = graded.folder_of["wrong"]
    wrong = (folder / "feedback" / "wrong" / "latency_budget" / "latency_budget.html").read_text()
    assert "a batch size measured twice, once over the budget: wrong value" in wrong  # what a case tests


def test_export_lists_failed_submissions_with_zero_and_the_report_says_why(graded):
    exported = {}
    for folder in graded.folders:
        with (folder / "grades.csv").open() as f:
            exported |= {(r["student_id"], r["assignment"]): float(r["score"]) for r in csv.DictReader(f)}
    assert set(exported) == set(graded.rows)  # every student and assignment, graded or not
    assert exported[("invalid_json", "quiz")] == 0.0 and graded.rows[("invalid_json", "quiz")].status != "ok"
    assert exported[("correct", "latency_budget")] == samples.FULL["latency_budget"]


def test_regrading_is_idempotent_and_keeps_manual_grades(graded, monkeypatch):
    monkeypatch.setenv(settings.SECRET.name, demo.DEMO_SECRET)  # the demo class's secret
    folder = graded.folder_of["wrong"]
    api = course.make_api(folder, TIMEOUT_S)  # the timeout the class was graded with
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        on_budget = gb.find_grade("test_on_budget", "latency_budget", "latency_budget", "wrong")
        assert on_budget.auto_score == 0
        on_budget.manual_score = 1.0  # the instructor accepts "<" after reading the code
        gb.db.commit()
    first = grade.grade_one(api, folder, "latency_budget", "wrong", force=True)
    second = grade.grade_one(api, folder, "latency_budget", "wrong", force=True)
    assert (first.score, second.score, second.status) == (7.0, 7.0, "ok")
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        on_budget = gb.find_grade("test_on_budget", "latency_budget", "latency_budget", "wrong")
        assert on_budget.manual_score == 1.0


def owned_files(*folders: Path) -> list[Path]:
    """Files that an attack sample planted or wrote into (it writes "PW" + "NED")."""
    marker = b"PW" + b"NED"
    return [p for folder in folders for p in folder.rglob("*")
            if p.is_file() and (p.name == "owned.txt" or marker in p.read_bytes())]


def test_attacks_change_nothing_outside_their_own_folder(graded):
    assert owned_files(*graded.folders, ROOT / "source", ROOT / "release", ROOT / "autograder") == []
    for folder in graded.folders:
        with sqlite3.connect(folder / "gradebook.db") as con:
            assert con.execute("SELECT COUNT(*) FROM grade WHERE manual_score = 999").fetchone() == (0,)


def test_a_flood_of_output_is_capped_in_the_notebook_and_said_in_the_feedback(graded):
    folder, rows = graded.folder_of["flood"], graded.rows
    for assignment in samples.TARGETS["flood"]:
        notebook = folder / "autograded" / "flood" / assignment / f"{assignment}.ipynb"
        assert notebook.stat().st_size < 6_000_000
        page = (folder / "feedback" / "flood" / assignment / f"{assignment}.html").read_text()
        assert "[grader: output beyond" in page
        assert "output beyond the byte cap dropped" in "; ".join(rows[("flood", assignment)].notes)


def test_feedback_shows_the_verdict_of_every_part_without_hidden_values(graded):
    folder = graded.folder_of["wrong"]
    page = (folder / "feedback" / "wrong" / "latency_budget" / "latency_budget.html").read_text()
    assert "Graded outside your notebook" in page
    assert "a latency exactly equal to the budget: wrong value" in page


def test_a_fork_bomb_leaves_no_process_behind(graded):
    assert graded.rows["fork_bomb", "latency_budget"].status == "ok"
    here = tempfile.gettempdir()  # this test process's own folder (tests/conftest.py): its kernels' files
    grading_kernels = [p for p in psutil.process_iter(["cmdline"])
                       if "hwopt.course.grading.kernel" in (p.info["cmdline"] or [])
                       and any(here in part for part in p.info["cmdline"])]  # ours, and forks
    assert grading_kernels == []


# ---- the same class graded in parallel ---------------------------------------------------------------------
ASSIGNMENTS = ("latency_budget", "batching")
CLASS = ("correct", "wrong", "blank", "batching_slip")  # full, partial and no marks, under the samples' names
BOMB = "a_bomb"  # its task is submitted first: the other worker grades the class while it holds
HOLD_S = 12  # the fork bomb keeps its processes this long


def class_folder(folder: Path, students, targets_only: bool = True) -> Path:
    """A course folder with these sample students' submissions, as the session's graded samples have them."""
    folder = course.prepare_course(folder)
    samples.write_submissions(folder / "submitted", {s: s for s in students}, targets_only=targets_only)
    return folder


def graded_as(rows) -> list[tuple]:
    """What must not depend on how a class is graded: each row's student, assignment, score, status, notes."""
    return [(r.student, r.assignment, r.score, r.max_score, r.status, r.notes) for r in rows]


def serial(graded_samples, students, assignments) -> tuple[list[tuple], dict]:
    """The session's serial grading of these students and assignments: (graded_as rows, grade cells)."""
    rows = [graded_samples.rows[s, a] for s in sorted(students) for a in assignments]
    cells = {k: v for k, v in graded_samples.cells.items() if k[0] in students and k[1] in assignments}
    return graded_as(rows), cells


def fork_bomb_that_holds() -> nbformat.NotebookNode:
    """The fork-bomb sample's latency_budget, keeping its processes HOLD_S seconds before it goes on."""
    nb = samples.submission("fork_bomb", "latency_budget")
    bomb = next(c for c in nb.cells if samples.FORK_BOMB in c.source)
    bomb.source = bomb.source.replace(samples.FORK_BOMB, samples.FORK_BOMB + f"time.sleep({HOLD_S})\n")
    return nb


@pytest.fixture(scope="module")
def graded_in_parallel(tmp_path_factory, postgres_server):
    """The class and the bomb graded by two local Dask workers into a fresh PostgreSQL gradebook:
    (rows, grade cells, (student, assignment) in the order their rows came back)."""
    folder = class_folder(tmp_path_factory.mktemp("parallel") / "course", CLASS)
    bomb = folder / "submitted" / BOMB / "latency_budget"
    bomb.mkdir(parents=True)
    nbformat.write(fork_bomb_that_holds(), bomb / "latency_budget.ipynb")
    db_url = postgres_server.create_database("parallel")
    done = []
    with pytest.MonkeyPatch.context() as env:
        env.setenv(settings.SECRET.name, demo.DEMO_SECRET)  # the samples' cases
        rows = grade.grade_class(folder, assignments=ASSIGNMENTS, workers=2, db_url=db_url,
                                 timeout_s=HOLD_S + 40, log=lambda line: done.append(tuple(line.split()[:2])))
    return rows, grade_cells(folder, db_url), done


def test_dask_workers_on_postgresql_give_every_grade_cell_the_serial_score(graded_in_parallel,
                                                                            graded_samples):
    rows, cells, _ = graded_in_parallel
    serial_rows, serial_cells = serial(graded_samples, CLASS, ASSIGNMENTS)
    assert len(serial_cells) >= 2 * 3 * len(ASSIGNMENTS)  # every grade cell of every submission, 2+ each
    assert {k: v for k, v in cells.items() if k[0] != BOMB} == serial_cells
    assert graded_as(r for r in rows if r.student != BOMB) == serial_rows
    scores = {r.score for r in rows}
    assert scores >= {0.0, samples.FULL["latency_budget"]} and len(scores) > 3


def test_a_fork_bomb_in_one_worker_fails_no_submission_in_another(graded_in_parallel):
    rows, _, done = graded_in_parallel
    bombed = next(r for r in rows if (r.student, r.assignment) == (BOMB, "latency_budget"))
    # the bomb's own work still counts
    assert (bombed.score, bombed.status) == (samples.FULL["latency_budget"], "ok")
    assert bombed.seconds > HOLD_S
    # graded on the other worker while the bomb held its processes (its task began first, ended after them)
    before = done[:done.index((BOMB, "latency_budget"))]
    while_bombed = [r for r in rows if (r.student, r.assignment) in before and r.status == "ok"]
    assert len(while_bombed) >= 2, done


@pytest.fixture
def existing_cluster(tmp_path):
    """A Dask cluster started as the README says an instructor starts one: `dask scheduler` and `dask worker`
    processes with the course's Dask settings and the grader secret (the samples'), one thread per worker;
    its address."""
    env = {**os.environ, "DASK_CONFIG": str(cluster.DASK_CONFIG), settings.SECRET.name: demo.DEMO_SECRET}
    dask = str(Path(sys.executable).parent / "dask")  # the environment's own `dask` command
    info = tmp_path / "scheduler.json"
    logs = (tmp_path / "scheduler.log").open("w"), (tmp_path / "worker.log").open("w")
    scheduler = subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                  "--scheduler-file", str(info)], env=env, stdout=logs[0], stderr=logs[0])
    worker = subprocess.Popen([dask, "worker", "--scheduler-file", str(info), "--nworkers", "2", "--nthreads",
                               "1", "--no-dashboard"], env=env, stdout=logs[1], stderr=logs[1])
    try:
        deadline = time.monotonic() + 60
        while not info.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(info.read_text())["address"]
        with Client(address) as client:
            client.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for process in (worker, scheduler):
            process.terminate()
            process.wait(timeout=30)
        for log in logs:
            log.close()


def test_a_class_graded_on_an_existing_cluster_gets_the_serial_scores(tmp_path, postgres_url, graded_samples,
                                                                      existing_cluster, monkeypatch):
    students, assignments = ("correct", "wrong"), ("latency_budget",)
    monkeypatch.setenv(settings.SECRET.name, demo.DEMO_SECRET)
    folder = class_folder(tmp_path / "course", students)
    rows = grade.grade_class(folder, assignments=assignments, db_url=postgres_url, scheduler=existing_cluster,
                             log=lambda *_: None)
    serial_rows, serial_cells = serial(graded_samples, students, assignments)
    assert grade_cells(folder, postgres_url) == serial_cells and len(serial_cells) >= 2 * len(students)
    assert graded_as(rows) == serial_rows
    assert len({r.score for r in rows}) == 2  # the correct and the wrong submission score differently
    config = cluster.cluster_config()
    assert dask_worker_settings(existing_cluster, list(config)) == [tuple(config.values())] * 2
    assert dask_scheduler_saturation(existing_cluster) == 1.0
