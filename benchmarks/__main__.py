"""Write the performance report: `python -m benchmarks [--quick] [--out DIR]` (Markdown, JSON, PNG plots)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import torch

from benchmarks import (
    course,
    decode_scaling,
    effects,
    engine,
    fidelity,
    figures,
    grading,
    llm_formats,
    report,
)
from hwopt.machine import card, probe

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("fidelity", "effects", "notebooks", "grading", "scaling", "llm", "engine")


def measured_probe(doc: dict):
    """The toolkit probe's medians from section 1 as a Ceilings-like object for the card, or None."""
    rows = {r["name"]: r for r in doc["fidelity"]["rows"] if r.get("candidate")}
    bw = next((r["candidate"]["median"] for n, r in rows.items() if n.startswith("bandwidth probe")), None)
    fl = next((r["candidate"]["median"] for n, r in rows.items() if n.startswith("FLOP/s probe")), None)
    if bw is None or fl is None:
        return None
    return SimpleNamespace(bandwidth_gbs=bw, flops_by_precision={"fp32": fl * 1e9})


def machine_card(measured=None) -> dict:
    """The toolkit's machine card for the CPU (machine.card), with section 1's probe medians when measured."""
    c = card.machine_card(probe=measured is not None, device="cpu", precisions=("fp32",),
                          probe_fn=lambda *_: measured)
    return {"card": c.render(), "details": c.to_dict()}


def _log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _section_fidelity(doc, ctx):
    doc["fidelity"], s = fidelity.measure(ctx["build"], quick=ctx["quick"], threads=ctx["threads"])
    ctx["stats"] += s


def _section_effects(doc, ctx):
    doc["effects"], _ = effects.measure(quick=ctx["quick"])
    ctx["stats"] += report.row_stats(doc["effects"]["rows"])


def _section_notebooks(doc, ctx):
    with quiet_stderr(ctx["build"] / "notebooks.log"):  # the kernels' own start-up chatter
        doc["course_cost"]["notebooks"], notes = course.measure_notebooks(quick=ctx["quick"])
    doc["course_cost"]["notes"] += notes


def _section_grading(doc, ctx):
    with quiet_stderr(ctx["build"] / "grading.log"):  # kernels started by nbgrader talk on stderr
        honest, samples, series, notes, parallel = grading.measure(quick=ctx["quick"],
                                                                   class_size=ctx["class_size"])
    doc["course_cost"]["grading_honest"] = honest
    doc["course_cost"]["grading_parallel"] = parallel
    doc["course_cost"]["grading"] = samples
    doc["scaling"]["grading"] = series
    doc["course_cost"]["notes"] += notes


def _section_scaling(doc, ctx):
    doc["scaling"]["bandwidth"], notes = fidelity.bandwidth_sweep(ctx["build"], quick=ctx["quick"],
                                                                  threads=ctx["threads"])
    doc["scaling"]["notes"] += notes
    doc["scaling"]["gemv"], notes, s = decode_scaling.measure(quick=ctx["quick"])
    doc["scaling"]["notes"] += notes
    ctx["stats"] += s


def _section_llm(doc, ctx):
    doc["llm_formats"] = llm_formats.measure(quick=ctx["quick"])


def _section_engine(doc, ctx):
    doc["engine"] = engine.measure(quick=ctx["quick"])
    ctx["stats"] += report.row_stats(doc["engine"]["rows"])


STEPS = {
    "fidelity": ("1. probe fidelity (STREAM, sgemm, FMA peak vs the toolkit's probes)", _section_fidelity),
    "effects": ("2. headline effects of the lessons", _section_effects),
    "notebooks": ("3. course cost: executing every notebook headless", _section_notebooks),
    "grading": ("3. course cost: grading an honest class, then the sample mix", _section_grading),
    "scaling": ("4. scaling: bandwidth vs array size, GEMV vs matrix size", _section_scaling),
    "llm": ("5. the trained LLM in every weight format: perplexity and top-1 agreement", _section_llm),
    "engine": ("6. the serving engine: the C kernel against llama.cpp, goodput at lesson 11's SLO",
               _section_engine),
}


@contextlib.contextmanager
def quiet_stderr(log_path: Path):
    """Send this process's file descriptor 2 (and its children's) to log_path for the block."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def run(out_dir: Path, *, quick: bool, sections=SECTIONS, class_size: int | None = None,
        command: str = "make bench") -> dict:
    """Measure the requested sections, write report.{json,md} and plots into out_dir; returns the document."""
    started, t0 = datetime.now(UTC), time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = {"build": None, "quick": quick, "threads": torch.get_num_threads(), "stats": [],
           "class_size": class_size}
    skipped = "not measured in this run (--only)"
    doc = {
        "schema_version": report.SCHEMA_VERSION, "mode": "quick" if quick else "full",
        "started_utc": started.strftime("%Y-%m-%d %H:%M UTC"), "duration_s": 0.0, "command": command,
        "machine": {}, "section_s": {},
        "fidelity": {"rows": [], "notes": [skipped]}, "effects": {"rows": [], "notes": [skipped]},
        "course_cost": {"notebooks": [], "grading": {"available": False, "reason": skipped},
                        "grading_honest": report.grading_unavailable(skipped),
                        "grading_parallel": report.parallel_grading_unavailable(
                            skipped, grading.grading_workers()),
                        "notes": []},
        "scaling": {"bandwidth": [], "gemv": [], "grading": [], "notes": []},
        "llm_formats": {"rows": [], "notes": [skipped]},
        "engine": {"rows": [], "notes": [skipped]},
        "noise": {}, "plots": {},
    }
    # compiled kernels and the kernels' logs stay out of the report, deleted with their folder at the end
    with tempfile.TemporaryDirectory(prefix="hwopt-bench-") as build, \
            warnings.catch_warnings(record=True) as seen:
        ctx["build"] = Path(build)
        warnings.simplefilter("always")
        for key in SECTIONS:
            if key in sections:
                title, step = STEPS[key]
                _log(title)
                t = time.perf_counter()
                step(doc, ctx)
                doc["section_s"][key] = time.perf_counter() - t
    messages = [f"{w.category.__name__}: {str(w.message).splitlines()[0][:160]}" for w in seen]
    doc["machine"] = {**machine_card(measured_probe(doc)), "threads": ctx["threads"]}
    doc["noise"] = report.noise_summary(ctx["stats"], messages)
    doc["plots"] = figures.save_all(doc, out_dir, probe.cache_sizes_bytes())
    doc["duration_s"] = time.perf_counter() - t0
    json_path, md_path = report.write_report(doc, out_dir)
    _log(f"wrote {md_path} and {json_path} in {doc['duration_s']:.0f} s")
    return doc


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out"), help="output folder")
    parser.add_argument("--quick", action="store_true", help="smoke run: smaller sizes, < 3 minutes")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="sections to run")
    parser.add_argument("--class-size", type=int, default=None,
                        help="students in the sample-mix grading run (default: every sample once)")
    args = parser.parse_args(argv)
    if args.class_size is not None and args.class_size < 1:
        parser.error(f"--class-size must be a positive integer, got {args.class_size}")
    out = Path(args.out)
    shown = out.resolve().relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out
    extra = (["--quick"] if args.quick else []) + (
        ["--only", *args.only] if set(args.only) != set(SECTIONS) else []) + (
        [f"--class-size {args.class_size}"] if args.class_size else [])
    command = "make bench" + (f" ARGS='{' '.join(extra)}'" if len(extra) > 1 else f" ARGS={extra[0]}" if extra
                              else "") + (f" OUT={shown}" if str(shown) != "benchmarks/out" else "")
    run(out, quick=args.quick, sections=tuple(args.only), class_size=args.class_size, command=command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
