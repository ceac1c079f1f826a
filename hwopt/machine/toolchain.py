"""The build tools on this machine (the C compiler of the course's C kernel and the performance report's C
references; the C++ compiler and CMake that build the serving engine, llama.cpp), and the folder where the
course keeps what it builds and computes here."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from hwopt import arguments

__all__ = ["ToolMissing", "c_compiler", "cxx_compiler", "cmake", "cache_dir"]

C_COMPILERS = ("cc", "gcc", "clang")  # tried in this order when neither an argument nor $CC names one
CXX_COMPILERS = ("c++", "g++", "clang++")  # likewise for $CXX
# How to get the engine's build tools, per system (the messages of ToolMissing).
CXX_INSTALL = ("install a C++ compiler: `apt-get install g++` (Debian, Ubuntu, WSL), "
               "`xcode-select --install` (macOS); on Windows use WSL")
CMAKE_INSTALL = ("install CMake 3.14 or newer: `apt-get install cmake` (Debian, Ubuntu, WSL), `brew install "
                 "cmake` (macOS), or `pip install cmake` in the course's environment")


class ToolMissing(RuntimeError):
    """A build tool is not installed here; the message says which and how to install it."""


def c_compiler(cc: str | None = None) -> str:
    """Path of the C compiler: cc, else $CC, else the first of C_COMPILERS on PATH; ToolMissing if none."""
    return _first_on_path("cc", cc, "C compiler", "CC", C_COMPILERS, "install gcc or clang")


def _first_on_path(argument: str, given: str | None, kind: str, variable: str, defaults: tuple[str, ...],
                   install: str) -> str:
    if given is not None:
        arguments.text(argument, given)
    names = [given] if given else [os.environ[variable]] if os.environ.get(variable) else list(defaults)
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise ToolMissing(f"no {kind} found (tried {', '.join(names)}): {install}")


def cxx_compiler(cxx: str | None = None) -> str:
    """Path of the C++ compiler: cxx, else $CXX, else the first of CXX_COMPILERS on PATH; ToolMissing if
    none."""
    return _first_on_path("cxx", cxx, "C++ compiler", "CXX", CXX_COMPILERS, CXX_INSTALL)


def cmake(path: str | None = None) -> str:
    """Path of CMake: path, else $CMAKE, else `cmake` on PATH (a pip-installed one included); ToolMissing if
    none."""
    return _first_on_path("path", path, "CMake", "CMAKE", ("cmake",), CMAKE_INSTALL)


def cache_dir() -> Path:
    """Where the course keeps what it builds or computes on this machine (kernels, evaluation results):
    $HWOPT_CACHE, else $XDG_CACHE_HOME/hwopt, else ~/.cache/hwopt."""
    if os.environ.get("HWOPT_CACHE"):
        return Path(os.environ["HWOPT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hwopt"
