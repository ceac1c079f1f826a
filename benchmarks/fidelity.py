"""Section 1 and the bandwidth scaling curve: the toolkit's probes vs C STREAM, BLAS sgemm, the FMA peak."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from benchmarks import native, report
from hwopt.machine import bench, probe

MB = 1e6


def stream_array_bytes(quick: bool, llc_bytes: int | None) -> float:
    """Bytes per STREAM array: 8x the last-level cache (quick: 4x; unknown: 32 MiB), at least 128 MB."""
    return max(128 * MB, (4 if quick else 8) * (llc_bytes or 32 * 2**20))


def _rates(bytes_moved: float, times_s) -> list[float]:
    return [bytes_moved / t / 1e9 for t in times_s if t > 0]


def measure(build_dir: Path, *, quick: bool, threads: int, progress=None) -> tuple[dict, list[dict]]:
    """Section 1 rows and notes (probes vs references, interleaved rounds), and its statistics series."""
    rounds = 3 if quick else 6
    llc = probe.last_level_cache_bytes()
    notes: list[str] = []
    rows: list[dict] = []
    exes = {}
    for name in ("stream", "fma_peak"):
        try:
            exes[name] = native.compile_kernel(name, build_dir)
        except native.NativeUnavailable as exc:
            notes.append(f"C reference `{name}` not available: {exc}")
    n = native.stream_elements_for(stream_array_bytes(quick, llc))
    gemm_n = 2048 if quick else 4096
    notes.append(
        f"{threads} threads for every kernel (the probe's torch thread count); STREAM arrays: 3 x "
        f"{n * 8 / MB:,.0f} MB doubles, the probe's the same bytes of floats (last-level cache "
        f"{llc / MB:,.0f} MB); sgemm "
        f"{gemm_n}x{gemm_n} float32; {rounds} interleaved rounds (reference, probe, reference, probe, ...)."
        if llc else f"{threads} threads; {rounds} interleaved rounds.")

    # One value per round and source, each as that tool reports it: STREAM the best of its trials (as STREAM
    # does), the probes their own figure, sgemm and the FMA loop the best of their repeats in the round.
    sources = ("STREAM Triad (C)", "STREAM Copy (C)", "bandwidth probe", "numpy sgemm", "torch sgemm",
               "FLOP/s probe", "FMA peak (C)")
    per_round: dict[str, list[float]] = {k: [] for k in sources}
    a_np, b_np, a_t, b_t = _gemm_inputs(gemm_n)
    fns = {"numpy sgemm": lambda: a_np @ b_np, "torch sgemm": lambda: a_t @ b_t}
    with bench.threads(threads):
        for r in range(rounds):
            if "stream" in exes:
                out = native.run_stream(exes["stream"], n, 4, threads=threads)
                per_round["STREAM Copy (C)"].append(max(_rates(out["copy_bytes"], out["copy_s"])))
                per_round["STREAM Triad (C)"].append(max(_rates(out["triad_bytes"], out["triad_s"])))
            # the probe on arrays of STREAM's bytes: the two differ only in the code that streams them
            array_mb = n * 8 / 2**20
            per_round["bandwidth probe"].append(probe.memory_bandwidth_gbs(device="cpu", size_mb=array_mb))
            res = bench.compare(fns, warmup=1 if r == 0 else 0, repeats=2, number=1)
            for label, m in res.items():
                per_round[label].append(2.0 * gemm_n**3 / m.min_s / 1e9)
            per_round["FLOP/s probe"].append(probe.matmul_flops("fp32", device="cpu", quick=quick) / 1e9)
            if "fma_peak" in exes:
                out = native.run_fma_peak(exes["fma_peak"], 30_000_000 if quick else 60_000_000, 3,
                                          threads=threads)
                per_round["FMA peak (C)"].append(out["flop"] / min(out["times_s"]) / 1e9)
            if progress:
                progress.update(1)

    bandwidths = ("STREAM Triad (C)", "STREAM Copy (C)", "bandwidth probe")
    stats = {k: report.rate_stats(k, v, "GB/s" if k in bandwidths else "GFLOP/s")
             for k, v in per_round.items() if v}

    def row(name, candidate, reference, goal=None, note=""):
        pairs = [c / r for c, r in zip(per_round[candidate], per_round[reference], strict=True)]
        return report.fidelity_row(name, stats[candidate], stats[reference], goal=goal, note=note,
                                   pairs=pairs)

    if "STREAM Triad (C)" in stats:
        rows.append(row("bandwidth probe / STREAM Triad", "bandwidth probe", "STREAM Triad (C)", 0.90))
        rows.append(row("bandwidth probe / STREAM Copy", "bandwidth probe", "STREAM Copy (C)",
                        note="for information: Copy is the easier kernel"))
    else:
        rows.append(report.unavailable_row("bandwidth probe / STREAM Triad", notes[0], goal=0.90,
                                           kind="fidelity"))
    best, other = sorted(("numpy sgemm", "torch sgemm"), key=lambda k: -stats[k]["median"])
    rows.append(row(f"FLOP/s probe / best sgemm ({best})", "FLOP/s probe", best, 0.90))
    rows.append(row(f"{other} / {best}", other, best, note="for information"))
    if "FMA peak (C)" in stats:
        rows.append(row("FLOP/s probe / FMA peak of the cores", "FLOP/s probe", "FMA peak (C)",
                        note="for information: what no GEMM reaches (loads, packing)"))
        rows.append(row(f"{best} / FMA peak of the cores", best, "FMA peak (C)", note="for information"))
    notes.append("per round, each tool's own figure: STREAM the best of its 4 trials (as STREAM reports), "
                 "the probes what they return, sgemm the faster of 2 calls, the FMA loop the best of 3; "
                 "ratio = median over rounds / median over rounds, brackets: IQR of the per-round ratios")
    return {"rows": rows, "notes": notes}, list(stats.values())


def _gemm_inputs(n: int):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    return a, b, torch.from_numpy(a.copy()), torch.from_numpy(b.copy())


def _point(source: str, kernel: str, bytes_per_array: int, stats: dict) -> dict:
    return {"source": source, "kernel": kernel, "bytes_per_array": bytes_per_array,
            "working_set_bytes": 3 * bytes_per_array, "gbs": stats["median"], "q1": stats["q1"],
            "q3": stats["q3"], "relative_iqr": stats["relative_iqr"]}


def sweep_sizes(quick: bool) -> list[int]:
    """Bytes per array for the bandwidth sweep: 4 KiB (L1) to 1 GiB (DRAM), x4 steps (x16 in quick mode)."""
    step, size, top = (16, 4 * 2**10, 256 * 2**20) if quick else (4, 4 * 2**10, 2**30)
    sizes = []
    while size <= top:
        sizes.append(size)
        size *= step
    return sizes


def bandwidth_sweep(build_dir: Path, *, quick: bool, threads: int) -> tuple[list[dict], list[str]]:
    """GB/s vs bytes per array, from L1-sized to DRAM-sized: C STREAM Triad/Copy and the toolkit's probe."""
    notes, series = [], []
    try:
        exe = native.compile_kernel("stream", build_dir)
    except native.NativeUnavailable as exc:
        exe = None
        notes.append(f"C STREAM curve not measured: {exc}")
    trials = 2 if quick else 7
    with bench.threads(threads):
        for size in sweep_sizes(quick):
            n = native.stream_elements_for(size)
            if exe is not None:
                inner = max(1, int(200 * MB // (24 * n)))  # each timed repeat moves >= ~200 MB
                out = native.run_stream(exe, n, trials, threads=threads, inner=inner)
                for kernel in ("triad", "copy"):
                    rates = _rates(out[f"{kernel}_bytes"], out[f"{kernel}_s"])
                    stats = report.rate_stats(kernel, rates, "GB/s")
                    series.append(_point("STREAM (C)", kernel, n * 8, stats))
            values = [probe.memory_bandwidth_gbs(device="cpu", size_mb=size / 2**20, repeats=5)
                      for _ in range(trials)]
            series.append(_point("toolkit probe (torch)", "triad", size,
                                 report.rate_stats("probe", values, "GB/s")))
    notes.append("toolkit probe points: each is the probe's own best-of-5 figure, median over "
                 f"{trials} calls; the probe's default array size is "
                 f"{probe.default_array_mb('cpu'):,.0f} MiB per array")
    return series, notes
