"""Quantization methods on the course's trained LLM, judged by perplexity (lesson 9): where its activations
have outlier channels, W8A8 with per-tensor, per-token or per-channel activation scales or SmoothQuant, and
weight-only 4 bits by round-to-nearest (RTN), AWQ and GPTQ.

Every Linear of the decoder blocks is quantized (q, k, v, o, gate, up, down); the embedding table and the
output head tied to it stay in fp32, as SmoothQuant, AWQ and GPTQ leave them. Weights are int8 with a scale
per output channel (W8A8) or in a weight-only format of hwopt.formats; activations are rounded on every call,
with one scale per sequence (per-tensor), per token (a row: applied to the output row after the int8 sum),
or per input channel (which varies inside the dot product's sum, so an int8 matmul cannot apply it: a
reference, not a kernel). Calibration (SmoothQuant's channel maxima, AWQ's search, GPTQ's Hessians) reads
the train split's calibration text (hwopt/models/weights/calibration.txt), never the validation text.

SmoothQuant follows its Llama recipe: only the inputs whose scales fold into the RMSNorm before them (the
attention's q/k/v, the MLP's gate/up) are smoothed. AWQ and GPTQ run block by block, each block calibrated
on the outputs of the blocks already quantized; AWQ scales q/k/v (folded into the norm), gate/up (into the
norm) and down (into up's rows), not o_proj, whose scales cannot fold into v_proj under grouped-query
attention (AutoAWQ's rule); AWQ's weight-clipping search is left out.
"""

from __future__ import annotations

import copy
import hashlib

import torch
from torch import nn

from hwopt import arguments, formats, plots, quantization
from hwopt.experiments import gptq, llm_accuracy, outliers
from hwopt.models import checkpoint, corpus, perplexity, tokenizer
from hwopt.models.llama import Llama

__all__ = ["GROUPS", "ACTIVATIONS", "METHODS", "CALIBRATION", "calibration_windows", "group_inputs",
           "outlier_rows", "outlier_report", "plot_outliers", "w8a8", "weight_only", "evaluate_w8a8",
           "evaluate_weight_only"]

# The Linears of a block by the input they share: the first one's input is every one's
GROUPS = {"attention input": ("q_proj", "k_proj", "v_proj"), "attention output": ("o_proj",),
          "MLP input": ("gate_proj", "up_proj"), "MLP hidden": ("down_proj",)}
_PARENT = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
           "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
_SMOOTHED = ("attention input", "MLP input")  # scales fold into the RMSNorm before them
_AWQ_SCALED = ("attention input", "MLP input", "MLP hidden")
ACTIVATIONS = ("per-tensor", "per-token", "per-channel", "smoothquant")
METHODS = ("rtn", "awq", "gptq")
CALIBRATION = checkpoint.WEIGHTS_DIR / "calibration.txt"
CALIBRATION_WINDOWS = 4  # windows of the model's context: 2,048 tokens for the target (512 positions)
AWQ_TOKENS = 512  # calibration tokens AWQ's search multiplies per candidate scale (its cost, not its quality)


def _net(net) -> Llama:
    return arguments.instance("net", net, Llama)


def calibration_windows(model="target", max_windows: int = CALIBRATION_WINDOWS) -> torch.Tensor:
    """(n, context) token windows of the calibration text (train split), in the model's tokenizer."""
    max_windows = arguments.count("max_windows", max_windows, "items")
    folder = checkpoint.resolve(model)
    tok = tokenizer.load(folder / "tokenizer.json")
    stream = tokenizer.encode_documents(tok, corpus.read_validation(CALIBRATION))
    seq_len = checkpoint.read_config(folder).max_seq_len
    return perplexity.windows(stream, seq_len - 1, max_windows)  # windows of seq_len tokens


def _calibration_key(tokens: torch.Tensor) -> str:
    return hashlib.sha256(tokens.numpy().tobytes()).hexdigest()[:12]


def _linear(net: Llama, layer: int, name: str) -> nn.Linear:
    return getattr(getattr(net.layers[layer], _PARENT[name]), name)


def _tokens(tokens, net: Llama, name: str = "tokens") -> torch.Tensor:
    """tokens (batch, seq) checked against net's vocabulary and positions."""
    arguments.instance(name, tokens, torch.Tensor)
    arguments.finite_array(name, tokens, ndim=2, integer=True, minimum=0)
    config = net.config
    if tokens.numel() == 0 or int(tokens.max()) >= config.vocab_size or tokens.shape[1] > config.max_seq_len:
        raise ValueError(f"{name} must be token ids below {config.vocab_size}, (batch, seq) with 1 <= seq <= "
                         f"{config.max_seq_len}; got shape {tuple(tokens.shape)}")
    return tokens


@torch.inference_mode()
def group_inputs(net: Llama, tokens: torch.Tensor) -> dict[tuple[int, str], torch.Tensor]:
    """{(layer, group of GROUPS): the input (tokens, in_features) its Linears see} when net runs on tokens
    (batch, seq)."""
    net = _net(net)
    tokens = _tokens(tokens, net)
    seen: dict[tuple[int, str], torch.Tensor] = {}
    hooks = []
    for layer in range(len(net.layers)):
        for group, names in GROUPS.items():
            def keep(module, args, key=(layer, group)):
                seen[key] = args[0].detach().flatten(0, -2).float().clone()
            hooks.append(_linear(net, layer, names[0]).register_forward_pre_hook(keep))
    try:
        net(tokens.to(net.embed_tokens.weight.device))
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def outlier_rows(inputs: dict, threshold: float = 6.0) -> list[dict]:
    """Per (layer, group) of group_inputs: how far its largest channel stands out. peak_ratio = the largest
    channel's max |x| over the median channel's; outliers = channels above threshold x the median's."""
    arguments.instance("inputs", inputs, dict)
    if not inputs or not all(isinstance(k, tuple) and len(k) == 2 and k[1] in GROUPS for k in inputs):
        raise ValueError("inputs must be group_inputs(...)'s {(layer, group): activations}")
    threshold = arguments.positive("threshold", threshold, maximum=1e6)
    rows = []
    for (layer, group), x in inputs.items():
        arguments.instance(f"inputs[{layer}, {group!r}]", x, torch.Tensor)
        arguments.finite_array(f"inputs[{layer}, {group!r}]", x, ndim=2)
        peaks = x.abs().amax(dim=0)
        median = float(peaks.median().clamp_min(1e-12))
        rows.append({"layer": layer, "group": group, "peak_ratio": float(peaks.max()) / median,
                     "outliers": len(outliers.outlier_channels(x, threshold)),
                     "channel": int(peaks.argmax()), "channels": x.shape[1]})
    return rows


def outlier_report(rows: list[dict], threshold: float = 6.0) -> str:
    """A table (layer x input group) of peak ratios and outlier counts, and where the largest ones are."""
    arguments.instance("rows", rows, list)
    if not rows or not all(isinstance(r, dict) and {"layer", "group", "peak_ratio", "outliers", "channel"}
                           <= set(r) for r in rows):
        raise ValueError("rows must be outlier_rows(...)'s list of dicts")
    threshold = arguments.positive("threshold", threshold, maximum=1e6)
    for k, r in enumerate(rows):
        arguments.count(f"rows[{k}]['layer']", r["layer"], "layers", minimum=0)
        arguments.one_of(f"rows[{k}]['group']", r["group"], tuple(GROUPS))
        arguments.positive(f"rows[{k}]['peak_ratio']", r["peak_ratio"])
        arguments.count(f"rows[{k}]['outliers']", r["outliers"], "dimension", minimum=0)
        arguments.count(f"rows[{k}]['channel']", r["channel"], "dimension", minimum=0)
    groups = list(dict.fromkeys(r["group"] for r in rows))
    layers = sorted({r["layer"] for r in rows})
    by = {(r["layer"], r["group"]): r for r in rows}
    if len(by) != len(rows) or len(by) != len(layers) * len(groups):
        raise ValueError("rows must hold one row per (layer, group), every group in every layer")
    lines = [f"largest channel / median channel (max |x|), and channels above {threshold:g}x the median:",
             f"{'layer':>5}" + "".join(f"{g:>22}" for g in groups)]
    for layer in layers:
        lines.append(f"{layer:>5}" + "".join(
            f"{by[layer, g]['peak_ratio']:>13,.1f}x {by[layer, g]['outliers']:>3} ch" for g in groups))
    worst = max(rows, key=lambda r: r["peak_ratio"])
    calm = [g for g in groups if all(by[layer, g]["outliers"] == 0 for layer in layers)]
    lines.append(f"the largest: layer {worst['layer']}, {worst['group']}, channel {worst['channel']} "
                 f"({worst['peak_ratio']:,.0f}x); no outlier channel at all in: {', '.join(calm) or 'none'}")
    return "\n".join(lines)


def plot_outliers(rows: list[dict], ax=None):
    """Peak ratio (log) per layer, a line per input group; the Figure."""
    outlier_report(rows)  # checks the rows
    ax = plots.axes("layer", "largest / median channel peak (x)", logy=True, ax=ax,
                    title="Outlier channels in the trained model's activations")
    for k, group in enumerate(dict.fromkeys(r["group"] for r in rows)):
        mine = sorted((r for r in rows if r["group"] == group), key=lambda r: r["layer"])
        ax.plot([r["layer"] for r in mine], [r["peak_ratio"] for r in mine], marker="o", color=plots.color(k),
                label=group)
    return plots.finish(ax)


# ---- W8A8 ------------------------------------------------------------------------------------------------


def _round_activations(x: torch.Tensor, activations: str, bits: int) -> torch.Tensor:
    """x (batch, seq, in) fake-quantized with one scale per sequence, per token, or per channel."""
    b, s, n = x.shape
    if activations == "per-token":
        return quantization.fake_quantize(x, bits, per_channel=True, axis=-1)
    if activations == "per-channel":  # a scale per channel of each sequence, over its tokens
        return quantization.fake_quantize(x, bits, per_channel=True, axis=1)
    return quantization.fake_quantize(x.reshape(b, s * n), bits, per_channel=True).reshape(b, s, n)


class _Quantized(nn.Module):
    """A Linear whose weight was quantized ahead of time; its input divided by `smoothing` (None: not) and,
    with `activations`, fake-quantized on every call."""

    def __init__(self, weight, smoothing=None, activations: str | None = None, bits: int = 8):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.smoothing, self.activations, self.bits = smoothing, activations, bits

    def forward(self, x):
        if self.smoothing is not None:
            x = x / self.smoothing
        if self.activations is not None:
            x = _round_activations(x, "per-tensor" if self.activations == "smoothquant" else self.activations,
                                   self.bits)
        return nn.functional.linear(x, self.weight)


def _replace(net: Llama, layer: int, name: str, module: nn.Module) -> None:
    setattr(getattr(net.layers[layer], _PARENT[name]), name, module)


def w8a8(net: Llama, activations: str = "per-tensor", calibration: torch.Tensor | None = None,
         alpha: float = 0.5, bits: int = 8) -> tuple[Llama, float]:
    """(a copy of net with every block Linear in W8A8, bytes per weight of those Linears): weights `bits`
    with a scale per output channel, activations per ACTIVATIONS; 'smoothquant' divides the attention and MLP
    inputs by s_j = max|X_j|^alpha / max|W_j|^(1 - alpha) (outliers.smoothing_scales, X from calibration
    tokens (batch, seq)), multiplies the weights by s, then rounds the activations per tensor."""
    net = _net(net)
    arguments.one_of("activations", activations, ACTIVATIONS)
    alpha = arguments.fraction("alpha", alpha, allow_zero=True)
    bits = arguments.between("bits", bits, 2, 8, integer=True)
    if activations == "smoothquant":
        if calibration is None:
            raise ValueError("calibration must be token windows (batch, seq) for smoothquant: its scales "
                             "come from the activations")
        inputs = group_inputs(net, _tokens(calibration, net, "calibration"))
    out = copy.deepcopy(net)
    with torch.no_grad():
        for layer in range(len(net.layers)):
            for group, names in GROUPS.items():
                weights = [_linear(net, layer, n).weight.detach().float() for n in names]
                s = None
                if activations == "smoothquant" and group in _SMOOTHED:
                    s = outliers.smoothing_scales(inputs[layer, group], torch.cat(weights), alpha)
                for name, w in zip(names, weights, strict=True):
                    scaled = w if s is None else w * s
                    rounded = quantization.fake_quantize(scaled, bits, per_channel=True)
                    _replace(out, layer, name, _Quantized(rounded, s, activations, bits))
    return out, _bytes_per_weight(net, bits)


# ---- weight-only: RTN, AWQ, GPTQ -------------------------------------------------------------------------


def _weight_format(precision) -> formats.Format:
    fmt = formats.get(precision)
    if fmt.kind != "int" or fmt.bits > 8:
        raise ValueError(f"precision must be an integer weight format of at most 8 bits (int4_g128, "
                         f"int4_g32, int8, int4, ...); got {precision!r}")
    return fmt


def _rtn(w: torch.Tensor, fmt: formats.Format) -> torch.Tensor:
    return quantization.fake_quantize(w, fmt, per_channel=not fmt.block)


def _bytes_per_weight(net: Llama, fmt: formats.Format | int) -> float:
    """Bytes per weight of the blocks' Linears stored in fmt (a Format, or an integer grid's bits), scales
    included: a group format's own, else an fp32 scale per output row."""
    stored = count = 0
    for layer in range(len(net.layers)):
        for name in _PARENT:
            rows, cols = _linear(net, layer, name).weight.shape
            if isinstance(fmt, formats.Format) and fmt.block:
                stored += rows * cols * fmt.bytes_per_weight
            else:
                bits = fmt.bits if isinstance(fmt, formats.Format) else fmt
                stored += rows * cols * bits / 8 + 4 * rows
            count += rows * cols
    return stored / count


def weight_only(net: Llama, precision: str = "int4_g128", method: str = "rtn",
                calibration: torch.Tensor | None = None, grid: int = 20) -> tuple[Llama, float]:
    """(a copy of net with every block Linear's weight in `precision`, activations untouched; bytes per weight
    of those Linears). method: 'rtn' (round to nearest), 'awq' (per-input-channel scales searched on a grid
    of `grid` alphas, outliers.awq_search) or 'gptq' (gptq.gptq_quantize); both calibrated on calibration
    tokens (batch, seq), block by block. Integer formats without blocks get a scale per output row."""
    net = _net(net)
    fmt = _weight_format(precision)
    arguments.one_of("method", method, METHODS)
    grid = arguments.between("grid", grid, 1, 1000, integer=True)
    if method != "rtn" and calibration is None:
        raise ValueError(f"calibration must be token windows (batch, seq) for {method}: it is calibrated on "
                         "the layers' inputs")
    out = copy.deepcopy(net)
    if method == "rtn":
        with torch.no_grad():
            for layer in range(len(net.layers)):
                for name in _PARENT:
                    w = _linear(net, layer, name).weight.detach().float()
                    _linear(out, layer, name).weight.copy_(_rtn(w, fmt))
        return out, _bytes_per_weight(net, fmt)
    tokens = _tokens(calibration, net, "calibration").to(net.embed_tokens.weight.device)
    with torch.inference_mode():
        x = out.embed_tokens(tokens)
        cos, sin = out.rotary(0, tokens.shape[1], x.dtype, x.device)
    for layer in range(len(out.layers)):
        inputs = _block_inputs(out, layer, x, cos, sin)
        with torch.no_grad():
            for group, names in GROUPS.items():
                linears = [_linear(out, layer, n) for n in names]
                if method == "gptq":
                    h = gptq.hessian(inputs[group])
                    for lin in linears:
                        lin.weight.copy_(gptq.gptq_quantize(lin.weight.detach().float(), h, fmt))
                    continue
                weights = torch.cat([lin.weight.detach().float() for lin in linears])
                if group in _AWQ_SCALED:
                    searched = outliers.awq_search(inputs[group][:AWQ_TOKENS], weights, fmt.name, grid)
                    quantized = searched["weight"]
                else:
                    quantized = _rtn(weights, fmt)
                for lin, part in zip(linears, quantized.split([lin.out_features for lin in linears]),
                                     strict=True):
                    lin.weight.copy_(part)
        with torch.inference_mode():
            x = out.layers[layer](x, cos, sin)  # the next block sees this block's quantized output
    return out, _bytes_per_weight(net, fmt)


def _block_inputs(net: Llama, layer: int, x, cos, sin) -> dict[str, torch.Tensor]:
    """{group: its input (tokens, in)} when block `layer` runs on hidden states x (batch, seq, d_model)."""
    seen = {}
    hooks = [_linear(net, layer, names[0]).register_forward_pre_hook(
        lambda m, args, g=group: seen.__setitem__(g, args[0].detach().flatten(0, -2).float().clone()))
        for group, names in GROUPS.items()]
    try:
        with torch.inference_mode():
            net.layers[layer](x, cos, sin)
    finally:
        for hook in hooks:
            hook.remove()
    return {g: t.clone() for g, t in seen.items()}  # out of inference mode: usable in GPTQ's updates


# ---- evaluated, cached ------------------------------------------------------------------------------------


def evaluate_w8a8(model="target", activations: str = "per-tensor", alpha: float = 0.5, bits: int = 8,
                  **options) -> dict:
    """llm_accuracy.evaluate_variant of w8a8(net, activations, the calibration windows, alpha, bits): the
    model's validation perplexity and top-1 agreement with fp32 (options: seq_len, max_windows, ...)."""
    arguments.one_of("activations", activations, ACTIVATIONS)
    alpha = arguments.fraction("alpha", alpha, allow_zero=True)
    bits = arguments.between("bits", bits, 2, 8, integer=True)
    calibration = calibration_windows(model) if activations == "smoothquant" else None
    variant = f"W{bits}A{bits} {activations}"
    key = variant + (f" alpha={alpha:g} calibration={_calibration_key(calibration)}"
                     if calibration is not None else "")
    result = llm_accuracy.evaluate_variant(model, key, lambda net: w8a8(net, activations, calibration, alpha,
                                                                       bits), **options)
    return {**result, "variant": variant}


def evaluate_weight_only(model="target", precision: str = "int4_g128", method: str = "rtn", grid: int = 20,
                         **options) -> dict:
    """llm_accuracy.evaluate_variant of weight_only(net, precision, method, the calibration windows, grid):
    validation perplexity and top-1 agreement with fp32 (options: seq_len, max_windows, ...)."""
    fmt = _weight_format(precision)
    arguments.one_of("method", method, METHODS)
    grid = arguments.between("grid", grid, 1, 1000, integer=True)
    calibration = calibration_windows(model) if method != "rtn" else None
    variant = f"{fmt.name} {method.upper()}"
    key = variant + (f" grid={grid} calibration={_calibration_key(calibration)}" if calibration is not None
                     else "") + " v1"
    result = llm_accuracy.evaluate_variant(model, key, lambda net: weight_only(net, fmt.name, method,
                                                                              calibration, grid), **options)
    return {**result, "variant": variant}
