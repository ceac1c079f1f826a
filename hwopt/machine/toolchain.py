"""The build tools on this machine (the C compiler of the course's C kernel and the performance report's C
references), and the folder where the course keeps what it builds and computes here."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from hwopt import arguments

__all__ = ["ToolMissing", "c_compiler", "cache_dir"]

C_COMPILERS = ("cc", "gcc", "clang")  # tried in this order when neither an argument nor $CC names one


class ToolMissing(RuntimeError):
    """A build tool is not installed here; the message says which and how to install it."""


def c_compiler(cc: str | None = None) -> str:
    """Path of the C compiler: cc, else $CC, else the first of C_COMPILERS on PATH; ToolMissing if none."""
    if cc is not None:
        arguments.text("cc", cc)
    names = [cc] if cc else [os.environ["CC"]] if os.environ.get("CC") else list(C_COMPILERS)
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise ToolMissing(f"no C compiler found (tried {', '.join(names)}): install gcc or clang")


def cache_dir() -> Path:
    """Where the course keeps what it builds or computes on this machine (kernels, evaluation results):
    $HWOPT_CACHE, else $XDG_CACHE_HOME/hwopt, else ~/.cache/hwopt."""
    if os.environ.get("HWOPT_CACHE"):
        return Path(os.environ["HWOPT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hwopt"
