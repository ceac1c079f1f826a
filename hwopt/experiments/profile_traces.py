"""Recording the course's torch.profiler traces (assignment 8): small workloads run under the profiler, their
Chrome traces trimmed and shipped in hwopt/data/traces (hwopt.traces reads them and varies them).

`python -m hwopt.experiments.profile_traces` records every trace of RECORDINGS again (a few seconds) and
writes hwopt/data/traces/<name>.json. A file is the Chrome trace that `prof.export_chrome_trace` writes,
trimmed: only complete events ("ph": "X") of the categories in KEPT_CATEGORIES and the thread names
("ph": "M"), without their args; times start at 0 and keep torch's nanosecond digits (ts, dur in µs with
three decimals). Its "recorded" key says what ran, on which machine, with which torch, and when.
"""

from __future__ import annotations

import contextlib
import datetime
import inspect
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from hwopt import arguments, traces
from hwopt.data import DATA_DIR
from hwopt.experiments import profiling
from hwopt.machine import bench, hardware
from hwopt.models import tiny_decoder

KEPT_CATEGORIES = ("cpu_op", "user_annotation")  # operators and labelled regions (record_function)
KEPT_KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur")
COMMAND = "python -m hwopt.experiments.profile_traces"

WORKLOADS = {
    "pipeline_slow": "lesson 6's slow pipeline: sequential reads, per-item Python preprocessing, batch-1 MLP",
    "pipeline_fixed": "lesson 6's fixed pipeline: prefetched reads, numpy preprocessing, batched MLP",
    "mlp_train": "an MLP trained with SGD, batches from a DataLoader (per-item indexing, then collate)",
    "decoder_generate": "the tiny decoder generating greedily with its KV cache, one Python step per token",
}

# name -> (workload, its sizes): two recordings of each workload, so graded cases can draw other traces;
# pipeline_slow and pipeline_fixed run the same items through the same model.
RECORDINGS: dict[str, tuple[str, dict]] = {
    "pipeline_slow": ("pipeline_slow", {"n_items": 12, "batch_size": 4, "hidden": 64, "seed": 0}),
    "pipeline_slow_b": ("pipeline_slow", {"n_items": 10, "batch_size": 5, "hidden": 256, "seed": 1}),
    "pipeline_fixed": ("pipeline_fixed", {"n_items": 12, "batch_size": 4, "hidden": 64, "seed": 0}),
    "pipeline_fixed_b": ("pipeline_fixed", {"n_items": 64, "batch_size": 16, "hidden": 256, "seed": 1}),
    "mlp_train": ("mlp_train", {"steps": 2, "batch_size": 6, "width": 128, "seed": 0}),
    "mlp_train_b": ("mlp_train", {"steps": 3, "batch_size": 3, "width": 512, "seed": 1}),
    "decoder_generate": ("decoder_generate", {"new_tokens": 3, "d_model": 64, "n_layers": 1, "seed": 0}),
    "decoder_generate_b": ("decoder_generate", {"new_tokens": 2, "d_model": 256, "n_layers": 2, "seed": 1}),
}


# ---- the workloads: each returns the steps to profile (prof.step() after each) --------------------------

def _pipeline_slow(n_items, batch_size, hidden, seed) -> list[Callable[[], object]]:
    p = profiling.make_pipeline(n_items=n_items, batch_size=batch_size, hidden=hidden, io_ms=0.2, seed=seed)
    return [lambda: profiling.slow_pipeline(p)] * 2


def _pipeline_fixed(n_items, batch_size, hidden, seed) -> list[Callable[[], object]]:
    p = profiling.make_pipeline(n_items=n_items, batch_size=batch_size, hidden=hidden, io_ms=0.2, seed=seed)
    return [lambda: profiling.fixed_pipeline(p, workers=4)] * 2


def _mlp(width: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(), torch.nn.Linear(width, 10))


def _mlp_train(steps, batch_size, width, seed) -> list[Callable[[], object]]:
    model = _mlp(width, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    steps += 1  # the first one is the profiler's warm-up step
    data = TensorDataset(torch.randn(steps * batch_size, 64), torch.randint(0, 10, (steps * batch_size,)))
    batches = iter(DataLoader(data, batch_size=batch_size))

    def step():
        x, y = next(batches)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return [step] * steps


def _decoder_generate(new_tokens, d_model, n_layers, seed) -> list[Callable[[], object]]:
    model = tiny_decoder.make_tiny_decoder(vocab_size=256, d_model=d_model, n_layers=n_layers, n_heads=2,
                                           seed=seed, kernel="torch")
    prompt = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(seed))
    return [lambda: tiny_decoder.generate(model, prompt, new_tokens)] * 2


_RUNNERS = {"pipeline_slow": _pipeline_slow, "pipeline_fixed": _pipeline_fixed, "mlp_train": _mlp_train,
            "decoder_generate": _decoder_generate}


# ---- recording and trimming ----------------------------------------------------------------------------

def record(workload: str, sizes: dict, repeats: int = 5) -> dict:
    """Run one workload (a key of WORKLOADS, its sizes as in RECORDINGS) under torch.profiler (CPU, one torch
    thread) -> the Chrome trace as prof.export_chrome_trace writes it (a dict).

    The workload's steps run once unprofiled; then its first step is the profiler's warm-up step (left out of
    the trace, as first iterations are slow) and the others are recorded, each a ProfilerStep. Of `repeats`
    recordings the one with the shortest span is kept: the run least disturbed by other processes.
    """
    sizes = _check_sizes(workload, sizes)
    repeats = arguments.count("repeats", repeats, "repeats")
    recorded = []
    with bench.threads(1):
        _run(_RUNNERS[workload](**sizes), None)  # first calls allocate and load
        for _ in range(repeats):
            steps = _RUNNERS[workload](**sizes)
            plan = schedule(wait=0, warmup=1, active=len(steps) - 1, repeat=1)
            with profile(activities=[ProfilerActivity.CPU], schedule=plan) as prof:
                _run(steps, prof)
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "trace.json"
                prof.export_chrome_trace(str(path))
                recorded.append(json.loads(path.read_text()))
    return min(recorded, key=_span_ns)


def _span_ns(trace: dict) -> int:
    ends = [(traces.ns(e["ts"]), traces.ns(e["ts"]) + traces.ns(e["dur"])) for e in trace["traceEvents"]
            if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in KEPT_CATEGORIES]
    return max(end for _, end in ends) - min(start for start, _ in ends)


def _check_sizes(workload: str, sizes: dict) -> dict:
    """The sizes a workload's runner takes, each a whole number (>= 1; a seed >= 0)."""
    arguments.one_of("workload", workload, WORKLOADS)
    arguments.instance("sizes", sizes, dict)
    expected = list(inspect.signature(_RUNNERS[workload]).parameters)
    if sorted(sizes) != sorted(expected):
        raise ValueError(f"sizes must give exactly {expected} for {workload}; got {sorted(sizes)}")
    return {name: arguments.count(f"sizes[{name!r}]", value, "seed" if name == "seed" else "dimension",
                                  minimum=0 if name == "seed" else 1) for name, value in sizes.items()}


def _run(steps, prof) -> None:
    for step in steps:
        step()
        if prof is not None:
            prof.step()


def trim(trace: dict, recorded: dict | None = None) -> dict:
    """A Chrome trace cut to what the assignment reads: complete events of KEPT_CATEGORIES (KEPT_KEYS only)
    and thread names, times from 0 in µs with nanosecond digits; `recorded` (its provenance) kept beside."""
    arguments.instance("trace", trace, dict)
    if not isinstance(trace.get("traceEvents"), list):
        raise ValueError("trace must be a Chrome trace: a dict with a list of traceEvents")
    if recorded is not None:
        arguments.instance("recorded", recorded, dict)
    timed = [e for e in trace["traceEvents"] if isinstance(e, dict) and e.get("ph") in ("X", "M")]
    traces.check_events("trace", timed)
    complete = [e for e in trace["traceEvents"]
                if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in KEPT_CATEGORIES]
    if not complete:
        raise ValueError("trace must hold complete events ('ph': 'X') of operators or labelled regions")
    origin_ns = min(traces.ns(e["ts"]) for e in complete)
    threads = {(e["pid"], e["tid"]) for e in complete}
    events = [{"ph": "M", "name": "thread_name", "pid": e["pid"], "tid": e["tid"], "args": e["args"]}
              for e in trace["traceEvents"] if isinstance(e, dict) and e.get("ph") == "M"
              and e.get("name") == "thread_name" and (e.get("pid"), e.get("tid")) in threads]
    events = list({(e["pid"], e["tid"]): e for e in events}.values())  # torch writes some names twice
    for e in sorted(complete, key=lambda e: (traces.ns(e["ts"]), -traces.ns(e["dur"]))):
        start_ns, dur_ns = traces.ns(e["ts"]) - origin_ns, traces.ns(e["dur"])
        events.append({**{k: e[k] for k in KEPT_KEYS}, "ts": start_ns / 1000, "dur": dur_ns / 1000})
    return {"traceEvents": events, "displayTimeUnit": "ms", "recorded": recorded or {}}


def provenance(name: str, workload: str, sizes: dict) -> dict:
    """What a shipped trace says about itself: the workload and sizes, the command, machine, torch, date."""
    arguments.text("name", name)
    sizes = _check_sizes(workload, sizes)
    cpu = hardware.cpu_info()
    return {"name": name, "workload": workload, "about": WORKLOADS[workload], "sizes": sizes,
            "command": COMMAND, "cpu": cpu.get("cpu_model") or "unknown", "torch_threads": 1,
            "torch": torch.__version__, "date": datetime.date.today().isoformat()}


def write_traces(folder: str | Path = traces.TRACES_DIR, names: list[str] | None = None,
                 progress: bool = True) -> list[Path]:
    """Record the traces of RECORDINGS (all, or those named) and write folder/<name>.json; -> their paths."""
    folder = Path(arguments.instance("folder", folder, (str, Path)))
    names = list(RECORDINGS) if names is None else arguments.instance("names", names, list)
    for name in names:
        arguments.one_of("names item", name, RECORDINGS)
    progress = arguments.boolean("progress", progress)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in tqdm(names, desc="recording traces", unit="trace", disable=not progress):
        workload, sizes = RECORDINGS[name]
        trimmed = trim(record(workload, sizes), provenance(name, workload, sizes))
        path = folder / f"{name}.json"
        path.write_text(json.dumps(trimmed, separators=(",", ":")) + "\n")
        paths.append(path)
    return paths


def main() -> None:
    """Record every trace again into hwopt/data/traces."""
    for path in write_traces():
        print(f"{path.relative_to(DATA_DIR.parents[1])}: {path.stat().st_size / 1e3:.1f} kB")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
