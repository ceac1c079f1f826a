"""Live ceilings of the learner's machine: memory bandwidth (GB/s) and peak matmul FLOP/s per precision.

Bandwidth is STREAM Triad done by torch, a = b + 3*c, counted as STREAM does (3 arrays read or written once,
no write-allocate), on arrays far larger than the last-level cache. Matmul FLOP/s count 2*n^3 per n x n
product and keep the best of the available libraries (torch, and numpy's BLAS on CPU) over a size sweep that
stops at a time budget, so slow precisions (fp16 on most CPUs) still finish in seconds. Precisions are
hwopt.formats names ('fp32', 'bf16', ...); torch dtypes appear only where torch is called.

`ceilings(device)` is the one probe the lessons use: measured once, recorded under toolchain.cache_dir(), and
reused by every cell and every lesson on this machine for CEILINGS_MAX_AGE_S, so that they all reason from the
same numbers (separate probes of one machine differ by tens of percent on a busy one); the record says when
and how it was measured.
"""

from __future__ import annotations

import json
import os
import platform
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
from tqdm.auto import tqdm

from hwopt import arguments, formats, roofline
from hwopt.machine import bench, toolchain

CPU_CACHE_DIR = "/sys/devices/system/cpu/cpu0/cache"  # Linux sysfs: one index*/ folder per cache of cpu0
DEFAULT_PRECISIONS = {
    "cpu": ("fp32", "bf16", "fp16", "int8"),
    "cuda": ("fp32", "bf16", "fp16", "int8"),
    "mps": ("fp32", "fp16"),
}
MATMUL_PRECISIONS = ("fp32", "fp64", "fp16", "bf16", "int8")  # what _matmul_fns can multiply
BANDWIDTH_PRECISIONS = ("fp32", "fp64", "fp16", "bf16")  # element types of the bandwidth probe's arrays
MATMUL_BUDGET_S = {True: 3.0, False: 15.0}  # seconds per precision for the size sweep: quick, full
REPEATS = {True: 5, False: 7}  # timed repeats per size: quick, full
KEEP_LIBRARY = 0.8  # from n=512 on, a library slower than this fraction of the best is not tried larger
MATMUL_MIN_N = 128  # first size of the sweep
WARMUP = 2  # warm-up calls per library and size; the fastest also sets the calls per repeat
CEILINGS_MAX_AGE_S = 3600.0  # a recorded probe is reused this long, then measured again
CEILINGS_FILE = "ceilings.json"  # under toolchain.cache_dir(): this machine's recorded probes
MATMUL_MAX_N = {
    "cpu": {True: 2048, False: 4096},
    "cuda": {True: 8192, False: 16384},
    "mps": {True: 4096, False: 8192},
}


class UnsupportedPrecision(ValueError):
    """This precision has no matmul path on this device."""


def _element_bytes(precision: str) -> int:
    """Bytes of one element of a format ('fp32' -> 4)."""
    return formats.get(precision).bits // 8


def _device_kind(device) -> str:
    return bench.resolve_device(device).split(":")[0]


def _quiet_time(fn, *, device, warmup, repeats, clock) -> bench.Measurement:
    """bench.time_fn without the noise warning: probes keep the best repeat, which noise does not inflate."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bench.NoisyMeasurementWarning)
        return bench.time_fn(fn, device=device, warmup=warmup, repeats=repeats, clock=clock)


def cache_sizes_bytes(root: str | Path = CPU_CACHE_DIR) -> dict[str, int]:
    """Bytes of data/unified CPU cache per level, all instances together ({'L1': ..., 'L3': ...}; {} unknown).

    Read from Linux sysfs (cpu0's caches); a cache shared by k of the machine's n CPUs counts n / k times.
    """
    if isinstance(arguments.instance("root", root, (str, Path)), str):
        arguments.text("root", root)
    sizes: dict[str, int] = {}
    n_cpus = os.cpu_count() or 1
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    for index in sorted(Path(root).glob("index*")):
        try:
            level, kind, size, shared = (
                (index / name).read_text().strip() for name in ("level", "type", "size", "shared_cpu_list")
            )
            value = int(size[:-1]) * units[size[-1]] if size[-1:] in units else int(size)
            sharing = _count_cpus(shared)
        except (OSError, ValueError):
            continue
        if kind != "Instruction":
            sizes[f"L{level}"] = value * max(1, n_cpus // max(1, sharing))
    return sizes


def _count_cpus(cpu_list: str) -> int:
    """Number of CPUs in a Linux cpu list like '0-1,4'."""
    count = 0
    for part in cpu_list.split(","):
        lo, _, hi = part.partition("-")
        count += int(hi) - int(lo) + 1 if hi else 1
    return count


def last_level_cache_bytes(root: str | Path = CPU_CACHE_DIR) -> int | None:
    """Bytes of the largest CPU cache level (the last level), all instances together; None when unknown."""
    return max(cache_sizes_bytes(root).values(), default=None)


def default_array_mb(device="cpu") -> float:
    """Per-array size (MB) for the bandwidth probe: 4x the last-level cache, within 64..512 MB (GPU: 1 GB)."""
    kind = _device_kind(device)
    if kind == "cuda":
        free, _ = torch.cuda.mem_get_info()
        return float(min(1024, free / 8 / 2**20))
    if kind == "mps":
        return 512.0
    llc = last_level_cache_bytes() or 32 * 2**20
    return float(min(512, max(64, 4 * llc / 2**20)))


def triad_bytes(n_elements: int, precision="fp32") -> int:
    """Bytes STREAM counts for one Triad a = b + s*c: 3 arrays x n_elements x bytes per element."""
    n_elements = arguments.count("n_elements", n_elements, "elements")
    return 3 * n_elements * _element_bytes(formats.name(precision, supported=BANDWIDTH_PRECISIONS))


def memory_bandwidth_gbs(
    device="cpu",
    *,
    size_mb: float | None = None,
    repeats: int = 10,
    precision="fp32",
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Best STREAM-Triad bandwidth in GB/s over `repeats`, with torch.add(b, c, alpha=3, out=a).

    size_mb is per array (three arrays); default: 4x the last-level cache (CPU) or 1 GB (GPU).
    """
    device = bench.resolve_device(device)
    precision = formats.name(precision, supported=BANDWIDTH_PRECISIONS)
    if size_mb is None:
        size_mb = default_array_mb(device)
    size_mb = arguments.positive("size_mb", size_mb, maximum=arguments.LIMITS["megabytes"])
    arguments.count("repeats", repeats, "repeats")
    arguments.function("clock", clock)
    n = max(1, int(size_mb * 2**20) // _element_bytes(precision))
    tdtype = getattr(torch, formats.torch_dtype(precision))
    a = torch.zeros(n, dtype=tdtype, device=device)  # zeros/full touch every page before timing
    b = torch.full((n,), 1.0, dtype=tdtype, device=device)
    c = torch.full((n,), 2.0, dtype=tdtype, device=device)
    m = _quiet_time(
        lambda: torch.add(b, c, alpha=3, out=a), device=device, warmup=2, repeats=repeats, clock=clock
    )
    return triad_bytes(n, precision) / m.min_s / 1e9


def _matmul_fns(precision: str, device: str, n: int) -> dict[str, Callable[[], object]]:
    """Zero-argument functions, one per library, multiplying two n x n matrices of `precision` on `device`."""
    kind = device.split(":")[0]
    if precision == "int8":
        if kind == "cuda":
            a = torch.randint(-64, 64, (n, n), dtype=torch.int8, device=device)
            b = torch.randint(-64, 64, (n, n), dtype=torch.int8, device=device)
            return {"torch._int_mm": lambda: torch._int_mm(a, b)}
        if kind != "cpu":
            raise UnsupportedPrecision(f"precision 'int8' has no matmul probe on device {device!r}")
        with warnings.catch_warnings():  # torch.ao.quantization warns that it is deprecated
            warnings.simplefilter("ignore")

            layer = DynamicLinear(n, n, dtype=torch.qint8)
            layer.set_weight_bias(
                torch.quantize_per_tensor(torch.rand(n, n) - 0.5, 0.01, 0, torch.qint8), None
            )
        x = torch.rand(n, n)
        return {"torch dynamic int8 Linear": lambda: layer(x)}
    tdtype = getattr(torch, formats.torch_dtype(precision))
    a = torch.rand(n, n, device=device).to(tdtype)
    b = torch.rand(n, n, device=device).to(tdtype)
    fns: dict[str, Callable[[], object]] = {"torch": lambda: torch.matmul(a, b)}
    if kind == "cpu" and precision in ("fp32", "fp64"):
        an, bn = a.numpy(), b.numpy()
        fns["numpy"] = lambda: an @ bn
    return fns


def matmul_flops(
    precision="fp32",
    device="cpu",
    n: int | None = None,
    *,
    quick: bool = True,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Best matmul FLOP/s (2*n^3 per product) for `precision`; n=None sweeps n = 128, 256, ... within
    budget_s."""
    device = bench.resolve_device(device)
    precision = formats.name(precision)
    if precision not in MATMUL_PRECISIONS:
        raise UnsupportedPrecision(f"precision {precision!r} has no matmul probe; probed: "
                                   f"{', '.join(MATMUL_PRECISIONS)}")
    quick = arguments.boolean("quick", quick)
    arguments.function("clock", clock)
    if budget_s is not None:
        arguments.positive("budget_s", budget_s, maximum=arguments.LIMITS["seconds"])
    if precision == "fp64" and device.startswith("mps"):
        raise UnsupportedPrecision("precision 'fp64' is not supported on MPS")
    if n is not None:
        n = arguments.count("n", n, "dimension")
        rates = _flops_by_library(
            _matmul_fns(precision, device, n), device, n, WARMUP, REPEATS[bool(quick)], clock
        )
        return max(rates.values())
    if budget_s is None:
        budget_s = MATMUL_BUDGET_S[bool(quick)]
    n_max, repeats = MATMUL_MAX_N[device.split(":")[0]][bool(quick)], REPEATS[bool(quick)]
    start, size, best, warmup = clock(), MATMUL_MIN_N, 0.0, WARMUP
    fns = _matmul_fns(precision, device, size)
    while True:
        rates = _flops_by_library(fns, device, size, warmup, repeats, clock)
        best = max(best, *rates.values())
        if size * 2 > n_max or clock() - start + 2.0 * (2 * size) ** 3 / best > budget_s:
            return best  # even one call of the next size at the best rate so far would overrun
        keep = {
            lib for lib, rate in rates.items() if rate >= KEEP_LIBRARY * max(rates.values()) or size < 512
        }
        fns = {lib: fn for lib, fn in _matmul_fns(precision, device, 2 * size).items() if lib in keep}
        trial_s = sum(bench._run(fn, 1, device, clock) for fn in fns.values())  # also the first warm-up
        if clock() - start + trial_s * (repeats + WARMUP - 1) > budget_s:
            return best  # one call per library says the next size would overrun the budget
        size, warmup = 2 * size, WARMUP - 1


def _flops_by_library(
    fns: dict[str, Callable[[], object]], device: str, n: int, warmup: int, repeats: int, clock
) -> dict[str, float]:
    """Best FLOP/s (2*n^3 per call) of each library's n x n matmul, timed interleaved."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bench.NoisyMeasurementWarning)
        measured = bench.compare(fns, device=device, warmup=warmup, repeats=repeats, clock=clock)
    return {lib: 2.0 * n**3 / m.min_s for lib, m in measured.items()}


@dataclass(frozen=True)
class Ceilings:
    """Measured ceilings of one device: bandwidth (GB/s) and peak FLOP/s per precision (formats names).

    array_mb: the size of each of the bandwidth probe's three arrays; measured_at: when the bandwidth was
    measured (seconds since the epoch, 0 unknown); reused: read back from this machine's record (a matmul
    precision the record lacked measured now and added to it).
    """

    device: str
    bandwidth_gbs: float
    flops_by_precision: dict[str, float] = field(default_factory=dict)
    threads: int = 1
    quick: bool = True
    array_mb: float = 0.0
    measured_at: float = 0.0
    reused: bool = False

    def peak_flops(self, precision="fp32") -> float:
        """Measured peak FLOP/s for precision."""
        key = formats.name(precision)
        if key not in self.flops_by_precision:
            raise ValueError(f"precision {key!r} was not measured; measured: "
                             f"{sorted(self.flops_by_precision)}")
        return self.flops_by_precision[key]

    def ridge_point(self, precision="fp32") -> float:
        """FLOP/byte where this device turns from memory- to compute-bound for precision."""
        return roofline.ridge_point(self.peak_flops(precision), self.bandwidth_gbs)

    def to_ceiling(self, precision="fp32", label: str | None = None) -> roofline.Ceiling:
        """This device's measured roof for precision, ready for roofline.plot_roofline."""
        key = formats.name(precision)
        if label is not None:
            arguments.text("label", label)
        return roofline.Ceiling(
            label or f"this {self.device} {key}", self.peak_flops(key), self.bandwidth_gbs, True
        )

    def to_dict(self) -> dict:
        """Plain JSON-ready dict, with ridge points per precision."""
        return {
            "device": self.device, "threads": self.threads, "quick": self.quick,
            "bandwidth_gbs": self.bandwidth_gbs, "flops_by_precision": dict(self.flops_by_precision),
            "ridge_point_by_precision": {d: self.ridge_point(d) for d in self.flops_by_precision},
            "array_mb": self.array_mb, "measured_at": self.measured_at,
        }  # fmt: skip

    def method(self) -> str:
        """How these ceilings were measured, in words (the reason another figure of this machine differs)."""
        arrays = f"three {self.array_mb:,.0f} MB arrays" if self.array_mb else "three arrays"
        sizes = f"n = {MATMUL_MIN_N} up to {MATMUL_MAX_N[self.device.split(':')[0]][self.quick]}"
        libraries = "torch and numpy" if self.device == "cpu" else "torch"
        return (f"bandwidth: STREAM Triad a = b + 3c on {arrays}, far larger than the cache, counted as "
                f"STREAM counts (3 arrays moved; a kernel that only reads can pass it, as writing an array "
                f"first reads it into the cache); matmul: the best of {libraries} over {sizes}; "
                f"{self.threads} thread{'s' if self.threads > 1 else ''}")

    def provenance(self, now: float | None = None) -> str:
        """When these ceilings were measured and by which method, and how to measure them again."""
        now = time.time() if now is None else arguments.positive("now", now)
        when = "measured just now"
        if self.reused and self.measured_at:
            age_min = max(0.0, now - self.measured_at) / 60
            when = (f"the bandwidth measured {age_min:.0f} min ago on this machine by an earlier cell or "
                    "lesson, and reused so that every lesson reasons from the same numbers")
        return (f"{when} ({self.method()}); `probe.ceilings(device, fresh=True)` measures again")

    def __str__(self) -> str:
        lines = [f"{self.device} ({self.threads} threads): memory bandwidth {self.bandwidth_gbs:.1f} GB/s"]
        for d, f in self.flops_by_precision.items():
            lines.append(f"  {d:>8}: {f / 1e9:8.1f} GFLOP/s   ridge {self.ridge_point(d):6.2f} FLOP/byte")
        return "\n".join(lines)


def probe(
    device="cpu",
    precisions: Iterable | None = None,
    quick: bool = False,
    *,
    threads: int | None = None,
    progress: bool = False,
) -> Ceilings:
    """Measure bandwidth and matmul FLOP/s per precision (quick: ~2 s each; full: up to ~12 s each)."""
    device = bench.resolve_device(device)
    kind = device.split(":")[0]
    explicit = precisions is not None
    if explicit and (isinstance(precisions, str) or not isinstance(precisions, list | tuple)):
        raise ValueError(f"precisions must be None or a list like ['fp32', 'int8']; got {precisions!r}")
    names = [formats.name(d, f"precisions[{i}]")
             for i, d in enumerate(precisions if explicit else DEFAULT_PRECISIONS[kind])]
    if unprobed := [d for d in names if d not in MATMUL_PRECISIONS]:
        raise UnsupportedPrecision(f"precisions {unprobed} have no matmul probe; probed: "
                                   f"{', '.join(MATMUL_PRECISIONS)}")
    quick = arguments.boolean("quick", quick)
    progress = arguments.boolean("progress", progress)
    if threads is not None:
        arguments.count("threads", threads, "threads")
        with bench.threads(threads):
            return probe(device, names if explicit else None, quick, progress=progress)
    array_mb = default_array_mb(device)
    bandwidth = memory_bandwidth_gbs(device, size_mb=array_mb, repeats=8 if quick else 20)
    flops: dict[str, float] = {}
    steps = names
    if progress:
        steps = tqdm(names, desc="matmul FLOP/s", leave=False)
    for d in steps:
        try:
            flops[d] = matmul_flops(d, device, quick=quick)
        except (UnsupportedPrecision, RuntimeError, ImportError, AttributeError):
            if explicit:
                raise
    return Ceilings(device, bandwidth, flops, torch.get_num_threads() if kind == "cpu" else 1, bool(quick),
                    array_mb, time.time())


def _machine_key(device: str) -> str:
    """What must match for a recorded probe to describe this run: host, CPU, device, threads, torch."""
    gpu = torch.cuda.get_device_name(device) if device.startswith("cuda") else ""
    return " | ".join(str(part) for part in (
        platform.node(), platform.machine(), os.cpu_count(), last_level_cache_bytes(), device, gpu,
        torch.get_num_threads(), torch.__version__))


def _records(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none yet, or cut short by a crash: measure again
        return {}


def ceilings(device="cpu", precisions: tuple | list | None = ("fp32",), *, quick: bool = True,
             fresh: bool = False, max_age_s: float = CEILINGS_MAX_AGE_S) -> Ceilings:
    """This machine's ceilings for precisions, measured once and reused by every cell and lesson.

    A record of this machine (same host, CPU, device, threads and torch) younger than max_age_s seconds is
    returned as it is (reused=True), a matmul precision it lacks measured and added; otherwise probe()
    measures (quick: seconds) and replaces the record. fresh=True, or quick=False (the full probe), always
    measures. precisions=None: the device's defaults (DEFAULT_PRECISIONS), those without a matmul path here
    left out instead of raising.
    """
    device = bench.resolve_device(device)
    explicit = precisions is not None
    if explicit and (isinstance(precisions, str) or not isinstance(precisions, list | tuple)
                     or not precisions):
        raise ValueError(f"precisions must be None or a non-empty list like ['fp32', 'int8']; "
                         f"got {precisions!r}")
    names = [formats.name(d, f"precisions[{i}]")
             for i, d in enumerate(precisions if explicit else DEFAULT_PRECISIONS[device.split(":")[0]])]
    quick = arguments.boolean("quick", quick)
    fresh = arguments.boolean("fresh", fresh)
    max_age_s = arguments.positive("max_age_s", max_age_s, allow_zero=True,
                                   maximum=arguments.LIMITS["seconds"])
    path, key = toolchain.cache_dir() / CEILINGS_FILE, _machine_key(device)
    record = _records(path).get(key)
    if record and not fresh and quick and time.time() - record.get("measured_at", 0) <= max_age_s:
        flops, tried = dict(record["flops_by_precision"]), set(record.get("unsupported", []))
        missing = [d for d in names if d not in flops and (explicit or d not in tried)]
        for d in missing:
            try:
                flops[d] = matmul_flops(d, device, quick=True)
            except (UnsupportedPrecision, RuntimeError, ImportError, AttributeError):
                if explicit:
                    raise
                tried.add(d)
        fields = {k: record[k] for k in ("bandwidth_gbs", "threads", "quick", "array_mb", "measured_at")}
        measured = Ceilings(device, flops_by_precision=flops, reused=True, **fields)
    else:
        measured, missing = probe(device, names if explicit else None, quick), names
        tried = {d for d in names if d not in measured.flops_by_precision}
    if missing:
        records = _records(path)
        records[key] = {**{k: v for k, v in measured.to_dict().items() if k != "ridge_point_by_precision"},
                        "unsupported": sorted(tried)}
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(records, indent=1), encoding="utf-8")
        partial.replace(path)  # atomic: lessons running at once never read half a file
    asked = {d: measured.flops_by_precision[d] for d in names if d in measured.flops_by_precision}
    return replace(measured, flops_by_precision=asked)
