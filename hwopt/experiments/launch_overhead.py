"""Launch overhead (lesson 10): the fixed cost of every operation, and CUDA graphs that pay it once per step.

Each PyTorch operation costs a fixed time (Python, dispatch, shape checks, allocating the output; on a GPU,
the kernel launch) before it touches a single element. Time per call against elements is a line; its intercept
is that overhead. A decode step runs hundreds of tiny operations, so overhead x operations can be much of it.
A CUDA graph records the step's kernels once and replays them with one launch;
torch.compile(mode="reduce-overhead") does the same automatically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hwopt import arguments, plots
from hwopt.machine import bench
from hwopt.models import tiny_decoder as td

SIZES = (1, 64, 1024, 4096, 16384, 65536)  # elements of the additions timed by time_per_call
COMPILE_CODE = 'step = torch.compile(step, mode="reduce-overhead")  # CUDA graphs, captured automatically'


def time_per_call(sizes: Sequence[int] = SIZES, device="cpu",
                  repeats: int = 7) -> dict[int, bench.Measurement]:
    """{elements: Measurement} of torch.add(a, b, out=c) on fp32 vectors of each size, interleaved, on one
    thread (larger tensors would otherwise be split across threads, whose start-up is an overhead too)."""
    values = arguments.finite_array("sizes", sizes, ndim=1, integer=True, minimum=1, maximum=1 << 26)
    device = bench.resolve_device(device)
    arguments.count("repeats", repeats, "repeats")
    fns = {}
    for n in values.tolist():
        a, b, c = (torch.ones(n, device=device) for _ in range(3))
        fns[n] = lambda a=a, b=b, c=c: torch.add(a, b, out=c)
    with bench.threads(1):
        return bench.compare(fns, device=device, warmup=2, repeats=repeats)


@dataclass(frozen=True)
class OverheadFit:
    """Least-squares line time per call = overhead_s + elements x per_element_s (seconds)."""

    overhead_s: float
    per_element_s: float

    @property
    def break_even_elements(self) -> float:
        """Elements at which an op's work takes as long as its overhead."""
        return self.overhead_s / self.per_element_s if self.per_element_s > 0 else float("inf")

    def __str__(self) -> str:
        return (f"overhead {self.overhead_s * 1e6:.1f} us per call + {self.per_element_s * 1e9:.3f} ns per "
                f"element: an op does as much work as it waits for at {self.break_even_elements:,.0f} "
                "elements")


def fit_overhead(elements: Sequence[int], seconds: Sequence[float]) -> OverheadFit:
    """Fit seconds per call = overhead + elements x per element; the intercept is the per-op overhead."""
    x = arguments.finite_array("elements", elements, ndim=1, integer=True, minimum=0).astype(float)
    y = arguments.finite_array("seconds", seconds, ndim=1, minimum=0).astype(float)
    if x.shape != y.shape or len(x) < 2 or np.ptp(x) == 0:
        raise ValueError("elements and seconds must be the same length, with at least two different sizes")
    slope, intercept = np.polyfit(x, y, 1)
    return OverheadFit(max(float(intercept), 0.0), max(float(slope), 0.0))


def fit_measurements(measurements: dict) -> OverheadFit:
    """fit_overhead over time_per_call's {elements: Measurement} (medians)."""
    arguments.instance("measurements", measurements, dict)
    if not all(isinstance(m, bench.Measurement) for m in measurements.values()):
        raise ValueError("measurements must map elements to bench.Measurement (from time_per_call)")
    return fit_overhead(list(measurements), [m.median_s for m in measurements.values()])


def plot_overhead(measurements: dict, fit: OverheadFit):
    """Time per call against elements (median with IQR), with the fitted line and its intercept."""
    arguments.instance("fit", fit, OverheadFit)
    fit_measurements(measurements)  # checks the measurements
    x = list(measurements)
    ax = plots.axes("elements per call", "time per call (us)", logx=True, logy=True)
    plots.measurement_band(ax, x, list(measurements.values()), unit="us", label="torch.add, measured")
    line = np.geomspace(min(x), max(x), 50)
    ax.plot(line, (fit.overhead_s + line * fit.per_element_s) * 1e6, ":", color=plots.color(1),
            label="overhead + elements x per element")
    ax.axhline(fit.overhead_s * 1e6, color="gray", linestyle="--", label="the intercept: overhead per call")
    return plots.finish(ax)


class _OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def count_ops(fn: Callable[[], object]) -> int:
    """Operations (ATen kernels) one call of fn dispatches: on a GPU, about one kernel launch each."""
    arguments.function("fn", fn)
    with _OpCounter() as counter:
        fn()
    return counter.count


def decode_step(model: td.TinyDecoder, context_len: int = 32, device="cpu") -> Callable[[], torch.Tensor]:
    """A zero-argument decode step of one token after context_len cached tokens (same inputs each call), in
    torch whatever the model's `kernel`: the framework calls whose overhead this module measures."""
    arguments.instance("model", model, td.TinyDecoder)
    context_len = arguments.count("context_len", context_len, "tokens")
    if context_len + 1 > model.max_len:
        raise ValueError(f"context_len must be below the model's max_len {model.max_len}; got {context_len}")
    bench.resolve_device(device)
    where = model.head.weight.device
    prompt = torch.randint(0, model.tok.num_embeddings, (1, context_len + 1),
                           generator=torch.Generator().manual_seed(0)).to(where)
    with torch.inference_mode():
        _, caches = model(prompt[:, :-1])
    token = prompt[:, -1:]

    def step():
        kept, model.kernel = model.kernel, "torch"  # one framework call per op, as on a GPU (on the CPU, the
        try:  # C kernel's decoder step would run the whole step in one call and dispatch next to none)
            with torch.inference_mode():
                return model(token, caches, start=context_len)[0]
        finally:
            model.kernel = kept

    return step


def overhead_share(n_ops: int, overhead_s: float, step_s: float) -> float:
    """Fraction of a step's time that n_ops x the per-op overhead accounts for (above 1: the fit is off)."""
    n_ops = arguments.count("n_ops", n_ops, "calls")
    overhead_s = arguments.positive("overhead_s", overhead_s, allow_zero=True)
    return n_ops * overhead_s / arguments.positive("step_s", step_s)


def step_report(model: td.TinyDecoder, fit: OverheadFit, label: str = "decode", device="cpu",
                repeats: int = 7) -> str:
    """One line: a decode step's operations x the fitted overhead against its measured time (one CPU thread,
    as the tiny decoder's timings in lesson 10)."""
    arguments.instance("fit", fit, OverheadFit)
    arguments.text("label", label)
    step = decode_step(model, device=device)
    n_ops = count_ops(step)
    with bench.threads(1):
        step_s = bench.time_fn(step, device=device, repeats=repeats).median_s
    share = overhead_share(n_ops, fit.overhead_s, step_s)
    return (f"{label} step: {n_ops} operations x {fit.overhead_s * 1e6:.1f} us = {share:.0%} of its "
            f"{step_s * 1e3:.2f} ms")


def cuda_graph(step: Callable[[], torch.Tensor], device="cuda") -> Callable[[], torch.Tensor]:
    """The step recorded once into a CUDA graph: the returned function replays every kernel with one launch
    and returns the graph's (static) output. Needs a CUDA device."""
    arguments.function("step", step)
    device = bench.resolve_device(device)
    if not device.startswith("cuda"):
        raise ValueError(f"device must be a CUDA device for a CUDA graph; got {device!r}")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the main stream, as capture requires
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    bench.sync(device)

    def replay():
        graph.replay()
        return out

    return replay


def compare_graph(model: td.TinyDecoder, context_len: int = 32, device="cuda",
                  repeats: int = 15) -> dict[str, bench.Measurement]:
    """Interleaved timings of one decode step, eager and replayed from a CUDA graph (CUDA only)."""
    arguments.instance("model", model, td.TinyDecoder)
    arguments.count("context_len", context_len, "tokens")
    arguments.count("repeats", repeats, "repeats")
    device = bench.resolve_device(device)
    if not device.startswith("cuda"):
        raise ValueError(f"device must be a CUDA device for a CUDA graph; got {device!r}")
    eager = decode_step(model, context_len, device)
    replay = cuda_graph(decode_step(model, context_len, device), device)
    if not torch.allclose(eager(), replay(), atol=1e-4, rtol=1e-4):
        raise RuntimeError("the CUDA graph's logits differ from the eager step's: the capture went wrong")
    return bench.compare({"eager step": eager, "CUDA graph replay": replay}, device=device, repeats=repeats)
