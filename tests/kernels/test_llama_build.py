"""kernels.llama_build: the missing tool is named with what to install; the build is keyed by its inputs; the
binary that `make engine` built is found and runs."""

import subprocess

import pytest

from hwopt.kernels import llama_build
from hwopt.machine import toolchain
from tests.support import skip_outside_ci


def test_a_missing_cmake_or_compiler_is_named_with_how_to_install_it(monkeypatch):
    monkeypatch.setenv("CMAKE", "no-such-cmake")
    monkeypatch.delenv(llama_build.SERVER_ENV, raising=False)
    missing_cmake = "no CMake found .*no-such-cmake.*pip install cmake"
    with pytest.raises(llama_build.EngineUnavailable, match=missing_cmake):
        llama_build._tools()
    assert "no CMake found" in llama_build.unavailable_reason()
    monkeypatch.delenv("CMAKE")
    monkeypatch.setenv("CXX", "no-such-c++")
    missing_cxx = "no C\\+\\+ compiler found .*apt-get install g\\+\\+"
    with pytest.raises(llama_build.EngineUnavailable, match=missing_cxx):
        llama_build.server_binary(progress=False)
    with pytest.raises(ValueError, match="cxx"):
        toolchain.cxx_compiler(3)


def test_the_build_is_keyed_by_compiler_flags_and_cpu(monkeypatch):
    tools = llama_build._tools()
    key = llama_build._key(*tools)
    assert key == llama_build._key(*tools)
    monkeypatch.setattr(llama_build, "CMAKE_FLAGS", (*llama_build.CMAKE_FLAGS, "-DGGML_AVX512=OFF"))
    assert llama_build._key(*tools) != key


def test_a_binary_named_by_the_environment_is_used_or_refused(monkeypatch, tmp_path):
    monkeypatch.setenv(llama_build.SERVER_ENV, str(tmp_path / "nothing"))
    with pytest.raises(llama_build.EngineUnavailable, match="not an executable"):
        llama_build.built_binary()
    monkeypatch.setenv(llama_build.SERVER_ENV, "/bin/true")
    assert str(llama_build.server_binary()) == "/bin/true"


def test_the_built_server_runs_and_says_how_long_its_build_took():
    binary = llama_build.built_binary()
    if binary is None:
        skip_outside_ci(f"llama-server is not built here ({llama_build.unavailable_reason()})")
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "version" in (done.stdout + done.stderr).lower()
    info = llama_build.build_info(binary)
    if info:  # built here (not given through the environment)
        assert info["seconds"] > 0 and info["source"] == f"{llama_build.SDIST} {llama_build.SDIST_VERSION}"
    assert llama_build.unavailable_reason() is None
