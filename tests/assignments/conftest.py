"""Fixtures of the assignment tests."""

import matplotlib
import pytest

from hwopt.course.grading.course import ROOT
from hwopt.course.grading.plugins import load_reference


@pytest.fixture(scope="module")
def reference(request):
    """The reference of the test module's ASSIGNMENT: its source notebook run once, its checks read."""
    matplotlib.use("Agg")  # "See it" cells plot
    assignment = request.module.ASSIGNMENT
    return load_reference(ROOT / "source" / assignment / f"{assignment}.ipynb")
