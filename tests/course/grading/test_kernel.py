"""course.grading.kernel: the grading kernel's resource limits and threads, read from the environment."""

import subprocess
import sys

import pytest

from hwopt.course.grading import kernel, settings

MEMORY, CPU, PROCESSES = settings.MEMORY_GB.name, settings.CPU_S.name, settings.MAX_PROCESSES.name
THREADS = settings.THREADS.name


def test_limits_come_from_the_environment_in_the_kernels_units():
    env = {MEMORY: "2", CPU: "30", PROCESSES: "64"}
    assert kernel.limit_value("RLIMIT_AS", env) == 2 * 2**30
    assert kernel.limit_value("RLIMIT_CPU", env) == 30
    assert kernel.limit_value("RLIMIT_NPROC", env) == 64
    assert kernel.limit_value("RLIMIT_AS", {}) == int(float(settings.MEMORY_GB.default) * 2**30) == 4 * 2**30


@pytest.mark.parametrize("bad", ["0", "-1", "four", "nan", "inf"])
def test_a_bad_limit_names_its_variable(bad):
    with pytest.raises(ValueError, match=f"{MEMORY} must be a positive finite number"):
        kernel.limit_value("RLIMIT_AS", {MEMORY: bad})


def test_an_unknown_limit_is_named():
    with pytest.raises(ValueError, match="name must be one of"):
        kernel.limit_value("RLIMIT_STACK", {})


def test_set_limits_lowers_soft_and_hard_limits_of_the_process():
    code = ("import resource; from hwopt.course.grading import kernel\n"
            f"print(kernel.set_limits({{{MEMORY!r}: '3', {CPU!r}: '50', {PROCESSES!r}: '500'}}))\n"
            "for name in ('RLIMIT_AS', 'RLIMIT_CPU', 'RLIMIT_NPROC'):\n"
            "    print(*resource.getrlimit(getattr(resource, name)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:4] == ["[]", f"{3 * 2**30} {3 * 2**30}", "50 50", "500 500"], out


def test_set_limits_on_macos_skips_the_address_space_limit_and_says_so(monkeypatch):
    resource = pytest.importorskip("resource")
    set_before = resource.setrlimit

    def macos_setrlimit(which, limits):  # what macOS answers for RLIMIT_AS
        if which == resource.RLIMIT_AS:
            raise ValueError("current limit exceeds maximum limit")
        return None  # the other limits would hold; this test process keeps its own

    monkeypatch.setattr(resource, "setrlimit", macos_setrlimit)
    notes = kernel.set_limits({})
    assert resource.setrlimit is not set_before
    assert notes == ["RLIMIT_AS not set (current limit exceeds maximum limit)"]


def test_threads_come_from_the_environment_for_every_numeric_library():
    assert kernel.thread_environment({}) == {name: "1" for name in kernel.THREAD_VARIABLES}
    assert kernel.thread_environment({THREADS: ""}) == kernel.thread_environment({})
    assert kernel.thread_environment({THREADS: " 4 "})["OMP_NUM_THREADS"] == "4"
    assert set(kernel.THREAD_VARIABLES) >= {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}


@pytest.mark.parametrize("bad", ["0", "-2", "2.5", "two", "1e3", "²"])
def test_a_bad_thread_count_names_its_variable(bad):
    with pytest.raises(ValueError, match=f"{THREADS} must be a positive whole number of threads"):
        kernel.thread_environment({THREADS: bad})


@pytest.mark.parametrize("variable", [MEMORY, CPU, PROCESSES, THREADS])
def test_check_environment_names_the_first_bad_setting(variable):
    kernel.check_environment({})
    with pytest.raises(ValueError, match=variable):
        kernel.check_environment({variable: "0"})
