"""Mixture of experts (lesson 12): which experts a decode step reads, and what expert parallelism moves.

A MoE layer routes each token to k of its E experts. A decode step of b tokens reads only the experts some
token chose: if every token picks k distinct experts uniformly and independently of the others, one expert is
missed by one token with probability 1 - k/E, so the expected number of distinct experts read is
    E * (1 - (1 - k/E)^b),
k at batch 1, rising towards E as b grows. Real routers are not uniform (some experts are popular): they read
fewer distinct experts than this, and `simulate_distinct_experts` counts them for any routing.
Expert parallelism puts the experts on different chips; each MoE layer then sends every token's hidden state
to the chips holding its k experts and the results back (two all-to-alls).
Shapes are hwopt.cost.footprint.ModelShape; formats are hwopt.formats names.
"""

from __future__ import annotations

import numpy as np

from hwopt import arguments, formats
from hwopt.cost import footprint

__all__ = ["expected_distinct_experts", "simulate_distinct_experts", "weight_bytes_read",
           "expert_parallel_bytes"]


def _routing(n_experts, experts_per_token, batch_size) -> tuple[int, int, int]:
    n_experts = arguments.count("n_experts", n_experts, "dimension")
    k = arguments.between("experts_per_token", experts_per_token, 1, n_experts, integer=True)
    return n_experts, k, arguments.count("batch_size", batch_size, "batch")


def expected_distinct_experts(n_experts: int, experts_per_token: int, batch_size: int) -> float:
    """Expected distinct experts b tokens read from one layer, routed uniformly: E(1 - (1 - k/E)^b)."""
    e, k, b = _routing(n_experts, experts_per_token, batch_size)
    return e * (1.0 - (1.0 - k / e) ** b)


def simulate_distinct_experts(n_experts: int, experts_per_token: int, batch_size: int, *, trials: int = 1000,
                              popularity=None, seed: int = 0) -> float:
    """Mean distinct experts over `trials` batches, each token drawing k distinct experts with probabilities
    proportional to `popularity` (E weights > 0; None: uniform), by sampling, not by the formula."""
    e, k, b = _routing(n_experts, experts_per_token, batch_size)
    trials = arguments.count("trials", trials, "repeats")
    seed = arguments.count("seed", seed, "seed", minimum=0)
    if popularity is None:
        weights = np.ones(e)
    else:
        weights = arguments.finite_array("popularity", popularity, ndim=1, minimum=0, strict=True)
        if weights.shape != (e,):
            raise ValueError(f"popularity must hold one weight per expert ({e}); got {weights.shape[0]}")
    rng, counted = np.random.default_rng(seed), 0
    per_chunk = max(1, (1 << 22) // (b * e))  # trials drawn at once: at most 4M keys (32 MB)
    for start in range(0, trials, per_chunk):
        n = min(per_chunk, trials - start)
        # the top k of Gumbel-perturbed log weights are k distinct experts drawn with these probabilities
        keys = np.log(weights) + rng.gumbel(size=(n, b, e))
        chosen = np.argpartition(-keys, k - 1, axis=-1)[..., :k].reshape(n, b * k)
        touched = np.zeros((n, e), dtype=bool)
        np.put_along_axis(touched, chosen, True, axis=1)
        counted += int(touched.sum())
    return counted / trials


def weight_bytes_read(shape: footprint.ModelShape, n_tokens: int = 1, precision: str = "fp16") -> float:
    """Bytes of weights one forward pass of n_tokens tokens (a decode step of a batch, a prefill) reads: every
    matmul weight but the input embedding table (a lookup), and of each MoE layer's routed experts only the
    expected distinct ones."""
    arguments.instance("shape", shape, footprint.ModelShape)
    n_tokens = arguments.count("n_tokens", n_tokens, "elements")
    per_weight = formats.get(precision, argument="precision").bytes_per_weight
    params = shape.n_params - (0 if shape.tied_embeddings else shape.vocab_size * shape.d_model)
    if shape.is_moe:
        moe_layers = shape.n_layers - shape.n_dense_layers
        read = expected_distinct_experts(shape.n_experts, shape.experts_per_token, min(n_tokens, 1 << 20))
        unread = shape.n_experts - read
        params -= moe_layers * unread * shape.mlp_params(shape.d_ff_expert)
    return params * per_weight


def expert_parallel_bytes(shape: footprint.ModelShape, batch_size: int, ep_degree: int,
                          precision: str = "bf16") -> float:
    """Bytes crossing between chips in one decode step with the experts spread over ep_degree chips: per MoE
    layer, each token's hidden state (d_model values in `precision`) to each of its k experts and back, of
    which (ep - 1) / ep land on another chip when experts are spread evenly."""
    arguments.instance("shape", shape, footprint.ModelShape)
    if not shape.is_moe:
        raise ValueError(f"shape must be a mixture of experts; {shape.name} is dense")
    batch_size = arguments.count("batch_size", batch_size, "batch")
    ep = arguments.between("ep_degree", ep_degree, 1, shape.n_experts, integer=True)
    per_value = formats.get(precision, argument="precision").bytes_per_weight
    moe_layers = shape.n_layers - shape.n_dense_layers
    return 2 * moe_layers * batch_size * shape.experts_per_token * shape.d_model * per_value * (ep - 1) / ep
