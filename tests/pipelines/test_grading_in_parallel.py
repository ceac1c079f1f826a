"""Grading a class in parallel: Dask workers on a PostgreSQL gradebook give every grade cell the score that
serial grading (one worker, SQLite: the session's graded samples) gives, while a fork bomb in one worker's
submission holds its processes; and so does an instructor's own cluster, started as the README says."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from distributed import Client

from hwopt.course.grading import cluster, course, demo, grade, samples, settings
from tests.pipelines.support import grade_cells
from tests.support import dask_scheduler_saturation, dask_worker_settings

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grading_sandbox")]
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
    assert {r.score for r in rows} >= {0.0, 12.0} and len({r.score for r in rows}) > 3


def test_a_fork_bomb_in_one_worker_fails_no_submission_in_another(graded_in_parallel):
    rows, _, done = graded_in_parallel
    bombed = next(r for r in rows if (r.student, r.assignment) == (BOMB, "latency_budget"))
    assert (bombed.score, bombed.status) == (12.0, "ok")  # the bomb's own work still counts
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
