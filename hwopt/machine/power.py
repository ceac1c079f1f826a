"""Energy this machine reports (lesson 12): Linux RAPL counters for CPU packages, NVML for NVIDIA GPUs.

RAPL (/sys/class/powercap/intel-rapl:N/energy_uj; AMD Zen packages appear there too) counts microjoules per
package and wraps at max_energy_range_uj; Linux lets only root read it since 5.10 (CVE-2020-8694), and
virtual machines rarely expose it. NVML (libnvidia-ml, installed with the NVIDIA driver, loaded here with
ctypes) gives each GPU's energy in millijoules since the driver loaded (Volta and later). `meters()` lists
the counters this process can read; `absent_reason()` says why there are none.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hwopt import arguments

__all__ = ["POWERCAP", "Meter", "EnergyReading", "rapl_meters", "nvml_meters", "meters", "absent_reason",
           "measure"]

POWERCAP = Path("/sys/class/powercap")


@dataclass(frozen=True)
class Meter:
    """One energy counter: read_j() returns its joules (from any origin), wrapping at wrap_j (None: never)."""

    name: str
    read_j: Callable[[], float]
    wrap_j: float | None = None

    def __post_init__(self):
        arguments.text("name", self.name)
        arguments.function("read_j", self.read_j)
        if self.wrap_j is not None:
            arguments.positive("wrap_j", self.wrap_j)

    def joules_between(self, start_j: float, end_j: float) -> float:
        """Joules counted from start_j to end_j, one wrap of the counter allowed."""
        used = arguments.positive("end_j", end_j, allow_zero=True) - arguments.positive("start_j", start_j,
                                                                                         allow_zero=True)
        return used + self.wrap_j if used < 0 and self.wrap_j else used


def _read_number(path: Path) -> float:
    return float(path.read_text().strip())


def rapl_meters(root=POWERCAP) -> tuple[list[Meter], str]:
    """A Meter per readable RAPL package under root, and why there is none ('' when there are some)."""
    root = Path(arguments.instance("root", root, (str, Path)))
    zones = sorted(p for p in root.glob("*rapl:*") if p.name.count(":") == 1) if root.is_dir() else []
    if not zones:
        return [], f"no RAPL counters under {root} (not Linux, or the machine, often a VM, exposes none)"
    found, refused = [], []
    for zone in zones:
        energy = zone / "energy_uj"
        try:
            _read_number(energy)
        except (OSError, ValueError):
            refused.append(zone.name)
            continue
        name = (zone / "name").read_text().strip() if (zone / "name").is_file() else zone.name
        limit = zone / "max_energy_range_uj"
        wrap = _read_number(limit) / 1e6 if limit.is_file() else None
        found.append(Meter(f"RAPL {name}", lambda energy=energy: _read_number(energy) / 1e6, wrap))
    reason = "" if found else (f"RAPL counters {', '.join(refused)} under {root} are not readable by this "
                               "user (Linux lets only root read them since 5.10)")
    return found, reason


def nvml_meters(library: str = "libnvidia-ml.so.1") -> tuple[list[Meter], str]:
    """A Meter per NVIDIA GPU that reports its energy through NVML, and why there is none."""
    arguments.text("library", library)
    try:
        nvml = ctypes.CDLL(library)
    except OSError:
        return [], f"no NVML ({library} is not installed: no NVIDIA driver here)"
    if nvml.nvmlInit_v2() != 0:
        return [], "NVML is installed but does not start (no NVIDIA GPU, or the driver is not loaded)"
    count = ctypes.c_uint(0)
    nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    found = []
    for index in range(count.value):
        handle = ctypes.c_void_p()
        if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
            continue

        def read_j(handle=handle) -> float:
            millijoules = ctypes.c_ulonglong(0)
            if nvml.nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(millijoules)) != 0:
                raise OSError("NVML stopped answering nvmlDeviceGetTotalEnergyConsumption")
            return millijoules.value / 1e3

        try:
            read_j()
        except OSError:
            continue
        found.append(Meter(f"NVML GPU {index}", read_j))
    return found, "" if found else "NVML reports no GPU energy counter (GPUs older than Volta have none)"


def meters() -> list[Meter]:
    """Every energy counter this process can read: RAPL packages, then NVIDIA GPUs."""
    return rapl_meters()[0] + nvml_meters()[0]


def absent_reason() -> str:
    """Why this machine reports no energy ('' when it does): one reason per kind of counter."""
    (rapl, why_rapl), (gpus, why_nvml) = rapl_meters(), nvml_meters()
    return "" if rapl or gpus else f"{why_rapl}; {why_nvml}"


@dataclass(frozen=True)
class EnergyReading:
    """Joules each counter counted while a function ran, and the seconds it ran."""

    joules: dict[str, float]
    seconds: float

    @property
    def total_j(self) -> float:
        """Joules of every counter together."""
        return sum(self.joules.values())

    @property
    def watts(self) -> float:
        """Mean power over the run: total_j / seconds."""
        return self.total_j / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        parts = ", ".join(f"{name} {j:,.2f} J" for name, j in self.joules.items())
        return f"{self.total_j:,.2f} J in {self.seconds:.2f} s = {self.watts:,.1f} W ({parts})"


def measure(fn: Callable[[], object], counters: list[Meter] | None = None) -> EnergyReading | None:
    """Run fn once and read the counters before and after; None when there is no counter to read."""
    arguments.function("fn", fn)
    if counters is not None:
        arguments.instance("counters", counters, (list, tuple))
    counters = meters() if counters is None else list(counters)
    for i, meter in enumerate(counters):
        arguments.instance(f"counters[{i}]", meter, Meter)
    if not counters:
        return None
    before = [m.read_j() for m in counters]
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    after = [m.read_j() for m in counters]
    used = {m.name: m.joules_between(b, a) for m, b, a in zip(counters, before, after, strict=True)}
    return EnergyReading(used, seconds)
