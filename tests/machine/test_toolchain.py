"""machine.toolchain: the C compiler is found by argument, $CC or PATH, and its absence is explained."""

import shutil

import pytest

from hwopt.machine import toolchain


def test_the_named_compiler_or_cc_or_the_first_on_path(monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    found = toolchain.c_compiler()
    assert found == next(shutil.which(n) for n in toolchain.C_COMPILERS if shutil.which(n))
    monkeypatch.setenv("CC", "gcc")
    assert toolchain.c_compiler() == shutil.which("gcc")
    assert toolchain.c_compiler("cc") == shutil.which("cc")


def test_a_missing_compiler_is_named_with_what_to_install(monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler")
    with pytest.raises(toolchain.ToolMissing, match="no C compiler found .*no-such-compiler.*install gcc"):
        toolchain.c_compiler()
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("CC")
    with pytest.raises(toolchain.ToolMissing, match="tried cc, gcc, clang"):
        toolchain.c_compiler()
    with pytest.raises(ValueError, match="cc"):
        toolchain.c_compiler(3)


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HWOPT_CACHE", str(tmp_path / "k"))
    assert toolchain.cache_dir() == tmp_path / "k"
    monkeypatch.delenv("HWOPT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert toolchain.cache_dir() == tmp_path / "hwopt"
