"""GPTQ (Frantar et al., 2023): weight-only quantization that rounds one input column at a time and spreads
each column's rounding error over the columns not yet rounded, weighted by the layer's inputs (lesson 9).

For a Linear with weight W (out, in) and calibration inputs X (tokens, in), the output error of a quantized
W' is ||X W^T - X W'^T||^2 = trace((W - W') H (W - W')^T) with H = X^T X / tokens. Rounding column j leaves
an error e_j = w_j - q_j; the columns after j absorb it as w_k -= e_j * [H^-1]_jk / [H^-1]_jj (the optimal
update of Optimal Brain Surgeon), computed from the upper Cholesky factor of H^-1 in blocks of BLOCK columns.
A group format's scales (int4_g128: a scale per 128 inputs of a row) are taken from the updated weights when
rounding reaches the group's first column, as the reference implementation does; rounding itself is
quantization.round_to_scales. Left out: act-order (columns in order of decreasing H_jj) and static groups.
"""

from __future__ import annotations

import torch

from hwopt import arguments, formats, quantization

__all__ = ["BLOCK", "DAMPING", "hessian", "gptq_quantize"]

BLOCK = 128  # columns updated together before the rest of the matrix is (the lazy batch update)
DAMPING = 0.01  # added to H's diagonal, as a share of its mean: keeps the Cholesky factorisation stable


def hessian(x: torch.Tensor) -> torch.Tensor:
    """H = X^T X / tokens (in, in), float64, of calibration inputs x (tokens, in)."""
    arguments.instance("x", x, torch.Tensor)
    if not x.is_floating_point():
        raise ValueError(f"x must be a floating-point tensor of inputs (tokens, in); got {x.dtype}")
    arguments.finite_array("x", x, ndim=2)
    x = x.detach().double()
    return x.T @ x / x.shape[0]


def _group_scales(columns: torch.Tensor, fmt: formats.Format) -> torch.Tensor:
    """The scales (out, 1) that quantization.quantize gives these columns (out, n) as one block."""
    q = quantization.quantize(columns, fmt, block=columns.shape[1])
    return q.scales.to(columns.dtype)


def gptq_quantize(w: torch.Tensor, h: torch.Tensor, precision: str = "int4_g128", block: int = BLOCK,
                  damping: float = DAMPING) -> torch.Tensor:
    """w (out, in) quantized by GPTQ for inputs whose H = hessian(x) is h (in, in); precision: an integer
    format of hwopt.formats (a group format such as int4_g128, or int8/int4 for a scale per row). Returns the
    quantized weight, dequantized (out, in), float32."""
    arguments.instance("w", w, torch.Tensor)
    arguments.finite_array("w", w, ndim=2)
    arguments.instance("h", h, torch.Tensor)
    arguments.finite_array("h", h, ndim=2)
    if h.shape != (w.shape[1], w.shape[1]):
        raise ValueError(f"h must be (in, in) = ({w.shape[1]}, {w.shape[1]}) for w {tuple(w.shape)}; got "
                         f"{tuple(h.shape)}")
    fmt = formats.get(precision)
    if fmt.kind != "int":
        raise ValueError(f"precision must be an integer format (GPTQ rounds on a scaled integer grid); got "
                         f"{precision!r}")
    block = arguments.count("block", block, "dimension")
    damping = arguments.positive("damping", damping, maximum=1.0)
    n = w.shape[1]
    group = fmt.block or n  # a scale per group of inputs, or one per row
    w = w.detach().double().clone()
    h = h.detach().double().clone()
    dead = torch.diagonal(h) == 0  # inputs never used: their weights cannot matter
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h += damping * torch.diagonal(h).mean() * torch.eye(n, dtype=h.dtype)
    h_inv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    q = torch.zeros_like(w)
    scales = None
    for start in range(0, n, block):
        end = min(start + block, n)
        work, errors = w[:, start:end].clone(), torch.zeros(w.shape[0], end - start, dtype=w.dtype)
        h_block = h_inv[start:end, start:end]
        for i in range(end - start):
            column = start + i
            if column % group == 0:
                ahead = torch.cat([work[:, i:], w[:, end:]], dim=1)[:, :group]  # updated weights of the group
                scales = _group_scales(ahead, fmt)
            rounded = quantization.round_to_scales(work[:, i:i + 1], scales, fmt)
            q[:, column] = rounded[:, 0]
            error = (work[:, i] - rounded[:, 0]) / h_block[i, i]
            work[:, i:] -= error[:, None] * h_block[i, i:][None, :]
            errors[:, i] = error
        w[:, end:] -= errors @ h_inv[start:end, end:]
    return q.float()
