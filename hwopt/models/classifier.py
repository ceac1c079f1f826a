"""A small real classifier: an MLP trained in seconds on scikit-learn's bundled digits (lessons 4, 5, 7).

Nothing is downloaded: the 1,797 8x8 digit images ship inside scikit-learn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.datasets import load_digits as sk_load_digits
from torch import nn

from hwopt import arguments
from hwopt.models import mlp

N_FEATURES = 64  # 8x8 pixels
N_CLASSES = 10


@dataclass(frozen=True)
class Digits:
    """Train/test split of the digits: x (n, 64) float32 in [0, 1], y (n,) int64 class labels."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> Digits:
    """scikit-learn's bundled digits, pixels scaled to [0, 1], split with a fixed shuffle."""
    test_fraction = arguments.fraction("test_fraction", test_fraction, allow_one=False)
    seed = arguments.count("seed", seed, "seed", minimum=0)

    bunch = sk_load_digits()
    x = torch.tensor(bunch.data / 16.0, dtype=torch.float32)
    y = torch.tensor(bunch.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = max(1, round(len(y) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return Digits(x[train], y[train], x[test], y[test])


def make_classifier(hidden: int = 256, n_hidden_layers: int = 2, seed: int = 0) -> nn.Sequential:
    """The digits MLP: 64 -> hidden (x n_hidden_layers, ReLU) -> 10 logits; Linear layers at even indices."""
    hidden = arguments.count("hidden", hidden, "dimension")
    n_hidden_layers = arguments.count("n_hidden_layers", n_hidden_layers, "layers")
    return mlp.make_mlp(hidden, n_hidden_layers + 1, in_features=N_FEATURES, out_features=N_CLASSES,
                        seed=seed)


def train(
    model: nn.Module, data: Digits, epochs: int = 10, lr: float = 1e-2, batch_size: int = 128, seed: int = 0
) -> nn.Module:
    """Train in place with Adam + cross-entropy; returns the model in eval mode."""
    arguments.instance("model", model, nn.Module)
    arguments.instance("data", data, Digits)
    arguments.finite_array("data.x_train", data.x_train, ndim=2)
    arguments.finite_array("data.y_train", data.y_train, ndim=1, integer=True, minimum=0)
    epochs = arguments.count("epochs", epochs, "repeats")
    lr = arguments.positive("lr", lr, maximum=arguments.LIMITS["learning_rate"])
    batch_size = arguments.count("batch_size", batch_size, "batch")
    generator = torch.Generator().manual_seed(arguments.count("seed", seed, "seed", minimum=0))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    n = len(data.y_train)
    threads_before = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: one thread avoids sync overhead, faster on a busy machine
    try:
        for _ in range(epochs):
            for idx in torch.randperm(n, generator=generator).split(batch_size):
                optimizer.zero_grad()
                loss_fn(model(data.x_train[idx]), data.y_train[idx]).backward()
                optimizer.step()
    finally:
        torch.set_num_threads(threads_before)
    return model.eval()


def train_digits_classifier(
    hidden: int = 256, n_hidden_layers: int = 2, epochs: int = 10, seed: int = 0
) -> tuple[nn.Sequential, Digits]:
    """Load the digits and train an MLP on them (a few seconds on 2 cores); returns (model, data)."""
    arguments.count("epochs", epochs, "repeats")  # before the loading, like the sizes make_classifier checks
    arguments.count("hidden", hidden, "dimension")
    arguments.count("n_hidden_layers", n_hidden_layers, "layers")
    data = load_digits(seed=seed)
    model = make_classifier(hidden, n_hidden_layers, seed=seed)
    train(model, data, epochs=epochs, seed=seed)
    return model, data


def predict_labels(predict: Callable[[torch.Tensor], object], x: torch.Tensor) -> np.ndarray:
    """Class labels (n,) from any callable returning logits (n, 10): torch module, ORT wrapper, ..."""
    arguments.function("predict", predict)
    arguments.finite_array("x", x, ndim=2)
    with torch.inference_mode():
        logits = predict(x)
    if isinstance(logits, torch.Tensor):
        logits = logits.detach().float().cpu().numpy()
    logits = np.asarray(logits)
    if logits.ndim != 2 or logits.shape[0] != len(x):
        raise ValueError(f"predict must return logits of shape ({len(x)}, classes), got {logits.shape}")
    return logits.argmax(axis=1)


def accuracy(predict: Callable[[torch.Tensor], object], x: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of x classified as y (0..1) by a callable returning logits."""
    arguments.function("predict", predict)
    arguments.finite_array("x", x, ndim=2)
    arguments.finite_array("y", y, ndim=1, integer=True, minimum=0)
    if len(x) != len(y) or len(y) == 0:
        raise ValueError(f"x and y must be non-empty and the same length, got {len(x)} and {len(y)}")
    return float((predict_labels(predict, x) == np.asarray(y)).mean())


def agreement(predict_a: Callable, predict_b: Callable, x: torch.Tensor) -> float:
    """Fraction of inputs on which two predictors choose the same class (0..1); a reference check."""
    arguments.function("predict_a", predict_a)
    arguments.function("predict_b", predict_b)
    arguments.finite_array("x", x, ndim=2)
    return float((predict_labels(predict_a, x) == predict_labels(predict_b, x)).mean())
