"""Memory: a transformer's weights + activations + KV cache vs batch, sequence length, precision (lesson 7).

Shapes of published models come from data/model_shapes.csv (each row cites the model's config file);
parameter counts are computed from the shapes. All sizes in bytes, reported in GB (1e9 bytes).
  weights      = n_params * bytes_per_weight
  KV cache     = 2 (K and V) * n_layers * batch * seq_len * n_kv_heads * head_dim * bytes_per_element
  activations  = peak of one layer's forward over the whole prompt (prefill), see activation_bytes.
"""

from __future__ import annotations

import csv
import difflib
from dataclasses import asdict, dataclass
from pathlib import Path

from hwopt import arguments
from hwopt.experiments.precision import bytes_per_weight

SHAPES_CSV = Path(__file__).resolve().parents[2] / "data" / "model_shapes.csv"
GB = 1e9


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shape (as in its config.json) and where it was read."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab_size: int
    gated_mlp: bool = True
    tied_embeddings: bool = False
    max_seq_len: int = 4096
    source_url: str = ""

    def __post_init__(self):
        arguments.text("name", self.name)
        arguments.count("n_layers", self.n_layers, "layers")
        for field in ("d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size"):
            arguments.count(field, getattr(self, field), "dimension")
        arguments.count("max_seq_len", self.max_seq_len, "tokens")
        arguments.boolean("gated_mlp", self.gated_mlp)
        arguments.boolean("tied_embeddings", self.tied_embeddings)
        arguments.text("source_url", self.source_url, allow_empty=True)
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError("d_model must be divisible by n_heads, and n_heads by n_kv_heads")

    @property
    def head_dim(self) -> int:
        """d_model / n_heads."""
        return self.d_model // self.n_heads

    @property
    def n_params(self) -> int:
        """Parameters: attention (q, o; k, v per KV head), MLP (3 matrices if gated, else 2), embeddings."""
        kv_width = self.n_kv_heads * self.head_dim
        attention = 2 * self.d_model * self.d_model + 2 * self.d_model * kv_width
        mlp = (3 if self.gated_mlp else 2) * self.d_model * self.d_ff
        embeddings = self.vocab_size * self.d_model * (1 if self.tied_embeddings else 2)
        return self.n_layers * (attention + mlp) + embeddings


def load_shapes(path: str | Path | None = None) -> list[ModelShape]:
    """All model shapes in data/model_shapes.csv (or path)."""
    path = Path(arguments.instance("path", path, (str, Path))) if path is not None else SHAPES_CSV
    if not path.is_file():
        raise ValueError(f"path must be an existing CSV of model shapes, got {str(path)!r}")
    ints = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size", "max_seq_len")
    with path.open(newline="") as f:
        return [
            ModelShape(
                name=row["name"],
                **{k: int(row[k]) for k in ints},
                gated_mlp=row["gated_mlp"] == "1",
                tied_embeddings=row["tied_embeddings"] == "1",
                source_url=row["source_url"],
            )
            for row in csv.DictReader(f)
        ]


def get_shape(name: str, path: str | Path | None = None) -> ModelShape:
    """The shape named name (case-insensitive); a typo lists close names."""
    arguments.text("name", name)
    shapes = {s.name.lower(): s for s in load_shapes(path)}
    key = str(name).lower()
    if key not in shapes:
        close = difflib.get_close_matches(key, list(shapes), n=3, cutoff=0.3)
        hint = f"; did you mean {', '.join(shapes[c].name for c in close)}?" if close else ""
        raise ValueError(
            f"name {name!r} is not in the model table{hint} (known: "
            f"{', '.join(s.name for s in shapes.values())})"
        )
    return shapes[key]


def _sizes(shape, batch_size, seq_len) -> None:
    arguments.instance("shape", shape, ModelShape)
    arguments.count("batch_size", batch_size, "batch")
    arguments.count("seq_len", seq_len, "tokens")


def _bytes(name: str, precision) -> float:
    """Bytes per value of a precision argument, a bad one named (kv_precision, not just precision)."""
    return arguments.named(name, bytes_per_weight, precision)


def weights_bytes(shape: ModelShape, precision: str | int = "fp16") -> float:
    """Bytes of all weights at a precision ('fp32', 'fp16', 'int8', 'int4', ... or bits)."""
    arguments.instance("shape", shape, ModelShape)
    return shape.n_params * _bytes("precision", precision)


def kv_cache_bytes(shape: ModelShape, batch_size: int, seq_len: int, precision: str | int = "fp16") -> float:
    """Bytes of the K and V cache: 2 * n_layers * batch_size * seq_len * n_kv_heads * head_dim * bytes."""
    _sizes(shape, batch_size, seq_len)
    return (
        2
        * shape.n_layers
        * batch_size
        * seq_len
        * shape.n_kv_heads
        * shape.head_dim
        * _bytes("precision", precision)
    )


def activation_bytes(
    shape: ModelShape,
    batch_size: int,
    seq_len: int,
    precision: str | int = "fp16",
    *,
    naive_attention: bool = True,
) -> float:
    """Peak activations of one layer over the whole prompt (prefill), bytes.

    Per token: residual + normed input (2 * d_model) + the larger of q/k/v (d_model + 2 * kv width) and the
    MLP hidden (d_ff, twice if gated); plus, with naive attention, the scores batch * n_heads * seq_len^2
    (fused 'flash' attention never stores them).
    """
    _sizes(shape, batch_size, seq_len)
    naive_attention = arguments.boolean("naive_attention", naive_attention)
    b = _bytes("precision", precision)
    kv_width = shape.n_kv_heads * shape.head_dim
    per_token = 2 * shape.d_model + max(
        shape.d_model + 2 * kv_width, shape.d_ff * (2 if shape.gated_mlp else 1)
    )
    scores = batch_size * shape.n_heads * seq_len * seq_len if naive_attention else 0
    return (batch_size * seq_len * per_token + scores) * b


@dataclass(frozen=True)
class MemoryBreakdown:
    """Memory needed to serve a model, GB (1e9 bytes)."""

    weights_gb: float
    activations_gb: float
    kv_cache_gb: float

    def __post_init__(self):
        for name in ("weights_gb", "activations_gb", "kv_cache_gb"):
            arguments.positive(name, getattr(self, name), allow_zero=True)

    @property
    def total_gb(self) -> float:
        """weights + activations + KV cache, GB."""
        return self.weights_gb + self.activations_gb + self.kv_cache_gb

    def as_dict(self) -> dict[str, float]:
        """{'weights_gb': ..., 'activations_gb': ..., 'kv_cache_gb': ..., 'total_gb': ...}."""
        return {**asdict(self), "total_gb": self.total_gb}


def memory_breakdown(
    shape: ModelShape,
    batch_size: int,
    seq_len: int,
    precision: str | int = "fp16",
    *,
    kv_precision: str | int | None = None,
    naive_attention: bool = True,
) -> MemoryBreakdown:
    """Weights, peak activations and KV cache (GB) for batch_size sequences of seq_len tokens."""
    _sizes(shape, batch_size, seq_len)
    kv_precision = precision if kv_precision is None else kv_precision
    _bytes("kv_precision", kv_precision)
    int_weights = _bytes("precision", precision) < 2
    act_precision = "fp16" if int_weights else precision  # int weights compute with fp16 activations
    return MemoryBreakdown(
        weights_gb=weights_bytes(shape, precision) / GB,
        activations_gb=activation_bytes(
            shape, batch_size, seq_len, act_precision, naive_attention=naive_attention
        )
        / GB,
        kv_cache_gb=kv_cache_bytes(shape, batch_size, seq_len, kv_precision) / GB,
    )


def fits(breakdown: MemoryBreakdown, memory_gb: float, reserve_fraction: float = 0.1) -> bool:
    """True when total <= memory_gb * (1 - reserve_fraction) (runtimes keep some memory for themselves)."""
    arguments.instance("breakdown", breakdown, MemoryBreakdown)
    memory_gb = arguments.positive("memory_gb", memory_gb)
    reserve_fraction = arguments.fraction("reserve_fraction", reserve_fraction, allow_zero=True,
                                          allow_one=False)
    return breakdown.total_gb <= memory_gb * (1 - reserve_fraction)


def max_batch_size(
    shape: ModelShape,
    seq_len: int,
    memory_gb: float,
    precision: str | int = "fp16",
    *,
    reserve_fraction: float = 0.1,
    naive_attention: bool = True,
    limit: int = 1 << 16,
) -> int:
    """Largest batch that fits in memory_gb (0 when even batch 1 does not fit), searched up to limit."""
    _sizes(shape, 1, seq_len)
    arguments.positive("memory_gb", memory_gb)
    _bytes("precision", precision)
    arguments.fraction("reserve_fraction", reserve_fraction, allow_zero=True, allow_one=False)
    arguments.boolean("naive_attention", naive_attention)
    limit = arguments.count("limit", limit, "batch")

    def ok(b: int) -> bool:
        return fits(
            memory_breakdown(shape, b, seq_len, precision, naive_attention=naive_attention),
            memory_gb,
            reserve_fraction,
        )

    if not ok(1):
        return 0
    lo, hi = 1, limit
    if ok(hi):
        return hi
    while hi - lo > 1:  # memory grows with batch: binary search for the last batch that fits
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def oom_fix(
    shape: ModelShape, batch_size: int, seq_len: int, memory_gb: float, precision: str | int = "fp16"
) -> str:
    """One sentence: does it fit, and if not, which change (flash attention, precision, batch) fixes it."""
    arguments.positive("memory_gb", memory_gb)
    b = memory_breakdown(shape, batch_size, seq_len, precision)
    if fits(b, memory_gb):
        return f"fits: {b.total_gb:.1f} GB of {memory_gb:g} GB"
    for change, kwargs in (("fused (flash) attention", {"naive_attention": False}),):
        if fits(memory_breakdown(shape, batch_size, seq_len, precision, **kwargs), memory_gb):
            return f"out of memory ({b.total_gb:.1f} GB > {memory_gb:g} GB); fix: {change}"
    for lower in ("int8", "int4"):
        if bytes_per_weight(lower) < bytes_per_weight(precision):
            if fits(memory_breakdown(shape, batch_size, seq_len, lower, naive_attention=False), memory_gb):
                return (
                    f"out of memory ({b.total_gb:.1f} GB > {memory_gb:g} GB); fix: {lower} weights "
                    "and KV cache with fused attention"
                )
    best = max_batch_size(shape, seq_len, memory_gb, precision, naive_attention=False)
    if best:
        return (
            f"out of memory ({b.total_gb:.1f} GB > {memory_gb:g} GB); fix: batch {best} or less "
            "with fused attention"
        )
    return f"out of memory ({b.total_gb:.1f} GB > {memory_gb:g} GB); the weights alone need a bigger device"


def plot_memory(
    shape: ModelShape,
    batch_size: int,
    seq_len: int,
    precision: str | int,
    memory_gb: float,
    naive_attention: bool = True,
    ax=None,
):
    """Stacked bar of weights / activations / KV cache (GB) beside the device's memory; returns the Figure."""
    from hwopt import plots

    arguments.positive("memory_gb", memory_gb)
    b = memory_breakdown(shape, batch_size, seq_len, precision, naive_attention=naive_attention)
    verdict = "fits" if fits(b, memory_gb) else "OUT OF MEMORY"
    ax = plots.axes(
        "memory (GB)",
        shape.name,
        ax=ax,
        title=f"{precision}, batch {batch_size} x {seq_len} tokens: {verdict}",
    )
    left = 0.0
    for k, (label, gb) in enumerate(
        (("weights", b.weights_gb), ("activations", b.activations_gb), ("KV cache", b.kv_cache_gb))
    ):
        ax.barh([0], [gb], left=left, color=plots.color(k), label=f"{label} {gb:.1f} GB")
        left += gb
    ax.axvline(memory_gb, color="k", linestyle="--", label=f"device memory {memory_gb:g} GB")
    ax.set_yticks([])
    ax.set_xlim(0, max(left, memory_gb) * 1.1)
    return plots.finish(ax)


def memory_explorer(memory_gb_by_device: dict[str, float], shapes: list[ModelShape] | None = None):
    """Sliders (model, precision, batch, sequence length, device, attention) over plot_memory."""
    from hwopt import widgets

    arguments.instance("memory_gb_by_device", memory_gb_by_device, dict)
    if not memory_gb_by_device:
        raise ValueError("memory_gb_by_device must name at least one device and its memory in GB")
    for device, gb in memory_gb_by_device.items():
        arguments.text("memory_gb_by_device", device)
        arguments.positive(f"memory_gb_by_device[{device!r}]", gb)
    if shapes is not None:
        arguments.instance("shapes", shapes, (list, tuple))
        for i, s in enumerate(shapes):
            arguments.instance(f"shapes[{i}]", s, ModelShape)
    shapes = shapes or load_shapes()

    def show(model, precision, batch_size, seq_len, memory_gb, attention):
        return plot_memory(model, batch_size, seq_len, precision, memory_gb, attention == "naive")

    return widgets.explore(
        show,
        model=widgets.dropdown("model", [(s.name, s) for s in shapes], shapes[min(1, len(shapes) - 1)]),
        precision=widgets.toggle("precision", ["fp32", "fp16", "int8", "int4"], "fp16"),
        batch_size=widgets.int_slider("batch size", 1, 128, 8),
        seq_len=widgets.int_slider("sequence length", 128, 32768, 4096, step=128, unit="tokens"),
        memory_gb=widgets.dropdown("device", list(memory_gb_by_device.items())),
        attention=widgets.toggle("attention", ["naive", "fused (flash)"]),
    )
