"""A hand-written decode-step kernel (lowbit_gemv.c) at fp32, int8 and int4, built with the system C compiler.

The kernel runs h <- h + h @ B_i over a stack of square layers, the same step as decode.py, with every
weight read once per step: it is written for the memory-bound case of batch-1 decoding. Its int8 and int4
dot products have one instruction path per x86 SIMD level (PATHS: AVX-512 VNNI, AVX-VNNI, AVX2, plain C);
the build picks the fastest this CPU runs, from the SIMD features hwopt.machine.hardware reads. Building
takes well under a second; the shared library is cached by its source, compiler and flags. Its fp32 loop also
serves gemv_f32, y = W x + b for a Linear's weights, and lowbit_decoder_step, a whole single-token step of
the tiny decoder (tiny_decoder.py) in one call.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hwopt import arguments, formats
from hwopt.machine import bench, hardware, toolchain

SOURCE = Path(__file__).with_name("lowbit_gemv.c")
BASE_FLAGS = ("-O3", "-shared", "-fPIC", "-pthread")
PORTABLE_FLAGS = BASE_FLAGS  # the plain C loops: any CPU, any compiler
# How the kernel stores each precision's weights, as formats names: int8 rows with one fp32 scale per row
# (negligible: 4 bytes a row), int4 with one fp32 scale per block (lowbit_gemv.c reads blocks of INT4_BLOCK).
WEIGHT_FORMATS = {"fp32": "fp32", "int8": "int8", "int4": "int4_g32"}
INT4_BLOCK = formats.get(WEIGHT_FORMATS["int4"]).block  # weights per int4 scale
ERRORS = {-1: "bad arguments", -2: "out of memory"}
X86_ARCHS = ("x86_64", "amd64", "i386", "i686")


@dataclass(frozen=True)
class KernelPath:
    """One instruction path of lowbit_gemv.c: the SIMD features it needs (hardware's names), the compiler
    flags that enable them, and how it multiplies int8 weights by the int8 input."""

    name: str
    needs: tuple[str, ...]
    flags: tuple[str, ...]
    int8_dot: str


# Fastest first. lowbit_gemv.c chooses its loops from the compiler's feature macros, which these flags set.
PATHS = {p.name: p for p in (
    KernelPath("avx512-vnni", ("AVX2", "FMA", "AVX-512F", "AVX-512 VNNI"),
               ("-mavx2", "-mfma", "-mavx512f", "-mavx512vnni"),
               "one vpdpbusd per 64 weights: 64 u8 x s8 products summed straight into 16 int32 lanes "
               "(the weight made unsigned by adding 128, taken back once per row)"),
    KernelPath("avx-vnni", ("AVX2", "FMA", "AVX-VNNI"), ("-mavx2", "-mfma", "-mavxvnni"),
               "vpsignb + one vpdpbusd per 32 weights: 32 u8 x s8 products summed straight into 8 int32 "
               "lanes"),
    KernelPath("avx2", ("AVX2", "FMA"), ("-mavx2", "-mfma"),
               "vpsignb + vpmaddubsw + vpmaddwd + vpaddd per 32 weights: products summed in pairs into "
               "int16 (which saturates at 32767, so the unsigned side is kept to |x| <= 127), then widened "
               "to int32"),
    KernelPath("portable", (), (), "plain C loops (the compiler vectorizes what it can)"),
)}  # fmt: skip


class KernelUnavailable(RuntimeError):
    """The C kernel cannot be built here (no compiler, or the build failed): the message says why."""


def runnable_paths(simd=None, arch: str | None = None) -> list[str]:
    """Names of the PATHS this CPU can run, fastest first ('portable' last); default: this machine's SIMD
    features (hardware.cpu_info) and architecture."""
    if simd is not None:
        arguments.instance("simd", simd, (list, tuple, set, frozenset))
        for i, feature in enumerate(simd):
            arguments.text(f"simd[{i}]", feature)
    if arch is not None:
        arguments.text("arch", arch)
    simd = set(hardware.cpu_info()["simd"] if simd is None else simd)
    x86 = (platform.machine() if arch is None else arch).lower() in X86_ARCHS
    return [p.name for p in PATHS.values() if not p.needs or (x86 and set(p.needs) <= simd)]


def best_path(simd=None, arch: str | None = None) -> str:
    """The fastest path this CPU runs: what build() and load() use by default."""
    return runnable_paths(simd, arch)[0]


def path_flags(path: str) -> tuple[str, ...]:
    """Compiler flags that build `path` (a key of PATHS)."""
    arguments.one_of("path", path, PATHS)
    return BASE_FLAGS + PATHS[path].flags


def cache_dir() -> Path:
    """Where built kernels are kept: $HWOPT_CACHE, else $XDG_CACHE_HOME/hwopt, else ~/.cache/hwopt."""
    if os.environ.get("HWOPT_CACHE"):
        return Path(os.environ["HWOPT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hwopt"


def build(cc: str | None = None, flags: tuple[str, ...] | None = None, out_dir: Path | None = None, *,
          path: str | None = None) -> Path:
    """Compile lowbit_gemv.c into a shared library (cached by source, compiler and flags); its file.

    flags: the compiler flags, or path: a key of PATHS (default: best_path(), the fastest this CPU runs).
    A path this CPU cannot run still builds (to check that it compiles); open_library refuses to load it.
    """
    if flags is not None:
        arguments.instance("flags", flags, (tuple, list))
        for i, flag in enumerate(flags):
            arguments.text(f"flags[{i}]", flag)
    if path is not None:
        arguments.one_of("path", path, PATHS)
    if flags is not None and path is not None:
        raise ValueError("give flags or path, not both")
    flags = tuple(flags) if flags is not None else path_flags(path or best_path())
    if out_dir is not None:
        arguments.instance("out_dir", out_dir, (str, Path))
    try:
        compiler = toolchain.c_compiler(cc)
    except toolchain.ToolMissing as error:
        raise KernelUnavailable(str(error)) from None
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
def load(cc: str | None = None, path: str | None = None) -> ctypes.CDLL:
    """The built kernel, loaded (built first if needed): `path`, by default the fastest this CPU runs; when
    the compiler rejects a path's flags (too old for them), the next one this CPU runs."""
    candidates = runnable_paths()
    if path is not None:
        path_flags(path)  # a known path
        candidates = candidates[candidates.index(path):] if path in candidates else [path]
    for i, name in enumerate(candidates):
        try:
            return open_library(build(cc, path=name))
        except KernelUnavailable as error:
            if "no C compiler" in str(error) or i == len(candidates) - 1:
                raise
    raise AssertionError("unreachable: 'portable' is always a candidate")


def open_library(path: Path) -> ctypes.CDLL:
    """Load a built kernel and declare its functions' C signatures; KernelUnavailable when it was built for
    an instruction path this CPU cannot run (it would die on an illegal instruction)."""
    path = Path(arguments.instance("path", path, (str, Path)))
    if not path.is_file():
        raise ValueError(f"path must be a kernel built by build(); {str(path)!r} does not exist")
    lib = ctypes.CDLL(str(path))
    lib.lowbit_decode_step.restype = ctypes.c_int
    lib.lowbit_decode_step.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_void_p,
                                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_int]
    lib.lowbit_gemv_f32.restype = ctypes.c_int
    lib.lowbit_gemv_f32.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.lowbit_decoder_step.restype = ctypes.c_int
    lib.lowbit_decoder_step.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_int, ctypes.c_long,
                                        ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float,
                                        ctypes.c_void_p, ctypes.c_int]
    lib.lowbit_kernel_path.restype = ctypes.c_char_p
    lib.lowbit_kernel_path.argtypes = []
    built = kernel_path(lib)
    if built not in runnable_paths():
        raise KernelUnavailable(f"{path.name} was built for the {built} path, which this CPU cannot run "
                                f"(it runs {', '.join(runnable_paths())})")
    return lib


def kernel_path(lib: ctypes.CDLL | None = None) -> str:
    """The instruction path a loaded kernel runs, as it reports itself (default: load(), this machine's)."""
    if lib is not None:
        arguments.instance("lib", lib, ctypes.CDLL)
    return (load() if lib is None else lib).lowbit_kernel_path().decode()


def unavailable_reason() -> str | None:
    """None when the kernel builds and loads here, else the reason it does not."""
    try:
        load()
    except (KernelUnavailable, OSError) as error:
        return str(error)
    return None


def path_report(lib: ctypes.CDLL | None = None) -> str:
    """Which path this machine's kernel was built with, how it multiplies int8 numbers, and the other paths
    this CPU could run (for lesson 2)."""
    built = kernel_path(lib)
    simd = [f for f in hardware.cpu_info()["simd"] if any(f in p.needs for p in PATHS.values())]
    lines = [f"this CPU's SIMD features the kernel can use: {', '.join(simd) or 'none'}",
             f"the C kernel here runs the {built} path: {PATHS[built].int8_dot}"]
    others = [p for p in runnable_paths() if p != built]
    if others:
        lines.append(f"this CPU can also run: {', '.join(others)}")
    if built in ("avx2", "portable"):
        lines.append("no VNNI here: on a CPU with AVX-512 VNNI or AVX-VNNI the same kernel builds the "
                     "one-instruction vpdpbusd path instead")
    return "\n".join(lines)


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
    w = _square(w)
    scale = np.abs(w).max(axis=0) / 127  # per column of w: the output channels (computed in place below)
    scale[scale == 0] = 1.0
    q = w / scale
    np.rint(q, out=q)
    np.clip(q, -127, 127, out=q)
    return _interleave(q.astype(np.int8).T), scale.astype(np.float32)


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
    w = _square(w)
    k, n = w.shape
    blocks = w.reshape(k // INT4_BLOCK, INT4_BLOCK, n)  # blocks run down the columns (output channels)
    scale = np.abs(blocks).max(axis=1) / 7  # (K/32, N)
    scale[scale == 0] = 1.0
    levels = blocks / scale[:, None, :]
    np.rint(levels, out=levels)
    np.clip(levels, -8, 7, out=levels)
    levels += 8
    nibbles = levels.astype(np.uint8).reshape(k // 64, 2, INT4_BLOCK, n)  # (piece of 64, half, j, channel)
    packed = nibbles[:, 0] | (nibbles[:, 1] << 4)  # (K/64, 32, N)
    rows = packed.transpose(2, 0, 1).reshape(n, k // 2)
    grouped_scale = scale.astype(np.float32).T.reshape(n // 4, 4, -1).transpose(0, 2, 1)
    return _interleave(rows), np.ascontiguousarray(grouped_scale)


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
    precision = formats.name(precision, "precision", supported=WEIGHT_FORMATS)
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
    precision = formats.name(precision, "precision", supported=WEIGHT_FORMATS)
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
    """Zero-argument function running the decode step in C at `precision` -> (d_model,) fp32 (it reuses its
    buffers: call it from one thread at a time; separate step functions may run concurrently).

    stack: anything with .layers (square (d, d) fp32 arrays, d a multiple of 64) and .x (d,), such as
    hwopt.experiments.decode.make_stack(). threads: worker threads (default: torch's intra-op thread count).
    lib: a library from open_library (default: load(), built for this machine).
    """
    return _bind(stack, precision, _prepare(stack, precision), threads, lib)


def _bind(stack, precision: str, prepared, threads: int | None, lib: ctypes.CDLL | None
          ) -> Callable[[], np.ndarray]:
    """step_fn on weights already laid out by _prepare (so several libraries can share them)."""
    threads = default_threads() if threads is None else arguments.count("threads", threads, "threads")
    lib = load() if lib is None else arguments.instance("lib", lib, ctypes.CDLL)
    d = stack.layers[0].shape[0]
    x = np.ascontiguousarray(stack.x, dtype=np.float32)
    out, work = np.empty(d, np.float32), np.empty(2 * d, np.float32)  # work: ping-pong + the int8 input
    weights = (ctypes.c_void_p * len(prepared))(*[w.ctypes.data for w, _ in prepared])
    scales = (ctypes.c_void_p * len(prepared))(*[None if s is None else s.ctypes.data for _, s in prepared])
    bits = formats.get(WEIGHT_FORMATS[precision]).bits

    def step():
        status = lib.lowbit_decode_step(bits, len(prepared), d, weights, scales, x.ctypes.data,
                                        out.ctypes.data, work.ctypes.data, threads)
        if status != 0:
            raise RuntimeError(f"lowbit_decode_step failed: {ERRORS.get(status, status)}")
        return out.copy()

    step.prepared = prepared  # keeps the arrays the pointers refer to alive
    return step


def gemv_f32(w, x, bias=None, threads: int | None = None, lib: ctypes.CDLL | None = None) -> np.ndarray:
    """y = w @ x + bias in C (fp32, on `threads` cores): w (rows, cols) row-major like a torch Linear's
    weight, x (cols,), bias (rows,) or None -> y (rows,). The tiny decoder's projections run this loop."""
    w = np.ascontiguousarray(arguments.finite_array("w", w, ndim=2), dtype=np.float32)
    x = np.ascontiguousarray(arguments.finite_array("x", x, ndim=1), dtype=np.float32)
    rows, cols = w.shape
    if rows == 0 or cols == 0 or len(x) != cols:
        raise ValueError(f"x must hold one value per column of w ({cols}, w non-empty); got {len(x)} values "
                         f"and w of shape {w.shape}")
    if bias is not None:
        bias = np.ascontiguousarray(arguments.finite_array("bias", bias, ndim=1), dtype=np.float32)
        if len(bias) != rows:
            raise ValueError(f"bias must hold one value per row of w ({rows}); got {len(bias)}")
    threads = default_threads() if threads is None else arguments.count("threads", threads, "threads")
    lib = load() if lib is None else arguments.instance("lib", lib, ctypes.CDLL)
    y = np.empty(rows, np.float32)
    status = lib.lowbit_gemv_f32(rows, cols, w.ctypes.data, x.ctypes.data,
                                 None if bias is None else bias.ctypes.data, y.ctypes.data, threads)
    if status != 0:
        raise RuntimeError(f"lowbit_gemv_f32 failed: {ERRORS.get(status, status)}")
    return y


def default_threads() -> int:
    """The kernel's default worker count: torch's intra-op thread count (the cores torch uses)."""
    import torch

    return torch.get_num_threads()


# ---- this machine's path against the AVX2 one, on the same weights -----------------------------------------

SAME_SPEED = 0.10  # a ratio within 1 +- this (or within the timing spread, if wider) is no difference


@dataclass(frozen=True)
class PathComparison:
    """The step timed on two kernel paths in one interleaved run: measurements {"<precision> <path>": ...}."""

    built: str
    baseline: str
    measurements: dict[str, bench.Measurement]

    @property
    def precisions(self) -> list[str]:
        """The precisions timed."""
        return list(dict.fromkeys(label.split()[0] for label in self.measurements))

    def speedup(self, precision: str) -> float:
        """How many times faster the built path runs the step than the baseline path, at precision."""
        arguments.one_of("precision", precision, self.precisions)
        return bench.speedup(self.measurements[f"{precision} {self.baseline}"],
                             self.measurements[f"{precision} {self.built}"])

    def verdict(self) -> str:
        """What the ratios say: do fewer instructions per weight make the step faster on this machine?"""
        ratios = {p: self.speedup(p) for p in self.precisions}
        said = ", ".join(f"{p} {r:.2f}x" for p, r in ratios.items())
        margin = {p: max(SAME_SPEED, *(self.measurements[f"{p} {path}"].relative_iqr
                                       for path in (self.built, self.baseline))) for p in ratios}
        faster = [p for p, r in ratios.items() if r > 1 + margin[p]]
        slower = [p for p, r in ratios.items() if r < 1 / (1 + margin[p])]
        built, baseline = self.built, self.baseline
        lines = [f"{built} vs {baseline} on the same weights, in one run: {said}"]
        if faster:
            lines.append(f"At {' and '.join(faster)} the {built} path is faster: with the {baseline} "
                         "instructions the kernel was limited by how many instructions it could issue, not "
                         "by memory alone; one vpdpbusd per group of products lifts that limit.")
        if slower:
            lines.append(f"At {' and '.join(slower)} the {baseline} path is faster here: on this CPU the "
                         f"{built} loop costs more than it saves (some CPUs lower their clock for 512-bit "
                         "code).")
        same = [p for p in ratios if p not in faster + slower]
        spread = max((margin[p] for p in same), default=0.0)
        if same and spread > SAME_SPEED:
            lines.append(f"At {' and '.join(same)} the timing spread ({spread:.0%}) is larger than the "
                         "difference: these runs cannot tell the paths apart (rerun when the machine is "
                         "quieter).")
        elif same:
            lines.append(f"At {' and '.join(same)} both paths run at the same speed (within "
                         f"{SAME_SPEED:.0%}): the step waits on memory, so fewer instructions per weight do "
                         "not show. VNNI pays where instructions are the limit: weights already in cache, or "
                         "one core that must keep up with the memory on its own.")
        return "\n".join(lines)

    def __str__(self) -> str:
        rows = [f"{label:24s} {m.median_ms:8.3f} ms/step (IQR {m.iqr_ms:.3f})"
                for label, m in self.measurements.items()]
        return "\n".join([*rows, self.verdict()])


def compare_paths(stack, baseline: str = "avx2", precisions=("int8", "int4"), threads: int | None = None,
                  repeats: int = 10) -> PathComparison | None:
    """Time the step at each precision on this machine's path and on `baseline`, interleaved (A B A B ...);
    None when there is nothing to compare (this machine builds the baseline path, or cannot run it)."""
    arguments.one_of("baseline", baseline, PATHS)
    arguments.instance("precisions", precisions, (list, tuple))
    if not precisions:
        raise ValueError(f"precisions must name at least one of {sorted(WEIGHT_FORMATS)}; got {precisions!r}")
    for i, precision in enumerate(precisions):
        arguments.one_of(f"precisions[{i}]", precision, WEIGHT_FORMATS)
    if threads is not None:
        arguments.count("threads", threads, "threads")
    repeats = arguments.count("repeats", repeats, "repeats")
    built = kernel_path()
    if baseline not in runnable_paths() or baseline == built:
        return None
    libs = {built: load(), baseline: load(path=baseline)}
    fns = {}
    for precision in precisions:
        prepared = _prepare(stack, precision)  # one copy of the weights, read by both paths
        fns.update({f"{precision} {name}": _bind(stack, precision, prepared, threads, lib)
                    for name, lib in libs.items()})
    return PathComparison(built, baseline, bench.compare(fns, repeats=repeats))
