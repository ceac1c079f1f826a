"""Quantization, computed in one place: the codes and scales a number format stores for a tensor. Lesson 4's
sliders, lesson 9's formats, and the kernels of lesson 2 (the C kernel and ONNX Runtime's graphs, which only
pack these codes into their own layouts) all call `quantize`; `fake_quantize` is the round trip.

Integer grids of b bits: symmetric q = clamp(round(x / s), -qmax, qmax) with qmax = 2^(b-1) - 1 and
s = max|x| / qmax (the most negative code, -2^(b-1), is left out to keep zero in the middle: int4 uses 15
codes); asymmetric q = clamp(round(x / s) + z, 0, 2^b - 1) with s = (max - min) / (2^b - 1), the range widened
to hold 0, and z = round(-min / s). Float formats round to the nearest value of their encoding (ties to even,
saturating at the largest finite value) under a scale: amax / the element's largest value (fp8; NVFP4's E4M3
block scales, under one fp32 scale per tensor that puts the tensor's amax on the largest block scale times the
largest element), or a power of two (MXFP4's E8M0: 2^(floor(log2 amax) - the element's largest exponent), the
OCP MX rule). Float formats of 16 bits or more are plain casts, with no scale.

Scales are stored in the format's scale format (fp32 unless it says otherwise: int4_g128's are fp16), and the
codes are computed with the stored scale, as a kernel reads them. One scale covers the whole tensor, a channel
(per_channel: every index of the other axes, e.g. a row of a weight (out, in)), or a block of `block` values
of a channel along `axis`, the reduction axis (a block format's own block unless told). A block or channel of
zeros gets scale 1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from hwopt import arguments, formats

__all__ = ["BITS", "Quantized", "blocked", "fake_quantize", "levels", "quantize", "representable_values",
           "round_to_float", "round_to_scales"]

BITS = (2, 16)  # the bit widths an integer grid given by its bits may have (lesson 4's slider)
_SIGNED_FLOATS = tuple(e.name for e in formats.ENCODINGS.values() if e.signed)


# ---- grids ------------------------------------------------------------------------------------------------


def levels(bits: int, *, symmetric: bool = True) -> int:
    """How many distinct codes an integer grid of `bits` uses: symmetric 2^bits - 1 (-(2^(b-1) - 1) ..
    2^(b-1) - 1: int4 has 15, int2 has 3), asymmetric all 2^bits."""
    bits = arguments.between("bits", bits, *BITS, integer=True)
    symmetric = arguments.boolean("symmetric", symmetric)
    return 2**bits - 1 if symmetric else 2**bits


def _grid(precision) -> formats.Format:
    """The Format of `precision`: a name, alias or Format, or an integer grid's bit width (2 to 16)."""
    if isinstance(precision, int | np.integer) and not isinstance(precision, bool | np.bool_):
        bits = arguments.between("precision", precision, *BITS, integer=True)
        return formats.FORMATS.get(f"int{bits}") or formats.Format(f"int{bits}", bits, "int", "", "")
    return formats.get(precision, "precision")


def _is_cast(f: formats.Format) -> bool:
    return f.kind == "float" and f.bits >= 16


def blocked(precision: str | int | formats.Format, block: int) -> formats.Format:
    """The format `precision` (as quantize takes it) with `block` values per scale: a block format regrouped
    (its scale format kept: int4_g128 at 32 has fp16 scales), an integer or fp8 format in blocks with an fp32
    scale each (the entry of hwopt.formats with that layout where there is one: int4 at 32 is int4_g32)."""
    f = _grid(precision)
    block = arguments.count("block", block, "dimension")
    if f.block:
        return f.with_block(block)
    if _is_cast(f):
        raise ValueError(f"block: {f.name} is a plain cast (16 bits or more), with no scales to group; "
                         f"got block={block!r}")
    for g in formats.FORMATS.values():
        if (g.kind, g.bits, g.element, g.block, g.scale_format) == (f.kind, f.bits, f.element, block, "fp32"):
            return g
    return replace(f, name=f"{f.name}, an fp32 scale per {block}", aliases=(), block=block, scale_bits=32,
                   scale_format="fp32")


def _quantum(magnitude: np.ndarray, enc: formats.Encoding) -> np.ndarray:
    """The spacing of the encoding's values around each magnitude (>= 0): its local rounding step."""
    _, exponent = np.frexp(magnitude)  # magnitude = f * 2^exponent, 0.5 <= f < 1
    return np.ldexp(1.0, np.maximum(exponent - 1, enc.min_exponent) - enc.mantissa_bits)


def _round(values: np.ndarray, enc: formats.Encoding) -> np.ndarray:
    """values rounded to the nearest value of enc, ties to even, saturating at +-max_value (float64)."""
    magnitude = np.abs(values)
    quantum = _quantum(magnitude, enc)
    return np.sign(values) * np.minimum(np.rint(magnitude / quantum) * quantum, enc.max_value)


def round_to_float(x, encoding: str):
    """x rounded to the nearest value of a signed float encoding ('E4M3', 'E5M2', 'E2M1', ...: a key of
    hwopt.formats.ENCODINGS), ties to even, saturating at +-max_value; same shape, type and dtype as x."""
    arguments.one_of("encoding", encoding, _SIGNED_FLOATS)
    values, like = _numpy(x)
    return _like(_round(values, formats.ENCODINGS[encoding]).astype(values.dtype), like)


def representable_values(precision: str | int | formats.Format) -> np.ndarray:
    """Every finite value a format's elements take before any scale, sorted (mxfp4's E2M1: -6 .. 6; int4: the
    symmetric codes -7 .. 7); formats of at most 16 bits."""
    f = _grid(precision)
    if f.bits > 16:
        raise ValueError(f"precision must be a format of at most 16 bits (its values are listed); got "
                         f"{precision!r}")
    if f.kind == "int":
        top = 2 ** (f.bits - 1) - 1
        return np.arange(-top, top + 1, dtype=np.float64)
    enc = f.encoding
    exponent, mantissa = np.meshgrid(np.arange(2**enc.exponent_bits), np.arange(2**enc.mantissa_bits))
    exponent, fraction = exponent.ravel(), mantissa.ravel() / 2**enc.mantissa_bits
    normal = np.ldexp(1.0 + fraction, exponent - enc.bias)
    subnormal = np.ldexp(fraction, enc.min_exponent)
    magnitudes = np.where((exponent == 0) & (enc.mantissa_bits > 0), subnormal, normal)
    magnitudes = magnitudes[magnitudes <= enc.max_value]
    return np.unique(np.concatenate([-magnitudes, magnitudes]) if enc.signed else magnitudes)


# ---- numpy and torch in, the same type out -----------------------------------------------------------------


def _numpy(x, name: str = "x") -> tuple[np.ndarray, tuple]:
    """x as a numpy array of finite floats (float32, or float64 where x is float64 or not a float), and what
    to give results back as: (is a tensor, x's dtype, x's device)."""
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            raise ValueError(f"{name} must be a floating-point array or tensor; got a tensor of {x.dtype}")
        arguments.finite_array(name, x)
        values = x.detach()
        values = values.float() if values.dtype in (torch.float16, torch.bfloat16) else values
        return values.cpu().numpy(), (True, x.dtype, x.device)
    array = arguments.finite_array(name, x)
    dtype = array.dtype if array.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    values = array.astype(np.float32 if array.dtype == np.float16 else dtype, copy=False)
    return values, (False, np.dtype(np.float16) if array.dtype == np.float16 else dtype, None)


def _like(values: np.ndarray, like: tuple, dtype=None):
    """values as the type of the input described by like (a tensor on its device, or a numpy array), in its
    float dtype (or `dtype`, for codes)."""
    is_tensor, float_dtype, device = like
    if not is_tensor:
        return values.astype(dtype or float_dtype, copy=False)
    tensor = torch.from_numpy(np.ascontiguousarray(values) if values.strides and min(values.strides) < 0
                              else values)
    return tensor.to(device=device, dtype=None if dtype else float_dtype)


def _code_dtype(f: formats.Format, symmetric: bool):
    """The narrowest integer dtype that holds the codes (int8 for 8 bits or fewer, symmetric; uint8 for
    asymmetric 8 bits; wider past 8 bits)."""
    if f.bits <= 8:
        return np.int8 if symmetric else np.uint8
    return np.int16 if symmetric else np.int32


# ---- quantize -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Quantized:
    """What a format stores for x, as arrays of x's type (numpy or torch, on x's device).

    codes: x's shape; integer codes (integer formats) or the element values of a float format (E2M1's 0, 0.5,
      1, ... 6 with their signs), before any scale.
    scales: x's shape with `axis` holding one entry per block (1 per channel; every dimension 1 for one scale
      per tensor), float32, each a value of the format's scale format.
    zero_points: like scales (asymmetric integer grids), or None.
    tensor_scale: a second scale over the whole tensor (NVFP4's fp32 one; 1.0 elsewhere).
    precision: the format (hwopt.formats.Format; a bit width's integer grid, or a regrouped block format).
    block: values per scale along axis (a channel's length per channel; 0 for one scale per tensor).
    axis: the reduction axis the blocks run along (non-negative).
    dtype: x's float dtype, which dequantize() returns.
    """

    codes: object
    scales: object
    zero_points: object
    tensor_scale: float
    precision: formats.Format
    block: int
    axis: int
    dtype: object

    @property
    def symmetric(self) -> bool:
        """True unless the codes carry zero points (an asymmetric integer grid)."""
        return self.zero_points is None

    def numpy(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """codes, scales and zero points (None where symmetric) as numpy arrays, what a backend packs (shared
        with tensors on the CPU, not copied)."""
        return tuple(a.cpu().numpy() if isinstance(a, torch.Tensor) else a
                     for a in (self.codes, self.scales, self.zero_points))

    def _parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, tuple]:
        """codes, scales expanded to codes' shape, zero points expanded likewise (or None), as numpy (float64
        where the codes are float64, else float32), and the like tuple of the input."""
        is_tensor = isinstance(self.codes, torch.Tensor)
        codes, scales, zero_points = self.numpy()
        work = np.float64 if str(self.dtype) in ("float64", "torch.float64") else np.float32
        like = (is_tensor, self.dtype, self.codes.device if is_tensor else None)
        return codes, _expand(scales, self, codes.shape, work), _expand(zero_points, self, codes.shape,
                                                                        work), like

    def dequantize(self):
        """Back to floats: (codes - zero_points) * scales * tensor_scale, x's shape, type and dtype."""
        codes, scales, zero_points, like = self._parts()
        values = codes.astype(scales.dtype)
        if zero_points is not None:
            values -= zero_points
        values *= scales
        if self.tensor_scale != 1.0:
            values *= scales.dtype.type(self.tensor_scale)
        return _like(values, like)

    def steps(self):
        """Each value's local rounding step (x's shape, type and dtype), in the units of x: the scale on an
        integer grid, the encoding's spacing around the element times the scale on a float one."""
        codes, scales, _, like = self._parts()
        scale = scales * scales.dtype.type(self.tensor_scale)
        if self.precision.kind == "int":
            return _like(scale, like)
        return _like((_quantum(np.abs(codes), self.precision.encoding) * scale).astype(scale.dtype), like)


def _expand(per_block: np.ndarray | None, q: Quantized, shape: tuple, work) -> np.ndarray | None:
    """Scales or zero points of q, each repeated over the values of its block: shape `shape`."""
    if per_block is None:
        return None
    per_block = per_block.astype(work, copy=False)
    if q.block == 0 or per_block.shape[q.axis] == 1:
        return np.broadcast_to(per_block, shape)
    within = [slice(None)] * len(shape)
    within[q.axis] = slice(0, shape[q.axis])  # the last block's padding dropped
    return np.repeat(per_block, q.block, axis=q.axis)[tuple(within)]


def _groups(values: np.ndarray, block: int) -> np.ndarray:
    """values (..., n) as (..., ceil(n / block), block), the last block zero-padded."""
    pad = -values.shape[-1] % block
    if pad:
        values = np.pad(values, [(0, 0)] * (values.ndim - 1) + [(0, pad)])
    return values.reshape(*values.shape[:-1], -1, block)


def _stored_scale(scale: np.ndarray, enc: formats.Encoding) -> np.ndarray:
    """scale rounded to the scale's encoding, never 0 (a scale too small for it takes the smallest one)."""
    stored = _round(scale, enc)
    return np.where(stored > 0, stored, enc.min_subnormal)


def _integer(groups: np.ndarray, f: formats.Format, symmetric: bool):
    """Codes, scales and zero points (or None) of groups (..., block) on f's integer grid."""
    dtype = groups.dtype
    if symmetric:
        qmax = 2 ** (f.bits - 1) - 1
        amax = np.abs(groups).max(axis=-1, keepdims=True)
        scale = _stored_scale(np.where(amax > 0, amax / qmax, 1.0), f.scale_encoding).astype(dtype)
        codes = groups / scale
        np.rint(codes, out=codes)
        np.clip(codes, -qmax, qmax, out=codes)
        return codes, scale, None
    qmax = 2**f.bits - 1
    low = np.minimum(groups.min(axis=-1, keepdims=True), 0)
    high = np.maximum(groups.max(axis=-1, keepdims=True), 0)
    scale = _stored_scale(np.where(high > low, (high - low) / qmax, 1.0), f.scale_encoding).astype(dtype)
    zero_point = np.clip(np.rint(-low / scale), 0, qmax)
    codes = groups / scale
    np.rint(codes, out=codes)
    codes += zero_point
    np.clip(codes, 0, qmax, out=codes)
    return codes, scale, zero_point


def _float(groups: np.ndarray, f: formats.Format, whole: np.ndarray):
    """Element values, scales and the tensor scale of groups (..., block) in float format f (whole: the
    tensor, for a per-tensor scale)."""
    enc, scale_enc, tensor_scale = f.encoding, f.scale_encoding, 1.0
    amax = np.abs(groups).max(axis=-1, keepdims=True).astype(np.float64)
    if not scale_enc.mantissa_bits:  # a power of two (E8M0): the OCP MX rule
        exponent = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - enc.max_exponent, 0)
        scale = np.ldexp(1.0, np.clip(exponent, scale_enc.min_exponent, scale_enc.max_exponent).astype(int))
    else:
        if f.tensor_scale_format:  # NVFP4: the tensor's amax lands on the largest block scale x element
            tensor_amax = float(np.abs(whole).max())
            tensor_scale = tensor_amax / (enc.max_value * scale_enc.max_value) if tensor_amax > 0 else 1.0
            tensor_scale = float(np.float32(tensor_scale))  # stored in fp32
        scale = _stored_scale(np.where(amax > 0, amax / enc.max_value / tensor_scale, 1.0), scale_enc)
    elements = _round(groups / (scale * tensor_scale), enc)
    return elements.astype(groups.dtype), scale.astype(np.float32), tensor_scale


def _axis(axis, ndim: int) -> int:
    axis = arguments.number("axis", axis, integer=True)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis must be an axis of x (from {-ndim} to {ndim - 1}); got {axis}")
    return axis % ndim


def _quantize(values: np.ndarray, f: formats.Format, per_channel: bool, symmetric: bool, axis: int):
    """quantize on a numpy array: codes, scales, zero points (or None), tensor scale and values per scale,
    the arrays laid out as values with `axis` last, codes in their integer dtype or values' float dtype."""
    last = np.moveaxis(values, axis, -1)  # (..., n): the reduction axis last
    n = last.shape[-1]
    if _is_cast(f):
        ones = np.ones((1,) * values.ndim, np.float32)
        return _round(last, f.encoding).astype(values.dtype), ones, None, 1.0, 0
    block = f.block or (n if per_channel else 0)
    groups = _groups(last, block) if block else last.reshape(1, -1)
    zero_points, tensor_scale = None, 1.0
    if f.kind == "int":
        codes, scales, zero_points = _integer(groups, f, symmetric)
        code_dtype = _code_dtype(f, symmetric)
    else:
        codes, scales, tensor_scale = _float(groups, f, last)
        code_dtype = values.dtype
    per_scale_shape = (*last.shape[:-1], -1) if block else (1,) * values.ndim
    codes = codes.reshape(*last.shape[:-1], -1)[..., :n] if block else codes.reshape(last.shape)
    return (codes.astype(code_dtype, copy=False), scales.astype(np.float32).reshape(per_scale_shape),
            None if zero_points is None else zero_points.astype(code_dtype).reshape(per_scale_shape),
            tensor_scale, block)


def quantize(x, precision: str | int | formats.Format, *, block: int | None = None, per_channel: bool = False,
             symmetric: bool = True, axis: int = -1) -> Quantized:
    """The codes and scales `precision` stores for x (a numpy array or torch tensor of floats).

    precision: a format of hwopt.formats (a name such as 'int8', 'int4_g32', 'fp8_e4m3', 'mxfp4', 'nvfp4', an
      alias or a Format), or a bit width from 2 to 16 (an integer grid of that many bits).
    block: values per scale along axis (default: the format's own block; an integer or fp8 format without
      blocks gets an fp32 scale per block). Blocks lie within a channel.
    per_channel: without blocks, one scale per channel (every index of the axes but `axis`) instead of one
      per tensor. Formats of 16 bits or more are casts: they take neither.
    symmetric: integer grids only; False adds a zero point per scale and uses all 2^bits codes.
    axis: the reduction axis (the input features: -1 for a torch weight (out, in), 0 for w (K, N) in x @ w).
    """
    f = _grid(precision) if block is None else blocked(precision, block)
    per_channel = arguments.boolean("per_channel", per_channel)
    symmetric = arguments.boolean("symmetric", symmetric)
    if f.kind == "float" and not symmetric:
        raise ValueError(f"symmetric must be True for {f.name}: float formats are symmetric around 0")
    values, like = _numpy(x)
    if values.ndim == 0:
        raise ValueError("x must have at least one dimension; got a scalar")
    axis = _axis(axis, values.ndim)
    if per_channel and values.ndim < 2 and not f.block and not _is_cast(f):
        raise ValueError(f"per_channel needs x with at least 2 dimensions (a scale per index of the axes but "
                         f"axis); got shape {values.shape}")
    codes, scales, zero_points, tensor_scale, block = _quantize(values, f, per_channel, symmetric, axis)

    def back(array: np.ndarray | None):
        return None if array is None else _like(np.moveaxis(array, -1, axis), like, array.dtype)

    return Quantized(back(codes), back(scales), back(zero_points), float(tensor_scale), f, block, axis,
                     like[1])


def fake_quantize(x, precision: str | int | formats.Format, *, block: int | None = None,
                  per_channel: bool = False, symmetric: bool = True, axis: int = -1):
    """x rounded to what `precision` stores (scales included) and back: same shape, type and dtype as x.
    Arguments as quantize's."""
    return quantize(x, precision, block=block, per_channel=per_channel, symmetric=symmetric,
                    axis=axis).dequantize()


def round_to_scales(x, scales, precision: str | int | formats.Format):
    """x rounded on the symmetric grid of an integer format with scales given (broadcast against x):
    clamp(round(x / scales), -qmax, qmax) * scales, same shape, type and dtype as x. For a quantizer that
    fixes the scales first and rounds later (GPTQ rounds a column at a time with its group's scales, taken
    from quantize)."""
    f = _grid(precision)
    if f.kind != "int":
        raise ValueError(f"precision must be an integer format (its grid is scale x integer codes); got "
                         f"{f.name!r}")
    values, like = _numpy(x)
    steps, _ = _numpy(scales, "scales")
    if np.any(steps <= 0):
        raise ValueError("scales must be positive")
    try:
        steps = np.broadcast_to(steps, values.shape).astype(values.dtype, copy=False)
    except ValueError:
        raise ValueError(f"scales must broadcast against x's shape {values.shape}; got "
                         f"{steps.shape}") from None
    qmax = 2 ** (f.bits - 1) - 1
    return _like(np.clip(np.rint(values / steps), -qmax, qmax) * steps, like)
