"""Grading workers: how many a class gets, and a Dask cluster that runs their tasks.

A class is graded by one process where the gradebook takes one writer (SQLite), else by one worker process
per core (or as asked) of a Dask cluster: a local one, started with the course's Dask settings
(autograder/dask.yaml), or an instructor's own (its scheduler's address), whose workers reach the course
folder and the gradebook and import this toolkit.
"""

from __future__ import annotations

import contextlib
import os

import dask
import yaml
from distributed import Client, LocalCluster, as_completed

from hwopt.course.grading import course, gradebook, settings

DASK_CONFIG = course.ROOT / "autograder" / "dask.yaml"  # a grading cluster's Dask settings


def cores() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def plan_workers(workers: int | None, db_url: str, scheduler: str | None, log=print) -> int:
    """How many grading workers: workers, default one per core; one where the gradebook takes one writer."""
    parallel_ok = gradebook.takes_parallel_writers(db_url)
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise ValueError(f"workers must be a positive integer (or None: one per core); got {workers!r}")
    if scheduler and not parallel_ok:
        raise ValueError(f"scheduler: a cluster's workers need a gradebook server (db_url postgresql://...), "
                         f"got db_url {db_url!r}")
    if workers is None:
        workers = cores()
        if not parallel_ok and workers > 1:
            log(f"one grading worker: the SQLite gradebook takes one writer at a time (for {workers}, "
                f"grade into a PostgreSQL server: --db-url or {settings.DB_URL.name})")
            workers = 1
    elif workers > 1 and not parallel_ok:
        raise ValueError(f"workers: {workers} workers need a gradebook that takes parallel writers "
                         f"(db_url postgresql://...); SQLite does not, got db_url {db_url!r}")
    return workers


def cluster_config() -> dict:
    """The Dask settings of a grading cluster (DASK_CONFIG), dotted as dask.config.set takes them."""
    def dotted(tree: dict, prefix: str = ""):
        for key, value in tree.items():
            if isinstance(value, dict):
                yield from dotted(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", value

    return dict(dotted(yaml.safe_load(DASK_CONFIG.read_text())))


def local_cluster(workers: int):
    """A Dask cluster on this machine for grading: `workers` processes of one thread each."""
    with dask.config.set(cluster_config()):  # the workers start here and take the settings along
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                            memory_limit=0,  # kernels' memory is the sandbox's to limit
                            silence_logs=40)  # errors only


def run(function, tasks: list[tuple[str, str]], workers: int, scheduler: str | None, done, failed, **task):
    """function(student=, assignment=, **task) for each (student, assignment) on a Dask cluster; done(result)
    as each one finishes, done(failed(student, assignment, why)) for one whose worker died under it.

    scheduler: an existing cluster's address (its workers import this toolkit and run with --nthreads 1);
    None starts a local one of `workers`.
    """
    with contextlib.ExitStack() as stack:
        cluster = scheduler or stack.enter_context(local_cluster(workers))
        client = stack.enter_context(Client(cluster))
        futures = {client.submit(function, assignment=a, student=s, pure=False, **task): (s, a)
                   for s, a in tasks}
        for future in as_completed(futures):
            student, assignment = futures[future]
            try:
                result = future.result()
            except Exception as err:  # the worker died under the task (Dask gave up retrying it)
                result = failed(student, assignment, f"{type(err).__name__}: {err}")
            done(result)
