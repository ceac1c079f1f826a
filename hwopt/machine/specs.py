"""The chip table (hwopt/data/chips.csv): datasheet peaks per number format, memory, bandwidth, TDP, price.

Units are in the column names. Peaks are dense (no sparsity), in TFLOPS (TOPS for integers), one column per
format: the column of a format is `formats.get(name).peak_column`. fp32 has two: fp32_tflops on the vector
units (SIMD, CUDA cores, shaders) and fp32_matrix_tflops on matrix units that take fp32 (AMD CDNA, AWS
Neuron), which is where a matmul runs when the vendor lists it. memory_gib is GiB (2**30 bytes): vendors' "GB"
of DRAM or HBM capacity are binary, the memory chips come in powers of two. bandwidth_gbs is GB/s (1e9 bytes
per second), as vendors compute it from transfer rates. An empty cell means the vendor gives no figure.
interconnect_gbs is the chip's link to other chips of its kind (NVLink, PCIe where a card has nothing faster,
Google's ICI, AMD's Infinity Fabric), GB/s per chip with both directions summed, as vendors quote it: a chip
sends at half of it (`interconnect_one_way_gbs`).

Every row carries its source URL and the date it was read; every price and interconnect figure its own URL
and date. Derived numbers
(FLOP/s from TFLOPS, bytes from GiB, ridge point, price per chip from an instance's price) are computed here,
never typed into the table.
"""

from __future__ import annotations

import csv
import datetime as dt
import difflib
import math
import re
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path

from hwopt import arguments, formats, roofline
from hwopt.data import DATA_DIR

CHIPS_CSV = DATA_DIR / "chips.csv"
KINDS = ("cpu", "gpu", "tpu", "accelerator")
PEAK_COLUMNS = ("fp32_tflops", "fp32_matrix_tflops", "fp16_tflops", "bf16_tflops", "fp8_tflops",
                "mxfp4_tflops", "nvfp4_tflops", "int8_tops", "int4_tops")
# A format column's twin on matrix units, where the table has one (a matmul runs there when it is given).
MATRIX_COLUMNS = {"fp32_tflops": "fp32_matrix_tflops"}
UNPACKED_TO = ("int8", "fp16", "bf16", "fp32")  # where sub-byte integer weights are computed, best first
NUMBER_COLUMNS = (*PEAK_COLUMNS, "memory_gib", "bandwidth_gbs", "interconnect_gbs", "tdp_w",
                  "instance_price_per_hour_usd", "chips_per_instance")
DATE_COLUMNS = ("read_date", "price_read_date", "interconnect_read_date")


@dataclass(frozen=True)
class Chip:
    """One row of hwopt/data/chips.csv; peaks are dense TFLOPS/TOPS, None where the vendor gives no figure."""

    name: str
    vendor: str
    kind: str
    segment: str
    fp32_tflops: float | None
    fp32_matrix_tflops: float | None
    fp16_tflops: float | None
    bf16_tflops: float | None
    fp8_tflops: float | None
    mxfp4_tflops: float | None
    nvfp4_tflops: float | None
    int8_tops: float | None
    int4_tops: float | None
    memory_gib: float | None
    bandwidth_gbs: float
    interconnect: str  # the chip-to-chip link: 'NVLink 4', 'PCIe 4.0 x16', 'ICI', 'Infinity Fabric', ...
    interconnect_gbs: float | None  # its GB/s per chip, both directions summed as vendors quote it
    tdp_w: float | None
    price_instance: str
    instance_price_per_hour_usd: float | None
    chips_per_instance: float | None
    price_source_url: str
    price_read_date: str
    interconnect_source_url: str
    interconnect_read_date: str
    source_url: str
    read_date: str
    notes: str

    @property
    def price_per_hour_usd(self) -> float | None:
        """On-demand USD per chip-hour = instance price / chips per instance (None if not rented)."""
        if self.instance_price_per_hour_usd is None:
            return None
        return self.instance_price_per_hour_usd / (self.chips_per_instance or 1)

    @property
    def interconnect_one_way_gbs(self) -> float | None:
        """GB/s the chip sends to other chips in one direction: interconnect_gbs / 2 (None if not listed)."""
        return None if self.interconnect_gbs is None else self.interconnect_gbs / 2

    @property
    def memory_bytes(self) -> float | None:
        """Memory capacity in bytes (memory_gib * 2**30; None where the table gives none)."""
        return None if self.memory_gib is None else self.memory_gib * 2**30

    @property
    def memory_gb(self) -> float | None:
        """Memory capacity in GB of 1e9 bytes, the unit of the footprint model (None where none is given)."""
        return None if self.memory_bytes is None else self.memory_bytes / 1e9

    def peaks(self) -> dict[str, float]:
        """The peak columns this row fills: column -> TFLOPS (TOPS for integers)."""
        return {c: getattr(self, c) for c in PEAK_COLUMNS if getattr(self, c) is not None}

    def peak_column(self, precision="fp32") -> str | None:
        """The column of precision's matmul peak (matrix units where listed); None if the row has none."""
        column = formats.get(precision).peak_column
        for candidate in (MATRIX_COLUMNS.get(column), column):
            if candidate and getattr(self, candidate, None) is not None:
                return candidate
        return None

    def has_peak_column(self, precision) -> bool:
        """True when the table gives a peak in precision's own column (a name, alias or torch dtype)."""
        return self.peak_column(precision) is not None

    def peak(self, precision="fp32") -> tuple[float | None, str]:
        """(dense matmul peak in FLOP/s, OP/s for integers, or None; the column used and why, or why there is
        none). The one fallback is physical: integer weights narrower than a byte (int4, int2) are unpacked to
        the first of UNPACKED_TO this chip lists, where the table gives no peak of their own."""
        fmt = formats.get(precision)
        if column := self.peak_column(fmt):
            return getattr(self, column) * 1e12, column
        if fmt.kind == "int" and fmt.bits < 8:  # unpacked to wider units to compute
            for wider in UNPACKED_TO:
                if column := self.peak_column(wider):
                    return getattr(self, column) * 1e12, f"{column} ({fmt.name} unpacked to {wider})"
        if not self.peaks():
            return None, "no FLOP/s published (bandwidth and memory only)"
        sub_byte = fmt.kind == "int" and fmt.bits < 8
        unpack = f" and no {'/'.join(UNPACKED_TO)} peak to unpack to" if sub_byte else ""
        return None, f"no {fmt.peak_column or fmt.name + ' peak'}{unpack} in the chip table"

    def peak_flops(self, precision="fp32") -> float:
        """Dense matmul peak in FLOP/s (OP/s for integers) for precision (see peak); ValueError if none."""
        flops, basis = self.peak(precision)
        if flops is None:
            name = formats.get(precision).name
            raise ValueError(f"precision {precision!r}: {self.name} has no dense {name} figure: {basis}")
        return flops

    def ridge_point(self, precision="fp32") -> float:
        """FLOP/byte where this chip turns from memory-bound to compute-bound for precision."""
        return roofline.ridge_point(self.peak_flops(precision), self.bandwidth_gbs)

    def ceiling(self, precision="fp32", label: str | None = None) -> roofline.Ceiling:
        """This chip's spec-sheet roof for precision, ready for roofline.plot_roofline."""
        if label is not None:
            arguments.text("label", label)
        label = label or f"{self.name} {formats.get(precision).name} (spec)"
        return roofline.Ceiling(label, self.peak_flops(precision), self.bandwidth_gbs)

    def to_dict(self) -> dict:
        """Plain dict of the row plus the computed price_per_hour_usd."""
        return {**asdict(self), "price_per_hour_usd": self.price_per_hour_usd}

    def __str__(self) -> str:
        peaks = ", ".join(f"{c.rsplit('_', 1)[0]} {v:g} T" for c, v in self.peaks().items())
        return f"{self.name} ({self.kind}, {self.segment}): {peaks or 'no FLOP/s published'}, " \
               f"{self.bandwidth_gbs:g} GB/s"


def _number(row: dict, column: str, path) -> float | None:
    text = (row.get(column) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{path}: column {column} of {row.get('name')!r} must be a number; "
                         f"got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{path}: column {column} of {row.get('name')!r} must be positive; got {text!r}")
    return value


def _date(row: dict, column: str, path) -> str:
    text = (row.get(column) or "").strip()
    if text:
        try:
            dt.date.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{path}: column {column} of {row.get('name')!r} must be a date YYYY-MM-DD; "
                             f"got {text!r}") from None
    return text


@lru_cache(maxsize=8)
def _load(path: str) -> tuple[Chip, ...]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    names = {f.name for f in fields(Chip)}
    chips = []
    for row in rows:
        missing = names - set(row)
        if missing:
            raise ValueError(f"{path}: missing columns {sorted(missing)}")
        values = {k: (row[k] or "").strip() for k in names}
        values.update({c: _number(row, c, path) for c in NUMBER_COLUMNS})
        values.update({c: _date(row, c, path) for c in DATE_COLUMNS})
        if values["bandwidth_gbs"] is None:
            raise ValueError(f"{path}: {row['name']!r} needs bandwidth_gbs")
        link = ("interconnect", "interconnect_source_url", "interconnect_read_date")
        if values["interconnect_gbs"] is not None and not all(values[c] for c in link):
            raise ValueError(f"{path}: {row['name']!r} gives interconnect_gbs without its interconnect, "
                             "interconnect_source_url and interconnect_read_date")
        if values["kind"] not in KINDS:
            raise ValueError(f"{path}: kind of {row['name']!r} must be one of {KINDS}; "
                             f"got {values['kind']!r}")
        chips.append(Chip(**values))
    return tuple(chips)


def load_chips(path=None) -> list[Chip]:
    """All chips of the table (hwopt/data/chips.csv, or the CSV at path)."""
    path = Path(arguments.instance("path", path, (str, Path))) if path is not None else CHIPS_CSV
    if not path.is_file():
        raise ValueError(f"path must be a chip table CSV; {str(path)!r} does not exist")
    return list(_load(str(path.resolve())))


def _key(text: str) -> str:
    """Lower-case name without spaces, dashes, underscores or dots: 'A100-80GB sxm' -> 'a10080gbsxm'."""
    return re.sub(r"[\s\-_.]+", "", text.lower())


def get_chip(name: str, path=None) -> Chip:
    """The chip called name (case, spaces and dashes ignored; vendor optional, e.g. 'h100 sxm', 'TPU v5e')."""
    arguments.text("name", name)
    chips = load_chips(path)
    key = _key(name)
    exact = [c for c in chips if key in (_key(c.name), _key(c.name.removeprefix(c.vendor)))]
    if len(exact) == 1:
        return exact[0]
    partial = [c for c in chips if key in _key(c.name)]
    if len(partial) == 1:
        return partial[0]
    if partial:
        raise ValueError(f"name {name!r} is ambiguous; did you mean: {', '.join(c.name for c in partial)}")
    close = difflib.get_close_matches(key, {_key(c.name): c.name for c in chips}, n=5, cutoff=0.4)
    by_key = {_key(c.name): c.name for c in chips}
    hint = ", ".join(by_key[k] for k in close) or ", ".join(c.name for c in chips[:5]) + ", ..."
    raise ValueError(f"name {name!r} is no chip in the table; did you mean: {hint}")


def chips_by_kind(kind: str, path=None) -> list[Chip]:
    """The chips of one kind: 'cpu', 'gpu', 'tpu' or 'accelerator'."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
    return [c for c in load_chips(path) if c.kind == kind]


def closest_chips(bandwidth_gbs: float, flops: float | None = None, n: int = 3, *, precision="fp32",
                  path=None) -> list[tuple[Chip, float]]:
    """The n chips nearest to (bandwidth_gbs, flops in FLOP/s for precision) on log scales, with their
    distance.

    Distance = sqrt(log10(bw ratio)^2 + log10(flops ratio)^2); 0.3 means about 2x away. Without flops only
    bandwidth counts; with flops, chips that give no peak for precision are skipped.
    """
    bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    flops = None if flops is None else arguments.positive("flops", flops)
    n = arguments.count("n", n, "items")
    fmt = formats.get(precision)
    scored = []
    for chip in load_chips(path):
        d2 = math.log10(chip.bandwidth_gbs / bandwidth_gbs) ** 2
        if flops is not None:
            if not chip.has_peak_column(fmt):
                continue
            d2 += math.log10(chip.peak_flops(fmt) / flops) ** 2
        scored.append((chip, math.sqrt(d2)))
    scored.sort(key=lambda pair: pair[1])
    return scored[:n]


def table(chips=None, precision="fp32") -> list[dict]:
    """Rows for display: name, kind, peak TFLOPS for precision, GB/s, GiB, ridge FLOP/byte, USD/chip-hour."""
    fmt = formats.get(precision)
    if chips is not None:
        arguments.instance("chips", chips, (list, tuple))
        for i, chip in enumerate(chips):
            arguments.instance(f"chips[{i}]", chip, Chip)
    rows = []
    for c in load_chips() if chips is None else chips:
        has = c.has_peak_column(fmt)
        rows.append({"name": c.name, "kind": c.kind, "segment": c.segment,
                     "peak_tflops": c.peak_flops(fmt) / 1e12 if has else None,
                     "peak_column": c.peak_column(fmt),
                     "bandwidth_gbs": c.bandwidth_gbs, "memory_gib": c.memory_gib,
                     "ridge_flop_per_byte": c.ridge_point(fmt) if has else None,
                     "price_per_hour_usd": c.price_per_hour_usd})
    return rows


def compare_bandwidth(chip: Chip, other: Chip) -> str:
    """One sentence setting chip's datasheet GB/s against other's (lesson 7: like with like)."""
    arguments.instance("chip", chip, Chip)
    arguments.instance("other", other, Chip)
    ratio = chip.bandwidth_gbs / other.bandwidth_gbs
    a, b = f"{chip.name} ({chip.kind})", f"{other.name} ({other.kind})"
    figures = f"{chip.bandwidth_gbs:g} vs {other.bandwidth_gbs:g} GB/s, datasheet against datasheet"
    if ratio < 1:
        return f"{a} streams less than {b}: {figures} ({ratio:.2f}x)."
    return f"{a} streams {ratio:.1f}x the GB/s of {b}: {figures}."


def datasheet_share(measured_gbs: float, chip: Chip | None, label: str = "this machine") -> str:
    """Sentences setting a measured GB/s against the datasheet of the chip it ran on (None: not in table)."""
    measured_gbs = arguments.positive("measured_gbs", measured_gbs)
    if chip is not None:
        arguments.instance("chip", chip, Chip)
    label = arguments.text("label", label)
    measured = f"{label} streamed {measured_gbs:.1f} GB/s"
    if chip is None:
        return (f"{measured}.\nThe chip table has no datasheet for this chip (a VM may hide its model), so "
                f"no share can be computed:\nset the {measured_gbs:.1f} GB/s against your own machine (the "
                "cores and memory channels you were given),\nnot against a whole server socket or GPU card.")
    share = measured_gbs / chip.bandwidth_gbs
    return (f"{measured} = {share:.0%} of its own datasheet ({chip.name}, {chip.bandwidth_gbs:g} GB/s).\n"
            "Compare shares like this one with each other, and datasheets with datasheets.")
