"""A tiny decoder-only transformer with a KV cache (lesson 2): random weights, real decode speed in tokens/s.

Shapes: tokens (batch, seq) int64 -> logits (batch, seq, vocab_size). Each generated token runs every Linear
layer once on a single vector, so decode speed is bounded by memory bandwidth / bytes read per token (the
weights, and the K and V of every past token).

At batch 1 torch runs each of those matrix-vector products (GEMVs) as a separate call (MKL's fp32 GEMV used
one core on the EPYC CPUs we measured) and reaches a fraction of the bandwidth; and each of the ~60 small ops
between them (norms, attention, GELU, adds) is a framework call that starts with cold caches, since every
GEMV has just streamed megabytes of weights through them. So where the C kernel builds (lowbit_gemv), a
single-token step on the CPU outside autograd is one call of its lowbit_decoder_step: every Linear (Q/K/V
fused in one, the output projection, the MLP's two, the head) in its fp32 GEMV on all of torch's threads,
and everything between them in C by one core while the others wait. The prompt (several tokens at once),
training and GPUs stay in torch. `kernel` chooses: "auto" (the C kernel where it builds), "c", or "torch".

The KV cache is a list with one (K, V) pair per layer, each (batch, heads, past tokens, head_dim).
"""

from __future__ import annotations

import ctypes
import functools

import torch
from torch import nn
from torch.nn import functional as F

from hwopt import arguments
from hwopt.kernels import lowbit_gemv
from hwopt.machine import bench

KERNELS = ("auto", "c", "torch")  # who runs a decode step's GEMVs: the C kernel where it builds, C, torch


@functools.cache
def _c_kernel():
    """The loaded C kernel, or the reason it is not available here (a str), decided once per process."""
    try:
        return lowbit_gemv.load()
    except (lowbit_gemv.KernelUnavailable, OSError) as error:
        return str(error)


def _kernel_lib(kernel: str):
    """The library a model's `kernel` setting runs its decode GEMVs with, or None for torch."""
    lib = _c_kernel() if kernel != "torch" else None
    if isinstance(lib, str):
        if kernel == "c":
            raise lowbit_gemv.KernelUnavailable(lib)
        return None
    return lib


def project(layer: nn.Linear, x, kernel: str = "auto", threads: int | None = None):
    """layer(x); one fp32 vector on the CPU outside autograd runs in the C kernel's GEMV (see the top), on
    `threads` cores (default: torch's thread count), unless the layer is not a plain Linear it can read
    (_c_ready: a subclass, a hook, another dtype)."""
    lib = _kernel_lib(kernel) if x.shape[:-1].numel() == 1 and x.device.type == "cpu" else None
    w, b = layer.weight, layer.bias
    if lib is None or torch.is_grad_enabled() or x.dtype != torch.float32 or not _c_ready(layer):
        return layer(x)
    x = x.contiguous()
    y = torch.empty(*x.shape[:-1], w.shape[0])
    status = lib.lowbit_gemv_f32(w.shape[0], w.shape[1], w.data_ptr(), x.data_ptr(),
                                 None if b is None else b.data_ptr(), y.data_ptr(),
                                 threads or torch.get_num_threads())
    if status != 0:
        raise RuntimeError(f"lowbit_gemv_f32 failed: {lowbit_gemv.ERRORS.get(status, status)}")
    return y


def causal_mask_after(past: int, new: int, device="cpu") -> torch.Tensor:
    """(new, past + new) bool mask: new token i sees every past token and the new tokens up to itself."""
    past = arguments.count("past", past, "tokens", minimum=0)
    new = arguments.count("new", new, "tokens")
    device = device if isinstance(device, torch.device) else bench.resolve_device(device)
    return torch.ones(new, past + new, dtype=torch.bool, device=device).tril(diagonal=past)


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention + 4x MLP, with an optional (k, v) cache."""

    def __init__(self, d_model: int, n_heads: int, kernel: str = "auto"):
        super().__init__()
        arguments.count("d_model", d_model, "dimension")
        arguments.count("n_heads", n_heads, "dimension")
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.kernel = arguments.one_of("kernel", kernel, KERNELS)
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.up = nn.Linear(d_model, 4 * d_model)
        self.down = nn.Linear(4 * d_model, d_model)

    def forward(self, x, cache=None, threads: int | None = None):
        """x (batch, seq, d_model), cache (k, v) each (batch, heads, past, head_dim) -> (y, new cache);
        threads: cores for the C kernel's GEMVs (default: torch's thread count).

        After a cache, the seq new tokens see every cached one and, causally, each other (verification)."""
        b, s, d = x.shape
        q, k, v = project(self.qkv, self.norm1(x), self.kernel, threads).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))
        mask = None
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
            if s > 1:  # several new tokens after a cache (speculative verification): causal among themselves
                mask = causal_mask_after(k.shape[2] - s, s, x.device)
        # A causal mask is only needed when several new tokens attend among themselves (the prompt).
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=cache is None and s > 1)
        x = x + project(self.proj, attn.transpose(1, 2).reshape(b, s, d), self.kernel, threads)
        up = project(self.up, self.norm2(x), self.kernel, threads)
        x = x + project(self.down, F.gelu(up), self.kernel, threads)
        return x, (k, v)


class TinyDecoder(nn.Module):
    """Decoder-only language model: token + position embeddings, n_layers blocks, untied output head."""

    def __init__(self, vocab_size: int = 8192, d_model: int = 1024, n_layers: int = 4, n_heads: int = 8,
                 max_len: int = 512, kernel: str = "auto"):
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
        self.blocks = nn.ModuleList(Block(d_model, n_heads, kernel) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.kernel = kernel

    @property
    def kernel(self) -> str:
        """Who runs the decode step's GEMVs: 'auto', 'c' or 'torch' (KERNELS); settable."""
        return self._kernel

    @kernel.setter
    def kernel(self, kernel: str) -> None:
        kernel = arguments.one_of("kernel", kernel, KERNELS)
        _kernel_lib(kernel)  # 'c' where the C kernel does not build: KernelUnavailable, saying why
        self._kernel = kernel
        for block in self.blocks:
            block.kernel = kernel

    def gemv_runner(self) -> str:
        """What runs a single-token decode step's GEMVs on the CPU (and, in the C kernel's decoder step, all
        the rest of it), in words (for reports)."""
        lib = _kernel_lib(self.kernel)
        if lib is None:
            return "torch (one call per Linear)"
        where = f"lowbit_gemv.c, {lowbit_gemv.kernel_path(lib)} path"
        if _whole_step_in_c(self):
            return f"the C kernel's decoder step ({where}): every GEMV, norm and attention in one call"
        return f"the C kernel's fp32 GEMV ({where}), one call per Linear"

    def forward(self, tokens, caches=None, start: int = 0):
        """tokens (batch, seq) -> (logits (batch, seq, vocab), caches); start = position of tokens[:, 0]."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (batch, seq); got shape {tuple(tokens.shape)}")
        if start + tokens.shape[1] > self.max_len:
            raise ValueError(f"sequence longer than max_len={self.max_len}")
        threads = torch.get_num_threads()
        lib = (_kernel_lib(self.kernel) if tokens.numel() == 1 and tokens.device.type == "cpu"
               and not torch.is_grad_enabled() else None)
        if lib is not None and (step := _step_in_c(self, lib, tokens, caches, start, threads)) is not None:
            return step
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        new = []
        for i, block in enumerate(self.blocks):
            x, c = block(x, None if caches is None else caches[i], threads)
            new.append(c)
        return project(self.head, self.norm(x), self.kernel, threads), new


def _c_ready(module: nn.Module) -> bool:
    """Whether lowbit_decoder_step can read this module's parameters as they are: a plain Linear, LayerNorm or
    Embedding without hooks (the C step would skip them), every parameter fp32, contiguous, on the CPU."""
    return (type(module) in (nn.Linear, nn.LayerNorm, nn.Embedding) and not module._forward_hooks
            and not module._forward_pre_hooks
            and all(p.dtype == torch.float32 and p.device.type == "cpu" and p.is_contiguous()
                    for p in module.parameters(recurse=False)))


def _whole_step_in_c(model: TinyDecoder) -> bool:
    """Whether lowbit_decoder_step runs this model's single-token steps: every module the plain one it was
    built with (_c_ready), every Linear but the head with a bias, every norm with its affine parameters and
    the same eps. Otherwise (a replaced or hooked module, another dtype) each GEMV goes to C alone
    (project)."""
    blocks = list(model.blocks)
    norms = [m for b in blocks for m in (b.norm1, b.norm2)] + [model.norm]
    linears = [m for b in blocks for m in (b.qkv, b.proj, b.up, b.down)]
    return not (any(type(b) is not Block or b._forward_hooks or b._forward_pre_hooks
                    or b.n_heads != blocks[0].n_heads for b in blocks)
                or not all(map(_c_ready, (*norms, *linears, model.head, model.tok, model.pos)))
                or any(m.bias is None for m in linears) or model.head.bias is not None
                or any(m.weight is None or m.bias is None or m.eps != model.norm.eps for m in norms))


def _step_in_c(model: TinyDecoder, lib, tokens, caches, start: int, threads: int):
    """One token through the whole model in lowbit_decoder_step (see the top): (logits, caches) as forward
    returns them, or None where torch should do the step: a model it does not run (_whole_step_in_c), a
    token out of range (torch says so), or an unusual cache."""
    if not _whole_step_in_c(model):
        return None
    blocks, heads = list(model.blocks), model.blocks[0].n_heads
    if tokens.dtype not in (torch.int32, torch.int64) or start < 0:
        return None  # torch says what is wrong
    d, token = model.tok.embedding_dim, int(tokens.reshape(()))
    if not 0 <= token < model.tok.num_embeddings:
        return None
    past = 0 if caches is None else caches[0][0].shape[2]
    shape = (1, heads, past, d // heads)
    if caches is not None and (len(caches) != len(blocks) or not all(
            t.shape == shape and t.dtype == torch.float32 and t.device.type == "cpu" and t.stride(3) == 1
            for k, v in caches for t in (k, v))):
        return None  # a cache of another layout: torch handles it, or says what is wrong
    kv = torch.empty(len(blocks), 2, 1, heads, past + 1, d // heads)
    logits = torch.empty(1, 1, model.head.out_features)
    pointers, strides = [], []
    for i, b in enumerate(blocks):
        # the cache before this token (none: past = 0, nothing is read), and its copy with this token after
        k, v = (kv[i, 0, 0], kv[i, 1, 0]) if caches is None else (caches[i][0][0], caches[i][1][0])
        pointers += [p.data_ptr() for m in (b.norm1, b.qkv, b.proj, b.norm2, b.up, b.down)
                     for p in (m.weight, m.bias)]
        pointers += [k.data_ptr(), v.data_ptr(), kv[i, 0].data_ptr(), kv[i, 1].data_ptr()]
        strides += [k.stride(0), k.stride(1), v.stride(0), v.stride(1)]
    pointers += [model.norm.weight.data_ptr(), model.norm.bias.data_ptr(), model.head.weight.data_ptr(),
                 model.tok.weight[token].data_ptr(), model.pos.weight[start].data_ptr()]
    status = lib.lowbit_decoder_step(len(blocks), d, heads, past, model.head.out_features,
                                     (ctypes.c_void_p * len(pointers))(*pointers),
                                     (ctypes.c_long * len(strides))(*strides), model.norm.eps,
                                     logits.data_ptr(), threads)
    if status != 0:
        raise RuntimeError(f"lowbit_decoder_step failed: {lowbit_gemv.ERRORS.get(status, status)}")
    return logits, [(kv[i, 0], kv[i, 1]) for i in range(len(blocks))]


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
                      seed: int = 0, device="cpu", kernel: str = "auto") -> TinyDecoder:
    """A TinyDecoder with seeded random weights, in eval mode on `device`; kernel: see KERNELS."""
    device = bench.resolve_device(device)
    torch.manual_seed(arguments.count("seed", seed, "seed", minimum=0))
    return TinyDecoder(vocab_size, d_model, n_layers, n_heads, kernel=kernel).eval().to(device)


def weight_bytes_per_token(model: TinyDecoder) -> int:
    """Bytes of weights one decode step reads: everything except the embedding tables (one row each)."""
    arguments.instance("model", model, TinyDecoder)
    embedded = {id(p) for m in (model.tok, model.pos) for p in m.parameters()}
    return sum(p.numel() * p.element_size() for p in model.parameters() if id(p) not in embedded)


def check_new_tokens(model: TinyDecoder, prompt_len: int, new_tokens, minimum: int = 1) -> None:
    """ValueError unless new_tokens (at least `minimum`) fit after a prompt of prompt_len in model.max_len."""
    arguments.instance("model", model, TinyDecoder)
    arguments.count("prompt_len", prompt_len, "tokens", minimum=0)
    arguments.count("minimum", minimum, "tokens", minimum=0)
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
    check_new_tokens(model, prompt.shape[1], new_tokens)
    logits, caches = model(prompt)
    tokens = prompt
    for i in range(new_tokens):
        nxt = logits[:, -1:].argmax(-1)
        tokens = torch.cat([tokens, nxt], dim=1)
        if i < new_tokens - 1:
            logits, caches = model(nxt, caches, start=tokens.shape[1] - 1)
    return tokens


def kv_bytes_read(model: TinyDecoder, context_len: int) -> int:
    """Bytes of K and V one decode step reads at context_len past tokens: 2 x layers x context x d_model x
    bytes per element (every head keeps its own K and V here)."""
    arguments.instance("model", model, TinyDecoder)
    context_len = arguments.count("context_len", context_len, "tokens", minimum=0)
    element = next(model.parameters()).element_size()
    return 2 * len(model.blocks) * context_len * model.tok.embedding_dim * element
