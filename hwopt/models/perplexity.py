"""Perplexity of a causal language model on a token stream: exp(mean next-token cross-entropy), in
non-overlapping windows of seq_len + 1 tokens (each window's first token is only context), and top-1 agreement
between two models' predictions over the same windows.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from hwopt import arguments

__all__ = ["windows", "mean_loss", "unigram_perplexity"]


def _check_stream(name: str, stream, vocab_size: int | None = None) -> None:
    """A 1-D int tensor of token ids (each below vocab_size if given)."""
    arguments.instance(name, stream, torch.Tensor)
    maximum = None if vocab_size is None else vocab_size - 1
    arguments.finite_array(name, stream, ndim=1, integer=True, minimum=0, maximum=maximum)


def windows(stream: torch.Tensor, seq_len: int, max_windows: int | None = None) -> torch.Tensor:
    """(n, seq_len + 1) windows of a 1-D token stream, non-overlapping, the tail that fills none dropped."""
    _check_stream("stream", stream)
    seq_len = arguments.count("seq_len", seq_len, "tokens")
    n = (len(stream) - 1) // seq_len
    if max_windows is not None:
        n = min(n, arguments.count("max_windows", max_windows, "items"))
    if n < 1:
        raise ValueError(f"stream must hold at least seq_len + 1 = {seq_len + 1} tokens; got {len(stream)}")
    return torch.stack([stream[i * seq_len:i * seq_len + seq_len + 1] for i in range(n)])


@torch.no_grad()
def mean_loss(model, stream: torch.Tensor, seq_len: int, max_windows: int | None = None,
              batch_size: int = 8, progress: bool = True) -> float:
    """Mean next-token cross-entropy (nats per token) of model (tokens (b, s) -> logits (b, s, vocab)) over
    the windows of stream."""
    batch_size = arguments.count("batch_size", batch_size, "batch")
    progress = arguments.boolean("progress", progress)
    chunks = windows(stream, seq_len, max_windows)
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for i in tqdm(range(0, len(chunks), batch_size), disable=not progress, desc="perplexity", unit="batch"):
        w = chunks[i:i + batch_size].to(device)
        logits = model(w[:, :-1]).float()
        total += F.cross_entropy(logits.flatten(0, 1), w[:, 1:].flatten(), reduction="sum").item()
        count += w[:, 1:].numel()
    return total / count


def unigram_perplexity(train_stream: torch.Tensor, stream: torch.Tensor, vocab_size: int) -> float:
    """Perplexity on stream of token frequencies counted on train_stream (add-one smoothing): the baseline a
    model that ignores context reaches."""
    vocab_size = arguments.count("vocab_size", vocab_size, "dimension")
    _check_stream("train_stream", train_stream, vocab_size)
    _check_stream("stream", stream, vocab_size)
    counts = torch.bincount(train_stream, minlength=vocab_size).double() + 1.0
    log_p = (counts / counts.sum()).log()
    return math.exp(-log_p[stream].mean().item())
