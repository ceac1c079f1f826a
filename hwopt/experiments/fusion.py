"""Fusion: bytes moved by a chain of elementwise ops, unfused vs fused, and the speedup predicted (lesson 5).

The chain is y = (gelu(x + bias) + residual) * scale on x, residual of shape (rows, cols).
Unfused, each op reads its inputs from memory and writes its output back; fused, one kernel reads x and
residual once and writes y once. For the 4-op chain: 9 vs 3 tensor passes, a predicted 3x when memory is
the limit. The chain also evaluates one erf per element (exact GELU); where the machine evaluates erf more
slowly than memory delivers the bytes, that second roof binds instead (gelu_elements_per_s measures it).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from hwopt import arguments, plots, roofline, widgets
from hwopt.machine import bench, probe

CHAIN_OPS = 4  # add bias, gelu, add residual, scale
CHAIN_EXTRA_INPUTS = 1  # residual: a full-size tensor; bias (cols,) and scale (scalar) are negligible
CHAIN_TRANSCENDENTALS = 1  # one erf per element (the exact GELU); the adds and multiplies are cheap
GELU_KERNEL_PASSES = 2  # unfused, the GELU kernel reads its input and writes its output
CACHE_MULTIPLE = 4  # the lesson's tensors are this many times the last-level cache
UNKNOWN_CACHE_BYTES = 32 * 2**20  # assumed when the cache size cannot be read
CHAIN_MB_RANGE = (16.0, 512.0)  # per-tensor size limits (MB): enough to leave the cache, few seconds to run
GELU_MAX_ELEMENTS = 1 << 20  # the transcendental probe's array: at most 4 MB, inside the cache


def chain(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, scale: float) -> torch.Tensor:
    """(gelu(x + bias) + residual) * scale; x, residual (rows, cols), bias (cols,)."""
    return (F.gelu(x + bias) + residual) * scale


class Chain(nn.Module):
    """The chain as a module with its bias and scale inside (for torch.compile and ONNX export)."""

    def __init__(self, bias: torch.Tensor, scale: float):
        super().__init__()
        arguments.instance("bias", bias, torch.Tensor)
        arguments.finite_array("bias", bias, ndim=1)
        scale = arguments.number("scale", scale)
        self.bias = nn.Parameter(bias.detach().clone(), requires_grad=False)
        self.scale = float(scale)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return chain(x, self.bias, residual, self.scale)


def chain_into(
    x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, scale: float, out: torch.Tensor
) -> torch.Tensor:
    """The chain written into a preallocated out (rows, cols): no fresh output memory per call."""
    return torch.mul(F.gelu(x + bias) + residual, scale, out=out)


def chain_eager_into(
    x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, scale: float, out: torch.Tensor
) -> torch.Tensor:
    """The chain run eagerly, one kernel per op (the same 9 passes as chain), every result written into a
    preallocated out (rows, cols): eager without fresh memory per call, to set beside chain_into compiled."""
    torch.add(x, bias, out=out)
    torch.ops.aten.gelu_(out)  # the exact GELU, in place
    out.add_(residual)
    return out.mul_(scale)


def cache_bytes(device: str = "cpu") -> int | None:
    """The device's last-level cache in bytes: the CPU's (probe.last_level_cache_bytes), a CUDA GPU's L2;
    None when unknown."""
    device = bench.resolve_device(device)
    kind = device.split(":")[0]
    if kind == "cpu":
        return probe.last_level_cache_bytes()
    if kind == "cuda":
        return getattr(torch.cuda.get_device_properties(device), "L2_cache_size", None) or None
    return None


def chain_shape(device: str = "cpu", *, cache_multiple: float = CACHE_MULTIPLE, cols: int = 1024) -> tuple:
    """(rows, cols) of fp32 tensors cache_multiple times the device's last-level cache (16..512 MB each)."""
    cache_multiple = arguments.positive("cache_multiple", cache_multiple)
    cols = arguments.count("cols", cols, "dimension")
    low, high = CHAIN_MB_RANGE
    target_mb = min(high, max(low, cache_multiple * (cache_bytes(device) or UNKNOWN_CACHE_BYTES) / 1e6))
    rows = max(64, round(target_mb * 1e6 / (4 * cols) / 64) * 64)
    return rows, cols


def gelu_elements_per_s(
    device: str = "cpu", n_elements: int | None = None, *, repeats: int = 15, clock=time.perf_counter
) -> float:
    """The transcendental roof: exact (erf) GELUs per second, best of repeats, on an fp32 array that fits in
    the cache (default: an eighth of the last-level cache, at most 1M elements), so memory is not the limit.

    On a CPU: one thread's rate times torch's thread count (erf work scales with the cores; one thread is
    timed because a parallel call on a busy machine waits for its slowest thread's turn on a core).
    """
    device = bench.resolve_device(device)
    if n_elements is not None:
        n_elements = arguments.count("n_elements", n_elements, "elements")
    repeats = arguments.count("repeats", repeats, "repeats")
    arguments.function("clock", clock)
    if n_elements is None:
        n_elements = min(GELU_MAX_ELEMENTS, max(1 << 14, (cache_bytes(device) or UNKNOWN_CACHE_BYTES) // 32))
    x = torch.randn(n_elements, generator=torch.Generator().manual_seed(0)).to(device)
    cpu = device == "cpu"
    threads = torch.get_num_threads() if cpu else 1
    with warnings.catch_warnings(), bench.threads(1) if cpu else contextlib.nullcontext():
        warnings.simplefilter("ignore", bench.NoisyMeasurementWarning)  # a roof keeps the best repeat
        m = bench.time_fn(lambda: F.gelu(x), device=device, warmup=2, repeats=repeats, clock=clock)
    return threads * n_elements / m.min_s


@dataclass(frozen=True)
class ChainPrediction:
    """The chain's predicted time: the kernel that evaluates the erfs under both roofs (erf_kernel), plus
    the kernels without erfs at the memory roof (other_memory_s, 0 when the chain is one fused kernel)."""

    erf_kernel: roofline.ElementwiseRoofs
    other_memory_s: float = 0.0

    def __post_init__(self):
        arguments.instance("erf_kernel", self.erf_kernel, roofline.ElementwiseRoofs)
        arguments.positive("other_memory_s", self.other_memory_s, allow_zero=True)

    @property
    def time_s(self) -> float:
        """Predicted seconds: the erf kernel's slower roof plus the other kernels' bytes."""
        return self.erf_kernel.time_s + self.other_memory_s

    @property
    def bound(self) -> str:
        """'memory' or 'transcendental': the roof of the kernel that evaluates the erfs."""
        return self.erf_kernel.bound


def chain_roofs(
    n_elements: int,
    bandwidth_gbs: float,
    gelus_per_s: float,
    *,
    fused: bool = True,
    n_passes: int | None = None,
) -> ChainPrediction:
    """Predicted time of the chain on tensors of n_elements (n_passes full fp32 passes; default: fused 3,
    unfused 9) at bandwidth_gbs, with one erf per element at gelus_per_s.

    Fused, one kernel: max(bytes / bandwidth, erfs / rate). Unfused, the GELU kernel (its input read and its
    output written, GELU_KERNEL_PASSES) takes the slower of its two roofs; the other passes add at the memory
    roof, since separate kernels cannot overlap one's arithmetic with another's memory traffic.
    """
    n_elements = arguments.count("n_elements", n_elements, "elements")
    bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    gelus_per_s = arguments.positive("gelus_per_s", gelus_per_s)
    fused = arguments.boolean("fused", fused)
    n_passes = passes(fused=fused) if n_passes is None else arguments.count("n_passes", n_passes, "items")
    erf_passes = n_passes if fused else min(n_passes, GELU_KERNEL_PASSES)
    pass_bytes = 4.0 * n_elements
    erf_kernel = roofline.elementwise_roofs(
        erf_passes * pass_bytes, bandwidth_gbs, CHAIN_TRANSCENDENTALS * n_elements, gelus_per_s
    )
    return ChainPrediction(erf_kernel, (n_passes - erf_passes) * pass_bytes / (bandwidth_gbs * 1e9))


def bound_sentence(prediction: ChainPrediction, bandwidth_gbs: float, gelus_per_s: float) -> str:
    """Which roof binds the chain's erf kernel on this run, and by how much, in one sentence."""
    arguments.instance("prediction", prediction, ChainPrediction)
    arguments.positive("bandwidth_gbs", bandwidth_gbs)
    arguments.positive("gelus_per_s", gelus_per_s)
    roofs = prediction.erf_kernel
    memory_ms, erf_ms = roofs.memory_s * 1e3, roofs.transcendental_s * 1e3
    ratio = max(memory_ms, erf_ms) / max(min(memory_ms, erf_ms), 1e-12)
    if roofs.bound == "memory":
        return (
            f"memory-bound here: moving the bytes at {bandwidth_gbs:.1f} GB/s takes {memory_ms:.2f} ms, "
            f"{ratio:.1f}x the {erf_ms:.2f} ms the erfs take at {gelus_per_s / 1e9:.2f} G/s: "
            "the byte count predicts the fused time"
        )
    return (
        f"compute-bound here: the erfs take {erf_ms:.2f} ms at {gelus_per_s / 1e9:.2f} G/s, {ratio:.1f}x "
        f"the {memory_ms:.2f} ms that moving the bytes takes at {bandwidth_gbs:.1f} GB/s: fusing saves "
        "bytes, but the fused kernel waits on its arithmetic, so it gains less than the byte count predicts"
    )


def chain_inputs(rows: int, cols: int, device: str = "cpu", seed: int = 0) -> dict:
    """Random inputs for the chain: {'x', 'bias', 'residual', 'scale'} on device, float32."""
    arguments.count("rows", rows, "dimension")
    arguments.count("cols", cols, "dimension")
    if rows * cols > arguments.LIMITS["elements"]:
        raise ValueError(f"rows * cols must be at most {arguments.LIMITS['elements']:,} elements "
                         f"(hwopt.arguments.LIMITS['elements']); got {rows * cols:,}")
    device = bench.resolve_device(device)
    g = torch.Generator().manual_seed(arguments.count("seed", seed, "seed", minimum=0))
    return {
        "x": torch.randn(rows, cols, generator=g).to(device),
        "bias": torch.randn(cols, generator=g).to(device),
        "residual": torch.randn(rows, cols, generator=g).to(device),
        "scale": 0.5,
    }


def passes(n_ops: int = CHAIN_OPS, extra_inputs: int = CHAIN_EXTRA_INPUTS, *, fused: bool) -> int:
    """Full-tensor memory passes of a chain of n_ops elementwise ops (one read per input, one write each).

    Unfused: every op reads its input and writes its output (2 * n_ops), plus one read per extra input.
    Fused: read the input and the extra inputs once, write the output once.
    """
    n_ops = arguments.count("n_ops", n_ops, "layers")
    extra_inputs = arguments.between("extra_inputs", extra_inputs, 0, n_ops, integer=True)
    fused = arguments.boolean("fused", fused)
    return (1 + extra_inputs + 1) if fused else (2 * n_ops + extra_inputs)


def bytes_moved(
    n_elements: int,
    *,
    fused: bool,
    n_ops: int = CHAIN_OPS,
    extra_inputs: int = CHAIN_EXTRA_INPUTS,
    bytes_per_element: float = 4.0,
) -> float:
    """Bytes read + written by the chain on tensors of n_elements each."""
    n_elements = arguments.count("n_elements", n_elements, "elements")
    bytes_per_element = arguments.positive("bytes_per_element", bytes_per_element)
    return float(passes(n_ops, extra_inputs, fused=fused) * n_elements * bytes_per_element)


def predicted_speedup(n_ops: int = CHAIN_OPS, extra_inputs: int = CHAIN_EXTRA_INPUTS) -> float:
    """Fused over unfused speed when memory traffic is all that matters: unfused bytes / fused bytes."""
    return passes(n_ops, extra_inputs, fused=False) / passes(n_ops, extra_inputs, fused=True)


def predicted_time_ms(n_bytes: float, bandwidth_gbs: float) -> float:
    """Time to move n_bytes at bandwidth_gbs (the memory roof), milliseconds."""
    n_bytes = arguments.positive("n_bytes", n_bytes, allow_zero=True)
    bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    return n_bytes / (bandwidth_gbs * 1e9) * 1e3


def fusion_prediction(size_mb: float, n_ops: int, bandwidth_gbs: float, extra_inputs: int = 1) -> dict:
    """Slider callback: for tensors of size_mb (fp32) -> unfused/fused MB moved, predicted ms, speedup."""
    size_mb = arguments.positive("size_mb", size_mb, maximum=arguments.LIMITS["megabytes"])
    n_ops = arguments.count("n_ops", n_ops, "layers")
    extra_inputs = min(arguments.count("extra_inputs", extra_inputs, "layers", minimum=0), n_ops)
    arguments.positive("bandwidth_gbs", bandwidth_gbs)
    n_elements = max(1, int(size_mb * 1e6 / 4))
    out = {"n_elements": n_elements}
    for kind, fused in (("unfused", False), ("fused", True)):
        moved = bytes_moved(n_elements, fused=fused, n_ops=n_ops, extra_inputs=extra_inputs)
        out[f"{kind}_mb"] = moved / 1e6
        out[f"{kind}_ms"] = predicted_time_ms(moved, bandwidth_gbs)
    out["speedup"] = out["unfused_ms"] / out["fused_ms"]
    return out


def plot_fusion_prediction(size_mb: float, n_ops: int, bandwidth_gbs: float, extra_inputs: int = 1, ax=None):
    """Bars of predicted unfused vs fused time for the slider; returns the Figure."""
    p = fusion_prediction(size_mb, n_ops, bandwidth_gbs, extra_inputs)
    ax = plots.axes(
        "predicted time at the memory roof (ms)",
        "variant",
        title=f"{n_ops} ops on {size_mb:g} MB tensors: fused {p['speedup']:.1f}x faster",
        ax=ax,
    )
    ax.barh([0, 1], [p["unfused_ms"], p["fused_ms"]], color=[plots.color(1), plots.color(2)])
    ax.set_yticks(
        [0, 1], [f"unfused ({p['unfused_mb']:.0f} MB moved)", f"fused ({p['fused_mb']:.0f} MB moved)"]
    )
    ax.invert_yaxis()
    return plots.finish(ax)


def first_call_s(fn: Callable[[], object], device: str = "cpu") -> float:
    """Seconds taken by one call of fn, synchronised (a compiled function's first call includes compiling)."""
    arguments.function("fn", fn)
    bench.sync(device)
    start = time.perf_counter()
    fn()
    bench.sync(device)
    return time.perf_counter() - start


def max_abs_error(candidate: torch.Tensor, reference: torch.Tensor) -> float:
    """max |candidate - reference| (the eager FP32 result is the reference)."""
    candidate = arguments.finite_array("candidate", candidate)
    reference = arguments.finite_array("reference", reference)
    candidate = torch.as_tensor(candidate).float().cpu()
    reference = torch.as_tensor(reference).float().cpu()
    if candidate.shape != reference.shape:
        raise ValueError(
            f"shapes differ: candidate {tuple(candidate.shape)} vs reference {tuple(reference.shape)}"
        )
    return float((candidate - reference).abs().max())


def fusion_explorer(bandwidth_gbs: float):
    """Sliders (tensor size, ops in the chain) -> predicted unfused vs fused time at bandwidth_gbs."""
    bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    return widgets.explore(
        plot_fusion_prediction,
        bandwidth_gbs=bandwidth_gbs,
        size_mb=widgets.log_slider("tensor size", 0.1, 1000.0, 16.0, unit="MB"),
        n_ops=widgets.int_slider("elementwise ops in the chain", 1, 10, CHAIN_OPS),
    )


def report_rows(
    results: dict,
    n_elements: int,
    passes_by_label: dict[str, int],
    bandwidth_gbs: float,
    baseline: str | None = None,
    *,
    gelus_per_s: float | None = None,
    fused_labels: Iterable[str] | None = None,
) -> list[dict]:
    """Per variant: measured ms, full-tensor passes, achieved GB/s, predicted ms, the roof that sets it,
    predicted/measured ratio and speedup over the baseline (the first variant unless named).

    Predicted ms is the memory roof (passes at bandwidth_gbs) or, given gelus_per_s, chain_roofs: fused
    variants (fused_labels; default: those with the fused chain's 3 passes) as one kernel, others unfused.
    """
    arguments.instance("results", results, dict)
    if not results:
        raise ValueError("results must hold at least one Measurement")
    for label, m in results.items():
        arguments.instance(f"results[{label!r}]", m, bench.Measurement)
    n_elements = arguments.count("n_elements", n_elements, "elements")
    arguments.instance("passes_by_label", passes_by_label, dict)
    for label, n in passes_by_label.items():
        arguments.count(f"passes_by_label[{label!r}]", n, "items")
    arguments.positive("bandwidth_gbs", bandwidth_gbs)
    if baseline is not None:
        arguments.one_of("baseline", baseline, results)
    if gelus_per_s is not None:
        arguments.positive("gelus_per_s", gelus_per_s)
    if fused_labels is not None:
        arguments.instance("fused_labels", fused_labels, (list, tuple, set, frozenset))
        for i, label in enumerate(fused_labels):
            arguments.one_of(f"fused_labels[{i}]", label, results)
    baseline = baseline or next(iter(results))
    missing = set(results) - set(passes_by_label)
    if missing:
        raise ValueError(f"passes_by_label must give the memory passes of {sorted(missing)}")
    if fused_labels is None:
        fused_labels = [k for k, v in passes_by_label.items() if v == passes(fused=True)]
    fused_labels = set(fused_labels)
    rows = []
    for label, m in results.items():
        moved = passes_by_label[label] * n_elements * 4.0
        if gelus_per_s is None:
            predicted_ms, bound = predicted_time_ms(moved, bandwidth_gbs), "memory"
        else:
            prediction = chain_roofs(
                n_elements,
                bandwidth_gbs,
                gelus_per_s,
                fused=label in fused_labels,
                n_passes=passes_by_label[label],
            )
            predicted_ms, bound = prediction.time_s * 1e3, prediction.bound
        rows.append(
            {
                "variant": label,
                "measured_ms": m.median_ms,
                "iqr_ms": m.iqr_ms,
                "passes": passes_by_label[label],
                "achieved_gbs": moved / m.median_s / 1e9,
                "predicted_ms": predicted_ms,
                "bound": bound,
                "predicted_over_measured": predicted_ms / m.median_ms,
                "speedup": results[baseline].median_s / m.median_s,
            }
        )
    return rows


def format_report(rows: list[dict]) -> str:
    """report_rows as an aligned text table."""
    arguments.instance("rows", rows, (list, tuple))
    for i, row in enumerate(rows):
        arguments.instance(f"rows[{i}]", row, dict)
    width = max(16, *(len(r["variant"]) + 2 for r in rows))
    lines = [
        f"{'variant':<{width}}{'passes':>7}{'ms':>9}{'IQR':>8}{'GB/s':>8}{'predicted ms':>14}{'bound':>16}"
        f"{'pred/meas':>11}{'speedup':>9}"
    ]
    for r in rows:
        lines.append(
            f"{r['variant']:<{width}}{r['passes']:>7}{r['measured_ms']:>9.2f}{r['iqr_ms']:>8.2f}"
            f"{r['achieved_gbs']:>8.1f}{r['predicted_ms']:>14.2f}{r['bound']:>16}"
            f"{r['predicted_over_measured']:>11.2f}{r['speedup']:>8.2f}x"
        )
    return "\n".join(lines)


def _rows_named(rows: list[dict], **labels: str) -> dict[str, dict]:
    """report_rows by variant, checked to hold each label (keyword: the argument that named it)."""
    arguments.instance("rows", rows, (list, tuple))
    for i, row in enumerate(rows):
        arguments.instance(f"rows[{i}]", row, dict)
    by = {r["variant"]: r for r in rows}
    for name, label in labels.items():
        arguments.text(name, label)
        if label not in by:
            raise ValueError(f"{name} must name one of the variants {list(by)}, got {label!r}")
    return by


def fresh_output_sentence(
    rows: list[dict], allocating: str = "torch.compile", given: str = "torch.compile, out given"
) -> str:
    """What a fresh output tensor cost per call, from report_rows of one kernel timed allocating its output
    and writing into one given; and how close the kernel with its output given came to its roof."""
    by = _rows_named(rows, allocating=allocating, given=given)
    fresh_ms = by[allocating]["measured_ms"] - by[given]["measured_ms"]
    share = fresh_ms / by[allocating]["measured_ms"]
    kernel = by[given]
    roof = (
        f"with its output given, the fused kernel took {kernel['measured_ms']:.2f} ms: "
        f"{kernel['predicted_over_measured']:.0%} of the speed its {kernel['bound']} roof allows"
    )
    if share > 0.1:
        return (
            f"a fresh output cost {fresh_ms:.1f} ms per call here ({share:.0%} of the compiled chain's "
            f"time): page faults on memory the allocator had just asked the operating system for; {roof}"
        )
    return f"a fresh output cost little here ({fresh_ms:+.2f} ms per call): memory was reused; {roof}"


def fusion_verdict(rows: list[dict], unfused: str = "eager, out given",
                   fused: str = "torch.compile, out given") -> str:
    """Fusion's gain, from report_rows of an unfused and a fused variant that both write into an output
    allocated once (so that page faults are in neither): each one's predicted and measured time, their
    ratios, and what the roofs leave out when they miss."""
    by = _rows_named(rows, unfused=unfused, fused=fused)
    u, f = by[unfused], by[fused]
    each = "; ".join(f"{r['variant']} ({r['passes']} passes) predicted {r['predicted_ms']:.2f} ms "
                     f"({r['bound']} roof), measured {r['measured_ms']:.2f} ms: "
                     f"{r['predicted_over_measured']:.0%} of its predicted speed" for r in (u, f))
    predicted, measured = u["predicted_ms"] / f["predicted_ms"], u["measured_ms"] / f["measured_ms"]
    said = (f"Both writing into an output allocated once: {each}. Fusion: predicted {predicted:.1f}x, "
            f"measured {measured:.1f}x.")
    if all(0.7 <= r["predicted_over_measured"] <= 1.3 for r in (u, f)):
        return f"{said} The roofs predict both times within 30%, so they account for the gain."
    return (f"{said} Whatever the ratios, the roofs miss the absolute times they predict, so they do not "
            "account for the gain (a matching ratio would be two errors cancelling). What they leave out: "
            "the time each kernel spends apart from moving bytes and evaluating erf (starting its threads, "
            "the loop's own instructions), and the caches, which can keep part of an intermediate result "
            "between kernels.")
