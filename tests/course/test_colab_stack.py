"""The toolkit works on Colab's stack: ipywidgets 7.7.1 (jupyterlab_widgets 3.0.16, widgetsnbextension 3.6),
ipython 7.34, ipykernel 6.17, jupyter_client 7.4, and no GPU to find.

A second environment = this one's packages with Colab's widget and IPython versions in front (an overlay
folder on PYTHONPATH, built by `make colab-overlay` from hwopt.course.colab.COLAB_STACK at the stored Colab
freeze's versions): the widget tests, one lesson and one assignment run there headless, in fresh processes,
their kernels on Colab's ipykernel and IPython. (This environment's Python, not Colab's 3.13: Colab's torch
build is not on the package index; tests/course/test_colab_resolution.py checks the setup cell's installs for
3.13.)
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from hwopt.course import colab

ROOT = colab.ROOT
OVERLAY = ROOT / ".venv-colab-overlay"
# A lesson with sliders and an assignment (its instructor version, solutions in) that run quickly headless.
LESSONS = ("notebooks/03_batching.ipynb", "notebooks/07_five_mistakes.ipynb", "notebooks/01_chips.ipynb")
ASSIGNMENTS = ("source/batching/batching.ipynb", "source/roofline/roofline.ipynb")
STACK = ("ipywidgets", "widgetsnbextension", "jupyterlab_widgets", "ipython", "ipykernel", "jupyter_client")
WIDGET_TESTS = "explor or widget or slider or dropdown or toggle"
CELL_TIMEOUT_S = 300

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def colab_env():
    """Environment variables for a process that sees Colab's widget versions first, and no CUDA device."""
    colab.build_overlay(OVERLAY)  # `make test` built it already; this only checks its stamp
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(OVERLAY), os.environ.get("PYTHONPATH", "")]),
            "CUDA_VISIBLE_DEVICES": ""}


def run_python(code, env, timeout=600):
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def colab_versions():
    """{name: version} of Colab's stack, from the stored freeze."""
    return dict(pin.split("==") for pin in colab.colab_stack_pins())


def test_the_overlay_holds_colabs_widget_and_ipython_versions(colab_env):
    result = run_python(
        "import json, importlib.metadata as m, IPython, ipykernel, ipywidgets, hwopt.widgets\n"
        f"names = {STACK!r}\n"
        "print(json.dumps({n: m.version(n) for n in names} | {'imported': [ipywidgets.__version__,"
        " IPython.__version__, ipykernel.__version__]}))",
        colab_env)
    assert result.returncode == 0, result.stderr
    versions = json.loads(result.stdout.strip().splitlines()[-1])
    expected = colab_versions()
    assert versions.pop("imported") == [expected["ipywidgets"], expected["ipython"], expected["ipykernel"]]
    assert versions == {name: expected[name] for name in STACK}
    # What Colab publishes (its pip-freeze at the stored commit): the overlay puts these first.
    assert expected["ipywidgets"] == "7.7.1" and expected["jupyterlab_widgets"] == "3.0.16"
    assert expected["ipython"] == "7.34.0" and expected["ipykernel"] == "6.17.1"


def widget_test_files():
    """Test modules that exercise the toolkit's widget builders (helpers and lesson explorers)."""
    pattern = re.compile(r"_explorer\(|hwopt\.widgets|from hwopt import .*\bwidgets\b")
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")
                  if not p.name.startswith(("test_colab", "test_browser")) and pattern.search(p.read_text()))


def test_widget_builders_and_explorers_work_with_ipywidgets_7(colab_env):
    files = widget_test_files()
    assert "tests/test_widgets.py" in files
    code = (
        "import sys, ipywidgets, pytest\n"
        "assert ipywidgets.__version__ == '7.7.1', ipywidgets.__version__\n"
        f"sys.exit(pytest.main({files!r} + ['-q', '-p', 'no:cacheprovider', '-k', {WIDGET_TESTS!r}]))"
    )
    result = run_python(code, colab_env)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, f"widget tests fail with ipywidgets 7.7.1:\n{result.stdout[-4000:]}"
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert passed >= 5, f"expected the widget tests to run, got: {summary}"


def test_gpu_detection_falls_back_to_the_cpu_without_raising(colab_env):
    code = (
        "from hwopt.machine import bench, hardware\n"
        "info = hardware.machine()\n"
        "print(bench.resolve_device('auto'), len(info.gpus))\n"
    )
    result = run_python(code, colab_env, timeout=120)
    assert result.returncode == 0, result.stderr
    device, gpus = result.stdout.split()[-2:]
    assert device in ("cpu", "mps") and gpus == "0"
    card = subprocess.run([sys.executable, "-m", "hwopt", "info"], cwd=ROOT, env=colab_env,
                          capture_output=True, text=True, timeout=120)
    assert card.returncode == 0, card.stderr


def run_on_colabs_stack(relative_path, colab_env, tmp_path):
    """Execute a notebook in its working folder, a first cell asserting the kernel runs Colab's versions."""
    nb = nbformat.read(ROOT / relative_path, as_version=4)
    expected = colab_versions()
    wanted = expected["ipywidgets"], expected["ipython"], expected["ipykernel"]
    check = ("import IPython, ipykernel, ipywidgets\n"
             "versions = ipywidgets.__version__, IPython.__version__, ipykernel.__version__\n"
             f"assert versions == {wanted!r}, versions")
    nb.cells.insert(0, nbformat.v4.new_code_cell(check))
    copy = tmp_path / Path(relative_path).name
    nbformat.write(nb, copy)
    folder = ROOT / colab.working_folder(relative_path)
    code = (
        "import sys, nbformat\n"
        "from nbclient import NotebookClient\n"
        f"nb = nbformat.read({str(copy)!r}, as_version=4)\n"
        f"NotebookClient(nb, timeout={CELL_TIMEOUT_S}, kernel_name='python3',"
        f" resources={{'metadata': {{'path': {str(folder)!r}}}}}).execute()\n"
        "print('executed', sum(c.cell_type == 'code' for c in nb.cells))\n"
    )
    return run_python(code, colab_env, timeout=600)


def test_a_lesson_runs_headless_on_colabs_widget_and_ipython_stack(colab_env, tmp_path):
    lesson = next(rel for rel in LESSONS if (ROOT / rel).exists())
    result = run_on_colabs_stack(lesson, colab_env, tmp_path)
    assert result.returncode == 0, f"{lesson} fails on Colab's stack:\n{result.stderr[-4000:]}"
    assert "executed" in result.stdout


def test_an_assignment_runs_headless_on_colabs_widget_and_ipython_stack(colab_env, tmp_path):
    assignment = next(rel for rel in ASSIGNMENTS if (ROOT / rel).exists())
    result = run_on_colabs_stack(assignment, colab_env, tmp_path)
    assert result.returncode == 0, f"{assignment} fails on Colab's stack:\n{result.stderr[-4000:]}"
    assert "executed" in result.stdout
