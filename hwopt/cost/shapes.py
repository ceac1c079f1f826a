"""The model table: published decoder-only transformers' shapes (hwopt/data/model_shapes.csv), one row each.

Each row cites the model's config file; parameter counts are computed from the shape. What a shape costs in
memory (weights, KV cache, activations) is cost.footprint's; this module holds the table alone, which is what
the assignments read (a grading kernel sees it, not the cost models: course.grading.toolkit).
"""

from __future__ import annotations

import csv
import difflib
from dataclasses import dataclass
from pathlib import Path

from hwopt import arguments
from hwopt.data import DATA_DIR

SHAPES_CSV = DATA_DIR / "model_shapes.csv"


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shape (as in its config.json) and where it was read.

    Beyond the dense GQA transformer, a shape can carry: head_dim when it is not d_model / n_heads; a
    mixture of experts (n_experts routed experts of hidden size d_ff_expert, experts_per_token chosen per
    token, n_shared_experts always used, the first n_dense_layers layers with a dense MLP of d_ff instead);
    multi-head latent attention (MLA: one latent of kv_lora_rank values plus a rope key of rope_head_dim
    values per token and layer instead of K and V heads; queries through a q_lora_rank bottleneck); and a
    sliding window of sliding_window tokens in n_sliding_layers of the layers. total_params_b and
    active_params_b are the counts the model's publisher states (billions; params_source_url), to check the
    counts computed from the shape.
    """

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
    head_dim: int = 0  # 0: d_model // n_heads
    n_experts: int = 0  # 0: a dense model
    experts_per_token: int = 0
    n_shared_experts: int = 0
    d_ff_expert: int = 0
    n_dense_layers: int = 0
    kv_lora_rank: int = 0  # 0: K and V heads (MHA, GQA); > 0: multi-head latent attention
    q_lora_rank: int = 0
    rope_head_dim: int = 0
    sliding_window: int = 0  # tokens; 0: every layer attends to the whole context
    n_sliding_layers: int = 0
    total_params_b: float | None = None
    active_params_b: float | None = None
    params_source_url: str = ""

    def __post_init__(self):
        arguments.text("name", self.name)
        arguments.count("n_layers", self.n_layers, "layers")
        for field in ("d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size"):
            arguments.count(field, getattr(self, field), "dimension")
        arguments.count("max_seq_len", self.max_seq_len, "tokens")
        arguments.boolean("gated_mlp", self.gated_mlp)
        arguments.boolean("tied_embeddings", self.tied_embeddings)
        for field in ("source_url", "params_source_url"):
            arguments.text(field, getattr(self, field), allow_empty=True)
        for field in ("head_dim", "n_experts", "experts_per_token", "n_shared_experts", "d_ff_expert",
                      "kv_lora_rank", "q_lora_rank", "rope_head_dim"):
            arguments.count(field, getattr(self, field), "dimension", minimum=0)
        arguments.count("sliding_window", self.sliding_window, "tokens", minimum=0)
        for field in ("n_dense_layers", "n_sliding_layers"):
            arguments.between(field, getattr(self, field), 0, self.n_layers, integer=True)
        for field in ("total_params_b", "active_params_b"):
            if getattr(self, field) is not None:
                arguments.positive(field, getattr(self, field))
        if self.n_heads % self.n_kv_heads or (not self.head_dim and self.d_model % self.n_heads):
            raise ValueError("d_model must be divisible by n_heads (unless head_dim is given), and n_heads "
                             "by n_kv_heads")
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        experts = (self.experts_per_token, self.n_shared_experts, self.d_ff_expert, self.n_dense_layers)
        if self.n_experts and not (1 <= self.experts_per_token <= self.n_experts and self.d_ff_expert
                                   and self.n_dense_layers < self.n_layers):
            raise ValueError("experts_per_token must be from 1 to n_experts, d_ff_expert at least 1 and "
                             "n_dense_layers below n_layers in a mixture of experts")
        if not self.n_experts and any(experts):
            raise ValueError("experts_per_token, n_shared_experts, d_ff_expert and n_dense_layers need "
                             "n_experts")
        if bool(self.sliding_window) != bool(self.n_sliding_layers):
            raise ValueError("sliding_window and n_sliding_layers must be given together")

    @property
    def attention(self) -> str:
        """'MLA' (latent K/V), 'MHA' (a K and V head per query head), 'GQA' (query heads share K/V heads)."""
        if self.kv_lora_rank:
            return "MLA"
        return "MHA" if self.n_kv_heads == self.n_heads else "GQA"

    @property
    def is_moe(self) -> bool:
        """True for a mixture of experts."""
        return self.n_experts > 0

    @property
    def attention_params(self) -> int:
        """Parameters of one layer's attention: q, k, v and o (MLA: its down- and up-projections)."""
        q_width = self.n_heads * self.head_dim
        if not self.kv_lora_rank:
            return 2 * self.d_model * q_width + 2 * self.d_model * self.n_kv_heads * self.head_dim
        q_out = self.n_heads * (self.head_dim + self.rope_head_dim)
        q = (self.d_model + q_out) * self.q_lora_rank if self.q_lora_rank else self.d_model * q_out
        kv = self.d_model * (self.kv_lora_rank + self.rope_head_dim) + self.kv_lora_rank * 2 * q_width
        return q + kv + q_width * self.d_model

    def mlp_params(self, d_ff: int) -> int:
        """Parameters of one MLP (dense, or one expert) of hidden size d_ff: 3 matrices if gated, else 2."""
        return (3 if self.gated_mlp else 2) * self.d_model * arguments.count("d_ff", d_ff, "dimension")

    @property
    def embedding_params(self) -> int:
        """The input embedding table and the output head (one table when tied)."""
        return self.vocab_size * self.d_model * (1 if self.tied_embeddings else 2)

    def _params(self, experts: int) -> int:
        moe_layers = self.n_layers - self.n_dense_layers if self.n_experts else 0
        mlp = (self.n_layers - moe_layers) * self.mlp_params(self.d_ff)
        if moe_layers:
            mlp += moe_layers * ((experts + self.n_shared_experts) * self.mlp_params(self.d_ff_expert)
                                 + self.d_model * self.n_experts)  # the router
        return self.n_layers * self.attention_params + mlp + self.embedding_params

    @property
    def n_params(self) -> int:
        """Parameters: attention, MLPs (every expert), routers, embeddings (norms and biases not counted)."""
        return self._params(self.n_experts)

    @property
    def active_params(self) -> int:
        """Parameters one token uses: as n_params, with experts_per_token routed experts per MoE layer."""
        return self._params(self.experts_per_token)


COUNT_COLUMNS = ("head_dim", "n_experts", "experts_per_token", "n_shared_experts", "d_ff_expert",
                 "n_dense_layers", "kv_lora_rank", "q_lora_rank", "rope_head_dim", "sliding_window",
                 "n_sliding_layers")  # optional: an empty cell is 0


def _row(row: dict, path) -> ModelShape:
    """A ModelShape from a CSV row (empty optional cells: 0 or None); ValueError naming the bad cell."""
    def number(column, kind):
        text = (row.get(column) or "").strip()
        try:
            return kind(text) if text else None
        except ValueError:
            raise ValueError(f"{path}: column {column} of {row.get('name')!r} must be a number; "
                             f"got {text!r}") from None

    ints = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size", "max_seq_len")
    return ModelShape(
        name=row["name"], **{k: number(k, int) for k in ints},
        gated_mlp=row["gated_mlp"] == "1", tied_embeddings=row["tied_embeddings"] == "1",
        source_url=row["source_url"], **{k: number(k, int) or 0 for k in COUNT_COLUMNS},
        total_params_b=number("total_params_b", float), active_params_b=number("active_params_b", float),
        params_source_url=row.get("params_source_url") or "")


def load_shapes(path: str | Path | None = None) -> list[ModelShape]:
    """All model shapes in SHAPES_CSV (or the CSV at path)."""
    path = Path(arguments.instance("path", path, (str, Path))) if path is not None else SHAPES_CSV
    if not path.is_file():
        raise ValueError(f"path must be an existing CSV of model shapes, got {str(path)!r}")
    with path.open(newline="") as f:
        return [_row(row, path) for row in csv.DictReader(f)]


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
