"""The chip table (data/chips.csv): vendor datasheet peaks per precision, memory, bandwidth, TDP, price.

Every row carries its source URL and the date it was read. Derived numbers (FLOP/s from TFLOPS, ridge point,
price per chip from an instance's price) are computed here, never typed into the table.
"""

from __future__ import annotations

import csv
import difflib
import math
import re
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path

from hwopt import arguments
from hwopt.cost import roofline

CHIPS_CSV = Path(__file__).resolve().parents[2] / "data" / "chips.csv"
KINDS = ("cpu", "gpu", "tpu", "accelerator")
# dtype spelling -> the column holding its dense peak (TFLOPS or TOPS).
DTYPE_COLUMNS = {
    "float32": "fp32_tflops", "fp32": "fp32_tflops",
    "float16": "fp16_tflops", "fp16": "fp16_tflops", "half": "fp16_tflops",
    "bfloat16": "fp16_tflops", "bf16": "fp16_tflops",
    "int8": "int8_tops", "qint8": "int8_tops",
}
NUMBER_COLUMNS = ("fp32_tflops", "fp16_tflops", "int8_tops", "memory_gb", "bandwidth_gbs", "tdp_w",
                  "instance_price_per_hour_usd", "chips_per_instance")


def canonical_dtype(dtype) -> str:
    """Lower-case dtype name ('float32', 'bf16', 'int8', ...) from a str or torch dtype."""
    key = str(dtype).lower().removeprefix("torch.")
    if key not in DTYPE_COLUMNS:
        raise ValueError(f"dtype must be one of {sorted(DTYPE_COLUMNS)} (or the torch dtype); got {dtype!r}")
    return key


@dataclass(frozen=True)
class Chip:
    """One row of data/chips.csv; peaks are dense (no sparsity), None where the vendor gives none."""

    name: str
    vendor: str
    kind: str
    segment: str
    fp32_tflops: float | None
    fp16_tflops: float | None
    int8_tops: float | None
    memory_gb: float | None
    bandwidth_gbs: float
    tdp_w: float | None
    price_instance: str
    instance_price_per_hour_usd: float | None
    chips_per_instance: float | None
    price_source_url: str
    source_url: str
    read_date: str
    notes: str

    @property
    def price_per_hour_usd(self) -> float | None:
        """On-demand USD per chip-hour = instance price / chips per instance (None if not rented)."""
        if self.instance_price_per_hour_usd is None:
            return None
        return self.instance_price_per_hour_usd / (self.chips_per_instance or 1)

    def has_dtype(self, dtype) -> bool:
        """True when the table gives a peak for this dtype."""
        return getattr(self, DTYPE_COLUMNS[canonical_dtype(dtype)]) is not None

    def peak_flops(self, dtype="float32") -> float:
        """Dense peak in FLOP/s (OP/s for int8) for dtype; ValueError if unknown or not specified."""
        column = DTYPE_COLUMNS[canonical_dtype(dtype)]
        value = getattr(self, column)
        if value is None:
            raise ValueError(f"dtype {dtype!r}: {self.name} has no {column} in the chip table "
                             f"(the vendor does not specify it)")
        return value * 1e12

    def ridge_point(self, dtype="float32") -> float:
        """FLOP/byte where this chip turns from memory-bound to compute-bound for dtype."""
        return roofline.ridge_point(self.peak_flops(dtype), self.bandwidth_gbs)

    def ceiling(self, dtype="float32", label: str | None = None) -> roofline.Ceiling:
        """This chip's spec-sheet roof for dtype, ready for roofline.plot_roofline."""
        if label is not None:
            arguments.text("label", label)
        return roofline.Ceiling(label or f"{self.name} {canonical_dtype(dtype)} (spec)",
                                self.peak_flops(dtype), self.bandwidth_gbs)

    def to_dict(self) -> dict:
        """Plain dict of the row plus the computed price_per_hour_usd."""
        return {**asdict(self), "price_per_hour_usd": self.price_per_hour_usd}

    def __str__(self) -> str:
        peaks = ", ".join(f"{d} {getattr(self, c):g} T" for d, c in
                          (("fp32", "fp32_tflops"), ("fp16/bf16", "fp16_tflops"), ("int8", "int8_tops"))
                          if getattr(self, c) is not None)
        return f"{self.name} ({self.kind}, {self.segment}): {peaks or 'no FLOP/s given'}, " \
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
        if values["bandwidth_gbs"] is None:
            raise ValueError(f"{path}: {row['name']!r} needs bandwidth_gbs")
        if values["kind"] not in KINDS:
            raise ValueError(f"{path}: kind of {row['name']!r} must be one of {KINDS}; "
                             f"got {values['kind']!r}")
        chips.append(Chip(**values))
    return tuple(chips)


def load_chips(path=None) -> list[Chip]:
    """All chips of the table (data/chips.csv next to the package, or the CSV at path)."""
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


def closest_chips(bandwidth_gbs: float, flops: float | None = None, n: int = 3, *, dtype="float32",
                  path=None) -> list[tuple[Chip, float]]:
    """The n chips nearest to (bandwidth_gbs, flops in FLOP/s for dtype) on log scales, with their distance.

    Distance = sqrt(log10(bw ratio)^2 + log10(flops ratio)^2); 0.3 means about 2x away. Without flops only
    bandwidth counts; with flops, chips that give no peak for dtype are skipped.
    """
    bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    flops = None if flops is None else arguments.positive("flops", flops)
    n = arguments.count("n", n, "items")
    canonical_dtype(dtype)
    scored = []
    for chip in load_chips(path):
        d2 = math.log10(chip.bandwidth_gbs / bandwidth_gbs) ** 2
        if flops is not None:
            if not chip.has_dtype(dtype):
                continue
            d2 += math.log10(chip.peak_flops(dtype) / flops) ** 2
        scored.append((chip, math.sqrt(d2)))
    scored.sort(key=lambda pair: pair[1])
    return scored[:n]


def table(chips=None, dtype="float32") -> list[dict]:
    """Rows for display: name, kind, peak TFLOPS for dtype, GB/s, ridge FLOP/byte, USD per chip-hour."""
    canonical_dtype(dtype)
    if chips is not None:
        arguments.instance("chips", chips, (list, tuple))
        for i, chip in enumerate(chips):
            arguments.instance(f"chips[{i}]", chip, Chip)
    rows = []
    for c in load_chips() if chips is None else chips:
        has = c.has_dtype(dtype)
        rows.append({"name": c.name, "kind": c.kind, "segment": c.segment,
                     "peak_tflops": c.peak_flops(dtype) / 1e12 if has else None,
                     "bandwidth_gbs": c.bandwidth_gbs, "memory_gb": c.memory_gb,
                     "ridge_flop_per_byte": c.ridge_point(dtype) if has else None,
                     "price_per_hour_usd": c.price_per_hour_usd})
    return rows
