"""Outlier channels, why LLMs break naive 8-bit activations, and two fixes: SmoothQuant and AWQ (lesson 9).

A few input channels of an LLM's linear layers carry values 10-100x the rest (LLM.int8(), Dettmers et al.
2022). One int8 scale per activation tensor is then set by them, and the ordinary channels round to a few
levels. SmoothQuant (Xiao et al. 2023) migrates the difficulty: per input channel j,
s_j = max|X_j|^alpha / max|W_j|^(1 - alpha), X' = X / s, W' = W * s, so X' W'^T = X W^T exactly before
rounding. AWQ (Lin et al. 2024) protects the weights of salient channels (large mean |X_j|) in weight-only
int4: W' = Q(W * s) / s with s = mean|X_j|^alpha, alpha searched on a grid for the least output error.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

import numpy as np
import torch
from torch import nn

from hwopt import arguments, formats, plots, quantization
from hwopt.experiments import fake_quant
from hwopt.experiments.precision import linear_layers
from hwopt.models.classifier import Digits, accuracy

ACTIVATION_SCALES = ("per-tensor", "per-channel", "smoothquant")
_TINY = 1e-5  # floor of channel statistics, so that an all-zero channel gets a finite scale


def _tensor(name: str, x, ndim: int = 2) -> torch.Tensor:
    arguments.instance(name, x, torch.Tensor)
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor; got a tensor of {x.dtype}")
    arguments.finite_array(name, x, ndim=ndim)
    return x.detach().float()


def _pair(x, w) -> tuple[torch.Tensor, torch.Tensor]:
    x, w = _tensor("x", x), _tensor("w", w)
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"w must be (out, in), in = x's {x.shape[1]} features; got shape {tuple(w.shape)}")
    return x, w


def heavy_tailed_weights(rows: int = 256, cols: int = 256, df: float = 4.0, seed: int = 0) -> torch.Tensor:
    """A (rows, cols) matrix of Student-t values (df degrees of freedom) scaled to std 1/sqrt(cols) like an
    nn.Linear: a stand-in for an LLM weight, whose rare large values a Gaussian lacks."""
    rows = arguments.count("rows", rows, "dimension")
    cols = arguments.count("cols", cols, "dimension")
    df = arguments.between("df", df, 2.5, 1e6)
    rng = np.random.default_rng(arguments.count("seed", seed, "seed", minimum=0))
    t = rng.standard_t(df, size=(rows, cols)) / np.sqrt(df / (df - 2))
    return torch.from_numpy(t / np.sqrt(cols)).float()


def with_outlier_channels(model: nn.Module, layer: str, n_channels: int = 4, factor: float = 50.0,
                          seed: int = 0) -> tuple[nn.Sequential, list[int]]:
    """A copy of an MLP whose input to Linear `layer` has n_channels channels `factor` times larger, the same
    function in FP32: the Linear two modules earlier scales those rows up (ReLU passes a positive factor
    through), `layer` scales those columns down. Returns (model, the channels)."""
    arguments.instance("model", model, nn.Sequential)
    names = list(linear_layers(model))
    arguments.one_of("layer", layer, names[1:])
    factor = arguments.positive("factor", factor, maximum=1e6)
    position = list(model._modules).index(layer)
    before, relu = model[position - 2] if position >= 2 else None, model[position - 1]
    if not (isinstance(before, nn.Linear) and isinstance(relu, nn.ReLU)):
        raise ValueError(f"layer must follow Linear -> ReLU (passing a positive factor); {layer!r} does not")
    width = model[position].in_features
    n_channels = arguments.between("n_channels", n_channels, 1, width, integer=True)
    rng = np.random.default_rng(arguments.count("seed", seed, "seed", minimum=0))
    channels = sorted(int(c) for c in rng.choice(width, n_channels, replace=False))
    planted = copy.deepcopy(model).eval()
    with torch.no_grad():
        planted[position - 2].weight[channels] *= factor
        if planted[position - 2].bias is not None:
            planted[position - 2].bias[channels] *= factor
        planted[position].weight[:, channels] /= factor
    return planted, channels


def layer_inputs(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """The input (batch, in_features) each Linear layer of model sees when model runs on x."""
    layers = linear_layers(model)
    x = _tensor("x", x)
    seen: dict[str, torch.Tensor] = {}
    hooks = [layer.register_forward_hook(lambda m, args, out, n=name: seen.__setitem__(n, args[0].detach()))
             for name, layer in layers.items()]
    try:
        with torch.inference_mode():
            model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def outlier_channels(x: torch.Tensor, threshold: float = 6.0) -> list[int]:
    """Channels (columns) of activations x (tokens, channels) whose max |x| exceeds threshold times the median
    channel's max |x|."""
    x = _tensor("x", x)
    threshold = arguments.positive("threshold", threshold, maximum=1e6)
    peaks = x.abs().amax(dim=0)
    typical = peaks.median().clamp_min(_TINY)
    return [int(c) for c in torch.nonzero(peaks > threshold * typical).ravel()]


def quantize_activations(x: torch.Tensor, bits: int = 8, per_channel: bool = False) -> torch.Tensor:
    """Activations x (tokens, channels) fake-quantized to `bits`: one scale per tensor or one per channel."""
    x = _tensor("x", x)
    bits = arguments.between("bits", bits, *quantization.BITS, integer=True)
    per_channel = arguments.boolean("per_channel", per_channel)
    return quantization.fake_quantize(x, bits, per_channel=per_channel, axis=0)


def smoothing_scales(x: torch.Tensor, w: torch.Tensor, alpha: float = 0.5) -> torch.Tensor:
    """SmoothQuant's per-input-channel s (in,) = max|X_j|^alpha / max|W_j|^(1 - alpha), x (tokens, in),
    w (out, in); divide x by s and multiply w by s. A channel x never used keeps s = 1 (nothing to go by)."""
    x, w = _pair(x, w)
    alpha = arguments.fraction("alpha", alpha, allow_zero=True)
    x_peak = x.abs().amax(dim=0)
    w_peak = w.abs().amax(dim=0).clamp_min(_TINY)
    scales = x_peak.clamp_min(_TINY) ** alpha / w_peak ** (1 - alpha)
    return torch.where(x_peak > _TINY, scales, torch.ones_like(scales))


def w8a8_output(x: torch.Tensor, w: torch.Tensor, activations: str = "per-tensor", alpha: float = 0.5,
                bits: int = 8) -> torch.Tensor:
    """x @ w.T with w per output channel and x (per tensor, per channel, or smoothed then per tensor) both
    fake-quantized to `bits`: (tokens, out)."""
    x, w = _pair(x, w)
    arguments.one_of("activations", activations, ACTIVATION_SCALES)
    arguments.fraction("alpha", alpha, allow_zero=True)
    scales = smoothing_scales(x, w, alpha) if activations == "smoothquant" else torch.ones(x.shape[1])
    x_q = quantize_activations(x / scales, bits, per_channel=activations == "per-channel")
    return x_q @ quantization.fake_quantize(w * scales, bits, per_channel=True).T


class _QuantizedLinear(nn.Module):
    """A Linear whose weight was fake-quantized ahead of time and whose input is, per call, divided by
    `smoothing` and fake-quantized (activation_bits None: left in float, weight-only)."""

    def __init__(self, weight, bias, smoothing, activation_bits, per_channel):
        super().__init__()
        self.weight, self.bias, self.smoothing = weight, bias, smoothing
        self.activation_bits, self.per_channel = activation_bits, per_channel

    def forward(self, x):
        if self.activation_bits is not None:
            x = quantize_activations(x / self.smoothing, self.activation_bits, self.per_channel)
        return nn.functional.linear(x, self.weight, self.bias)


def _replace_linears(model: nn.Module, make) -> nn.Module:
    quantized = copy.deepcopy(model).eval()
    for name, layer in linear_layers(quantized).items():
        parent, _, child = name.rpartition(".")
        bias = None if layer.bias is None else layer.bias.detach()
        setattr(quantized.get_submodule(parent) if parent else quantized, child,
                make(name, layer.weight.detach(), bias))
    return quantized


def w8a8_model(model: nn.Module, calibration_x: torch.Tensor, activations: str = "per-tensor",
               alpha: float = 0.5, bits: int = 8) -> nn.Module:
    """A copy of model with every Linear in W8A8 (w8a8_output's scheme); SmoothQuant's scales come from each
    layer's inputs on calibration_x (batch, features)."""
    arguments.one_of("activations", activations, ACTIVATION_SCALES)
    alpha = arguments.fraction("alpha", alpha, allow_zero=True)
    arguments.between("bits", bits, *quantization.BITS, integer=True)
    inputs = layer_inputs(model, _tensor("calibration_x", calibration_x))

    def make(name, weight, bias):
        s = smoothing_scales(inputs[name], weight, alpha) if activations == "smoothquant" \
            else torch.ones(weight.shape[1])
        return _QuantizedLinear(quantization.fake_quantize(weight * s, bits, per_channel=True), bias, s, bits,
                                activations == "per-channel")

    return _replace_linears(model, make)


def awq_search(x: torch.Tensor, w: torch.Tensor, precision: str = "int4_g128", grid: int = 20) -> dict:
    """AWQ's search for one layer: for alpha in 0, 1/grid, ..., (grid-1)/grid, s = mean|X_j|^alpha
    (normalised), the output error of x @ (Q(w * s) / s).T; alpha 0 is plain quantization. Returns alpha
    (the best), scales (in,), weight (the quantized weight, float), errors {alpha: relative output error}."""
    x, w = _pair(x, w)
    precision = formats.name(precision)
    grid = arguments.between("grid", grid, 1, 1000, integer=True)
    exact = x @ w.T
    salience = x.abs().mean(dim=0).clamp_min(1e-4)
    errors, best = {}, None
    for alpha in [i / grid for i in range(grid)]:
        s = salience**alpha
        s = s / (s.max() * s.min()).sqrt()
        weight = quantization.fake_quantize(w * s, precision) / s
        errors[alpha] = fake_quant.relative_rmse(x @ weight.T, exact)
        if best is None or errors[alpha] < errors[best[0]]:
            best = (alpha, s, weight)
    return {"alpha": best[0], "scales": best[1], "weight": best[2], "errors": errors}


def weight_only_model(model: nn.Module, precision: str = "int4_g128", awq_x: torch.Tensor | None = None,
                      grid: int = 20) -> nn.Module:
    """A copy of model with every Linear weight fake-quantized to `precision`, activations left in float; with
    awq_x (batch, features), each layer's weight is AWQ-scaled first (awq_search on its inputs)."""
    precision = formats.name(precision)
    grid = arguments.between("grid", grid, 1, 1000, integer=True)
    inputs = layer_inputs(model, _tensor("awq_x", awq_x)) if awq_x is not None else None

    def make(name, weight, bias):
        if inputs is None:
            return _QuantizedLinear(quantization.fake_quantize(weight, precision), bias, None, None, False)
        searched = awq_search(inputs[name], weight, precision, grid)["weight"]
        return _QuantizedLinear(searched, bias, None, None, False)

    return _replace_linears(model, make)


def accuracy_vs_outliers(model: nn.Module, data: Digits, layer: str = "2",
                         factors: Iterable[float] = (1, 10, 30, 100, 300, 1000), n_channels: int = 8,
                         calibration: int = 256) -> dict[str, dict[float, float]]:
    """Test accuracy (0..1) of W8A8 with each activation scaling (ACTIVATION_SCALES) as outlier channels of
    growing factor are planted at `layer`'s input; SmoothQuant calibrated on `calibration` training digits."""
    arguments.instance("data", data, Digits)
    factors = arguments.finite_array("factors", factors, ndim=1, minimum=1, maximum=1e6).tolist()
    calibration = arguments.count("calibration", calibration, "batch")
    x = data.x_train[:calibration]
    curves: dict[str, dict[float, float]] = {mode: {} for mode in ACTIVATION_SCALES}
    for factor in factors:
        planted, _ = with_outlier_channels(model, layer, n_channels, factor)
        for mode in ACTIVATION_SCALES:
            curves[mode][factor] = accuracy(w8a8_model(planted, x, mode), data.x_test, data.y_test)
    return curves


def plot_accuracy_vs_outliers(curves: Mapping[str, Mapping[float, float]], reference: float | None = None,
                              ax=None):
    """Test accuracy (%) vs outlier factor (log), a line per activation scaling ({'per-tensor': {1: 0.9}})."""
    arguments.instance("curves", curves, Mapping)
    if not curves:
        raise ValueError("curves must map an activation scaling to {factor: accuracy}")
    for label, by_factor in curves.items():
        arguments.instance(f"curves[{label!r}]", by_factor, Mapping)
        for factor, value in by_factor.items():
            arguments.positive(f"curves[{label!r}] factor", factor)
            arguments.fraction(f"curves[{label!r}][{factor}]", value, allow_zero=True)
    if reference is not None:
        arguments.fraction("reference", reference, allow_zero=True)
    ax = plots.axes("outlier channels' factor (x the rest)", "test accuracy (%)", logx=True,
                    title="W8A8 with outlier channels", ax=ax)
    for k, (label, by_factor) in enumerate(curves.items()):
        factors = sorted(by_factor)
        ax.plot(factors, [100 * by_factor[f] for f in factors], marker="o", color=plots.color(k), label=label)
    if reference is not None:
        ax.axhline(100 * reference, color="k", linestyle="--", label="FP32 reference")
    ax.set_ylim(0, 100)
    return plots.finish(ax)
