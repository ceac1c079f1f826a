"""The torch.profiler traces the course recorded (hwopt/data/traces, written by experiments.profile_traces),
read as plain JSON, and variants of them: the same run shifted, stretched, thinned, its thread renamed and
its events shuffled (assignment 8's hidden cases). Times are µs with nanosecond digits; computed in whole
nanoseconds, so that what nests in a trace still nests in its variants.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from hwopt import arguments
from hwopt.data import DATA_DIR

TRACES_DIR = DATA_DIR / "traces"


def ns(us) -> int:
    """A time in µs (as a trace writes it) in whole nanoseconds."""
    return round(float(arguments.number("us", us)) * 1000)


def check_events(name: str, events) -> list[dict]:
    """Chrome trace events: dicts with a "ph"; pid and tid whole numbers >= 0 or names; a complete event
    ("ph": "X") with a finite ts and a finite dur >= 0 (µs); name: what the caller calls them."""
    arguments.text("name", name)
    arguments.instance(name, events, list)
    for i, e in enumerate(events):
        arguments.instance(f"{name}[{i}]", e, dict)
        arguments.text(f"{name}[{i}]['ph']", e.get("ph"))
        for key in ("pid", "tid"):
            if not isinstance(e.get(key), str):
                arguments.count(f"{name}[{i}][{key!r}]", e.get(key), "seed", minimum=0)
        if e["ph"] == "X":
            arguments.number(f"{name}[{i}]['ts']", e.get("ts"))
            arguments.positive(f"{name}[{i}]['dur']", e.get("dur"), allow_zero=True)
    return events


def trace_names(folder: str | Path = TRACES_DIR) -> list[str]:
    """The names of the traces shipped in folder (file names without .json), sorted."""
    folder = Path(arguments.instance("folder", folder, (str, Path)))
    return sorted(p.stem for p in folder.glob("*.json"))


def load_events(name: str, folder: str | Path = TRACES_DIR) -> list[dict]:
    """The traceEvents of a shipped trace."""
    arguments.one_of("name", name, trace_names(folder))
    return json.loads((Path(folder) / f"{name}.json").read_text())["traceEvents"]


def variant(events: list[dict], *, shift_us: float = 0.0, scale: float = 1.0, drop_every: int = 0,
            tid: int | None = None, order_seed: int | None = None) -> list[dict]:
    """The same trace seen differently, nesting kept: times shifted by shift_us and stretched by scale (in
    whole nanoseconds: an event's start and end are mapped, so what nested still nests), every drop_every-th
    operator left out (0: none), the busiest thread renamed tid, events shuffled with order_seed."""
    check_events("events", events)
    arguments.number("shift_us", shift_us)
    scale = arguments.positive("scale", scale, maximum=1e3)
    drop_every = arguments.count("drop_every", drop_every, "items", minimum=0)
    if tid is not None:
        arguments.count("tid", tid, "seed")
    if order_seed is not None:
        arguments.count("order_seed", order_seed, "seed", minimum=0)
    complete = [e for e in events if e["ph"] == "X"]
    busiest = max({(e["pid"], e["tid"]) for e in complete},
                  key=lambda t: sum(ns(e["dur"]) for e in complete if (e["pid"], e["tid"]) == t),
                  default=None)
    shift_ns, out, operators = ns(shift_us), [], 0
    for e in events:
        e = dict(e)
        if tid is not None and (e.get("pid"), e.get("tid")) == busiest:
            e["tid"] = tid
        if e.get("ph") == "X":
            if e.get("cat") == "cpu_op":
                operators += 1
                if drop_every and operators % drop_every == 0:
                    continue
            start_ns, end_ns = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
            start, end = round(start_ns * scale) + shift_ns, round(end_ns * scale) + shift_ns
            e["ts"], e["dur"] = start / 1000, (end - start) / 1000
        out.append(e)
    if order_seed is not None:
        random.Random(order_seed).shuffle(out)
    return out
