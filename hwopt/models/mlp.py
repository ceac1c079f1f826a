"""The multi-layer perceptron the lessons measure (lessons 1, 3, 5): Linear layers with ReLU between them.

Shapes: (batch, in_features) -> (batch, out_features); every hidden layer is `width` wide.
"""

from __future__ import annotations

import torch
from torch import nn

from hwopt import arguments

__all__ = ["make_mlp"]


def make_mlp(width: int = 1024, depth: int = 3, *, in_features: int | None = None,
             out_features: int | None = None, seed: int = 0) -> nn.Sequential:
    """`depth` Linear layers with ReLU between them, in eval mode: in_features (default width) -> width -> ...
    -> out_features (default width); Linear layers at even indices; weights drawn from `seed`."""
    width = arguments.count("width", width, "dimension")
    depth = arguments.count("depth", depth, "layers")
    in_features = width if in_features is None else arguments.count("in_features", in_features, "dimension")
    out_features = width if out_features is None else arguments.count("out_features", out_features,
                                                                      "dimension")
    torch.manual_seed(arguments.count("seed", seed, "seed", minimum=0))
    sizes = [in_features, *[width] * (depth - 1), out_features]
    layers: list[nn.Module] = []
    for i in range(depth):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < depth - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).eval()
