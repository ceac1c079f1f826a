"""A tiny decoder-only transformer with a KV cache (lesson 2): random weights, real decode speed in tokens/s.

Shapes: tokens (batch, seq) int64 -> logits (batch, seq, vocab_size). Each generated token runs every Linear
layer once on a single vector, so decode speed is bounded by memory bandwidth / bytes of weights read.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from hwopt import arguments
from hwopt.machine import bench


def causal_mask_after(past: int, new: int, device="cpu") -> torch.Tensor:
    """(new, past + new) bool mask: new token i sees every past token and the new tokens up to itself."""
    past = arguments.count("past", past, "tokens", minimum=0)
    new = arguments.count("new", new, "tokens")
    device = device if isinstance(device, torch.device) else bench.resolve_device(device)
    return torch.ones(new, past + new, dtype=torch.bool, device=device).tril(diagonal=past)


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention + 4x MLP, with an optional (k, v) cache."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        arguments.count("d_model", d_model, "dimension")
        arguments.count("n_heads", n_heads, "dimension")
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.up = nn.Linear(d_model, 4 * d_model)
        self.down = nn.Linear(4 * d_model, d_model)

    def forward(self, x, cache=None):
        """x (batch, seq, d_model), cache (k, v) each (batch, heads, past, head_dim) -> (y, new cache).

        After a cache, the seq new tokens see every cached one and, causally, each other (verification)."""
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))
        mask = None
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
            if s > 1:  # several new tokens after a cache (speculative verification): causal among themselves
                mask = causal_mask_after(k.shape[2] - s, s, x.device)
        # A causal mask is only needed when several new tokens attend among themselves (the prompt).
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=cache is None and s > 1)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        x = x + self.down(F.gelu(self.up(self.norm2(x))))
        return x, (k, v)


class TinyDecoder(nn.Module):
    """Decoder-only language model: token + position embeddings, n_layers blocks, untied output head."""

    def __init__(self, vocab_size: int = 8192, d_model: int = 1024, n_layers: int = 4, n_heads: int = 8,
                 max_len: int = 512):
        super().__init__()
        arguments.count("vocab_size", vocab_size, "dimension")
        arguments.count("d_model", d_model, "dimension")
        arguments.count("n_layers", n_layers, "layers")
        arguments.count("n_heads", n_heads, "dimension")
        arguments.count("max_len", max_len, "tokens")
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.max_len = max_len
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, tokens, caches=None, start: int = 0):
        """tokens (batch, seq) -> (logits (batch, seq, vocab), caches); start = position of tokens[:, 0]."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (batch, seq); got shape {tuple(tokens.shape)}")
        if start + tokens.shape[1] > self.max_len:
            raise ValueError(f"sequence longer than max_len={self.max_len}")
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        new = []
        for i, block in enumerate(self.blocks):
            x, c = block(x, None if caches is None else caches[i])
            new.append(c)
        return self.head(self.norm(x)), new


def truncate_caches(caches: list, length: int) -> list:
    """The KV caches keeping only their first `length` positions (tokens rejected after a verification)."""
    arguments.instance("caches", caches, (list, tuple))
    length = arguments.count("length", length, "tokens", minimum=0)
    for i, cache in enumerate(caches):
        arguments.instance(f"caches[{i}]", cache, (list, tuple))
        if len(cache) != 2 or not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in cache):
            raise ValueError(f"caches[{i}] must be a (k, v) pair of (batch, heads, past, head_dim) tensors")
        if length > cache[0].shape[2]:
            raise ValueError(f"length must be at most the cached {cache[0].shape[2]} positions; got {length}")
    return [(k[:, :, :length], v[:, :, :length]) for k, v in caches]


def make_tiny_decoder(vocab_size: int = 8192, d_model: int = 1024, n_layers: int = 4, n_heads: int = 8,
                      seed: int = 0, device="cpu") -> TinyDecoder:
    """A TinyDecoder with seeded random weights, in eval mode on `device`."""
    device = bench.resolve_device(device)
    torch.manual_seed(arguments.count("seed", seed, "seed", minimum=0))
    return TinyDecoder(vocab_size, d_model, n_layers, n_heads).eval().to(device)


def weight_bytes_per_token(model: TinyDecoder) -> int:
    """Bytes of weights one decode step reads: everything except the embedding tables (one row each)."""
    arguments.instance("model", model, TinyDecoder)
    embedded = {id(p) for m in (model.tok, model.pos) for p in m.parameters()}
    return sum(p.numel() * p.element_size() for p in model.parameters() if id(p) not in embedded)


def _within_max_len(model: TinyDecoder, prompt_len: int, new_tokens, minimum: int = 1) -> None:
    arguments.count("new_tokens", new_tokens, "tokens", minimum=minimum)
    if prompt_len + new_tokens > model.max_len:
        raise ValueError(f"new_tokens must be at most {model.max_len - prompt_len} after a prompt of "
                         f"{prompt_len} (the model's max_len is {model.max_len}); got {new_tokens}")


@torch.inference_mode()
def generate(model: TinyDecoder, prompt, new_tokens: int):
    """Greedy decoding with the KV cache: prompt (batch, seq) -> (batch, seq + new_tokens) tokens."""
    arguments.instance("model", model, TinyDecoder)
    vocab = model.tok.num_embeddings
    arguments.instance("prompt", prompt, torch.Tensor)
    arguments.finite_array("prompt", prompt, ndim=2, integer=True, minimum=0, maximum=vocab - 1)
    _within_max_len(model, prompt.shape[1], new_tokens)
    logits, caches = model(prompt)
    tokens = prompt
    for i in range(new_tokens):
        nxt = logits[:, -1:].argmax(-1)
        tokens = torch.cat([tokens, nxt], dim=1)
        if i < new_tokens - 1:
            logits, caches = model(nxt, caches, start=tokens.shape[1] - 1)
    return tokens


def measure_decode(model: TinyDecoder, prompt_len: int = 16, new_tokens: int = 32, device="cpu",
                   repeats: int = 3) -> tuple[float, bench.Measurement]:
    """Measured single-stream decode speed (tokens/s) over new_tokens steps after a prompt, and the timing."""
    arguments.instance("model", model, TinyDecoder)
    arguments.count("prompt_len", prompt_len, "tokens")
    _within_max_len(model, prompt_len, new_tokens, minimum=2)  # the first new token comes from the prefill
    device = bench.resolve_device(device)
    arguments.count("repeats", repeats, "repeats")
    prompt = torch.randint(0, model.tok.num_embeddings, (1, prompt_len), device=device)
    with torch.inference_mode():
        logits, caches = model(prompt)  # prefill once; time only the token-by-token steps

    def steps():
        with torch.inference_mode():
            cache = caches
            nxt = logits[:, -1:].argmax(-1)
            for i in range(new_tokens - 1):
                out, cache = model(nxt, cache, start=prompt_len + i)
                nxt = out[:, -1:].argmax(-1)
            return nxt

    with torch.inference_mode():
        m = bench.time_fn(steps, label="decode", device=device, warmup=1, repeats=repeats, number=1)
    return (new_tokens - 1) / m.median_s, m


def estimated_tokens_per_s(model: TinyDecoder, bandwidth_gbs: float) -> float:
    """Bandwidth-bound estimate: bandwidth / weight bytes per token (tokens/s)."""
    bandwidth_gbs = arguments.positive("bandwidth_gbs", bandwidth_gbs)
    return bandwidth_gbs * 1e9 / weight_bytes_per_token(model)


def kv_bytes_read(model: TinyDecoder, context_len: int) -> int:
    """Bytes of K and V one decode step reads at context_len past tokens: 2 x layers x context x d_model x
    bytes per element (every head keeps its own K and V here)."""
    arguments.instance("model", model, TinyDecoder)
    context_len = arguments.count("context_len", context_len, "tokens", minimum=0)
    element = next(model.parameters()).element_size()
    return 2 * len(model.blocks) * context_len * model.tok.embedding_dim * element


def bound_report(model: TinyDecoder, measured_tokens_per_s: float, bandwidth_gbs: float,
                 context_len: int = 0) -> str:
    """The measured decode rate against its bandwidth bound: the ratio, and what it means (lesson 2).

    context_len: the longest context of the measured steps (the K and V of every past token are read too).
    """
    arguments.positive("measured_tokens_per_s", measured_tokens_per_s)
    context_len = arguments.count("context_len", context_len, "tokens", minimum=0)
    bound = estimated_tokens_per_s(model, bandwidth_gbs)
    weights = weight_bytes_per_token(model)
    ratio = bound / measured_tokens_per_s
    streamed_gbs = weights * measured_tokens_per_s / 1e9
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    lines = [f"{weights / 1e6:,.0f} MB of {dtype} weights per token; the bound at "
             f"{bandwidth_gbs:,.1f} GB/s is {bound:,.0f} tokens/s, measured {measured_tokens_per_s:,.0f} "
             f"tokens/s: bound / measured = {ratio:.2f} (the weights streamed at {streamed_gbs:,.1f} GB/s, "
             f"{streamed_gbs / bandwidth_gbs:.0%} of the bandwidth)"]
    if context_len:
        kv = kv_bytes_read(model, context_len)
        meaning = ("the weights are what this step reads" if kv < 0.1 * weights else
                   "a real share of the bytes read, which the bound (weights only) leaves out")
        lines.append(f"the KV cache at {context_len} tokens of context adds {kv / 1e6:,.2f} MB per token, "
                     f"{kv / weights:.1%} of the weight bytes: {meaning}")
    if ratio < 0.9:
        lines.append("Faster than the bound: some of the weights were read from a cache rather than memory, "
                     "or the bandwidth probe measured low.")
    elif ratio <= 1.25:
        lines.append("At the bound: decoding here is memory-bound, as predicted, and only fewer bytes per "
                     "token would make it faster.")
    else:
        lines.append(f"{ratio:.1f}x below the bound: {1 - 1 / ratio:.0%} of each step goes to something "
                     "other than reading weights at full bandwidth: one framework call per layer with its "
                     "own overhead, attention and normalization on single vectors, and GEMVs that may not "
                     "use every core. The bound is what a kernel with none of that would reach.")
    return "\n".join(lines)
