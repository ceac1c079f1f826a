"""Timing harness: warm-up, device sync, interleaved repeats, median/IQR/min, a noise warning.

Times are seconds per call. Compare variants with `compare` (interleaved A B A B ...) and state results as
ratios from the same run (`speedup`): separate runs on a shared machine can disagree by more than 1.5x.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
from threadpoolctl import threadpool_limits

from hwopt import arguments, plots

NOISE_THRESHOLD = 0.15  # relative IQR (IQR / median) above which a measurement is called noisy
TARGET_REPEAT_S = 0.010  # auto-picked `number` makes one repeat last at least this long (seconds)
MAX_NUMBER = arguments.LIMITS["calls"]  # upper bound on calls per repeat, auto-picked or given

DEVICES = ("auto", "cpu", "cuda", "mps")


class NoisyMeasurementWarning(UserWarning):
    """The spread of a measurement (IQR / median) is large: treat its numbers with care."""


def _format_time(seconds: float) -> tuple[float, str]:
    """Pick a readable unit for a duration in seconds: (value, unit)."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if abs(seconds) >= scale:
            return seconds / scale, unit
    return seconds / 1e-9, "ns"


@dataclass(frozen=True)
class Measurement:
    """Timings of one function: `times_s` holds seconds per call, one value per repeat."""

    label: str
    times_s: tuple[float, ...]
    number: int = 1  # calls per repeat
    device: str = "cpu"

    def __post_init__(self):
        arguments.text("label", self.label, allow_empty=True)
        times = tuple(float(t) for t in arguments.finite_array("times_s", self.times_s, ndim=1, minimum=0))
        arguments.count("number", self.number, "calls")
        _check_device(self.device)
        object.__setattr__(self, "times_s", times)

    @property
    def repeats(self) -> int:
        """How many repeats were timed."""
        return len(self.times_s)

    @property
    def median_s(self) -> float:
        """Median seconds per call."""
        return statistics.median(self.times_s)

    @property
    def q1_s(self) -> float:
        """First quartile, seconds per call (linear interpolation, as numpy's default)."""
        return quantile(self.times_s, 0.25)

    @property
    def q3_s(self) -> float:
        """Third quartile, seconds per call."""
        return quantile(self.times_s, 0.75)

    @property
    def iqr_s(self) -> float:
        """Interquartile range (q3 - q1), seconds."""
        return self.q3_s - self.q1_s

    @property
    def min_s(self) -> float:
        """Fastest repeat, seconds per call."""
        return min(self.times_s)

    @property
    def median_ms(self) -> float:
        """Median milliseconds per call."""
        return self.median_s * 1e3

    @property
    def iqr_ms(self) -> float:
        """Interquartile range, milliseconds."""
        return self.iqr_s * 1e3

    @property
    def min_ms(self) -> float:
        """Fastest repeat, milliseconds per call."""
        return self.min_s * 1e3

    @property
    def relative_iqr(self) -> float:
        """IQR / median (0 = perfectly steady); inf when the median is 0."""
        median = self.median_s
        return self.iqr_s / median if median > 0 else (0.0 if self.iqr_s == 0 else math.inf)

    @property
    def is_noisy(self) -> bool:
        """True when relative_iqr > NOISE_THRESHOLD."""
        return self.relative_iqr > NOISE_THRESHOLD

    def __str__(self) -> str:
        value, unit = _format_time(self.median_s) if self.median_s > 0 else (0.0, "ms")
        scale = value / self.median_s if self.median_s > 0 else 1e3
        digits = max(0, 2 - math.floor(math.log10(value))) if value > 0 else 2  # 3 significant digits
        name = f"{self.label}: " if self.label else ""
        return (
            f"{name}{value:.{digits}f} {unit} median (IQR {self.iqr_s * scale:.{digits}f} {unit}, "
            f"min {self.min_s * scale:.{digits}f} {unit}, {self.repeats}x{self.number} calls)"
        )


def quantile(values: Sequence[float], q: float) -> float:
    """Quantile q in [0, 1] of values, linear interpolation between order statistics (numpy's default)."""
    q = arguments.between("q", q, 0, 1)
    ordered = sorted(arguments.finite_array("values", values, ndim=1).tolist())
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _check_device(device) -> tuple[str, str]:
    """(name, base) of a device name such as 'cpu', 'cuda' or 'cuda:1', not asking whether it is present."""
    is_torch_device = type(device).__module__ == "torch" and type(device).__name__ == "device"
    name = str(device).strip().lower() if isinstance(device, str) or is_torch_device else ""
    base, _, index = name.partition(":")
    if base not in DEVICES or (":" in name and (base != "cuda" or not index.isdigit())):
        choices = ", ".join(map(repr, DEVICES))
        raise ValueError(f"device must be one of {choices} (or 'cuda:N'); got {device!r}")
    return name, base


DEVICE_ENV = "HWOPT_DEVICE"  # set (cpu, cuda, mps): what 'auto' means, e.g. for a recorded run of the lessons


def resolve_device(device="auto") -> str:
    """'auto' -> $HWOPT_DEVICE if set, else 'cuda' if available, else 'mps' if available, else 'cpu';
    checks an explicit choice."""
    name, base = _check_device(device)
    if base == "auto" and os.environ.get(DEVICE_ENV, "").strip():
        chosen = os.environ[DEVICE_ENV]
        try:
            auto = _check_device(chosen)[1] == "auto"
        except ValueError:
            auto = True
        if auto:
            raise ValueError(f"${DEVICE_ENV} must name a device (cpu, cuda, cuda:N or mps); got {chosen!r}")
        return resolve_device(chosen)
    mps_ok = bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()
    if base == "auto":
        return "cuda" if torch.cuda.is_available() else "mps" if mps_ok else "cpu"
    if base == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} requested but torch.cuda.is_available() is False here")
    if base == "mps" and not mps_ok:
        raise ValueError(f"device={device!r} requested but Apple MPS is not available on this machine")
    return name


def sync(device="cpu") -> None:
    """Wait until queued work on `device` has finished (CUDA/MPS run asynchronously; CPU: no-op)."""
    name, _ = _check_device(device)
    if name.startswith("cuda"):
        torch.cuda.synchronize(name if ":" in name else None)
    elif name.startswith("mps"):
        torch.mps.synchronize()


@contextlib.contextmanager
def threads(n: int) -> Iterator[int]:
    """Run the block with `n` threads for torch and BLAS (numpy), restoring the previous settings after."""
    n = arguments.count("n", n, "threads")

    previous = torch.get_num_threads()
    with contextlib.ExitStack() as stack:
        stack.enter_context(threadpool_limits(limits=n, user_api="blas"))
        torch.set_num_threads(n)
        try:
            yield n
        finally:
            torch.set_num_threads(previous)


def _check_common(warmup: int, repeats: int, number: int | None, clock) -> None:
    arguments.count("repeats", repeats, "repeats")
    arguments.count("warmup", warmup, "repeats", minimum=0)
    if number is not None:
        arguments.count("number", number, "calls")
    arguments.function("clock", clock)


def _run(fn: Callable[[], object], number: int, device: str, clock) -> float:
    """Seconds taken by `number` calls of fn, synchronised at the end."""
    sync(device)
    start = clock()
    for _ in range(number):
        fn()
    sync(device)
    return clock() - start


def _settle(fn: Callable[[], object], seconds: float, device: str, clock) -> None:
    """Call fn, untimed, until at least `seconds` have passed."""
    end = clock() + seconds
    while clock() < end:
        fn()
        sync(device)


def _pick_number(fn, device, clock, warmup_times: list[float]) -> int:
    """Calls per repeat so that one repeat lasts >= TARGET_REPEAT_S, from the fastest warm-up call."""
    per_call = min(warmup_times) if warmup_times else _run(fn, 1, device, clock)
    calls = 1
    while per_call <= 0 and calls < MAX_NUMBER:  # below the clock's resolution: time batches of calls
        calls *= 10
        per_call = _run(fn, calls, device, clock) / calls
    if per_call <= 0:
        return MAX_NUMBER
    return max(1, min(MAX_NUMBER, math.ceil(TARGET_REPEAT_S / per_call)))


def _warn_if_noisy(m: Measurement, stacklevel: int) -> None:
    if m.is_noisy:
        warnings.warn(
            f"{m.label or 'measurement'} is noisy: IQR is {m.relative_iqr:.0%} of the median "
            f"(threshold {NOISE_THRESHOLD:.0%}). Other programs may be competing for the machine; "
            "compare variants only within one interleaved run, or raise `repeats`.",
            NoisyMeasurementWarning,
            stacklevel=stacklevel,
        )


def compare(
    fns: Mapping[str, Callable[[], object]],
    *,
    device="cpu",
    warmup: int = 3,
    repeats: int = 15,
    number: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
    settle_s: float = 0.0,
) -> dict[str, Measurement]:
    """Time several zero-argument functions interleaved (A B A B ...): {label: Measurement}, seconds/call.

    settle_s: before each timed repeat, run the function untimed for at least this long. Thread pools (BLAS,
    OpenMP) keep spinning for a while after a call and take cores from whatever runs next; settling for
    longer than that times each function as a program running only it would see it (a pause would instead
    let the machine go cold).
    """
    return _measure(fns, device, warmup, repeats, number, clock, stacklevel=4, settle_s=settle_s)


def _measure(fns, device, warmup, repeats, number, clock, stacklevel: int,
             settle_s: float = 0.0) -> dict[str, Measurement]:
    arguments.instance("fns", fns, Mapping)
    if not fns:
        raise ValueError("fns must be a non-empty mapping {label: zero-argument callable}")
    for label, fn in fns.items():
        arguments.function(f"fns[{label!r}]", fn)
    _check_common(warmup, repeats, number, clock)
    settle_s = arguments.between("settle_s", settle_s, 0, 10)
    device = resolve_device(device)

    warm: dict[str, list[float]] = {label: [] for label in fns}
    for _ in range(warmup):
        for label, fn in fns.items():
            warm[label].append(_run(fn, 1, device, clock))
    numbers = {label: number or _pick_number(fn, device, clock, warm[label]) for label, fn in fns.items()}

    times: dict[str, list[float]] = {label: [] for label in fns}
    for _ in range(repeats):
        for label, fn in fns.items():
            if settle_s:
                _settle(fn, settle_s, device, clock)
            times[label].append(_run(fn, numbers[label], device, clock) / numbers[label])

    results = {
        label: Measurement(str(label), tuple(times[label]), number=numbers[label], device=device)
        for label in fns
    }
    for m in results.values():
        _warn_if_noisy(m, stacklevel)
    return results


def time_fn(
    fn: Callable[[], object],
    *,
    label: str = "",
    device="cpu",
    warmup: int = 3,
    repeats: int = 15,
    number: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Measurement:
    """Time one zero-argument function: warm-up, then `repeats` x `number` calls -> Measurement (s/call)."""
    arguments.function("fn", fn)
    arguments.text("label", label, allow_empty=True)
    measured = _measure({label: fn}, device, warmup, repeats, number, clock, stacklevel=4)
    return measured[label]


def speedup(baseline: Measurement, candidate: Measurement) -> float:
    """How many times faster candidate is than baseline: baseline.median_s / candidate.median_s."""
    arguments.instance("baseline", baseline, Measurement)
    arguments.instance("candidate", candidate, Measurement)
    if candidate.median_s <= 0:
        raise ValueError("candidate median must be > 0 seconds to form a ratio")
    return baseline.median_s / candidate.median_s


def plot_measurements(measurements, ax=None, *, unit: str = "ms"):
    """Horizontal bars of the median per call with IQR whiskers and a min marker; returns the Figure."""
    arguments.instance("measurements", measurements, (Mapping, list, tuple))
    items = list(measurements.values()) if isinstance(measurements, Mapping) else list(measurements)
    if not items or not all(isinstance(m, Measurement) for m in items):
        raise ValueError("measurements must be a non-empty sequence or mapping of Measurement objects")
    arguments.one_of("unit", unit, plots.TIME_UNITS)
    k = plots.TIME_UNITS[unit]
    ax = plots.axes(f"time per call ({unit}), median with IQR", "variant", ax=ax)
    y = range(len(items))
    medians = [m.median_s * k for m in items]
    err = [[(m.median_s - m.q1_s) * k for m in items], [(m.q3_s - m.median_s) * k for m in items]]
    ax.barh(y, medians, xerr=err, color=[plots.color(i) for i in y], alpha=0.8, capsize=4)
    ax.plot([m.min_s * k for m in items], list(y), "k|", markersize=14, label="min")
    ax.set_yticks(list(y), [m.label or f"#{i}" for i, m in enumerate(items)])
    ax.invert_yaxis()
    return plots.finish(ax)
