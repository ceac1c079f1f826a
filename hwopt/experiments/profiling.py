"""Profiling first: a pipeline slowed by data loading and per-item Python, profiled, fixed (lesson 6).

The slow pipeline reads items one at a time (each read waits `io_ms`, like a network disk), preprocesses
each item in a Python loop and runs the model one item at a time. The fixed one reads items concurrently on
a pool of threads while the model works, preprocesses whole batches with numpy and runs the model on whole
batches. Threads overlap these reads because a read here sleeps (waiting releases the GIL); DataLoader's
workers are processes, which also overlap reads that compute in Python. Regions are labelled with
torch.profiler.record_function: data, preprocess, compute.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from hwopt import arguments, plots, widgets
from hwopt.machine import bench

CATEGORIES = ("data", "preprocess", "compute")
TRACE_DIR = Path("artifacts") / "traces"  # git-ignored
IO_MS_MAX = 1e3 * arguments.LIMITS["seconds"]  # the longest simulated read per item, ms


@dataclass(frozen=True)
class Pipeline:
    """A model and raw uint8 items (n_items, n_features) to push through it, batch_size at a time."""

    model: torch.nn.Module
    raw: np.ndarray
    batch_size: int = 32
    io_ms: float = 1.0  # simulated storage latency per item read
    device: str = "cpu"
    threads: int | None = 1  # torch threads for the model: a tiny model gains nothing from more

    def __post_init__(self):
        arguments.instance("model", self.model, torch.nn.Module)
        arguments.instance("raw", self.raw, np.ndarray)
        arguments.finite_array("raw", self.raw, ndim=2, integer=True, minimum=0, maximum=255)
        arguments.count("batch_size", self.batch_size, "batch")
        arguments.positive("io_ms", self.io_ms, allow_zero=True, maximum=IO_MS_MAX)
        bench.resolve_device(self.device)
        if self.threads is not None:
            arguments.count("threads", self.threads, "threads")


def make_pipeline(
    n_items: int = 256,
    n_features: int = 64,
    hidden: int = 256,
    batch_size: int = 32,
    io_ms: float = 1.0,
    device: str = "cpu",
    seed: int = 0,
    threads: int | None = 1,
) -> Pipeline:
    """A pipeline over random 8-bit 'images' (n_items, n_features) and an MLP n_features -> hidden -> 10."""
    n_items = arguments.count("n_items", n_items, "items")
    n_features = arguments.count("n_features", n_features, "dimension")
    hidden = arguments.count("hidden", hidden, "dimension")
    device = bench.resolve_device(device)
    rng = np.random.default_rng(arguments.count("seed", seed, "seed", minimum=0))
    raw = rng.integers(0, 256, size=(n_items, n_features), dtype=np.uint8)
    torch.manual_seed(seed)
    model = (
        torch.nn.Sequential(
            torch.nn.Linear(n_features, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, 10),
        )
        .eval()
        .to(device)
    )
    return Pipeline(model, raw, batch_size, io_ms, device, threads)


def read_item(p: Pipeline, i: int) -> np.ndarray:
    """One item's raw bytes after waiting io_ms (the simulated storage read)."""
    arguments.instance("p", p, Pipeline)
    i = arguments.between("i", i, 0, len(p.raw) - 1, integer=True)
    if p.io_ms > 0:
        time.sleep(p.io_ms / 1e3)
    return p.raw[i].copy()


def preprocess_item(raw: np.ndarray) -> list[float]:
    """Scale one item to [-1, 1] value by value in Python (the per-item overhead of the slow pipeline)."""
    raw = arguments.finite_array("raw", raw, ndim=1, integer=True, minimum=0, maximum=255)
    return [v / 127.5 - 1.0 for v in raw.tolist()]


def preprocess_batch(raw: np.ndarray) -> np.ndarray:
    """The same scaling on a whole batch (batch, n_features) at once with numpy, float32."""
    raw = arguments.finite_array("raw", raw, ndim=2, integer=True, minimum=0, maximum=255)
    return raw.astype(np.float32) / np.float32(127.5) - np.float32(1.0)


def _batches(p: Pipeline) -> list[range]:
    return [range(s, min(s + p.batch_size, len(p.raw))) for s in range(0, len(p.raw), p.batch_size)]


def run_pipeline(
    p: Pipeline, *, prefetch: bool = False, batched: bool = False, workers: int = 8
) -> torch.Tensor:
    """Push every item through the model -> logits (n_items, 10).

    prefetch: read items concurrently on `workers` threads, queued ahead of the model (else one by one);
    threads overlap the reads only because they sleep while waiting on storage.
    batched: preprocess with numpy and call the model once per batch (else per item, in Python).
    """
    arguments.instance("p", p, Pipeline)
    prefetch = arguments.boolean("prefetch", prefetch)
    batched = arguments.boolean("batched", batched)
    workers = arguments.count("workers", workers, "threads")
    outputs = []
    model_threads = bench.threads(p.threads) if p.threads else contextlib.nullcontext()
    with ThreadPoolExecutor(max_workers=workers) as pool, torch.inference_mode(), model_threads:
        if prefetch:  # all reads queued now; each batch waits only for reads not finished yet
            reads = [pool.map(lambda i: read_item(p, i), batch) for batch in _batches(p)]
        else:
            reads = [(read_item(p, i) for i in batch) for batch in _batches(p)]
        for batch_reads in reads:
            with record_function("data"):
                items = list(batch_reads)
            if batched:
                with record_function("preprocess"):
                    x = torch.from_numpy(preprocess_batch(np.stack(items))).to(p.device)
                with record_function("compute"):
                    outputs.append(p.model(x))
                    bench.sync(p.device)
            else:
                with record_function("preprocess"):
                    rows = [preprocess_item(item) for item in items]
                with record_function("compute"):
                    for row in rows:
                        outputs.append(p.model(torch.tensor([row], dtype=torch.float32, device=p.device)))
                    bench.sync(p.device)
    return torch.cat(outputs).cpu()


def slow_pipeline(p: Pipeline) -> torch.Tensor:
    """Sequential reads, per-item Python preprocessing, batch-1 model calls -> logits (n_items, 10)."""
    arguments.instance("p", p, Pipeline)
    return run_pipeline(p)


def fixed_pipeline(p: Pipeline, workers: int = 8) -> torch.Tensor:
    """Concurrent prefetched reads, batched numpy preprocessing, batched model calls -> logits (n, 10)."""
    arguments.instance("p", p, Pipeline)
    return run_pipeline(p, prefetch=True, batched=True, workers=workers)


def profiler_activities(device: str = "cpu") -> list:
    """What torch.profiler records: the CPU, plus CUDA kernels when device is a CUDA GPU."""
    base = device.split(":")[0] if isinstance(device, str) else device
    arguments.one_of("device", base, ("cpu", "cuda", "mps"))
    return [ProfilerActivity.CPU, ProfilerActivity.CUDA] if base == "cuda" else [ProfilerActivity.CPU]


def run_profiled(fn: Callable[[], object], device: str = "cpu") -> tuple[object, float]:
    """Run fn once under torch.profiler -> (profile, wall_ms of fn alone, profiler start-up excluded)."""
    arguments.function("fn", fn)
    with profile(activities=profiler_activities(device)) as prof:
        start = time.perf_counter()
        fn()
        bench.sync(device)
        wall_ms = (time.perf_counter() - start) * 1e3
    return prof, wall_ms


def time_by_category_ms(prof, wall_ms: float | None = None) -> dict[str, float]:
    """Milliseconds per labelled region (data, preprocess, compute), + 'other' when wall_ms is given."""
    _check_profile(prof)
    if wall_ms is not None:
        arguments.positive("wall_ms", wall_ms, allow_zero=True)
    totals = {name: 0.0 for name in CATEGORIES}
    for event in prof.key_averages():
        if event.key in totals:
            totals[event.key] += event.cpu_time_total / 1e3
    if wall_ms is not None:
        totals["other"] = max(0.0, wall_ms - sum(totals.values()))
    return totals


def _check_profile(prof) -> None:
    if not callable(getattr(prof, "key_averages", None)):
        raise ValueError(f"prof must be a torch.profiler profile, as run_profiled returns; got "
                         f"{type(prof).__name__}")


def _check_times(times_ms, name: str = "times_ms") -> dict[str, float]:
    """A {category: ms} mapping: non-empty, every time finite and >= 0, some time in all."""
    arguments.instance(name, times_ms, dict)
    if not times_ms:
        raise ValueError(f"{name} must name at least one category")
    for category, ms in times_ms.items():
        arguments.text(f"{name} category", category)
        arguments.positive(f"{name}[{category!r}]", ms, allow_zero=True)
    if not sum(times_ms.values()) > 0:
        raise ValueError(f"{name} must hold some time (a total > 0 ms); got {times_ms!r}")
    return times_ms


def hotspot(times_ms: dict[str, float]) -> str:
    """The category that took longest: fix this one first."""
    _check_times(times_ms)
    return max(times_ms, key=times_ms.get)


def key_averages_table(prof, row_limit: int = 10) -> str:
    """The profiler's table sorted by total CPU time, top row_limit rows."""
    _check_profile(prof)
    row_limit = arguments.count("row_limit", row_limit, "items")
    return prof.key_averages().table(sort_by="cpu_time_total", row_limit=row_limit)


def save_trace(prof, name: str = "pipeline", folder: str | Path = TRACE_DIR) -> Path:
    """Write a Chrome/Perfetto trace (JSON) to folder/name.json (git-ignored by default); returns the path."""
    if not isinstance(name, str) or not name.strip() or any(c in name for c in "/\\"):
        raise ValueError(f"name must be a plain file name without slashes, got {name!r}")
    folder = Path(arguments.instance("folder", folder, (str, Path)))
    _check_profile(prof)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    prof.export_chrome_trace(str(path))
    return path


def plot_time_by_category(by_pipeline: dict[str, dict[str, float]], ax=None):
    """Stacked horizontal bars: ms per category for each pipeline ({'slow': {...}, 'fixed': {...}})."""
    arguments.instance("by_pipeline", by_pipeline, dict)
    if not by_pipeline:
        raise ValueError("by_pipeline must hold at least one pipeline's times")
    for name, times in by_pipeline.items():
        _check_times(times, f"by_pipeline[{name!r}]")
    ax = plots.axes("time (ms)", "pipeline", title="Where the time goes", ax=ax)
    names = list(by_pipeline)
    categories = list(dict.fromkeys(c for times in by_pipeline.values() for c in times))
    left = np.zeros(len(names))
    for k, category in enumerate(categories):
        widths = np.array([by_pipeline[n].get(category, 0.0) for n in names])
        ax.barh(range(len(names)), widths, left=left, color=plots.color(k), label=category)
        left += widths
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    return plots.finish(ax)


def amdahl(times_ms: dict[str, float], category: str, factor: float) -> dict[str, float]:
    """The times after making one category `factor` times faster (the others unchanged), ms."""
    _check_times(times_ms)
    arguments.one_of("category", category, times_ms)
    factor = arguments.positive("factor", factor)
    return {k: v / factor if k == category else v for k, v in times_ms.items()}


def overall_speedup(times_ms: dict[str, float], category: str, factor: float) -> float:
    """Amdahl's law: total before / total after speeding one category up by factor."""
    after = sum(amdahl(times_ms, category, factor).values())
    return sum(times_ms.values()) / after if after > 0 else math.inf  # all the time was in that category


def plot_amdahl(times_ms: dict[str, float], category: str, factor: float, ax=None):
    """Before/after stacked bars for the slider: what speeding one category up buys overall."""
    after = amdahl(times_ms, category, factor)
    fig = plot_time_by_category({"as profiled": times_ms, f"{category} {factor:g}x faster": after}, ax=ax)
    fig.axes[0].set_title(f"overall {overall_speedup(times_ms, category, factor):.2f}x faster")
    return fig


def amdahl_explorer(times_ms: dict[str, float]):
    """Sliders (which category, how much faster) over plot_amdahl: optimize what the profile says."""
    _check_times(times_ms)
    return widgets.explore(
        plot_amdahl,
        times_ms=times_ms,
        category=widgets.dropdown("speed up", list(times_ms)),
        factor=widgets.log_slider("by a factor", 1.0, 100.0, 10.0, unit="x"),
    )


def nsys_available() -> bool:
    """True when NVIDIA Nsight Systems' `nsys` is on PATH."""
    return shutil.which("nsys") is not None


def nsys_command(script: str = "train.py", output: str = "pipeline_report") -> list[str]:
    """The Nsight Systems command line that profiles `python script` (CUDA, NVTX, OS runtime, CPU samples)."""
    arguments.text("script", script)
    arguments.text("output", output)
    return [
        "nsys",
        "profile",
        "--trace=cuda,nvtx,osrt",
        "--sample=cpu",
        "--force-overwrite=true",
        "-o",
        output,
        "python",
        script,
    ]


def run_nsys(script: str | Path, output: str | Path, timeout_s: float = 300) -> str:
    """Profile `python script` with Nsight Systems, then return `nsys stats` text (needs nsys on PATH)."""
    arguments.instance("script", script, (str, Path))
    arguments.instance("output", output, (str, Path))
    arguments.text("script", str(script))
    arguments.text("output", str(output))
    timeout_s = arguments.positive("timeout_s", timeout_s, maximum=arguments.LIMITS["seconds"])
    if not nsys_available():
        raise ValueError("nsys is not on PATH: install NVIDIA Nsight Systems (CUDA toolkit) to run it live")
    subprocess.run(nsys_command(str(script), str(output)), check=True, capture_output=True, timeout=timeout_s)
    stats = subprocess.run(
        nsys_stats_command(str(output)), check=True, capture_output=True, text=True, timeout=timeout_s
    )
    return stats.stdout


def nsys_stats_command(output: str = "pipeline_report") -> list[str]:
    """The command that summarises an Nsight Systems report: top CUDA kernels and NVTX ranges."""
    arguments.text("output", output)
    return ["nsys", "stats", "--report", "cuda_gpu_kern_sum,nvtx_sum", f"{output}.nsys-rep"]


PIPELINE_SCRIPT = '''"""Lesson 6's pipeline on a GPU, for Nsight Systems: nsys profile ... python pipeline.py

torch.profiler.record_function labels (data, preprocess, compute) become NVTX ranges only inside
torch.autograd.profiler.emit_nvtx(), which also gives every PyTorch operation its own range; the outer
ranges come from torch.cuda.nvtx directly.
"""
import torch

from hwopt.experiments import profiling

pipeline = profiling.make_pipeline(device="cuda")
profiling.fixed_pipeline(pipeline)  # warm-up: CUDA context and kernels loaded before the profiled runs
with torch.autograd.profiler.emit_nvtx(record_shapes=False):
    for _ in range(3):
        with torch.cuda.nvtx.range("slow pipeline"):
            profiling.slow_pipeline(pipeline)
        with torch.cuda.nvtx.range("fixed pipeline"):
            profiling.fixed_pipeline(pipeline)
'''


def write_pipeline_script(path: str | Path) -> Path:
    """Write the GPU pipeline script for nsys (slow and fixed runs, their record_function regions as NVTX
    ranges under emit_nvtx); returns its path."""
    path = Path(arguments.instance("path", path, (str, Path)))
    if path.suffix != ".py":
        raise ValueError(f"path must end in .py, got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PIPELINE_SCRIPT)
    return path
