"""A hand-written decode-step kernel (lowbit_gemv.c) at fp32, int8 and int4, built with the system C compiler.

The kernel runs h <- h + h @ B_i over a stack of square layers, the same step as decode.py, with every
weight read once per step: it is written for the memory-bound case of batch-1 decoding. Build it once per
machine (well under a second); the shared library is cached by its source and compiler flags.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from hwopt import arguments

SOURCE = Path(__file__).with_name("lowbit_gemv.c")
FLAGS = ("-O3", "-march=native", "-shared", "-fPIC", "-pthread")
PORTABLE_FLAGS = ("-O3", "-shared", "-fPIC", "-pthread")  # when the compiler rejects -march=native
BITS = {"fp32": 32, "int8": 8, "int4": 4}
INT4_BLOCK = 32  # weights per int4 scale
ERRORS = {-1: "bad arguments", -2: "out of memory", -3: "a thread could not start"}


class KernelUnavailable(RuntimeError):
    """The C kernel cannot be built here (no compiler, or the build failed): the message says why."""


def cache_dir() -> Path:
    """Where built kernels are kept: $HWOPT_CACHE, else $XDG_CACHE_HOME/hwopt, else ~/.cache/hwopt."""
    if os.environ.get("HWOPT_CACHE"):
        return Path(os.environ["HWOPT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hwopt"


def find_compiler(cc: str | None = None) -> str:
    """Path of the C compiler ($CC, else cc, else gcc); KernelUnavailable when none is on PATH."""
    if cc is not None:
        arguments.text("cc", cc)
    names = [cc] if cc else [os.environ["CC"]] if os.environ.get("CC") else ["cc", "gcc", "clang"]
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise KernelUnavailable(f"no C compiler found (tried {', '.join(names)}): install gcc or clang")


def build(cc: str | None = None, flags: tuple[str, ...] = FLAGS, out_dir: Path | None = None) -> Path:
    """Compile lowbit_gemv.c into a shared library (cached by source, compiler and flags); its path."""
    arguments.instance("flags", flags, tuple)
    for flag in flags:
        arguments.text("flags", flag)
    if out_dir is not None:
        arguments.instance("out_dir", out_dir, (str, Path))
    compiler = find_compiler(cc)
    key = hashlib.sha256(SOURCE.read_bytes() + "\0".join((compiler, *flags)).encode()).hexdigest()[:16]
    out_dir = Path(out_dir) if out_dir is not None else cache_dir()
    library = out_dir / f"lowbit_gemv-{key}.so"
    if library.exists():
        return library
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:  # build aside, then move: never a half-written .so
        built = Path(tmp) / library.name
        cmd = [compiler, *flags, str(SOURCE), "-o", str(built), "-lm"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise KernelUnavailable(f"`{' '.join(cmd)}` failed:\n{done.stderr.strip()[-600:]}")
        os.replace(built, library)
    return library


@functools.cache
def load(cc: str | None = None) -> ctypes.CDLL:
    """The built kernel, loaded (built first if needed; plain -O3 if -march=native is refused)."""
    try:
        path = build(cc)
    except KernelUnavailable as native_error:
        if "no C compiler" in str(native_error):
            raise
        path = build(cc, PORTABLE_FLAGS)
    return open_library(path)


def open_library(path: Path) -> ctypes.CDLL:
    """Load a built kernel and declare its function's C signature."""
    path = Path(arguments.instance("path", path, (str, Path)))
    if not path.is_file():
        raise ValueError(f"path must be a kernel built by build(); {str(path)!r} does not exist")
    lib = ctypes.CDLL(str(path))
    lib.lowbit_decode_step.restype = ctypes.c_int
    lib.lowbit_decode_step.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_void_p,
                                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_int]
    return lib


def unavailable_reason() -> str | None:
    """None when the kernel builds and loads here, else the reason it does not."""
    try:
        load()
    except (KernelUnavailable, OSError) as error:
        return str(error)
    return None


# ---- weight layouts (w is (K, N) as in h @ w; the kernel reads rows of w.T) -----------------------------


def _square(w, multiple: int = 64, name: str = "w") -> np.ndarray:
    w = arguments.finite_array(name, w, ndim=2).astype(np.float32, copy=False)
    if w.ndim != 2 or w.shape[0] != w.shape[1] or w.shape[0] % multiple or w.shape[0] == 0:
        raise ValueError(f"{name} must be a square (d, d) matrix with d a positive multiple of {multiple}; "
                         f"got shape {w.shape}")
    return w


def _interleave(rows: np.ndarray) -> np.ndarray:
    """Rows (N, B) -> (N/4, B/32, 4, 32): groups of 4 rows, 32 bytes of each in turn (one stream a group)."""
    n, width = rows.shape
    return np.ascontiguousarray(rows.reshape(n // 4, 4, width // 32, 32).transpose(0, 2, 1, 3))


def _deinterleave(grouped: np.ndarray) -> np.ndarray:
    """Inverse of _interleave: (N/4, B/32, 4, 32) -> (N, B)."""
    groups, pieces, four, piece = grouped.shape
    return grouped.transpose(0, 2, 1, 3).reshape(groups * four, pieces * piece)


def quantize_int8_rows(w) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per output channel: q (N/4, K/32, 4, 32) int8 in -127..127 (rows interleaved in groups
    of 4) and scale (N,); w.T ~= rows of q * scale."""
    rows = np.ascontiguousarray(_square(w).T)
    scale = np.abs(rows).max(axis=1) / 127
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(rows / scale[:, None]), -127, 127).astype(np.int8)
    return _interleave(q), scale.astype(np.float32)


def dequantize_int8_rows(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Inverse of quantize_int8_rows: fp32 (K, N)."""
    q = arguments.finite_array("q", q, ndim=4, integer=True, minimum=-127, maximum=127)
    scale = arguments.finite_array("scale", scale, ndim=1, minimum=0, strict=True)
    if q.shape[0] * q.shape[2] != len(scale):
        raise ValueError(f"scale must hold one value per row of q ({q.shape[0] * q.shape[2]}); "
                         f"got {len(scale)}")
    return (_deinterleave(q).astype(np.float32) * scale[:, None]).T


def quantize_int4_rows(w) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int4, blocks of 32 a channel: packed (N/4, K/64, 4, 32) uint8, scale (N/4, K/32, 4).

    A row's 64 weights take 32 bytes: byte j holds weight j (low nibble) and j + 32 (high), each as w + 8.
    Rows are interleaved in groups of 4, and so are their block scales.
    """
    rows = np.ascontiguousarray(_square(w).T)
    n, k = rows.shape
    blocks = rows.reshape(n, k // INT4_BLOCK, INT4_BLOCK)
    scale = np.abs(blocks).max(axis=2) / 7
    scale[scale == 0] = 1.0
    nibbles = (np.clip(np.rint(blocks / scale[..., None]), -8, 7) + 8).astype(np.uint8)
    nibbles = nibbles.reshape(n, k // 64, 64)
    packed = (nibbles[..., :32] | (nibbles[..., 32:] << 4)).reshape(n, k // 2)
    grouped_scale = scale.astype(np.float32).reshape(n // 4, 4, -1).transpose(0, 2, 1)
    return _interleave(packed), np.ascontiguousarray(grouped_scale)


def dequantize_int4_rows(packed: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Inverse of quantize_int4_rows: fp32 (K, N)."""
    packed = arguments.finite_array("packed", packed, ndim=4, integer=True, minimum=0, maximum=255)
    scale = arguments.finite_array("scale", scale, ndim=3, minimum=0, strict=True)
    blocks = (packed.shape[0], 2 * packed.shape[1], packed.shape[2])
    if scale.shape != blocks:
        raise ValueError(f"scale must be {blocks}, one per block of packed; got {scale.shape}")
    rows = _deinterleave(packed.astype(np.uint8, copy=False))
    n, half = rows.shape
    groups = rows.reshape(n, half // 32, 32)
    nibbles = np.concatenate([groups & 15, groups >> 4], axis=2).reshape(n, -1, INT4_BLOCK)
    row_scale = scale.transpose(0, 2, 1).reshape(n, -1)
    return ((nibbles.astype(np.float32) - 8) * row_scale[..., None]).reshape(n, half * 2).T


def quantize_input(h) -> tuple[np.ndarray, float]:
    """The kernel's int8/int4 layer input: symmetric int8, one scale (h ~= xq * scale)."""
    h = arguments.finite_array("h", h, ndim=1).astype(np.float32, copy=False)
    amax = float(np.abs(h).max())
    scale = np.float32(amax / 127 if amax > 0 else 1.0)
    return np.clip(np.rint(h / scale), -127, 127).astype(np.int8), float(scale)


def emulate(stack, precision: str) -> np.ndarray:
    """The kernel's arithmetic in numpy (float64 sums), to check the C code against: (d_model,)."""
    precision = arguments.precision("precision", precision, supported=BITS)
    prepared = _prepare(stack, precision)
    h = stack.x.astype(np.float64)
    for weights, scale in prepared:
        if precision == "fp32":
            h = h + weights.astype(np.float64) @ h
            continue
        xq, x_scale = quantize_input(h.astype(np.float32))
        rows = (dequantize_int8_rows(weights, scale) if precision == "int8"
                else dequantize_int4_rows(weights, scale)).T
        h = h + rows.astype(np.float64) @ (xq.astype(np.float64) * x_scale)
    return h.astype(np.float32)


def _prepare(stack, precision: str) -> list[tuple[np.ndarray, np.ndarray | None]]:
    precision = arguments.precision("precision", precision, supported=BITS)
    if not (hasattr(stack, "layers") and hasattr(stack, "x")):
        raise ValueError(f"stack must have .layers and .x, as decode.make_stack() returns; got "
                         f"{type(stack).__name__}")
    layers = [_square(w, name=f"stack.layers[{i}]") for i, w in enumerate(stack.layers)]
    if any(w.shape != layers[0].shape for w in layers) or np.shape(stack.x) != (layers[0].shape[0],):
        raise ValueError("stack.layers must all be (d, d) and stack.x (d,)")
    if precision == "fp32":
        return [(np.ascontiguousarray(w.T), None) for w in layers]
    quantize = quantize_int8_rows if precision == "int8" else quantize_int4_rows
    return [quantize(w) for w in layers]


def step_fn(stack, precision: str, threads: int | None = None, lib: ctypes.CDLL | None = None
            ) -> Callable[[], np.ndarray]:
    """Zero-argument function running the decode step in C at `precision` -> (d_model,) fp32.

    stack: anything with .layers (square (d, d) fp32 arrays, d a multiple of 64) and .x (d,), such as
    hwopt.experiments.decode.make_stack(). threads: worker threads (default: torch's intra-op thread count).
    lib: a library from open_library (default: load(), built for this machine).
    """
    if threads is None:
        import torch

        threads = torch.get_num_threads()
    threads = arguments.count("threads", threads, "threads")
    precision = arguments.precision("precision", precision, supported=BITS)
    prepared = _prepare(stack, precision)
    lib = load() if lib is None else arguments.instance("lib", lib, ctypes.CDLL)
    d = stack.layers[0].shape[0]
    x = np.ascontiguousarray(stack.x, dtype=np.float32)
    out, work = np.empty(d, np.float32), np.empty(d, np.float32)
    weights = (ctypes.c_void_p * len(prepared))(*[w.ctypes.data for w, _ in prepared])
    scales = (ctypes.c_void_p * len(prepared))(*[None if s is None else s.ctypes.data for _, s in prepared])
    bits = BITS[precision]

    def step():
        status = lib.lowbit_decode_step(bits, len(prepared), d, weights, scales, x.ctypes.data,
                                        out.ctypes.data, work.ctypes.data, threads)
        if status != 0:
            raise RuntimeError(f"lowbit_decode_step failed: {ERRORS.get(status, status)}")
        return out.copy()

    step.prepared = prepared  # keeps the arrays the pointers refer to alive
    return step
