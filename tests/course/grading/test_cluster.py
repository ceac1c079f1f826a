"""course.grading.cluster: how many grading workers a class gets, and the settings of a grading cluster."""

import pytest

from hwopt.course.grading import cluster, settings
from tests.support import dask_scheduler_saturation, dask_worker_settings


def test_one_worker_unless_the_gradebook_takes_parallel_writers():
    sqlite, server = "sqlite:///gradebook.db", "postgresql://grader@127.0.0.1/hwopt"
    said = []
    assert cluster.plan_workers(None, sqlite, None, said.append) == 1
    assert ("SQLite" in "".join(said) and settings.DB_URL.name in "".join(said)) or cluster.cores() == 1
    assert cluster.plan_workers(None, server, None) == cluster.cores()
    assert cluster.plan_workers(3, server, None) == 3
    assert cluster.plan_workers(1, sqlite, None) == 1
    with pytest.raises(ValueError, match="workers: 2 workers need a gradebook that takes parallel writers"):
        cluster.plan_workers(2, sqlite, None)
    with pytest.raises(ValueError, match="scheduler: a cluster's workers need a gradebook server"):
        cluster.plan_workers(None, sqlite, "tcp://127.0.0.1:8786")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="workers must be a positive integer"):
            cluster.plan_workers(bad, server, None)


def test_a_grading_cluster_runs_without_dasks_profiler_ticks_slowly_and_sends_one_task_at_a_time():
    config = cluster.cluster_config()
    assert config["distributed.worker.profile.enabled"] is False  # it samples every thread every 10 ms
    assert config["distributed.admin.tick.interval"] == "1s"  # Dask's: 20 ms
    assert config["distributed.scheduler.worker-saturation"] == 1.0  # Dask's 1.1: two tasks a worker
    with cluster.local_cluster(2) as local:
        assert dask_worker_settings(local.scheduler_address, list(config)) == [tuple(config.values())] * 2
        assert dask_scheduler_saturation(local.scheduler_address) == 1.0
