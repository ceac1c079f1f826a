"""hwopt.grading: the memory-limited grading kernel and the nbgrader plug-ins' pure parts."""

import os
from pathlib import Path

import nbformat
import pytest

from hwopt import grading

ROOT = Path(__file__).resolve().parents[1]


def test_set_memory_limit_rejects_bad_input():
    for bad in (0, -1, "4", None, True):
        with pytest.raises(ValueError, match="limit_gb"):
            grading.set_memory_limit(bad)


@pytest.mark.slow
def test_grading_kernel_is_memory_limited():
    """The kernelspec nbgrader_config.py selects starts a kernel whose allocations fail past the limit."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    ksm = KernelSpecManager(kernel_dirs=[str(ROOT / "autograder" / "kernels")])
    km = KernelManager(kernel_name="hwopt-grader", kernel_spec_manager=ksm)
    km.start_kernel(env={**os.environ, "HWOPT_GRADER_MEMORY_GB": "2"})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        outputs = []
        code = ("import resource, numpy as np\nprint(resource.getrlimit(resource.RLIMIT_AS)[0] // 2**30)\n"
                "try:\n    chunks = [np.ones(2**27) for _ in range(100)]  # 1 GiB each, touched\n"
                "except MemoryError:\n    print('MemoryError')")
        kc.execute_interactive(code, timeout=60, output_hook=lambda msg: outputs.append(msg["content"]))
        text = "".join(o.get("text", "") for o in outputs)
        assert text.split() == ["2", "MemoryError"], outputs
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_strip_hidden_tests_removes_the_region_and_delimiters():
    source = "a = 1\n### BEGIN HIDDEN TESTS\nassert secret\n### END HIDDEN TESTS\nb = 2"
    assert grading.strip_hidden_tests(source) == "a = 1\nb = 2"


@pytest.mark.parametrize("filename, expected", [
    ("quiz.ipynb", "quiz"),
    ("Copy of quiz.ipynb", "quiz"),
    ("Copy of latency_budget (1).ipynb", "latency_budget"),
    ("latency_budget-2.ipynb", "latency_budget"),
    ("copy_of_latency_budget.ipynb", "latency_budget"),
    ("12345_latency_budget.ipynb", "latency_budget"),
    ("notes.ipynb", None),
])
def test_normalise_notebook_name_maps_lms_and_colab_names(filename, expected):
    assert grading.normalise_notebook_name(filename, ["latency_budget.ipynb", "quiz.ipynb"]) == expected


def test_strip_test_tracebacks_keeps_only_the_error_line_in_grade_cells():
    lines = ["Traceback", "----> 3 assert secret_answer == 42", "AssertionError"]
    error = nbformat.v4.new_output("error", ename="AssertionError", evalue="hidden: wrong", traceback=lines)
    graded = nbformat.v4.new_code_cell("x", outputs=[error], metadata={"nbgrader": {
        "grade": True, "solution": False, "locked": True, "grade_id": "t", "points": 1}})
    student = nbformat.v4.new_code_cell("y", outputs=[nbformat.from_dict(dict(error))])
    nb = nbformat.v4.new_notebook(cells=[graded, student])
    grading.StripTestTracebacks().preprocess(nb, {})
    assert graded.outputs[0].traceback == ["AssertionError: hidden: wrong"]
    assert len(student.outputs[0].traceback) == 3  # the student's own cells keep their traceback
