"""Helpers shared by the tests (`tests.support`: pytest's `pythonpath` setting puts the root on the path)."""

import os

import pytest
from distributed import Client


def skip_outside_ci(reason: str) -> None:
    """Skip the test for reason; in CI (CI=true), where `make test` installs what is missing, fail instead."""
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI must run this test)")
    pytest.skip(reason)


def dask_worker_settings(address: str, keys) -> list[tuple]:
    """Each worker of the Dask cluster at address: its values of these Dask settings (dotted keys)."""
    with Client(address) as client:
        return list(client.run(lambda: tuple(__import__("dask").config.get(key) for key in keys)).values())


def dask_scheduler_saturation(address: str) -> float:
    """Tasks the scheduler at address sends a worker per thread before that worker finishes one."""
    with Client(address) as client:
        return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.WORKER_SATURATION)
