"""The report's pure parts: statistics rows, verdicts vs goals, noise summary, JSON schema, Markdown."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import jsonschema

from hwopt.machine.bench import NOISE_THRESHOLD, Measurement, quantile, speedup

SCHEMA_VERSION = 2  # 2: course_cost.grading_honest (the grading goal); course_cost.grading is the sample mix
NOTEBOOK_GOAL_S = 90.0  # headless execution of one lesson or assignment notebook on a 2-core CPU
GRADING_GOAL_S = 2.0  # mean grading seconds per submission-notebook of an honest class, on a 2-core CPU
GRADING_GOAL = "grading (sandboxed, serial) s per notebook"
PARALLEL_GOAL_PER_WORKER = 0.8  # parallel grading: speedup over one worker >= this x the workers (2-core CPU)

MEETS, BELOW, NO_GOAL, UNAVAILABLE = "meets goal", "below goal", "no goal", "not available"
VERDICTS = (MEETS, BELOW, NO_GOAL, UNAVAILABLE)


def verdict(ratio: float | None, goal) -> str:
    """'meets goal' when ratio >= goal, 'below goal' otherwise; 'no goal' / 'not available' when missing.

    A goal (low, high) is a band: met when low <= ratio <= high (a prediction / measurement near 1)."""
    if ratio is None or (isinstance(ratio, float) and not math.isfinite(ratio)):
        return UNAVAILABLE
    if goal is None:
        return NO_GOAL
    if isinstance(goal, list | tuple):
        if len(goal) != 2 or not 0 < goal[0] < goal[1]:
            raise ValueError(f"goal must be a positive ratio, a band (low, high) with 0 < low < high, or "
                             f"None, got {goal!r}")
        return MEETS if goal[0] <= ratio <= goal[1] else BELOW
    if goal <= 0:
        raise ValueError(f"goal must be a positive ratio or None, got {goal!r}")
    return MEETS if ratio >= goal else BELOW


def time_stats(m: Measurement) -> dict:
    """Per-call time statistics of a Measurement, in ms: median, q1, q3, iqr, best (= min)."""
    if not isinstance(m, Measurement):
        raise ValueError(f"m must be a hwopt.machine.bench.Measurement, got {type(m).__name__}")
    return {
        "label": m.label, "unit": "ms", "median": m.median_ms, "q1": m.q1_s * 1e3, "q3": m.q3_s * 1e3,
        "iqr": m.iqr_ms, "best": m.min_ms, "relative_iqr": m.relative_iqr, "repeats": m.repeats,
    }


def rate_stats(label: str, values: Sequence[float], unit: str) -> dict:
    """Statistics of a rate (e.g. GB/s, GFLOP/s), one value per repeat: median, q1, q3, iqr, best (= max)."""
    values = [float(v) for v in values]
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise ValueError(f"values must be a non-empty sequence of positive rates, got {values!r}")
    q1, q3, median = quantile(values, 0.25), quantile(values, 0.75), statistics.median(values)
    return {
        "label": label, "unit": unit, "median": median, "q1": q1, "q3": q3, "iqr": q3 - q1,
        "best": max(values), "relative_iqr": (q3 - q1) / median, "repeats": len(values),
    }


def paired_ratios(baseline: Measurement, candidate: Measurement) -> list[float]:
    """Per-repeat speedups baseline/candidate: repeats of compare() are interleaved, so pair them in order."""
    if baseline.repeats != candidate.repeats:
        raise ValueError(
            f"baseline and candidate need the same repeats, got {baseline.repeats}, {candidate.repeats}")
    return [b / c for b, c in zip(baseline.times_s, candidate.times_s, strict=True) if c > 0]


def speedup_row(name: str, baseline: Measurement, candidate: Measurement, goal: float | None = None,
                note: str = "") -> dict:
    """A headline effect: how many times faster candidate is than baseline (median / median), vs goal."""
    ratio = speedup(baseline, candidate)
    pairs = paired_ratios(baseline, candidate)
    return {
        "name": name, "kind": "speedup", "goal": goal, "ratio": ratio, "verdict": verdict(ratio, goal),
        "ratio_q1": quantile(pairs, 0.25) if pairs else None,
        "ratio_q3": quantile(pairs, 0.75) if pairs else None,
        "ratio_of_best": baseline.min_s / candidate.min_s if candidate.min_s > 0 else None,
        "baseline": time_stats(baseline), "candidate": time_stats(candidate), "note": note,
    }


def prediction_row(name: str, baseline: Measurement, candidate: Measurement, predicted: float,
                   goal=None, note: str = "") -> dict:
    """A prediction checked: predicted / measured, where measured = baseline median / candidate median."""
    if not isinstance(predicted, int | float) or not math.isfinite(predicted) or predicted <= 0:
        raise ValueError(f"predicted must be a positive ratio, got {predicted!r}")
    measured = speedup(baseline, candidate)
    pairs = [predicted / r for r in paired_ratios(baseline, candidate) if r > 0]
    ratio = predicted / measured
    return {
        "name": name, "kind": "fidelity", "goal": goal, "ratio": ratio, "verdict": verdict(ratio, goal),
        "ratio_q1": quantile(pairs, 0.25) if pairs else None,
        "ratio_q3": quantile(pairs, 0.75) if pairs else None,
        "ratio_of_best": predicted * candidate.min_s / baseline.min_s if baseline.min_s > 0 else None,
        "baseline": time_stats(baseline), "candidate": time_stats(candidate),
        "note": f"predicted {predicted:.3g}x, measured {measured:.3g}x" + (f"; {note}" if note else ""),
    }


def time_prediction_row(name: str, predicted_s: Sequence[float], measured: Measurement, goal=None,
                        note: str = "") -> dict:
    """A predicted time checked against the measured one: predicted median / measured median. predicted_s
    holds one prediction per repeat of `measured`, made from parts timed in that same repeat (paired IQR)."""
    predicted_s = [float(t) for t in predicted_s]
    if len(predicted_s) != measured.repeats or any(not math.isfinite(t) or t <= 0 for t in predicted_s):
        raise ValueError(f"predicted_s must hold {measured.repeats} positive times, one per repeat of "
                         f"measured; got {predicted_s!r}")
    predicted = Measurement(f"predicted: {measured.label}", tuple(predicted_s), device=measured.device)
    pairs = [p / t for p, t in zip(predicted_s, measured.times_s, strict=True) if t > 0]
    ratio = predicted.median_s / measured.median_s
    return {
        "name": name, "kind": "fidelity", "goal": goal, "ratio": ratio, "verdict": verdict(ratio, goal),
        "ratio_q1": quantile(pairs, 0.25) if pairs else None,
        "ratio_q3": quantile(pairs, 0.75) if pairs else None,
        "ratio_of_best": predicted.min_s / measured.min_s if measured.min_s > 0 else None,
        "baseline": time_stats(measured), "candidate": time_stats(predicted),
        "note": f"predicted {predicted.median_ms:.3g} ms, measured {measured.median_ms:.3g} ms"
                + (f"; {note}" if note else ""),
    }


def fidelity_row(name: str, candidate: dict, reference: dict, goal: float | None = None, note: str = "",
                 pairs: Sequence[float] | None = None) -> dict:
    """How close a measured rate comes to a reference rate: candidate median / reference median, vs goal.

    pairs: per-round ratios candidate/reference (rounds interleaved), for the IQR of the ratio.
    """
    for arg, stats in (("candidate", candidate), ("reference", reference)):
        if not isinstance(stats, Mapping) or not {"median", "best", "unit"} <= set(stats):
            raise ValueError(f"{arg} must be a rate_stats() dict, got {stats!r}")
    if candidate["unit"] != reference["unit"]:
        raise ValueError(f"units differ: candidate {candidate['unit']!r}, reference {reference['unit']!r}")
    ratio = candidate["median"] / reference["median"]
    return {
        "name": name, "kind": "fidelity", "goal": goal, "ratio": ratio, "verdict": verdict(ratio, goal),
        "ratio_q1": quantile(pairs, 0.25) if pairs else None,
        "ratio_q3": quantile(pairs, 0.75) if pairs else None,
        "ratio_of_best": candidate["best"] / reference["best"],
        "baseline": reference, "candidate": candidate, "note": note,
    }


def unavailable_row(name: str, reason: str, goal: float | None = None, kind: str = "speedup") -> dict:
    """A row for a measurement that could not be taken here, with the reason."""
    if not reason:
        raise ValueError("reason must say why the measurement is not available")
    return {
        "name": name, "kind": kind, "goal": goal, "ratio": None, "verdict": UNAVAILABLE, "ratio_q1": None,
        "ratio_q3": None, "ratio_of_best": None, "baseline": None, "candidate": None, "note": reason,
    }


def notebook_row(path: str, seconds: float | None, status: str, error: str = "",
                 goal_s: float = NOTEBOOK_GOAL_S) -> dict:
    """Headless execution cost of one notebook; verdict 'meets goal' when it ran ok within goal_s."""
    if status not in ("ok", "error", "timeout", "skipped"):
        raise ValueError(f"status must be 'ok', 'error', 'timeout' or 'skipped', got {status!r}")
    if status == "ok" and (seconds is None or seconds < 0):
        raise ValueError(f"seconds must be >= 0 for a notebook that ran, got {seconds!r}")
    if status == "skipped":
        result = UNAVAILABLE
    elif status == "ok":
        result = MEETS if seconds <= goal_s else BELOW
    else:
        result = BELOW
    return {"path": path, "seconds": seconds, "status": status, "error": error, "goal_s": goal_s,
            "verdict": result}


def students_text(n: int) -> str:
    """'1 student', '5 students'."""
    return f"{n} student" + ("" if n == 1 else "s")


def grading_row(seconds: Sequence[float], wall_s: float, cpu_s: float, *, students: int,
                sandbox_reason: str | None = None, not_full_marks: int = 0,
                goal_s: float = GRADING_GOAL_S) -> dict:
    """The grading goal: an honest class graded one notebook at a time; verdict on the mean vs goal_s.

    seconds: each notebook's grading seconds (autograde + feedback); wall_s, cpu_s: the whole class run's
    wall and CPU seconds (kernels included), whose mean per notebook is what the goal compares. The goal is
    'not available' when the class was graded without the sandbox (sandbox_reason says why) or when a
    notebook of it did not score full marks (then the time measures something other than grading).
    """
    seconds = [float(s) for s in seconds]
    if not seconds or any(not math.isfinite(s) or s < 0 for s in seconds):
        raise ValueError(f"seconds must be a non-empty sequence of non-negative times, got {seconds!r}")
    for arg, value in (("wall_s", wall_s), ("cpu_s", cpu_s)):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{arg} must be a non-negative number of seconds, got {value!r}")
    if students < 1:
        raise ValueError(f"students must be a positive integer, got {students!r}")
    n = len(seconds)
    mean = wall_s / n
    how = ("sandboxed" if sandbox_reason is None
           else f"measured WITHOUT the sandbox, which cannot start here ({sandbox_reason})")
    if sandbox_reason is not None or not_full_marks:
        result = UNAVAILABLE
    else:
        result = MEETS if mean <= goal_s else BELOW
    note = (f"a class of {students_text(students)}, each submitting the correct solution of every assignment "
            f"({n} notebooks), "
            f"graded serially, {how}; mean = wall time of the whole grade_class run / notebooks, median of "
            "each notebook's autograde + feedback seconds, CPU of the grader and its kernels / notebooks")
    if not_full_marks:
        note += f"; {not_full_marks} of {n} notebooks did not score full marks, so the time is not a verdict"
    return {
        "available": True, "name": GRADING_GOAL, "students": students, "notebooks": n, "total_s": wall_s,
        "s_per_notebook": mean, "median_s_per_notebook": statistics.median(seconds), "min_s": min(seconds),
        "max_s": max(seconds), "cpu_s_per_notebook": cpu_s / n, "sandboxed": sandbox_reason is None,
        "sandbox_reason": sandbox_reason, "not_full_marks": not_full_marks, "goal_s": goal_s,
        "verdict": result, "note": note,
    }


def grading_unavailable(reason: str, goal_s: float = GRADING_GOAL_S) -> dict:
    """The grading goal when the honest class could not be graded here, with the reason."""
    if not reason:
        raise ValueError("reason must say why grading was not measured")
    return {"available": False, "name": GRADING_GOAL, "reason": reason, "goal_s": goal_s,
            "verdict": UNAVAILABLE}


def parallel_grading_name(workers: int) -> str:
    """The parallel grading goal's name for this many workers."""
    return f"parallel grading speedup ({workers} workers)"


def parallel_grading_row(rounds: Sequence[tuple[float, float]], *, workers: int, notebooks: int,
                         same_scores: bool, note: str) -> dict:
    """The parallel grading goal: the median over rounds of serial s / parallel s, vs 0.8 x workers.

    rounds: (serial wall s, parallel wall s) of each round, one class of `notebooks` graded both ways;
    same_scores: whether every notebook got the serial run's score and status (else no verdict).
    """
    try:
        rounds = [(serial_s, parallel_s) for serial_s, parallel_s in rounds]
    except (TypeError, ValueError):
        rounds = []
    if not rounds:
        raise ValueError("rounds must be a non-empty sequence of (serial_s, parallel_s) pairs")
    for serial_s, parallel_s in rounds:
        for arg, value in (("serial_s", serial_s), ("parallel_s", parallel_s)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{arg} must be a positive number of seconds, got {value!r}")
    for arg, value in (("workers", workers), ("notebooks", notebooks)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{arg} must be a positive integer, got {value!r}")
    speedups = [serial_s / parallel_s for serial_s, parallel_s in rounds]
    speedup, goal = statistics.median(speedups), PARALLEL_GOAL_PER_WORKER * workers
    result = UNAVAILABLE if not same_scores else MEETS if speedup >= goal else BELOW
    if not same_scores:
        note += "; the parallel run's scores differ from the serial run's, so the speedup is not a verdict"
    return {"available": True, "name": parallel_grading_name(workers), "workers": workers,
            "notebooks": notebooks, "rounds": len(rounds),
            "serial_s": statistics.median(s for s, _ in rounds),
            "parallel_s": statistics.median(p for _, p in rounds), "speedup": speedup, "speedups": speedups,
            "speedup_iqr": quantile(speedups, 0.75) - quantile(speedups, 0.25),
            "goal": goal, "same_scores": same_scores, "verdict": result, "note": note}


def parallel_grading_unavailable(reason: str, workers: int) -> dict:
    """The parallel grading goal when it could not be measured here, with the reason."""
    if not reason:
        raise ValueError("reason must say why parallel grading was not measured")
    return {"available": False, "name": parallel_grading_name(workers), "reason": reason,
            "goal": PARALLEL_GOAL_PER_WORKER * workers, "verdict": UNAVAILABLE}


def summarize_warnings(messages: Iterable[str], keep: int = 3) -> list[str]:
    """Distinct 'Category: message' lines; a category seen more than `keep` times becomes one count line."""
    by_category: dict[str, list[str]] = {}
    for m in dict.fromkeys(messages):
        by_category.setdefault(m.split(":", 1)[0], []).append(m)
    out = []
    for category, lines in sorted(by_category.items()):
        if len(lines) > keep:
            example = lines[0].split(":", 1)[-1].strip()
            out.append(f"{category}: {len(lines)} distinct warnings, e.g. {example}")
        else:
            out += lines
    return out


def noise_summary(stats: Iterable[dict], warnings: Iterable[str] = ()) -> dict:
    """Relative IQRs of every timed series (sorted, noisiest first), the noisy count, and warnings seen."""
    rows = sorted(
        ({"label": s["label"], "relative_iqr": s["relative_iqr"],
          "noisy": s["relative_iqr"] > NOISE_THRESHOLD} for s in stats),
        key=lambda r: -r["relative_iqr"])
    rel = [r["relative_iqr"] for r in rows]
    return {
        "threshold": NOISE_THRESHOLD, "series": rows, "noisy": sum(r["noisy"] for r in rows),
        "median_relative_iqr": statistics.median(rel) if rel else None,
        "warnings": summarize_warnings(warnings),
    }


def row_stats(rows: Iterable[dict]) -> list[dict]:
    """Every baseline/candidate statistics dict held by ratio rows (for the noise summary)."""
    return [s for r in rows for s in (r.get("baseline"), r.get("candidate")) if s]


# ---------------------------------------------------------------- JSON schema

_NUM = {"type": ["number", "null"]}
_GOAL = {"anyOf": [_NUM, {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}]}
_STATS = {
    "type": ["object", "null"],
    "required": ["label", "unit", "median", "iqr", "best", "relative_iqr", "repeats"],
    "properties": {"label": {"type": "string"}, "unit": {"type": "string"}, "median": {"type": "number"},
                   "iqr": {"type": "number"}, "best": {"type": "number"}, "relative_iqr": {"type": "number"},
                   "repeats": {"type": "integer", "minimum": 1}},
}
_ROW = {
    "type": "object",
    "required": ["name", "kind", "goal", "ratio", "verdict", "baseline", "candidate", "note"],
    "properties": {"name": {"type": "string"}, "kind": {"enum": ["speedup", "fidelity"]}, "goal": _GOAL,
                   "ratio": _NUM, "ratio_q1": _NUM, "ratio_q3": _NUM, "ratio_of_best": _NUM,
                   "verdict": {"enum": list(VERDICTS)}, "baseline": _STATS, "candidate": _STATS,
                   "note": {"type": "string"}},
}
_SECTION = {"type": "object", "required": ["notes"], "properties": {"notes": {"type": "array",
                                                                                "items": {"type": "string"}}}}
_SERIES = {"type": "array", "items": {"type": "object"}}
_GRADING = {
    "type": "object", "required": ["available", "name", "goal_s", "verdict"],
    "properties": {"available": {"type": "boolean"}, "name": {"type": "string"}, "goal_s": {"type": "number"},
                   "verdict": {"enum": list(VERDICTS)}, "reason": {"type": "string"}},
    "if": {"properties": {"available": {"const": True}}},
    "then": {"required": ["students", "notebooks", "total_s", "s_per_notebook", "median_s_per_notebook",
                          "cpu_s_per_notebook", "sandboxed", "sandbox_reason", "note"],
             "properties": {"sandboxed": {"type": "boolean"}, "sandbox_reason": {"type": ["string", "null"]},
                            "notebooks": {"type": "integer", "minimum": 1}}},
    "else": {"required": ["reason"]},
}
_PARALLEL = {  # optional: reports written before parallel grading have none
    "type": "object", "required": ["available", "name", "goal", "verdict"],
    "properties": {"available": {"type": "boolean"}, "name": {"type": "string"}, "goal": {"type": "number"},
                   "verdict": {"enum": list(VERDICTS)}},
    "if": {"properties": {"available": {"const": True}}},
    "then": {"required": ["workers", "notebooks", "serial_s", "parallel_s", "speedup", "same_scores",
                          "note"],
             "properties": {"speedups": {"type": "array", "items": {"type": "number"}, "minItems": 1}}},
    "else": {"required": ["reason"]},
}
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["schema_version", "mode", "started_utc", "duration_s", "command", "machine", "fidelity",
                 "effects", "course_cost", "scaling", "noise", "plots"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "mode": {"enum": ["quick", "full"]},
        "started_utc": {"type": "string"},
        "duration_s": {"type": "number", "minimum": 0},
        "command": {"type": "string"},
        "machine": {"type": "object", "required": ["card"], "properties": {"card": {"type": "string"}}},
        "fidelity": {**_SECTION, "required": ["rows", "notes"],
                     "properties": {"rows": {"type": "array", "items": _ROW}}},
        "effects": {**_SECTION, "required": ["rows", "notes"],
                    "properties": {"rows": {"type": "array", "items": _ROW}}},
        "course_cost": {**_SECTION, "required": ["notebooks", "grading", "grading_honest", "notes"],
                        "properties": {
            "notebooks": {"type": "array", "items": {"type": "object", "required": [
                "path", "seconds", "status", "goal_s", "verdict"]}},
            "grading": {"type": "object", "required": ["available"]},
            "grading_honest": _GRADING, "grading_parallel": _PARALLEL}},
        "scaling": {**_SECTION, "required": ["bandwidth", "gemv", "grading", "notes"], "properties": {
            "bandwidth": _SERIES, "gemv": _SERIES, "grading": _SERIES}},
        "llm_formats": {**_SECTION, "required": ["rows", "notes"], "properties": {  # optional: older reports
            "rows": {"type": "array", "items": {"type": "object", "required": [
                "precision", "bytes_per_weight", "perplexity", "top1_agreement"]}}}},
        "engine": {**_SECTION, "required": ["rows", "notes"],  # optional: reports written before it have none
                   "properties": {"rows": {"type": "array", "items": _ROW}}},
        "noise": {"type": "object", "required": ["threshold", "series", "noisy", "warnings"]},
        "plots": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


def validate(doc: dict) -> dict:
    """Check a report document, as its JSON will hold it (a band goal's tuple is a list there), against
    SCHEMA (jsonschema.ValidationError if it does not fit); returns it."""
    jsonschema.validate(json.loads(json.dumps(doc)), SCHEMA)
    return doc


# ---------------------------------------------------------------- Markdown

def _fmt(value, digits: int = 3) -> str:
    """A number with `digits` significant digits ('-' for None)."""
    if value is None:
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    return f"{value:,.{decimals}f}"


def _stats_cell(s: dict | None) -> str:
    if not s:
        return "-"
    best = "min" if s["unit"] == "ms" else "best"
    return (f"{_fmt(s['median'])} {s['unit']} (IQR {_fmt(s['iqr'], 2)}, {best} {_fmt(s['best'])}, "
            f"n={s['repeats']})")


def _goal_cell(goal, unit: str = "") -> str:
    if goal is None:
        return "-"
    if isinstance(goal, list | tuple):
        return f"{_fmt(goal[0])}{unit}-{_fmt(goal[1])}{unit}"
    return f">= {_fmt(goal)}{unit}"


def ratio_table(rows: Sequence[dict], *, baseline_header: str = "baseline",
                candidate_header: str = "candidate") -> str:
    """Markdown table of ratio rows: ratio (paired IQR), ratio of bests, goal, verdict, both sides' stats."""
    lines = [
        "| measurement | ratio (IQR) | ratio of best | goal | verdict | "
        f"{candidate_header} | {baseline_header} |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["ratio"] is None:
            ratio = "-"
        elif r.get("ratio_q1") is not None:
            ratio = f"**{_fmt(r['ratio'])}** ({_fmt(r['ratio_q1'])}-{_fmt(r['ratio_q3'])})"
        else:
            ratio = f"**{_fmt(r['ratio'])}**"
        lines.append(
            f"| {r['name']} | {ratio} | {_fmt(r.get('ratio_of_best'))} | "
            f"{_goal_cell(r['goal'])} | "
            f"{r['verdict']} | {_stats_cell(r['candidate'])} | {_stats_cell(r['baseline'])} |")
    notes = [f"- {r['name']}: {r['note']}" for r in rows if r.get("note")]
    return "\n".join(lines + ([""] + notes if notes else []))


def notebook_table(rows: Sequence[dict]) -> str:
    """Markdown table of notebook execution costs."""
    lines = ["| notebook | seconds | status | goal | verdict |", "|---|---|---|---|---|"]
    for r in rows:
        status = r["status"] + (f": {r['error']}" if r.get("error") else "")
        lines.append(f"| {r['path']} | {_fmt(r['seconds'])} | {status} | <= {_fmt(r['goal_s'])} s | "
                     f"{r['verdict']} |")
    return "\n".join(lines)


def series_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """Markdown table of a scaling series (list of dicts), selected columns in order."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c)) if not isinstance(r.get(c), str) else r[c]
                                       for c in columns) + " |")
    return "\n".join(lines)


def llm_table(rows: Sequence[dict]) -> str:
    """Markdown table of the trained LLM's formats: bytes per weight (scales included), perplexity (3
    decimals: formats differ in the second), top-1 agreement with fp32."""
    lines = ["| format | bytes per weight | validation perplexity | top-1 agreement |", "|---|---|---|---|"]
    lines += [f"| {r['precision']} | {r['bytes_per_weight']:.4g} | {r['perplexity']:.3f} | "
              f"{r['top1_agreement']:.1%} |" for r in rows]
    return "\n".join(lines)


def _notes(notes: Sequence[str]) -> str:
    return "\n".join(f"- {n}" for n in notes) + ("\n\n" if notes else "")


def _plot(doc: dict, key: str) -> str:
    name = doc["plots"].get(key)
    return f"![{key}]({name})\n\n" if name else ""


def _sections_s(doc: dict) -> str:
    parts = [f"{k} {_fmt(v, 2)} s" for k, v in doc.get("section_s", {}).items()]
    return f" ({', '.join(parts)})" if parts else ""


def grading_measured(honest: dict) -> str:
    """The grading goal's 'measured' cell: mean, median and CPU seconds per notebook, or why not."""
    if not honest.get("available"):
        return f"not available: {honest.get('reason', 'no reason given')}"
    cell = (f"{_fmt(honest['s_per_notebook'])} s mean, median {_fmt(honest['median_s_per_notebook'])} s, "
            f"CPU {_fmt(honest['cpu_s_per_notebook'])} s ({honest['notebooks']} notebooks)")
    if not honest["sandboxed"]:
        cell += f"; measured WITHOUT the sandbox: {honest['sandbox_reason']}"
    if honest.get("not_full_marks"):
        cell += f"; {honest['not_full_marks']} notebooks short of full marks"
    return cell


def grading_paragraph(honest: dict | None, samples: dict) -> str:
    """Section 3's grading text: the honest class (the goal) first, then the sample mix."""
    parts = []
    if honest and honest.get("available"):
        how = ("every kernel in the grading sandbox" if honest["sandboxed"] else
               f"**WITHOUT the grading sandbox**, which cannot start here ({honest['sandbox_reason']})")
        parts.append(
            f"Grading an honest class, serially, {how}: {students_text(honest['students'])}, each submitting "
            f"the correct solution of every assignment ({honest['notebooks']} submission notebooks): "
            f"**{_fmt(honest['s_per_notebook'])} s per submission-notebook** (mean; median "
            f"{_fmt(honest['median_s_per_notebook'])} s, range {_fmt(honest['min_s'])}-"
            f"{_fmt(honest['max_s'])} s; CPU {_fmt(honest['cpu_s_per_notebook'])} s per notebook), "
            f"{_fmt(honest['total_s'])} s in all; "
            f"goal <= {_fmt(honest['goal_s'])} s: {honest['verdict']}.\n")
    elif honest:
        parts.append(f"Grading an honest class: not available ({honest.get('reason', 'no reason given')}).\n")
    if samples.get("available"):
        timeout = f"the {samples['cell_timeout_s']} s" if samples.get("cell_timeout_s") else "the"
        covered = (f"; this class covers {samples['samples_covered']} of the {samples['samples_total']}"
                   if samples.get("samples_total") else "")
        notebooks = f"{samples['notebooks']} submission notebooks"
        which = (f"), each submitting the assignments its sample is about (the correct and blank samples: "
                 f"every one); {notebooks}:" if samples.get("targets_only") else f"; {notebooks}):")
        parts.append(
            f"Grading the sample mix, a class of {students_text(samples['class_size'])} cycling through the "
            f"sample students (correct, blank, wrong, broken, cells that hang until {timeout} cell timeout, "
            f"the attack samples{covered}{which} "
            f"{_fmt(samples['s_per_notebook'])} s per submission-notebook, "
            f"{_fmt(samples['total_s'])} s in all"
            + (f" (CPU {_fmt(samples['cpu_s_per_notebook'])} s per notebook)"
               if samples.get("cpu_s_per_notebook") is not None else "")
            + ". Its mean includes the cell timeouts its hanging samples wait out: it prices the mix, not "
            "the grader.\n")
    else:
        parts.append(f"Grading the sample mix: not available ({samples.get('reason', 'no reason given')}).\n")
    return "\n".join(parts)


def parallel_measured(row: dict) -> str:
    """The parallel grading goal's 'measured' cell: the speedup and both wall times, or why not."""
    if not row.get("available"):
        return f"not available: {row.get('reason', 'no reason given')}"
    spread = (f", IQR {_fmt(row['speedup_iqr'], 2)} over {row['rounds']} rounds"
              if row.get("rounds", 1) > 1 else "")  # reports before rounds have one pair
    return (f"{_fmt(row['speedup'])}x ({_fmt(row['parallel_s'])} s vs {_fmt(row['serial_s'])} s serial, "
            f"{row['notebooks']} notebooks{spread})")


def parallel_paragraph(row: dict | None) -> str:
    """Section 3's text on the parallel grading goal."""
    if not row:
        return ""
    if not row.get("available"):
        return f"Grading in parallel: not available ({row.get('reason', 'no reason given')}).\n"
    median = " (median of the rounds)" if row.get("rounds", 1) > 1 else ""
    return (f"Grading an honest class in parallel, {row['workers']} workers: "
            f"**{_fmt(row['speedup'])}x** the serial speed{median} ({_fmt(row['parallel_s'])} s against "
            f"{_fmt(row['serial_s'])} s for {row['notebooks']} notebooks); goal >= {_fmt(row['goal'])}x: "
            f"{row['verdict']}. {row['note']}.\n")


def summary_table(doc: dict) -> str:
    """Markdown table of every goal in the report: ratio (or seconds), goal, verdict; then a count line."""
    lines = ["| goal | measured | target | verdict |", "|---|---|---|---|"]
    results = []
    for section in ("fidelity", "effects", "engine"):
        for r in doc.get(section, {"rows": []})["rows"]:
            if r["goal"] is not None:
                lines.append(f"| {r['name']} | {_fmt(r['ratio'])}x | {_goal_cell(r['goal'], 'x')} | "
                             f"{r['verdict']} |")
                results.append(r["verdict"])
    ran = [r for r in doc["course_cost"]["notebooks"] if r["status"] != "skipped"]
    if ran:
        met = sum(r["verdict"] == MEETS for r in ran)
        slowest = max(ran, key=lambda r: r["seconds"] or 0)
        verdict_nb = MEETS if met == len(ran) else BELOW
        lines.append(f"| every notebook headless | {met} of {len(ran)} within goal (slowest "
                     f"{_fmt(slowest['seconds'])} s) | <= {_fmt(NOTEBOOK_GOAL_S)} s each | {verdict_nb} |")
        results.append(verdict_nb)
    honest = doc["course_cost"].get("grading_honest")
    if honest:
        lines.append(f"| {honest['name']} | {grading_measured(honest)} | <= {_fmt(honest['goal_s'])} s | "
                     f"{honest['verdict']} |")
        results.append(honest["verdict"])
    parallel = doc["course_cost"].get("grading_parallel")
    if parallel:
        lines.append(f"| {parallel['name']} | {parallel_measured(parallel)} | >= {_fmt(parallel['goal'])}x | "
                     f"{parallel['verdict']} |")
        results.append(parallel["verdict"])
    missing = results.count(UNAVAILABLE)
    count = f"{results.count(MEETS)} of {len(results)} goals met"
    count += f"; {missing} not available" if missing else ""
    return "\n".join(lines) + f"\n\n{count}."


def render_markdown(doc: dict) -> str:
    """The whole report as Markdown, from a report document (see SCHEMA)."""
    fid, eff, cost, scal, noise = (doc[k] for k in ("fidelity", "effects", "course_cost", "scaling", "noise"))
    out = [
        "# Performance report: the course measured against the machine's limits\n",
        f"Generated by `{doc['command']}` ({doc['mode']} mode) on {doc['started_utc']}, "
        f"in {_fmt(doc['duration_s'])} s{_sections_s(doc)}. Regenerate it with the same command; never edit "
        "it by hand.\n",
        "Ratios are medians of measurements taken in one run with interleaved repeats; the range in "
        "brackets is the IQR of the per-repeat ratios; statistics cells show median (IQR, best, repeats).\n",
        "## Summary\n", summary_table(doc), "",
        "## The machine\n", "```\n" + doc["machine"]["card"].rstrip() + "\n```\n",
        "## 1. Probe fidelity: the toolkit's probes vs reference kernels\n",
        ratio_table(fid["rows"], baseline_header="reference", candidate_header="toolkit probe"), "",
        _notes(fid["notes"]) + _plot(doc, "fidelity"),
        "## 2. The lessons' headline effects\n",
        ratio_table(eff["rows"], baseline_header="baseline", candidate_header="optimized"), "",
        _notes(eff["notes"]) + _plot(doc, "effects"),
        "## 3. Course cost\n", "Headless execution (nbclient, cell timeout) of every lesson and assignment "
        "source notebook:\n", notebook_table(cost["notebooks"]) if cost["notebooks"] else "(none run)", "",
    ]
    out.append(grading_paragraph(cost.get("grading_honest"), cost["grading"]))
    if cost.get("grading_parallel"):  # reports written before parallel grading have none
        out.append(parallel_paragraph(cost["grading_parallel"]))
    out.append(_notes(cost["notes"]) + _plot(doc, "notebooks"))
    out += ["## 4. Scaling\n", "### Bandwidth vs array size (cache levels)\n", _plot(doc, "bandwidth")]
    if scal["bandwidth"]:
        out += [series_table(scal["bandwidth"], ["source", "kernel", "bytes_per_array", "gbs", "q1", "q3",
                                                 "relative_iqr"]), ""]
    out += ["### Decode GEMV vs matrix size\n", _plot(doc, "gemv")]
    if scal["gemv"]:
        out += [series_table(scal["gemv"], ["variant", "rows", "cols", "weight_mb", "median_ms", "gbs",
                                            "relative_iqr"]), ""]
    out += ["### Grading time vs class size (the sample mix)\n", _plot(doc, "grading")]
    if scal["grading"]:
        out += [series_table(scal["grading"], ["class_size", "notebooks", "total_s", "s_per_notebook"]), ""]
    out.append(_notes(scal["notes"]))
    if "llm_formats" in doc:  # reports written before it have none
        llm = doc["llm_formats"]
        out += ["## 5. The course's trained LLM in each weight format\n",
                llm_table(llm["rows"]) if llm["rows"] else "(not measured)", "", _notes(llm["notes"])]
    if "engine" in doc:  # reports written before it have none
        engine = doc["engine"]
        out += ["## 6. The serving engine: the course's C kernel against llama.cpp, and goodput\n",
                ratio_table(engine["rows"], baseline_header="llama.cpp (or requests answered)",
                            candidate_header="C kernel (or goodput)") if engine["rows"] else "(not measured)",
                "", _notes(engine["notes"])]
    out += [
        "## Noise\n",
        f"{noise['noisy']} of {len(noise['series'])} timed series had a relative IQR above "
        f"{noise['threshold']:.0%} (median relative IQR {_fmt(noise.get('median_relative_iqr'))}). "
        "Noisiest:\n",
        series_table(noise["series"][:8], ["label", "relative_iqr"]) if noise["series"] else "(none)", "",
    ]
    if noise["warnings"]:
        out.append("Warnings seen during the run:\n\n" + "\n".join(f"- {w}" for w in noise["warnings"][:20]))
    return "\n".join(out).rstrip() + "\n"


def write_report(doc: dict, out_dir: Path) -> tuple[Path, Path]:
    """Validate doc and write report.json and report.md into out_dir; returns both paths."""
    validate(doc)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "report.json", out_dir / "report.md"
    json_path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    md_path.write_text(render_markdown(doc))
    return json_path, md_path
