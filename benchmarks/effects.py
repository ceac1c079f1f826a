"""Section 2: the lessons' headline effects, each a ratio of the lesson modules' own code in one run.

Every effect is a small `setup_*` function that builds zero-argument callables from the toolkit (never a copy
of what a lesson measures); `measure` times them with hwopt.bench.compare and turns them into report rows.
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from benchmarks import report
from hwopt import bench


class Unavailable(RuntimeError):
    """The lesson code this effect needs is not in the toolkit (yet) or cannot run here; message says why."""


@dataclass
class Setup:
    """Callables to time interleaved: the baseline and candidates (the best candidate is reported)."""

    fns: dict[str, Callable[[], object]]
    baseline: str
    candidates: list[str]
    items: dict[str, int] = field(default_factory=dict)  # items per call (per-item time = time / items)
    note: str = ""


def need(module: str, *names: str):
    """Import hwopt.<module> and check it has `names`; Unavailable naming what is missing otherwise."""
    try:
        mod = importlib.import_module(f"hwopt.{module}")
    except ImportError as exc:
        raise Unavailable(f"hwopt.{module} is not in the toolkit ({exc})") from exc
    missing = [n for n in names if not hasattr(mod, n)]
    if missing:
        raise Unavailable(f"hwopt.{module} has no {', '.join(missing)}")
    return mod


# ---------------------------------------------------------------- the effects


def setup_batching(quick: bool) -> Setup:
    """Lesson 3: throughput of the lesson's MLP at its best batch size vs batch 1 (per-item times)."""
    batching = need("batching", "make_mlp", "BATCH_SIZES")
    import torch

    model = batching.make_mlp()
    width = next(m for m in model.modules() if isinstance(m, torch.nn.Linear)).in_features
    sizes = [1, 64, 256] if quick else [1, 32, 128, 256, 512]
    sizes = [b for b in sizes if b == 1 or b in batching.BATCH_SIZES]
    fns, items = {}, {}
    for b in sizes:
        x = torch.randn(b, width)

        def step(x=x):
            with torch.inference_mode():
                return model(x)

        fns[f"batch {b}"], items[f"batch {b}"] = step, b
    return Setup(fns, "batch 1", [f"batch {b}" for b in sizes if b > 1], items,
                 note=f"hwopt.batching.make_mlp(), items/s; best of batch {', '.join(map(str, sizes[1:]))}")


EFFECTS: list[tuple[str, float | None, Callable[[bool], Setup]]] = [
    ("best batched throughput / batch 1", 10.0, setup_batching),
]


# ---------------------------------------------------------------- measuring


def per_item(m: bench.Measurement, items: int) -> bench.Measurement:
    """The same measurement expressed per item (seconds per call / items)."""
    if items < 1:
        raise ValueError(f"items must be a positive integer, got {items!r}")
    if items == 1:
        return m
    return bench.Measurement(m.label, tuple(t / items for t in m.times_s), number=m.number, device=m.device)


def run_setup(name: str, goal: float | None, setup: Setup, *, repeats: int) -> dict:
    """Time a Setup interleaved and make its speedup row (best candidate vs baseline)."""
    res = bench.compare(setup.fns, repeats=repeats, warmup=2)
    res = {k: per_item(m, setup.items.get(k, 1)) for k, m in res.items()}
    best = min(setup.candidates, key=lambda k: res[k].median_s)
    note = setup.note + (f"; best: {best}" if len(setup.candidates) > 1 else "")
    return report.speedup_row(name, res[setup.baseline], res[best], goal=goal, note=note)


def measure(*, quick: bool, effects=None, progress=None) -> tuple[dict, list[str]]:
    """Section 2 rows (one per effect; 'not available' with the reason when the lesson code is missing)."""
    rows, notes = [], []
    repeats = 5 if quick else 15
    for name, goal, build in effects or EFFECTS:
        try:
            rows.append(run_setup(name, goal, build(quick), repeats=repeats))
        except Unavailable as exc:
            rows.append(report.unavailable_row(name, str(exc), goal=goal))
        except Exception as exc:  # a lesson module that breaks must not take the report down with it
            last = traceback.format_exception_only(exc)[-1].strip()
            rows.append(report.unavailable_row(name, f"failed: {last[:200]}", goal=goal))
        if progress:
            progress.update(1)
    notes.append(f"{repeats} interleaved repeats per effect (hwopt.bench.compare); ratio = baseline median / "
                 "optimized median, per item where batches differ")
    return {"rows": rows, "notes": notes}, []
