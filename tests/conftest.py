"""Shared test setup: plots render off-screen."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")
