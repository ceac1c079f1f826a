"""Grading a class in parallel: Dask workers on a PostgreSQL gradebook give every grade cell the score that
serial grading (one worker, SQLite) gives, and a fork bomb in one worker's submission fails no other's."""

import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "autograder"))
import grade_class  # noqa: E402
import samples  # noqa: E402

ASSIGNMENTS = ("latency_budget", "batching")
CLASS = {"ada": "correct", "bob": "wrong", "cy": "blank", "dee": "batching_slip"}  # full, partial, no marks
HOLD_S = 20  # the fork bomb keeps its processes this long, while the other worker grades classmates


def test_one_worker_unless_the_gradebook_takes_parallel_writers():
    sqlite, server = "sqlite:///gradebook.db", "postgresql://grader@127.0.0.1/hwopt"
    said = []
    assert grade_class.plan_workers(None, sqlite, None, said.append) == 1
    assert "SQLite" in "".join(said) or len(grade_class.os.sched_getaffinity(0)) == 1
    assert grade_class.plan_workers(None, server, None) == len(grade_class.os.sched_getaffinity(0))
    assert grade_class.plan_workers(3, server, None) == 3
    assert grade_class.plan_workers(1, sqlite, None) == 1
    with pytest.raises(ValueError, match="workers: 2 workers need a gradebook that takes parallel writers"):
        grade_class.plan_workers(2, sqlite, None)
    with pytest.raises(ValueError, match="scheduler: a cluster's workers need a gradebook server"):
        grade_class.plan_workers(None, sqlite, "tcp://127.0.0.1:8786")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="workers must be a positive integer"):
            grade_class.plan_workers(bad, server, None)


def graded_class(tmp_path: Path, name: str, students: dict[str, str], assignments=ASSIGNMENTS, **options):
    """A course with these sample students' submissions, graded; (rows, {grade cell: scores}, order done)."""
    course = grade_class.prepare_course(tmp_path / name)
    samples.write_submissions(course / "submitted", students)
    return grade(course, assignments, **options)


def grade(course: Path, assignments=ASSIGNMENTS, **options):
    from nbgrader.api import Gradebook

    done = []  # (student, assignment) in the order their rows came back
    rows = grade_class.grade_class(course, assignments=assignments,
                                   log=lambda line: done.append(tuple(line.split()[:2])), **options)
    api = grade_class.make_api(course, db_url=options.get("db_url"))
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        cells = {(sub.student.id, a.name, nb.name, g.name): (g.auto_score, g.manual_score, g.max_score)
                 for a in gb.assignments for sub in a.submissions for nb in sub.notebooks for g in nb.grades}
    return rows, cells, done


@pytest.fixture(autouse=True)
def demo_secret(monkeypatch):
    monkeypatch.setenv("HWOPT_GRADER_SECRET", grade_class.DEMO_SECRET)


@pytest.mark.slow
def test_dask_workers_on_postgresql_give_every_grade_cell_the_serial_score(tmp_path, postgres_url,
                                                                            grading_sandbox):
    serial_rows, serial_cells, _ = graded_class(tmp_path, "serial", CLASS, workers=1)
    parallel_rows, parallel_cells, _ = graded_class(tmp_path, "parallel", CLASS, workers=2,
                                                    db_url=postgres_url)
    assert len(serial_cells) >= 2 * len(CLASS) * len(ASSIGNMENTS)  # every student's every grade cell
    assert parallel_cells == serial_cells
    same = lambda rows: [(r.student, r.assignment, r.score, r.max_score, r.status, r.notes) for r in rows]  # noqa: E731
    assert same(parallel_rows) == same(serial_rows)
    assert {r.score for r in serial_rows} >= {0.0, 12.0} and len({r.score for r in serial_rows}) > 3


def fork_bomb_that_holds() -> nbformat.NotebookNode:
    """The fork-bomb sample's latency_budget, keeping its processes HOLD_S seconds before it goes on."""
    nb = samples.submission("fork_bomb", "latency_budget")
    bomb = next(c for c in nb.cells if samples.FORK_BOMB in c.source)
    bomb.source = bomb.source.replace(samples.FORK_BOMB, samples.FORK_BOMB + f"time.sleep({HOLD_S})\n")
    return nb


@pytest.mark.slow
def test_a_fork_bomb_in_one_worker_fails_no_honest_submission_in_another(tmp_path, postgres_url,
                                                                      grading_sandbox):
    course = grade_class.prepare_course(tmp_path / "bombed")
    honest = {f"honest{i}": "correct" for i in range(1, 5)}
    samples.write_submissions(course / "submitted", honest)
    bomb = course / "submitted" / "a_bomb" / "latency_budget"  # graded first: the other worker takes the rest
    bomb.mkdir(parents=True)
    nbformat.write(fork_bomb_that_holds(), bomb / "latency_budget.ipynb")
    start = time.perf_counter()
    rows, _, done = grade(course, ("latency_budget",), workers=2, db_url=postgres_url, timeout_s=HOLD_S + 40)
    by_student = {(r.student, r.assignment): r for r in rows}
    assert by_student["a_bomb", "latency_budget"].score == 12.0  # the bomb's own work still counts
    assert by_student["a_bomb", "latency_budget"].seconds > HOLD_S
    honest_latency = [by_student[s, "latency_budget"] for s in honest]
    assert [(r.score, r.status) for r in honest_latency] == [(12.0, "ok")] * len(honest)
    # graded on the other worker while the bomb held its processes (its task began first, ended after them)
    while_bombed = done[:done.index(("a_bomb", "latency_budget"))]
    assert len(while_bombed) >= 2, (done, time.perf_counter() - start)


@pytest.fixture
def existing_cluster(tmp_path):
    """A Dask cluster started as the README says an instructor starts one: `dask scheduler` and `dask worker`
    processes, autograder/ on PYTHONPATH and the kit's Dask settings, one thread per worker; its address."""
    import json
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT / "autograder"), "DASK_CONFIG": str(grade_class.DASK_CONFIG)}
    dask = str(Path(sys.executable).parent / "dask")  # the environment's own `dask` command
    info = tmp_path / "scheduler.json"
    logs = (tmp_path / "scheduler.log").open("w"), (tmp_path / "worker.log").open("w")
    scheduler = subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                  "--scheduler-file", str(info)], env=env, stdout=logs[0], stderr=logs[0])
    worker = subprocess.Popen([dask, "worker", "--scheduler-file", str(info), "--nworkers", "2", "--nthreads",
                               "1", "--no-dashboard"], env=env, stdout=logs[1], stderr=logs[1])
    try:
        from distributed import Client

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


@pytest.mark.slow
def test_a_class_graded_on_an_existing_cluster_gets_the_serial_scores(tmp_path, postgres_url, grading_sandbox,
                                                                      existing_cluster):
    students = {"ada": "correct", "bob": "wrong"}
    serial_rows, serial_cells, _ = graded_class(tmp_path, "serial", students, ("latency_budget",), workers=1)
    rows, cells, _ = graded_class(tmp_path, "cluster", students, ("latency_budget",), db_url=postgres_url,
                                  scheduler=existing_cluster)
    assert cells == serial_cells and len(cells) >= 2 * len(students)
    assert [(r.student, r.score, r.status) for r in rows] == [(r.student, r.score, r.status)
                                                               for r in serial_rows]
    assert len({r.score for r in rows}) == 2  # the correct and the wrong submission score differently
    assert worker_settings(existing_cluster) == [tuple(grade_class.cluster_config().values())] * 2
    assert scheduler_saturation(existing_cluster) == 1.0


def worker_settings(address: str) -> list[tuple]:
    """Each worker of the cluster at address: its values of the grading cluster's Dask settings."""
    from distributed import Client

    keys = list(grade_class.cluster_config())
    with Client(address) as client:
        return list(client.run(lambda: tuple(__import__("dask").config.get(key) for key in keys)).values())


def scheduler_saturation(address: str) -> float:
    """Tasks the scheduler at address sends a worker per thread before that worker finishes one."""
    from distributed import Client

    with Client(address) as client:
        return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.WORKER_SATURATION)


def test_the_kits_cluster_runs_without_dasks_profiler_ticks_slowly_and_sends_one_task_at_a_time():
    settings = grade_class.cluster_config()
    assert settings["distributed.worker.profile.enabled"] is False  # it samples every thread every 10 ms
    assert settings["distributed.admin.tick.interval"] == "1s"  # Dask's: 20 ms
    assert settings["distributed.scheduler.worker-saturation"] == 1.0  # Dask's 1.1: two tasks a worker
    with grade_class.local_cluster(2) as cluster:
        assert worker_settings(cluster.scheduler_address) == [tuple(settings.values())] * 2
        assert scheduler_saturation(cluster.scheduler_address) == 1.0
