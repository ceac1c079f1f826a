"""The decode step (lesson 2): a matrix-vector product streaming its weights from memory, fp32/int8/int4.

Generating one token reads every weight once and does 2 FLOP per weight, far below any chip's ridge point, so
time ~ weight bytes / bandwidth and fewer bytes per weight means proportionally more tokens/s. The lesson's
stack: `n_layers` residual layers h <- h + h @ B_i with B_i (d_model, d_model), together far larger than the
last-level cache. fp32 runs in numpy and torch; int8 and int4 run in ONNX Runtime's quantized MatMul kernels;
and a small C kernel written for this case (lowbit_gemv) runs all three precisions, when a C compiler is
present. Every quantized path stores hwopt.quantization's codes and scales, in its kernel's own layout. The
fp32 result in float64 is the oracle every path is checked against. Each path's bytes are those of its storage
format (hwopt.formats), block scales included: int4_g32 stores an fp32 scale per 32 weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from hwopt import arguments, formats, plots, quantization, widgets
from hwopt.kernels import lowbit_gemv, ort
from hwopt.machine import bench, specs

CACHE_MARGIN = 1.5  # a copy of the weights this many times the last-level cache is timed from memory

# Stated tolerances: relative L2 error of the stack's output vs the fp32 oracle (4 layers, random weights).
TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "int8": 0.05, "int4": 0.25}


def weights_gb(params: float, bytes_per_weight: float) -> float:
    """Weights in GB (1e9 bytes): params * bytes_per_weight (formats.bytes_per_weight: scales included)."""
    params = arguments.positive("params", params)
    return params * arguments.positive("bytes_per_weight", bytes_per_weight) / 1e9


def tokens_per_s_estimate(params: float, bytes_per_weight: float, bandwidth_gbs: float) -> float:
    """Single-stream decode speed if each token reads all weights once: bandwidth / model bytes (tokens/s)."""
    return arguments.positive("bandwidth_gbs", bandwidth_gbs) / weights_gb(params, bytes_per_weight)


def size_and_speed_report(params: float, bytes_per_weight: float, bandwidth_gbs: float) -> str:
    """One line for the slider: model size and the tokens/s that bandwidth allows."""
    size = weights_gb(params, bytes_per_weight)
    rate = tokens_per_s_estimate(params, bytes_per_weight, bandwidth_gbs)
    return (f"{params / 1e9:g}B params x {bytes_per_weight:g} bytes = {size:,.2f} GB of weights; at "
            f"{bandwidth_gbs:,.0f} GB/s each token reads them once -> at most {rate:,.1f} tokens/s")


# ---- the weights and the oracle ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodeStack:
    """Weights of a decode step: layers[i] is B_i (d_model, d_model) fp32, x the input (d_model,)."""

    layers: tuple[np.ndarray, ...]
    x: np.ndarray

    def __post_init__(self):
        arguments.instance("layers", self.layers, (tuple, list))
        if not self.layers:
            raise ValueError("layers must hold at least one (d_model, d_model) weight matrix")
        x = arguments.finite_array("x", self.x, ndim=1)
        for i, w in enumerate(self.layers):
            w = arguments.finite_array(f"layers[{i}]", w, ndim=2)
            if w.shape != (len(x), len(x)):
                raise ValueError(f"layers[{i}] must be ({len(x)}, {len(x)}) like x; got shape {w.shape}")

    @property
    def d_model(self) -> int:
        """Width of the activations."""
        return int(self.x.shape[0])

    @property
    def n_params(self) -> int:
        """Number of weights in the stack."""
        return sum(int(w.size) for w in self.layers)

    @property
    def activation_bytes(self) -> int:
        """Bytes of activations a step moves besides the weights: every layer reads its fp32 input (d_model)
        and writes its fp32 output (d_model); small next to the weights, and counted in bytes moved."""
        return 2 * 4 * self.d_model * len(self.layers)

    def weight_bytes(self, precision) -> float:
        """Bytes read per step with the weights stored in a format ('fp32', 'int4_g32'): weights + scales."""
        return self.n_params * formats.get(precision).bytes_per_weight


def layers_for_working_set(d_model: int, min_bytes: float, bytes_per_weight: float | None = None) -> int:
    """How many (d_model x d_model) layers make the stack at least min_bytes at bytes_per_weight (None: the
    narrowest format decode_paths stores, scales included, so that every path's copy is that large)."""
    arguments.count("d_model", d_model, "dimension")
    arguments.positive("min_bytes", min_bytes)
    if bytes_per_weight is None:
        bytes_per_weight = min(formats.bytes_per_weight(f) for f in storage_precisions(d_model).values())
    per_layer = d_model * d_model * arguments.positive("bytes_per_weight", bytes_per_weight)
    return max(1, math.ceil(min_bytes / per_layer))


def make_stack(d_model: int = 4096, n_layers: int = 4, seed: int = 0) -> DecodeStack:
    """Random weights (std 1/sqrt(d_model), so activations keep their scale) and input, fp32."""
    arguments.count("d_model", d_model, "dimension")
    arguments.count("n_layers", n_layers, "layers")
    n_weights, limit = d_model * d_model * n_layers, arguments.LIMITS["elements"]
    if n_weights > limit:
        raise ValueError(f"d_model * d_model * n_layers must be at most {limit:,} weights "
                         f"(hwopt.arguments.LIMITS['elements']); got {n_weights:,}")
    rng = np.random.default_rng(arguments.count("seed", seed, "seed", minimum=0))
    scale = np.float32(1.0 / math.sqrt(d_model))
    layers = []
    for _ in range(n_layers):
        w = rng.standard_normal((d_model, d_model), dtype=np.float32)
        w *= scale
        layers.append(w)
    return DecodeStack(tuple(layers), rng.standard_normal(d_model, dtype=np.float32))


def reference(stack: DecodeStack) -> np.ndarray:
    """The oracle: h <- h + h @ B_i for every layer, in float64; returns (d_model,)."""
    arguments.instance("stack", stack, DecodeStack)
    h = stack.x.astype(np.float64)
    for w in stack.layers:
        h = h + h @ w.astype(np.float64)
    return h


def relative_error(y, y_ref) -> float:
    """||y - y_ref|| / ||y_ref|| (L2 over all elements)."""
    y = arguments.finite_array("y", y).astype(np.float64).ravel()
    y_ref = arguments.finite_array("y_ref", y_ref).astype(np.float64).ravel()
    if y.shape != y_ref.shape:
        raise ValueError(f"y and y_ref must have the same number of elements; got {y.size} and {y_ref.size}")
    norm = np.linalg.norm(y_ref)
    if norm == 0:
        raise ValueError("y_ref must not be all zeros")
    return float(np.linalg.norm(y - y_ref) / norm)


# ---- fp32 (and fp16 on GPU) paths --------------------------------------------------------------------------


def numpy_step(stack: DecodeStack) -> Callable[[], np.ndarray]:
    """fp32 decode step in numpy (BLAS sgemv): returns a zero-argument function -> (d_model,)."""
    arguments.instance("stack", stack, DecodeStack)
    layers, x = stack.layers, stack.x

    def step():
        h = x
        for w in layers:
            h = h + h @ w
        return h

    return step


def torch_step(stack: DecodeStack, device="cpu", precision: str = "fp32") -> Callable[[], np.ndarray]:
    """Decode step in torch (torch.mv on the weights' transposed view) on `device` at precision 'fp32', 'fp16'
    or 'bf16' -> numpy (d_model,)."""
    arguments.instance("stack", stack, DecodeStack)
    device = bench.resolve_device(device)
    tdtype = getattr(torch, formats.torch_dtype(formats.name(precision, supported=("fp32", "fp16", "bf16"))))
    weights = [torch.from_numpy(w).to(device=device, dtype=tdtype).T for w in stack.layers]  # (out, in) views
    x = torch.from_numpy(stack.x).to(device=device, dtype=tdtype)

    def step():
        with torch.inference_mode():
            h = x
            for w in weights:
                h = h + torch.mv(w, h)
            return h.float().cpu().numpy()

    return step


# ---- int8 and int4 in ONNX Runtime: codes and scales from hwopt.quantization, packed by kernels.ort -----


def int8_model_bytes(stack: DecodeStack) -> bytes:
    """ONNX graph (bytes) of the stack, uint8 weights with a scale and zero point per output channel:
    DynamicQuantizeLinear -> MatMulInteger -> rescale."""
    arguments.instance("stack", stack, DecodeStack)
    return ort.decode_step_model([quantization.quantize(w, "int8", per_channel=True, symmetric=False, axis=0)
                                  for w in stack.layers])


def nbits_model_bytes(stack: DecodeStack, bits: int = 4, block_size: int = 32,
                      accuracy_level: int = 4) -> bytes:
    """ONNX graph (bytes) of the stack, MatMulNBits weights: symmetric 4- or 8-bit codes with an fp32 scale
    per block_size weights along K (accuracy_level 4: int8 compute; 0: fp32)."""
    arguments.instance("stack", stack, DecodeStack)
    arguments.one_of("bits", bits, ort.NBITS_BITS)
    arguments.one_of("block_size", block_size, ort.NBITS_BLOCK_SIZES)
    if stack.d_model % block_size:
        raise ValueError(f"block_size must divide d_model={stack.d_model}; got {block_size}")
    layers = [quantization.quantize(w, bits, block=block_size, axis=0) for w in stack.layers]
    return ort.decode_step_model(layers, accuracy_level)


def nbits_format(bits: int, block_size: int) -> formats.Format:
    """The format of MatMulNBits weights as nbits_model_bytes stores them: `bits`-bit ints, one fp32 scale per
    block_size (no zero points: the kernel's default midpoint); ValueError if formats has no such entry."""
    arguments.one_of("bits", bits, ort.NBITS_BITS)
    arguments.one_of("block_size", block_size, ort.NBITS_BLOCK_SIZES)
    f = quantization.blocked(bits, block_size)
    if f.name not in formats.FORMATS:
        raise ValueError(f"bits and block_size: formats has no {bits}-bit format with an fp32 scale per "
                         f"{block_size} weights (add one to hwopt/formats.py); got bits={bits!r}, "
                         f"block_size={block_size!r}")
    return f


def ort_step(session, stack: DecodeStack) -> Callable[[], np.ndarray]:
    """Zero-argument function running the session on the stack's input -> (d_model,)."""
    arguments.instance("stack", stack, DecodeStack)
    if not callable(getattr(session, "run", None)):
        raise ValueError(f"session must be an onnxruntime.InferenceSession; got {type(session).__name__}")
    feed = {"h0": stack.x[None, :]}

    def step():
        return session.run(None, feed)[0][0]

    return step


# ---- all paths, checked and timed --------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodePath:
    """One way to run the decode step: its precision, storage format, a zero-argument function, its bytes."""

    label: str
    precision: str  # what the lesson compares: 'fp32', 'fp16', 'int8' or 'int4' (the keys of TOLERANCE)
    storage_precision: str  # how the weights are stored, a name in hwopt.formats ('int4_g32')
    fn: Callable[[], np.ndarray]
    weight_bytes: float  # bytes read per step: weights and their scales

    @property
    def bytes_per_weight(self) -> float:
        """Bytes per weight of the path's storage format, block scales included."""
        return formats.bytes_per_weight(self.storage_precision)


def storage_precisions(d_model: int) -> dict[str, str]:
    """How each CPU path of decode_paths stores its weights: label -> formats name (the C kernel's paths are
    built only where it compiles). MatMulInteger also keeps an fp32 scale and a uint8 zero point per column
    of d_model weights, the C kernel's int8 an fp32 scale per row: negligible, as formats' int8 has it."""
    arguments.count("d_model", d_model, "dimension")
    int8_block = 128 if d_model % 128 == 0 else 32  # the larger block where it fits: a quarter of the scales
    return {
        "fp32 numpy": "fp32", "fp32 torch": "fp32",
        "int8 ORT MatMulInteger": "int8",
        "int8 ORT MatMulNBits": nbits_format(8, int8_block).name,
        "int4 ORT MatMulNBits": nbits_format(4, 32).name,
        **{f"{precision} C kernel": stored for precision, stored in lowbit_gemv.WEIGHT_FORMATS.items()},
    }  # fmt: skip


def prediction_table(stack: DecodeStack, bandwidth_gbs: float) -> str:
    """Per storage format of the CPU paths: bytes per weight (scales included), MB per step, predicted ms."""
    arguments.instance("stack", stack, DecodeStack)
    arguments.positive("bandwidth_gbs", bandwidth_gbs)
    by_format: dict[str, list[str]] = {}
    for label, stored in storage_precisions(stack.d_model).items():
        by_format.setdefault(stored, []).append(label)
    lines = [f"{'format':10s} {'B/weight':>8s}  {'stored as':32s} {'MB/step':>8s} {'predicted ms':>13s}  "
             "paths"]
    for stored, labels in by_format.items():
        f, nbytes = formats.get(stored), stack.weight_bytes(stored)
        lines.append(f"{stored:10s} {f.bytes_per_weight:8.4g}  {f.layout:32s} {nbytes / 1e6:8.0f} "
                     f"{nbytes / bandwidth_gbs / 1e6:13.2f}  {', '.join(labels)}")
    return "\n".join(lines)


def decode_paths(stack: DecodeStack, device="cpu", threads: int | None = None) -> dict[str, DecodePath]:
    """Every way to run the step: fp32 numpy and torch; int8 (2 kernels) and int4 in ONNX Runtime; the C
    kernel at fp32/int8/int4 (when it builds: lowbit_gemv.unavailable_reason()); on a GPU torch fp32/fp16."""
    arguments.instance("stack", stack, DecodeStack)
    device = bench.resolve_device(device)
    if threads is not None:
        arguments.count("threads", threads, "threads")
    stored = storage_precisions(stack.d_model)

    def path(label, precision, fn, storage_precision=None):
        storage_precision = storage_precision or stored[label]
        return DecodePath(label, precision, storage_precision, fn, stack.weight_bytes(storage_precision))

    paths = [path("fp32 numpy", "fp32", numpy_step(stack)),
             path("fp32 torch", "fp32", torch_step(stack, "cpu"))]
    if device != "cpu":  # labels name the device (GPU_MARKERS)
        paths += [path(f"fp32 torch {device}", "fp32", torch_step(stack, device), "fp32"),
                  path(f"fp16 torch {device}", "fp16", torch_step(stack, device, "fp16"), "fp16")]
    # Two int8 kernels (which is faster depends on the CPU), one int4; on the cores torch uses, and with idle
    # threads that sleep rather than spin (they would slow whichever path is timed next).
    ort_threads = torch.get_num_threads() if threads is None else threads
    int8_blocks, int4_blocks = (formats.get(stored[f"{bits} ORT MatMulNBits"]) for bits in ("int8", "int4"))
    graphs = {  # built one at a time: each serialized graph holds a copy of the weights
        "int8 ORT MatMulInteger": ("int8", lambda: int8_model_bytes(stack)),
        "int8 ORT MatMulNBits": ("int8", lambda: nbits_model_bytes(stack, 8, int8_blocks.block)),
        "int4 ORT MatMulNBits": ("int4", lambda: nbits_model_bytes(stack, 4, int4_blocks.block)),
    }
    paths += [path(label, precision, ort_step(ort.make_session(graph(), threads=ort_threads), stack))
              for label, (precision, graph) in graphs.items()]
    if stack.d_model % 64 == 0 and lowbit_gemv.unavailable_reason() is None:
        paths += [path(f"{prec} C kernel", prec, lowbit_gemv.step_fn(stack, prec, threads))
                  for prec in ("fp32", "int8", "int4")]
    return {p.label: p for p in paths}


def check_paths(paths: dict[str, DecodePath], stack: DecodeStack) -> dict[str, float]:
    """Relative error of every path vs the float64 oracle; ValueError naming any path above TOLERANCE."""
    _check_paths(paths)
    y_ref = reference(stack)
    errors = {label: relative_error(p.fn(), y_ref) for label, p in paths.items()}
    bad = {k: e for k, e in errors.items() if e > TOLERANCE[paths[k].precision]}
    if bad:
        raise ValueError("paths disagree with the fp32 oracle beyond tolerance: " + ", ".join(
            f"{k}: {e:.3g} > {TOLERANCE[paths[k].precision]:g}" for k, e in bad.items()))
    return errors


def _check_paths(paths) -> None:
    arguments.instance("paths", paths, dict)
    if not paths:
        raise ValueError("paths must name at least one DecodePath")
    for label, path in paths.items():
        arguments.instance(f"paths[{label!r}]", path, DecodePath)


GPU_MARKERS = ("cuda", "mps")  # labels of paths that run on a GPU name their device


@dataclass(frozen=True)
class DecodeResult:
    """Timed decode paths: Measurement per label, with achieved GB/s and speedups over the best fp32 path."""

    paths: dict[str, DecodePath]
    measurements: dict[str, bench.Measurement]

    def achieved_gbs(self, label: str) -> float:
        """Bytes of weights and scales read per second (GB/s) by one path, from its median time."""
        arguments.one_of("label", label, self.measurements)
        return self.paths[label].weight_bytes / self.measurements[label].median_s / 1e9

    @property
    def best_fp32(self) -> str:
        """Label of the fastest fp32 path."""
        fp32 = [k for k, p in self.paths.items() if p.precision == "fp32"]
        return min(fp32, key=lambda k: self.measurements[k].median_s)

    @property
    def best_fp32_cpu(self) -> str:
        """Label of the fastest fp32 path on the CPU (the baseline for the CPU-only ONNX Runtime paths)."""
        fp32 = [k for k, p in self.paths.items()
                if p.precision == "fp32" and not any(g in k for g in GPU_MARKERS)]
        return min(fp32, key=lambda k: self.measurements[k].median_s)

    def speedup(self, label: str, baseline: str | None = None) -> float:
        """How many times faster `label` is than `baseline` (default: the best fp32 path), same run."""
        arguments.one_of("label", label, self.measurements)
        if baseline is not None:
            arguments.one_of("baseline", baseline, self.measurements)
        return bench.speedup(self.measurements[baseline or self.best_fp32], self.measurements[label])

    def best(self, precision: str) -> str:
        """Label of the fastest path at precision."""
        arguments.one_of("precision", precision, {p.precision for p in self.paths.values()})
        return min((k for k, p in self.paths.items() if p.precision == precision),
                   key=lambda k: self.measurements[k].median_s)

    def fastest_on(self, device: str = "cpu") -> list[str]:
        """Labels of the fastest path per precision among those that run on `device` ('cpu' or a GPU)."""
        base = device.split(":")[0] if isinstance(device, str) else device
        arguments.one_of("device", base, ("cpu", *GPU_MARKERS))
        on_gpu = device != "cpu"
        labels = [k for k in self.paths if any(g in k for g in GPU_MARKERS) == on_gpu]
        precisions = dict.fromkeys(self.paths[k].precision for k in labels)
        fastest = {}
        for k in sorted(labels, key=lambda k: self.measurements[k].median_s):
            fastest.setdefault(self.paths[k].precision, k)
        return [fastest[p] for p in precisions]

    def vs_prediction(self, bandwidth_gbs: float) -> str:
        """Per path: its format, predicted time (weight + scale bytes / bandwidth) vs measured, and the
        fraction of the bandwidth it used."""
        arguments.positive("bandwidth_gbs", bandwidth_gbs)
        lines = [f"{'path':28s} {'format':>9s} {'B/weight':>8s} {'predicted ms':>13s} {'measured ms':>12s} "
                 f"{'pred/meas':>10s} {'of bandwidth':>13s}"]
        for k, m in self.measurements.items():
            p = self.paths[k]
            predicted = p.weight_bytes / (bandwidth_gbs * 1e9)
            lines.append(f"{k:28s} {p.storage_precision:>9s} {p.bytes_per_weight:8.4g} "
                         f"{predicted * 1e3:13.2f} {m.median_ms:12.2f} {predicted / m.median_s:10.2f} "
                         f"{self.achieved_gbs(k) / bandwidth_gbs:13.0%}")
        return "\n".join(lines)

    def table(self) -> str:
        """Text table: time per step, GB/s of weights and scales, speedup over the best fp32 path."""
        lines = [f"{'path':28s} {'ms/step':>9s} {'IQR':>7s} {'GB/s':>7s} {'vs best fp32':>13s}"]
        for k, m in self.measurements.items():
            lines.append(f"{k:28s} {m.median_ms:9.2f} {m.iqr_ms:7.2f} {self.achieved_gbs(k):7.1f} "
                         f"{self.speedup(k):12.2f}x")
        return "\n".join(lines)


SETTLE_S = 0.15  # longer than BLAS's idle threads spin after a call (OpenBLAS: 2**28 cycles, ~0.1 s)


def time_paths(paths: dict[str, DecodePath], device="cpu", repeats: int = 8,
               settle_s: float = SETTLE_S) -> DecodeResult:
    """Time the paths interleaved (A B C A B C ...) with bench.compare, so each speedup is a ratio of one run.

    Before each timed repeat a path runs untimed for settle_s: a framework's idle threads keep spinning for a
    while after each call and would otherwise slow whichever path is timed next.
    """
    _check_paths(paths)
    measured = bench.compare({k: p.fn for k, p in paths.items()}, device=device, repeats=repeats,
                             settle_s=settle_s)
    return DecodeResult(paths, measured)


INT8_DOT_FEATURES = ("AVX-512 VNNI", "AVX-VNNI", "AMX-INT8", "NEON DOTPROD", "I8MM")


def int8_verdict(result: DecodeResult, bandwidth_gbs: float, simd=()) -> str:
    """Plain-language verdict on each int8 path on the CPU from its measurement: memory- or compute-bound.

    A path is memory-bound if it streams its weights at >= half the measured bandwidth, or at >= 80% of the
    rate the best fp32 path streams in the same run (what a GEMV gets from memory on this machine).
    """
    arguments.instance("result", result, DecodeResult)
    arguments.positive("bandwidth_gbs", bandwidth_gbs)
    arguments.instance("simd", simd, (list, tuple, set, frozenset))
    base = result.best_fp32_cpu
    fp32_gbs = result.achieved_gbs(base)
    int8 = sorted((k for k, p in result.paths.items()
                   if p.precision == "int8" and not any(g in k for g in GPU_MARKERS)),
                  key=lambda k: result.measurements[k].median_s)
    if not int8:
        raise ValueError("result has no int8 path on the CPU to judge")
    lines = [f"measured bandwidth {bandwidth_gbs:.1f} GB/s; the best fp32 path ({base}) streams its weights "
             f"at {fp32_gbs:.1f} GB/s"]
    memory_bound = []
    for label in int8:
        gbs = result.achieved_gbs(label)
        keeps_up = memory_or_compute(gbs, bandwidth_gbs) == "memory" or gbs >= 0.8 * fp32_gbs
        memory_bound += [label] if keeps_up else []
        lines.append(f"  {label}: {gbs:.1f} GB/s ({gbs / bandwidth_gbs:.0%} of bandwidth) -> "
                     f"{'memory-bound' if keeps_up else 'limited by compute'}")
    slow = [k for k in int8 if k not in memory_bound]
    dot = [f for f in simd if f in INT8_DOT_FEATURES]
    why = (f"this CPU has {', '.join(dot)}, so look for overheads instead" if dot else
           "this CPU has no int8 dot-product instructions (VNNI or similar), so each int8 multiply-add "
           "takes several instructions")
    if not slow:
        lines.append("Every int8 kernel keeps up with memory: fewer bytes per weight pay off directly.")
    elif memory_bound:
        verb = "is" if len(slow) == 1 else "are"
        same = _same_bytes(result.paths[memory_bound[0]], result.paths[slow[0]])
        lines.append(f"{' and '.join(slow)} {verb} limited by compute, not memory: {why}. "
                     f"{memory_bound[0]} reads {same} and keeps up with memory: the bytes set the "
                     "floor, the kernel decides whether you reach it.")
    else:
        lines.append(f"Every int8 kernel here is limited by compute, not memory: {why}.")
    return "\n".join(lines)


def _same_bytes(a: DecodePath, b: DecodePath) -> str:
    if a.bytes_per_weight == b.bytes_per_weight:
        return "the same bytes"
    return f"about the same bytes ({a.bytes_per_weight:.4g} vs {b.bytes_per_weight:.4g} B/weight)"


def memory_or_compute(achieved_gbs: float, bandwidth_gbs: float, threshold: float = 0.5) -> str:
    """'memory' if a kernel reads its weights at >= threshold of the measured bandwidth, else 'compute'."""
    arguments.positive("achieved_gbs", achieved_gbs)
    arguments.positive("bandwidth_gbs", bandwidth_gbs)
    arguments.fraction("threshold", threshold)
    return "memory" if achieved_gbs >= threshold * bandwidth_gbs else "compute"


SPEED_FORMATS = ("fp32", "fp16", "fp8_e4m3", "int8", "int4_g32", "int4_g128")  # the explorer's formats


def speed_explorer(measured_bandwidth_gbs: float | None = None, chips=None):
    """Sliders (parameters, weight format, chip) -> model size (scales included), bandwidth-bound tokens/s."""
    if chips is None:
        chips = specs.load_chips()
    arguments.instance("chips", chips, (list, tuple))
    for i, chip in enumerate(chips):
        arguments.instance(f"chips[{i}]", chip, specs.Chip)
    bandwidth = {c.name: c.bandwidth_gbs for c in chips}
    options = [(f"{c.name} ({c.bandwidth_gbs:g} GB/s)", c.name) for c in chips]
    if measured_bandwidth_gbs is not None:
        arguments.positive("measured_bandwidth_gbs", measured_bandwidth_gbs)
        bandwidth["this machine"] = float(measured_bandwidth_gbs)
        options.insert(0, (f"this machine, measured ({measured_bandwidth_gbs:.1f} GB/s)", "this machine"))

    def show(params, precision, chip):
        print(formats.get(precision).describe())
        print(size_and_speed_report(params, formats.bytes_per_weight(precision), bandwidth[chip]))
        rates = [tokens_per_s_estimate(params, formats.bytes_per_weight(f), bandwidth[chip])
                 for f in SPEED_FORMATS]
        ax = plots.axes("weight format (bytes per weight incl. scales)", "tokens/s (upper bound)",
                        title=f"{params / 1e9:g}B params on {chip}", figsize=(7.0, 3.2))
        colors = [plots.color(1) if f == precision else plots.color(0) for f in SPEED_FORMATS]
        ax.bar([f"{f}\n{formats.bytes_per_weight(f):g} B" for f in SPEED_FORMATS], rates, color=colors)
        return plots.finish(ax)

    return widgets.explore(
        show,
        params=widgets.log_slider("parameters", 1e8, 1e12, 7e9, unit="count"),
        precision=widgets.dropdown("weights", [(formats.get(f).describe(), f) for f in SPEED_FORMATS],
                                   "fp16"),
        chip=widgets.dropdown("chip", options),
    )
