"""The C reference kernels (STREAM Copy/Triad, FP32 FMA peak): compiled at bench time with the system gcc."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from hwopt.kernels.lowbit_gemv import KernelUnavailable
from hwopt.machine import toolchain

HERE = Path(__file__).resolve().parent
CFLAGS = ("-O3", "-march=native", "-fopenmp")
KERNELS = {"stream": HERE / "stream.c", "fma_peak": HERE / "fma_peak.c"}


NativeUnavailable = KernelUnavailable  # the C code cannot be built here (no compiler, or the build failed)


def find_compiler(cc: str | None = None) -> str:
    """Path of the C compiler (toolchain.c_compiler); NativeUnavailable when none is on PATH."""
    try:
        return toolchain.c_compiler(cc)
    except toolchain.ToolMissing as error:
        raise NativeUnavailable(str(error)) from None


def compile_kernel(name: str, build_dir: Path, cc: str | None = None) -> Path:
    """Compile kernel `name` ('stream' or 'fma_peak') into build_dir with CFLAGS; the executable's path."""
    if name not in KERNELS:
        raise ValueError(f"name must be one of {sorted(KERNELS)}, got {name!r}")
    compiler = find_compiler(cc)
    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    exe = build_dir / name
    cmd = [compiler, *CFLAGS, str(KERNELS[name]), "-o", str(exe)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise NativeUnavailable(f"`{' '.join(cmd)}` failed: {done.stderr.strip()[-400:]}")
    return exe


def _run_json(cmd: list[str], threads: int, timeout_s: float) -> dict:
    if threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_PROC_BIND": "false"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s, check=True)
    return json.loads(done.stdout)


def run_stream(exe: Path, n_elements: int, trials: int, *, threads: int, inner: int = 1,
               timeout_s: float = 300.0) -> dict:
    """STREAM Copy+Triad on 3 arrays of n_elements doubles: dict of copy_s/triad_s (s per pass), bytes."""
    if n_elements < 1 or trials < 1 or inner < 1:
        raise ValueError(f"n_elements, trials, inner must be positive, got {n_elements}, {trials}, {inner}")
    return _run_json([str(exe), str(n_elements), str(trials), str(inner)], threads, timeout_s)


def run_fma_peak(exe: Path, iterations: int, trials: int, *, threads: int, timeout_s: float = 300.0) -> dict:
    """Run the register-only FP32 FMA loop: dict with flop (per trial) and times_s (one per trial)."""
    if iterations < 1 or trials < 1:
        raise ValueError(f"iterations and trials must be positive, got {iterations}, {trials}")
    return _run_json([str(exe), str(iterations), str(trials)], threads, timeout_s)


def stream_elements_for(bytes_per_array: float) -> int:
    """Doubles per array for a target array size in bytes (at least 1)."""
    if bytes_per_array <= 0:
        raise ValueError(f"bytes_per_array must be positive, got {bytes_per_array!r}")
    return max(1, int(bytes_per_array // 8))
