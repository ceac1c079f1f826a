"""Memory: a transformer's weights + activations + KV cache vs batch, sequence length, precision (lesson 7).

Shapes of published models come from the model table (cost.shapes: hwopt/data/model_shapes.csv, each row
citing the model's config file); parameter counts are computed from the shapes. All sizes in bytes, reported
in GB (1e9 bytes).
  weights      = n_params * bytes_per_weight
  KV cache     = 2 (K and V) * n_layers * batch * seq_len * n_kv_heads * head_dim * bytes_per_element
                 (MLA: its latent per token instead of K and V; a sliding-window layer keeps its window)
  activations  = peak of one layer's forward over the whole prompt (prefill), see activation_bytes.
Weights, KV cache and activations each have their own format (names of hwopt.formats, block scales counted):
the KV cache is often stored narrower than the activations (FP8 is common, int4 aggressive), and int weights
are dequantized to compute, their activations and cache staying 16-bit unless chosen otherwise.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hwopt import arguments, formats, plots, widgets
from hwopt.cost.shapes import SHAPES_CSV as SHAPES_CSV  # the model table, also read from here by the lessons
from hwopt.cost.shapes import ModelShape as ModelShape
from hwopt.cost.shapes import get_shape as get_shape
from hwopt.cost.shapes import load_shapes as load_shapes

GB = 1e9
WEIGHT_CHOICES = ("fp32", "fp16", "fp8_e4m3", "int8", "int4_g128")  # the explorer's weight formats
KV_PRECISIONS = ("fp32", "fp16", "bf16", "fp8_e4m3", "int8", "int4")  # the explorer's KV-cache formats


def kv_values_per_token_layer(shape: ModelShape) -> int:
    """Values one token adds to one layer's cache: K and V heads, or MLA's latent and rope key."""
    arguments.instance("shape", shape, ModelShape)
    if shape.kv_lora_rank:
        return shape.kv_lora_rank + shape.rope_head_dim
    return 2 * shape.n_kv_heads * shape.head_dim


def _sizes(shape, batch_size, seq_len) -> None:
    arguments.instance("shape", shape, ModelShape)
    arguments.count("batch_size", batch_size, "batch")
    arguments.count("seq_len", seq_len, "tokens")


def _bytes_per_value(fmt, argument: str) -> float:
    return formats.get(fmt, argument=argument).bytes_per_weight


def activation_precision(precision) -> str:
    """Format of the activations beside weights in `precision`: the same if 16 bits or wider, else fp16."""
    weights = formats.get(precision, argument="precision")
    return weights.name if weights.kind == "float" and weights.bits >= 16 else "fp16"


def kv_precision_for(precision, kv_precision=None) -> str:
    """Name of the KV cache's format: kv_precision (checked as that argument), or if None the activations'."""
    activations = activation_precision(precision)
    if kv_precision is None:
        return activations
    return formats.get(kv_precision, argument="kv_precision").name


def weights_bytes(shape: ModelShape, precision: str = "fp16") -> float:
    """Bytes of all weights in a format ('fp32', 'fp16', 'int8', 'int4_g128', ...; block scales counted)."""
    arguments.instance("shape", shape, ModelShape)
    return shape.n_params * _bytes_per_value(precision, "precision")


def kv_cache_bytes(shape: ModelShape, batch_size: int, seq_len: int, precision: str = "fp16") -> float:
    """Bytes of the K and V cache in a format: kv_values_per_token_layer (2 * n_kv_heads * head_dim; MLA: its
    latent and rope key) * batch_size * bytes per value * the tokens each layer keeps (seq_len; a sliding
    layer at most sliding_window)."""
    _sizes(shape, batch_size, seq_len)
    kept = ((shape.n_layers - shape.n_sliding_layers) * seq_len
            + shape.n_sliding_layers * min(seq_len, shape.sliding_window))
    return kv_values_per_token_layer(shape) * kept * batch_size * _bytes_per_value(precision, "precision")


def activation_bytes(
    shape: ModelShape,
    batch_size: int,
    seq_len: int,
    precision: str = "fp16",
    *,
    naive_attention: bool = True,
    token_budget: int | None = None,
) -> float:
    """Peak activations of one layer over the whole prompt (prefill), bytes.

    Per token: residual + normed input (2 * d_model) + the larger of q/k/v (q width + 2 * kv width) and the
    MLP hidden (d_ff, or the active experts' d_ff_expert; twice if gated); plus, with naive attention, the
    scores n_heads * seq_len per query token (fused 'flash' attention never stores them).
    Tokens processed at once: every prompt token (batch_size * seq_len), or at most token_budget of them: a
    serving engine caps the tokens of one step (vLLM's max_num_batched_tokens) and prefills the rest later.
    """
    _sizes(shape, batch_size, seq_len)
    naive_attention = arguments.boolean("naive_attention", naive_attention)
    tokens = batch_size * seq_len
    if token_budget is not None:
        tokens = min(tokens, arguments.count("token_budget", token_budget, "tokens"))
    b = _bytes_per_value(precision, "precision")
    kv_width = shape.n_kv_heads * shape.head_dim
    hidden = shape.d_ff if not shape.is_moe or shape.n_dense_layers else 0
    hidden = max(hidden, (shape.experts_per_token + shape.n_shared_experts) * shape.d_ff_expert)
    per_token = 2 * shape.d_model + max(
        shape.n_heads * shape.head_dim + 2 * kv_width, hidden * (2 if shape.gated_mlp else 1)
    )
    scores = tokens * shape.n_heads * seq_len if naive_attention else 0
    return (tokens * per_token + scores) * b


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
    precision: str = "fp16",
    *,
    kv_precision: str | None = None,
    naive_attention: bool = True,
    token_budget: int | None = None,
) -> MemoryBreakdown:
    """Weights (in `precision`), peak activations and KV cache (in `kv_precision`; None: the activations'
    format, see activation_precision) in GB, for batch_size sequences of seq_len tokens; token_budget as in
    activation_bytes (None: every prompt token at once)."""
    _sizes(shape, batch_size, seq_len)
    act_precision = activation_precision(precision)
    kv_precision = kv_precision_for(precision, kv_precision)
    return MemoryBreakdown(
        weights_gb=weights_bytes(shape, precision) / GB,
        activations_gb=activation_bytes(
            shape, batch_size, seq_len, act_precision, naive_attention=naive_attention,
            token_budget=token_budget,
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
    precision: str = "fp16",
    *,
    kv_precision: str | None = None,
    reserve_fraction: float = 0.1,
    naive_attention: bool = True,
    limit: int = 1 << 16,
    token_budget: int | None = None,
) -> int:
    """Largest batch that fits in memory_gb (0 when even batch 1 does not fit), searched up to limit;
    token_budget as in activation_bytes."""
    _sizes(shape, 1, seq_len)
    if token_budget is not None:
        arguments.count("token_budget", token_budget, "tokens")
    arguments.positive("memory_gb", memory_gb)
    _bytes_per_value(precision, "precision")
    arguments.fraction("reserve_fraction", reserve_fraction, allow_zero=True, allow_one=False)
    arguments.boolean("naive_attention", naive_attention)
    limit = arguments.count("limit", limit, "batch")

    def ok(b: int) -> bool:
        return fits(
            memory_breakdown(shape, b, seq_len, precision, kv_precision=kv_precision,
                             naive_attention=naive_attention, token_budget=token_budget),
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
    shape: ModelShape,
    batch_size: int,
    seq_len: int,
    memory_gb: float,
    precision: str = "fp16",
    *,
    kv_precision: str | None = None,
) -> str:
    """One sentence: does it fit, and if not, which change fixes it: fused (flash) attention, then an FP8 KV
    cache, then int8 or int4 weights (with an FP8 KV cache), then a smaller batch."""
    arguments.positive("memory_gb", memory_gb)
    b = memory_breakdown(shape, batch_size, seq_len, precision, kv_precision=kv_precision)
    if fits(b, memory_gb):
        return f"fits: {b.total_gb:.1f} GB of {memory_gb:g} GB"
    oom = f"out of memory ({b.total_gb:.1f} GB > {memory_gb:g} GB)"
    kv = kv_precision_for(precision, kv_precision)
    fp8 = "fp8_e4m3" if formats.bytes_per_weight(kv) > formats.bytes_per_weight("fp8_e4m3") else kv
    fixes = [("fused (flash) attention", precision, kv)]
    if fp8 != kv:
        fixes.append(("an FP8 KV cache with fused attention", precision, fp8))
    for lower in ("int8", "int4_g128"):
        if weights_bytes(shape, lower) < weights_bytes(shape, precision):
            cache = "an FP8 KV cache" if fp8 != kv else f"the {kv} KV cache"
            fixes.append((f"{lower} weights and {cache} with fused attention", lower, fp8))
    for change, weights, cache_format in fixes:
        fixed = memory_breakdown(shape, batch_size, seq_len, weights, kv_precision=cache_format,
                                 naive_attention=False)
        if fits(fixed, memory_gb):
            return f"{oom}; fix: {change}"
    best = max_batch_size(shape, seq_len, memory_gb, precision, kv_precision=kv, naive_attention=False)
    if best:
        return f"{oom}; fix: batch {best} or less with fused attention"
    return f"{oom}; the weights alone need a bigger device"


def plot_memory(
    shape: ModelShape,
    batch_size: int,
    seq_len: int,
    precision: str | int,
    memory_gb: float,
    naive_attention: bool = True,
    ax=None,
    *,
    kv_precision: str | None = None,
):
    """Stacked bar of weights / activations / KV cache (GB) beside the device's memory; returns the Figure."""
    arguments.positive("memory_gb", memory_gb)
    b = memory_breakdown(shape, batch_size, seq_len, precision, kv_precision=kv_precision,
                         naive_attention=naive_attention)
    verdict = "fits" if fits(b, memory_gb) else "OUT OF MEMORY"
    formats_used = f"{precision} weights, {kv_precision_for(precision, kv_precision)} KV cache"
    ax = plots.axes(
        "memory (GB)",
        shape.name,
        ax=ax,
        title=f"{formats_used}, batch {batch_size} x {seq_len} tokens: {verdict}",
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
    """Sliders (model, weight and KV-cache formats, batch, sequence length, device, attention) over
    plot_memory."""
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

    def show(model, precision, kv_precision, batch_size, seq_len, memory_gb, attention):
        return plot_memory(model, batch_size, seq_len, precision, memory_gb, attention == "naive",
                           kv_precision=kv_precision)

    return widgets.explore(
        show,
        model=widgets.dropdown("model", [(s.name, s) for s in shapes], shapes[min(1, len(shapes) - 1)]),
        precision=widgets.toggle("weights", WEIGHT_CHOICES, "fp16"),
        kv_precision=widgets.dropdown("KV cache", KV_PRECISIONS, "fp16"),
        batch_size=widgets.int_slider("batch size", 1, 128, 8),
        seq_len=widgets.int_slider("sequence length", 128, 32768, 4096, step=128, unit="tokens"),
        memory_gb=widgets.dropdown("device", list(memory_gb_by_device.items())),
        attention=widgets.toggle("attention", ["naive", "fused (flash)"]),
    )
