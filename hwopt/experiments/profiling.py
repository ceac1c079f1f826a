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
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from hwopt.machine import bench

CATEGORIES = ("data", "preprocess", "compute")
TRACE_DIR = Path("artifacts") / "traces"  # git-ignored


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
        if self.raw.ndim != 2 or len(self.raw) == 0:
            raise ValueError(f"raw must be a non-empty 2-D array (n_items, n_features), got {self.raw.shape}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {self.batch_size!r}")
        if not self.io_ms >= 0:
            raise ValueError(f"io_ms must be >= 0 milliseconds, got {self.io_ms!r}")
        if self.threads is not None and (
            isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1
        ):
            raise ValueError(
                f"threads must be None (torch's setting) or a positive int, got {self.threads!r}"
            )


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
    if isinstance(n_items, bool) or not isinstance(n_items, int) or n_items < 1:
        raise ValueError(f"n_items must be a positive int, got {n_items!r}")
    rng = np.random.default_rng(seed)
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
    if p.io_ms > 0:
        time.sleep(p.io_ms / 1e3)
    return p.raw[i].copy()


def preprocess_item(raw: np.ndarray) -> list[float]:
    """Scale one item to [-1, 1] value by value in Python (the per-item overhead of the slow pipeline)."""
    return [v / 127.5 - 1.0 for v in raw.tolist()]


def preprocess_batch(raw: np.ndarray) -> np.ndarray:
    """The same scaling on a whole batch (batch, n_features) at once with numpy, float32."""
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
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
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
    return run_pipeline(p)


def fixed_pipeline(p: Pipeline, workers: int = 8) -> torch.Tensor:
    """Concurrent prefetched reads, batched numpy preprocessing, batched model calls -> logits (n, 10)."""
    return run_pipeline(p, prefetch=True, batched=True, workers=workers)


def profiler_activities(device: str = "cpu") -> list:
    """What torch.profiler records: the CPU, plus CUDA kernels when device is a CUDA GPU."""
    base = str(device).split(":")[0]
    if base not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'mps', got {device!r}")
    return [ProfilerActivity.CPU, ProfilerActivity.CUDA] if base == "cuda" else [ProfilerActivity.CPU]


def run_profiled(fn: Callable[[], object], device: str = "cpu") -> tuple[object, float]:
    """Run fn once under torch.profiler -> (profile, wall_ms of fn alone, profiler start-up excluded)."""
    if not callable(fn):
        raise ValueError(f"fn must be callable with no arguments, got {type(fn).__name__}")
    with profile(activities=profiler_activities(device)) as prof:
        start = time.perf_counter()
        fn()
        bench.sync(device)
        wall_ms = (time.perf_counter() - start) * 1e3
    return prof, wall_ms


def time_by_category_ms(prof, wall_ms: float | None = None) -> dict[str, float]:
    """Milliseconds per labelled region (data, preprocess, compute), + 'other' when wall_ms is given."""
    totals = {name: 0.0 for name in CATEGORIES}
    for event in prof.key_averages():
        if event.key in totals:
            totals[event.key] += event.cpu_time_total / 1e3
    if wall_ms is not None:
        if not wall_ms >= 0:
            raise ValueError(f"wall_ms must be >= 0, got {wall_ms!r}")
        totals["other"] = max(0.0, wall_ms - sum(totals.values()))
    return totals


def hotspot(times_ms: dict[str, float]) -> str:
    """The category that took longest: fix this one first."""
    if not times_ms:
        raise ValueError("times_ms must name at least one category")
    return max(times_ms, key=times_ms.get)


def key_averages_table(prof, row_limit: int = 10) -> str:
    """The profiler's table sorted by total CPU time, top row_limit rows."""
    return prof.key_averages().table(sort_by="cpu_time_total", row_limit=row_limit)


def save_trace(prof, name: str = "pipeline", folder: str | Path = TRACE_DIR) -> Path:
    """Write a Chrome/Perfetto trace (JSON) to folder/name.json (git-ignored by default); returns the path."""
    if not name or any(c in name for c in "/\\"):
        raise ValueError(f"name must be a plain file name without slashes, got {name!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    prof.export_chrome_trace(str(path))
    return path


def plot_time_by_category(by_pipeline: dict[str, dict[str, float]], ax=None):
    """Stacked horizontal bars: ms per category for each pipeline ({'slow': {...}, 'fixed': {...}})."""
    from hwopt import plots

    if not by_pipeline:
        raise ValueError("by_pipeline must hold at least one pipeline's times")
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
    if category not in times_ms:
        raise ValueError(f"category must be one of {list(times_ms)}, got {category!r}")
    if not factor > 0:
        raise ValueError(f"factor must be positive, got {factor!r}")
    return {k: v / factor if k == category else v for k, v in times_ms.items()}


def overall_speedup(times_ms: dict[str, float], category: str, factor: float) -> float:
    """Amdahl's law: total before / total after speeding one category up by factor."""
    after = sum(amdahl(times_ms, category, factor).values())
    return sum(times_ms.values()) / after if after > 0 else float("inf")


def plot_amdahl(times_ms: dict[str, float], category: str, factor: float, ax=None):
    """Before/after stacked bars for the slider: what speeding one category up buys overall."""
    after = amdahl(times_ms, category, factor)
    fig = plot_time_by_category({"as profiled": times_ms, f"{category} {factor:g}x faster": after}, ax=ax)
    fig.axes[0].set_title(f"overall {overall_speedup(times_ms, category, factor):.2f}x faster")
    return fig


def amdahl_explorer(times_ms: dict[str, float]):
    """Sliders (which category, how much faster) over plot_amdahl: optimize what the profile says."""
    from hwopt import widgets

    if not times_ms:
        raise ValueError("times_ms must name at least one category")
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
    if not script or not output:
        raise ValueError("script and output must be non-empty")
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
    import subprocess

    if not nsys_available():
        raise ValueError("nsys is not on PATH: install NVIDIA Nsight Systems (CUDA toolkit) to run it live")
    subprocess.run(nsys_command(str(script), str(output)), check=True, capture_output=True, timeout=timeout_s)
    stats = subprocess.run(
        nsys_stats_command(str(output)), check=True, capture_output=True, text=True, timeout=timeout_s
    )
    return stats.stdout


def nsys_stats_command(output: str = "pipeline_report") -> list[str]:
    """The command that summarises an Nsight Systems report: top CUDA kernels and NVTX ranges."""
    if not output:
        raise ValueError("output must be non-empty")
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
    path = Path(path)
    if path.suffix != ".py":
        raise ValueError(f"path must end in .py, got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PIPELINE_SCRIPT)
    return path
