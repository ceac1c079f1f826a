"""A hand-written decode-step kernel (lowbit_gemv.c) at fp32, int8 and int4, built with the system C compiler.

The kernel runs h <- h + h @ B_i over a stack of square layers, the same step as decode.py, with every
weight read once per step: it is written for the memory-bound case of batch-1 decoding. Its int8 and int4
weights are hwopt.quantization's codes and scales, packed into the kernel's layout (pack_int8, pack_int4). The
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
import torch

from hwopt import arguments, formats, quantization
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
    out_dir = Path(out_dir) if out_dir is not None else toolchain.cache_dir()
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


# ---- weight layouts: hwopt.quantization's codes and scales of w (K, N), packed for the kernel ------------


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


def quantize_weight(w, precision: str) -> quantization.Quantized:
    """The codes and scales the kernel stores for w (K, N) at 'int8' (symmetric, a scale per output channel)
    or 'int4' (symmetric int4_g32: a scale per 32 weights of a channel), quantized along K."""
    precision = formats.name(precision, "precision", supported=("int8", "int4"))
    w = _square(w)
    return quantization.quantize(w, WEIGHT_FORMATS[precision], per_channel=True, axis=0)


def _channel_codes(q: quantization.Quantized, precision: str) -> tuple[np.ndarray, np.ndarray]:
    """q's codes as rows of w.T (N, K) and scales (N, blocks), checked to be quantize_weight's output."""
    arguments.instance("q", q, quantization.Quantized)
    stored = formats.get(WEIGHT_FORMATS[precision])
    codes, scales, _ = q.numpy()
    block = stored.block or (codes.shape[0] if codes.ndim == 2 else 0)
    if (q.precision.name != stored.name or not q.symmetric or q.axis != 0 or q.block != block
            or codes.ndim != 2 or codes.shape[0] != codes.shape[1] or codes.shape[0] % 64):
        raise ValueError(f"q must be quantize_weight(w, {precision!r}) of a square w (d, d), d a multiple of "
                         f"64; got {q.precision.name} codes of shape {codes.shape} along axis {q.axis}")
    return codes.T, scales.T


def pack_int8(q: quantization.Quantized) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's int8 layout of quantize_weight(w, 'int8'): codes (N/4, K/32, 4, 32) int8 in -127..127
    (rows of w.T interleaved in groups of 4) and a scale per row (N,) fp32."""
    rows, scales = _channel_codes(q, "int8")
    return _interleave(rows.astype(np.int8, copy=False)), np.ascontiguousarray(scales.ravel(), np.float32)


def pack_int4(q: quantization.Quantized) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's int4 layout of quantize_weight(w, 'int4'): packed (N/4, K/64, 4, 32) uint8 and scales
    (N/4, K/32, 4) fp32. A row's 64 weights take 32 bytes: byte j holds code j (low nibble) and code j + 32
    (high), each plus 8. Rows are interleaved in groups of 4, and so are their block scales."""
    rows, scales = _channel_codes(q, "int4")
    n, k = rows.shape
    nibbles = (rows + 8).astype(np.uint8).reshape(n, k // 64, 2, INT4_BLOCK)  # (row, piece of 64, half, j)
    packed = (nibbles[:, :, 0] | (nibbles[:, :, 1] << 4)).reshape(n, k // 2)
    grouped_scales = scales.astype(np.float32).reshape(n // 4, 4, -1).transpose(0, 2, 1)
    return _interleave(packed), np.ascontiguousarray(grouped_scales)


def emulate(stack, precision: str) -> np.ndarray:
    """The kernel's arithmetic in numpy (float64 sums), to check the C code against: (d_model,). The layer
    input is quantized as the kernel does it: symmetric int8, one scale for the vector."""
    precision = formats.name(precision, "precision", supported=WEIGHT_FORMATS)
    layers = _layers(stack)
    h = stack.x.astype(np.float64)
    for w in layers:
        if precision == "fp32":
            h = h + h @ w.astype(np.float64)
            continue
        weights = quantize_weight(w, precision).dequantize().astype(np.float64)
        x = quantization.fake_quantize(h.astype(np.float32), "int8")
        h = h + x.astype(np.float64) @ weights
    return h.astype(np.float32)


def _layers(stack) -> list[np.ndarray]:
    if not (hasattr(stack, "layers") and hasattr(stack, "x")):
        raise ValueError(f"stack must have .layers and .x, as decode.make_stack() returns; got "
                         f"{type(stack).__name__}")
    layers = [_square(w, name=f"stack.layers[{i}]") for i, w in enumerate(stack.layers)]
    if any(w.shape != layers[0].shape for w in layers) or np.shape(stack.x) != (layers[0].shape[0],):
        raise ValueError("stack.layers must all be (d, d) and stack.x (d,)")
    return layers


def _prepare(stack, precision: str) -> list[tuple[np.ndarray, np.ndarray | None]]:
    precision = formats.name(precision, "precision", supported=WEIGHT_FORMATS)
    layers = _layers(stack)
    if precision == "fp32":
        return [(np.ascontiguousarray(w.T), None) for w in layers]
    pack = pack_int8 if precision == "int8" else pack_int4
    return [pack(quantize_weight(w, precision)) for w in layers]


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
