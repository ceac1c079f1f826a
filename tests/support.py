"""Helpers shared by the tests (`tests.support`: pytest's `pythonpath` setting puts the root on the path)."""

import os

import pytest


def skip_outside_ci(reason: str) -> None:
    """Skip the test for reason; in CI (CI=true), where `make test` installs what is missing, fail instead."""
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI must run this test)")
    pytest.skip(reason)
