"""The LLaMA architecture, all of it in this file: RMSNorm, rotary position embeddings (RoPE), grouped-query
attention, SwiGLU, tied embeddings, and a KV cache for prefill and decode.

Shapes: tokens (batch, seq) int64 -> logits (batch, seq, vocab_size). Parameter names are Hugging Face's
(`embed_tokens`, `layers.N.self_attn.q_proj`, ...; a Hugging Face checkpoint adds the prefix `model.`), and
RoPE rotates the two halves of each head (Hugging Face's `rotate_half`), so a LlamaForCausalLM's weights load
here unchanged. Everything computes in the parameters' dtype, except the norms' mean of squares (fp32).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

from hwopt import arguments
from hwopt.machine import bench

__all__ = ["LlamaConfig", "Llama", "KVCache"]


@dataclass(frozen=True)
class LlamaConfig:
    """The shape of a LLaMA model; head_dim 0 means d_model / n_heads."""

    vocab_size: int = 4096
    d_model: int = 512
    n_layers: int = 8
    n_heads: int = 8
    n_kv_heads: int = 2  # grouped-query attention: n_heads / n_kv_heads query heads share each K and V head
    hidden: int = 1536  # the SwiGLU's inner width
    max_seq_len: int = 512
    rope_theta: float = 10_000.0
    norm_eps: float = 1e-5
    head_dim: int = 0
    tie_embeddings: bool = True
    # Llama 3's RoPE scaling: (factor, low_freq_factor, high_freq_factor, original_max_seq_len); () for none
    rope_llama3: tuple = ()

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_heads", "n_kv_heads", "hidden"):
            arguments.count(name, getattr(self, name), "dimension")
        arguments.count("n_layers", self.n_layers, "layers")
        arguments.count("max_seq_len", self.max_seq_len, "tokens")
        arguments.count("head_dim", self.head_dim, "dimension", minimum=0)
        arguments.positive("rope_theta", self.rope_theta)
        arguments.positive("norm_eps", self.norm_eps)
        arguments.boolean("tie_embeddings", self.tie_embeddings)
        arguments.instance("rope_llama3", self.rope_llama3, tuple)
        if self.rope_llama3:
            if len(self.rope_llama3) != 4:
                raise ValueError("rope_llama3 must be (factor, low_freq_factor, high_freq_factor, "
                                 f"original_max_seq_len); got {self.rope_llama3!r}")
            for i, value in enumerate(self.rope_llama3):
                arguments.positive(f"rope_llama3[{i}]", value)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if not self.head_dim and self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.head_dim and self.head_dim * self.n_heads == self.d_model:
            object.__setattr__(self, "head_dim", 0)  # the default spelled out (config.json's head_dim)
        if self.dim_per_head % 2:
            raise ValueError(f"head_dim must be even (RoPE rotates pairs); got {self.dim_per_head}")

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    """x / RMS(x) * weight, the mean of squares in fp32."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


def rope_frequencies(config: LlamaConfig) -> torch.Tensor:
    """The rotation speed of each pair of a head, radians per position: (head_dim / 2,) fp32."""
    dim = config.dim_per_head
    inv_freq = 1.0 / config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    if config.rope_llama3:  # long wavelengths slowed by `factor`, short ones kept, a smooth ramp between
        factor, low, high, original = config.rope_llama3
        wavelength = 2 * math.pi / inv_freq
        ramp = ((original / wavelength - low) / (high - low)).clamp(0, 1)
        inv_freq = (1 - ramp) * inv_freq / factor + ramp * inv_freq
    return inv_freq


def rotate(x, cos, sin):
    """RoPE on x (batch, heads, seq, head_dim): the first half of each head paired with the second."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class KVCache:
    """Keys and values of the tokens seen so far, per layer (batch, n_kv_heads, max_len, head_dim), filled up
    to `length`; `truncate` forgets the last tokens (a rejected speculative draft)."""

    def __init__(self, config: LlamaConfig, batch_size: int = 1, max_len: int | None = None,
                 device="cpu", dtype=torch.float32):
        arguments.instance("config", config, LlamaConfig)
        batch_size = arguments.count("batch_size", batch_size, "batch")
        device = bench.resolve_device(device)
        max_len = config.max_seq_len if max_len is None else max_len
        self.max_len = arguments.count("max_len", max_len, "tokens")
        shape = (batch_size, config.n_kv_heads, self.max_len, config.dim_per_head)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)]
        self.length = 0

    def update(self, layer: int, k, v):
        """Store k, v (batch, n_kv_heads, new, head_dim) after the cached tokens; returns all of them."""
        end = self.length + k.shape[2]
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def truncate(self, length: int) -> None:
        """Keep only the first `length` tokens."""
        self.length = arguments.between("length", length, 0, self.length, integer=True)

    @property
    def nbytes(self) -> int:
        """Bytes held for keys and values, allocated (max_len tokens), all layers."""
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


class Attention(nn.Module):
    """Causal grouped-query self-attention with RoPE."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, config.dim_per_head
        self.q_proj = nn.Linear(config.d_model, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.d_model, self.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.d_model, self.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, config.d_model, bias=False)

    def forward(self, x, cos, sin, cache: KVCache | None = None, layer: int = 0):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        past = 0
        if cache is not None:
            past = cache.length
            k, v = cache.update(layer, k, v)
        repeat = self.n_heads // self.n_kv_heads  # each K/V head serves `repeat` consecutive query heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        mask = None
        if past and s > 1:  # new tokens after a cache see all of it and, causally, each other
            mask = torch.ones(s, past + s, dtype=torch.bool, device=x.device).tril(diagonal=past)
        causal = cache is None or (not past and s > 1)  # a Python bool even while exporting
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return self.o_proj(y.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.d_model, config.hidden, bias=False)
        self.up_proj = nn.Linear(config.d_model, config.hidden, bias=False)
        self.down_proj = nn.Linear(config.hidden, config.d_model, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """Pre-norm decoder layer: x + attention(norm(x)), then + mlp(norm(x))."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.d_model, config.norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.d_model, config.norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin, cache=None, layer: int = 0):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, layer)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    """A LLaMA decoder: embeddings, n_layers blocks, a final RMSNorm, an output head (tied to the embeddings
    unless config.tie_embeddings is False)."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        arguments.instance("config", config, LlamaConfig)
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self._inv_freqs: dict[str, torch.Tensor] = {}  # RoPE speeds per device, fp32 whatever the weights
        self.apply(self._init)
        for name, p in self.named_parameters():  # residual outputs scaled down with depth (GPT-2's rule)
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * config.n_layers))

    @staticmethod
    def _init(module):
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def parameter_count(self, embeddings: bool = True) -> int:
        """Parameters, a tied head counted once; without the embedding table if embeddings=False."""
        arguments.boolean("embeddings", embeddings)
        total = sum(p.numel() for p in self.parameters())
        return total if embeddings else total - self.embed_tokens.weight.numel()

    def _inv_freq(self, device) -> torch.Tensor:
        key = str(device)
        if key not in self._inv_freqs:
            self._inv_freqs[key] = rope_frequencies(self.config).to(device)
        return self._inv_freqs[key]

    def rotary(self, start: int, end: int, dtype=torch.float32, device="cpu"):
        """RoPE's (cos, sin) for positions start..end - 1, each (end - start, head_dim) in dtype: what every
        block takes (a block run on its own, as a layer-by-layer quantizer runs it, needs them too)."""
        start = arguments.count("start", start, "tokens", minimum=0)
        end = arguments.count("end", end, "tokens", minimum=start + 1)
        return self._rotary(start, end, dtype, bench.resolve_device(device))

    def _rotary(self, start, end, dtype, device):  # unchecked: forward's positions are symbolic in a trace
        positions = torch.arange(start, end, device=device, dtype=torch.float32)
        angles = torch.outer(positions, self._inv_freq(device))
        return (torch.cat((angles, angles), dim=-1).cos().to(dtype),
                torch.cat((angles, angles), dim=-1).sin().to(dtype))

    def new_cache(self, batch_size: int = 1, max_len: int | None = None) -> KVCache:
        """An empty KVCache on this model's device and in its dtype."""
        w = self.embed_tokens.weight
        return KVCache(self.config, batch_size, max_len, w.device, w.dtype)

    def forward(self, tokens, cache: KVCache | None = None):
        """tokens (batch, seq) -> logits (batch, seq, vocab); with a cache, tokens follow the cached ones and
        their keys and values are added to it."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (batch, seq); got shape {tuple(tokens.shape)}")
        start = cache.length if cache is not None else 0
        end = start + tokens.shape[1]
        limit = cache.max_len if cache is not None else self.config.max_seq_len
        if end > limit:
            holder = "cache" if cache is not None else "model"
            raise ValueError(f"tokens: positions {start}..{end - 1} exceed the {holder}'s {limit} positions")
        x = self.embed_tokens(tokens)
        cos, sin = self._rotary(start, end, x.dtype, tokens.device)
        for i, block in enumerate(self.layers):
            x = block(x, cos, sin, cache, i)
        if cache is not None:
            cache.length = end
        return self.lm_head(self.norm(x))

    @torch.no_grad()
    def generate(self, tokens, max_new_tokens: int, temperature: float = 0.0, seed: int = 0):
        """tokens (batch, seq) followed by max_new_tokens more: greedy at temperature 0, else sampled."""
        arguments.finite_array("tokens", tokens, ndim=2, integer=True, minimum=0,
                               maximum=self.config.vocab_size - 1)
        if not isinstance(tokens, torch.Tensor):
            raise ValueError(f"tokens must be a tensor of token ids (batch, seq); "
                             f"got {type(tokens).__name__}")
        max_new_tokens = arguments.count("max_new_tokens", max_new_tokens, "tokens")
        temperature = arguments.positive("temperature", temperature, allow_zero=True)
        seed = arguments.count("seed", seed, "seed", minimum=0)
        generator = torch.Generator(tokens.device).manual_seed(seed)
        length = min(tokens.shape[1] + max_new_tokens, self.config.max_seq_len)
        cache = self.new_cache(tokens.shape[0], length)
        logits = self(tokens, cache)[:, -1]
        out = [tokens]
        for i in range(max_new_tokens):
            if temperature == 0:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                probs = torch.softmax(logits.float() / temperature, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator)
            out.append(nxt)
            if i + 1 < max_new_tokens:
                logits = self(nxt, cache)[:, -1]
        return torch.cat(out, dim=1)
