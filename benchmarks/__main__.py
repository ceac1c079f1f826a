"""Write the performance report: `python -m benchmarks [--quick] [--out DIR]` (Markdown, JSON, PNG plots)."""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path

from benchmarks import course, decode_scaling, effects, fidelity, figures, grading, report

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("fidelity", "effects", "notebooks", "grading", "scaling")


def machine_card() -> dict:
    """The toolkit's machine card for the CPU (hwopt.card): {'card': text, 'details': dict}."""
    try:
        from hwopt import card

        c = card.machine_card(probe=False, device="cpu")
        return {"card": c.render(), "details": c.to_dict()}
    except (ImportError, AttributeError):  # the card is newer than the hardware summary
        from hwopt import hardware

        info = hardware.machine()
        return {"card": info.summary(), "details": info.to_dict()}


def _log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(out_dir: Path, *, quick: bool, sections=SECTIONS, class_size: int | None = None,
        command: str = "make bench") -> dict:
    """Measure the requested sections, write report.{json,md} and plots into out_dir; returns the document."""
    import torch

    started, t0 = datetime.now(UTC), time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    build = out_dir / "build"
    threads = torch.get_num_threads()
    skipped = "not measured in this run (--only)"
    doc = {
        "schema_version": report.SCHEMA_VERSION, "mode": "quick" if quick else "full",
        "started_utc": started.strftime("%Y-%m-%d %H:%M UTC"), "duration_s": 0.0, "command": command,
        "machine": {**machine_card(), "threads": threads},
        "fidelity": {"rows": [], "notes": [skipped]}, "effects": {"rows": [], "notes": [skipped]},
        "course_cost": {"notebooks": [], "grading": {"available": False, "reason": skipped}, "notes": []},
        "scaling": {"bandwidth": [], "gemv": [], "grading": [], "notes": []},
        "noise": {}, "plots": {},
    }
    stats: list[dict] = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        if "fidelity" in sections:
            _log("1. probe fidelity (STREAM, sgemm, FMA peak vs the toolkit's probes)")
            doc["fidelity"], s = fidelity.measure(build, quick=quick, threads=threads)
            stats += s
        if "effects" in sections:
            _log("2. headline effects of the lessons")
            doc["effects"], _ = effects.measure(quick=quick)
            stats += report.row_stats(doc["effects"]["rows"])
        if "notebooks" in sections:
            _log("3. course cost: executing every notebook headless")
            doc["course_cost"]["notebooks"], notes = course.measure_notebooks(quick=quick)
            doc["course_cost"]["notes"] += notes
        if "grading" in sections:
            _log("3. course cost: autograding a class of sample students")
            summary, series, notes = grading.measure(quick=quick, class_size=class_size)
            doc["course_cost"]["grading"] = summary
            doc["scaling"]["grading"] = series
            doc["course_cost"]["notes"] += notes
        if "scaling" in sections:
            _log("4. scaling: bandwidth vs array size, GEMV vs matrix size")
            doc["scaling"]["bandwidth"], notes = fidelity.bandwidth_sweep(build, quick=quick, threads=threads)
            doc["scaling"]["notes"] += notes
            doc["scaling"]["gemv"], notes, s = decode_scaling.measure(quick=quick)
            doc["scaling"]["notes"] += notes
            stats += s
    messages = [f"{w.category.__name__}: {str(w.message).splitlines()[0][:160]}" for w in seen]
    doc["noise"] = report.noise_summary(stats, messages)
    doc["plots"] = figures.save_all(doc, out_dir, fidelity.cache_sizes_bytes())
    doc["duration_s"] = time.perf_counter() - t0
    json_path, md_path = report.write_report(doc, out_dir)
    _log(f"wrote {md_path} and {json_path} in {doc['duration_s']:.0f} s")
    return doc


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out"), help="output folder")
    parser.add_argument("--quick", action="store_true", help="smoke run: smaller sizes, < 3 minutes")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="sections to run")
    parser.add_argument("--class-size", type=int, default=None, help="students in the grading run")
    args = parser.parse_args(argv)
    if args.class_size is not None and args.class_size < 1:
        parser.error(f"--class-size must be a positive integer, got {args.class_size}")
    out = Path(args.out)
    shown = out.resolve().relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out
    command = "make bench" + (" ARGS=--quick" if args.quick else "") + (
        f" OUT={shown}" if str(shown) != "benchmarks/out" else "")
    run(out, quick=args.quick, sections=tuple(args.only), class_size=args.class_size, command=command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
