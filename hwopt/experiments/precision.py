"""Precision (lesson 4): weights at N bits (fake quantization by hwopt.quantization), their error, the
accuracy cliff, model sizes, half-precision and int8 runtimes, and the verdicts on what was measured.

Lesson 4's integer grids: symmetric or asymmetric, one scale per tensor or one per output row of a weight
(out, in) (per_channel); the formulas are hwopt.quantization's.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import warnings
from collections.abc import Callable, Iterable, Mapping

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.ao.quantization import quantize_dynamic

from hwopt import arguments, formats, plots, quantization, widgets
from hwopt.machine import bench
from hwopt.models.classifier import Digits, accuracy, agreement

HALF_AND_FULL = ("fp32", "fp16", "bf16")  # the float formats in_dtype runs a model in


def bytes_per_weight(precision: str | int) -> float:
    """Bytes per weight of a format name ('fp32', 'int4_g32': block scales counted) or a bit width (1..32)."""
    if isinstance(precision, str):
        return formats.bytes_per_weight(formats.get(precision, argument="precision"))
    if isinstance(precision, bool) or not isinstance(precision, int) or not 1 <= precision <= 32:
        raise ValueError(f"precision must be a format name or a bit width from 1 to 32, got {precision!r}")
    return precision / 8


def _check_bits(bits: int, name: str = "bits") -> int:
    return arguments.between(name, bits, *quantization.BITS, integer=True)


def quantization_error(
    w: torch.Tensor, bits: int, *, per_channel: bool = False, symmetric: bool = True
) -> torch.Tensor:
    """Absolute error |w - fake_quantize(w)| at `bits` (float32, w's shape): the heat-map of lesson 4."""
    arguments.instance("w", w, torch.Tensor)
    if not w.is_floating_point():
        raise ValueError(f"w must be a floating-point tensor; got a tensor of {w.dtype}")
    arguments.finite_array("w", w)
    _check_bits(bits)
    rounded = quantization.fake_quantize(w, bits, per_channel=per_channel, symmetric=symmetric)
    return (w.detach().float() - rounded.float()).abs()


def error_summary(w: torch.Tensor, bits: int, *, per_channel: bool = False, symmetric: bool = True) -> dict:
    """max_abs, mean_abs and relative_rmse (rms error / rms weight) of quantizing w."""
    err = quantization_error(w, bits, per_channel=per_channel, symmetric=symmetric)
    rms_w = w.detach().float().pow(2).mean().sqrt().clamp_min(torch.finfo(torch.float32).tiny)
    return {
        "max_abs": float(err.max()),
        "mean_abs": float(err.mean()),
        "relative_rmse": float(err.pow(2).mean().sqrt() / rms_w),
    }


def linear_layers(model: nn.Module) -> dict[str, nn.Linear]:
    """The model's nn.Linear layers by name, in order ('0', '2', '4' for an nn.Sequential MLP)."""
    arguments.instance("model", model, nn.Module)
    layers = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    if not layers:
        raise ValueError("model has no nn.Linear layers to quantize")
    return layers


def _check_keep(model: nn.Module, keep: Iterable[str]) -> set[str]:
    keep = set(arguments.instance("keep", keep, (list, tuple, set, frozenset)))
    unknown = keep - set(linear_layers(model))
    if unknown:
        raise ValueError(
            f"keep names unknown layers {sorted(unknown)}; Linear layers are {list(linear_layers(model))}"
        )
    return keep


def quantize_model_weights(
    model: nn.Module,
    bits: int,
    *,
    per_channel: bool = False,
    symmetric: bool = True,
    keep: Iterable[str] = (),
    keep_bits: int | None = None,
) -> nn.Module:
    """A copy of model, Linear weights fake-quantized to `bits`; layers in keep at keep_bits (None: FP32)."""
    _check_bits(bits)
    if keep_bits is not None:
        _check_bits(keep_bits, "keep_bits")
    keep = _check_keep(model, keep)
    arguments.boolean("per_channel", per_channel)
    arguments.boolean("symmetric", symmetric)
    quantized = copy.deepcopy(model).eval()
    with torch.no_grad():
        for name, layer in linear_layers(quantized).items():
            layer_bits = keep_bits if name in keep else bits
            if layer_bits is not None:
                layer.weight.copy_(quantization.fake_quantize(
                    layer.weight, layer_bits, per_channel=per_channel, symmetric=symmetric))
    return quantized


def model_size_bytes(
    model: nn.Module,
    precision: int | str = 32,
    *,
    keep: Iterable[str] = (),
    keep_bits: int = 8,
    per_channel: bool = False,
) -> int:
    """Bytes to store the model: Linear weights at `precision`, a format or a bit width (kept layers at
    keep_bits), the rest FP32, + scales (a block format's own; below 16 bits a float32 scale and an int32 zero
    point per tensor or row)."""
    bits = bytes_per_weight(precision) * 8
    keep = _check_keep(model, keep)
    keep_bits = arguments.between("keep_bits", keep_bits, 1, 32, integer=True)
    per_channel = arguments.boolean("per_channel", per_channel)
    layers = linear_layers(model)
    weight_ids = {id(layer.weight) for layer in layers.values()}
    total_bits = sum(p.numel() * 32 for p in model.parameters() if id(p) not in weight_ids)
    for name, layer in layers.items():
        layer_bits = keep_bits if name in keep else bits
        total_bits += layer.weight.numel() * layer_bits
        if layer_bits < 16:  # a float32 scale and an int32 zero point per tensor or per row
            total_bits += 64 * (layer.weight.shape[0] if per_channel else 1)
    return int(total_bits // 8)


def accuracy_vs_bits(
    model: nn.Module,
    data: Digits,
    bits_list: Iterable[int] = (8, 6, 4, 3, 2),
    *,
    per_channel: bool = False,
    symmetric: bool = True,
    keep: Iterable[str] = (),
) -> dict[int, float]:
    """Test accuracy (0..1) with every Linear weight fake-quantized at each bit width: the accuracy cliff."""
    arguments.instance("data", data, Digits)
    bits_list = arguments.finite_array("bits_list", bits_list, ndim=1, integer=True, minimum=2,
                                       maximum=16).tolist()
    keep = tuple(_check_keep(model, keep))
    return {
        bits: accuracy(
            quantize_model_weights(model, bits, per_channel=per_channel, symmetric=symmetric, keep=keep),
            data.x_test,
            data.y_test,
        )
        for bits in bits_list
    }


def layer_sensitivity(
    model: nn.Module, data: Digits, bits: int = 2, *, per_channel: bool = False, symmetric: bool = True
) -> dict[str, float]:
    """Test accuracy (0..1) when only one Linear layer is quantized to `bits`: which layer is fragile."""
    arguments.instance("data", data, Digits)
    _check_bits(bits)
    names = list(linear_layers(model))
    return {
        name: accuracy(
            quantize_model_weights(
                model,
                bits,
                per_channel=per_channel,
                symmetric=symmetric,
                keep=[n for n in names if n != name],
            ),
            data.x_test,
            data.y_test,
        )
        for name in names
    }


def in_dtype(model: nn.Module, precision: str, device: str = "cpu") -> Callable[[torch.Tensor], torch.Tensor]:
    """A predictor running a copy of model in 'fp32', 'fp16' or 'bf16' on device (input moved and cast)."""
    arguments.instance("model", model, nn.Module)
    device = bench.resolve_device(device)
    name = formats.get(precision, argument="precision").name
    if name not in HALF_AND_FULL:
        raise ValueError(f"precision must be one of {', '.join(HALF_AND_FULL)}, got {precision!r}")
    dtype = getattr(torch, formats.torch_dtype(name))
    cast = copy.deepcopy(model).to(device=device, dtype=dtype).eval()

    def predict(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return cast(x.to(device=device, dtype=dtype))

    return predict


TORCH_AO_DEPRECATED = (
    "torch.ao.quantization.quantize_dynamic is deprecated: PyTorch moved eager quantization to torchao's "
    "quantize_ (pip install torchao); this is the old path, kept for machines without torchao"
)


@contextlib.contextmanager
def _quiet_loggers(*names: str):
    """Loggers named here print errors only inside the block (torchao's import reports CUDA kernels that a
    CPU-only torch cannot load, and torch's tree utilities a deprecation of torchao's, on stderr)."""
    loggers = [logging.getLogger(name) for name in names]
    levels_before = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels_before, strict=True):
            lg.setLevel(level)


def torch_int8_api() -> str:
    """Which PyTorch dynamic-int8 API torch_dynamic_int8 uses here: 'torchao <version>' or 'torch.ao'."""
    try:
        with _quiet_loggers("torchao", "torch.utils._pytree"):
            import torchao
            from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_  # noqa: F401
    except Exception:  # absent, or a torchao built for another torch: the deprecated path still works
        return "torch.ao"
    return f"torchao {torchao.__version__}"


def torch_dynamic_int8(model: nn.Module, api: str | None = None) -> nn.Module:
    """A copy of model with dynamic int8 Linear layers (int8 weights; each call's activations quantized on
    the fly), on the CPU.

    api 'torchao': torchao's quantize_(Int8DynamicActivationInt8WeightConfig()), PyTorch's current API.
    api 'torch.ao': torch.ao.quantization.quantize_dynamic, deprecated: one DeprecationWarning says so.
    None: torchao when it imports (torch_int8_api), else torch.ao.
    """
    if api is not None:
        arguments.one_of("api", api, ("torchao", "torch.ao"))
    api = api or torch_int8_api().split()[0]
    arguments.instance("model", model, nn.Module)
    copied = copy.deepcopy(model).cpu().eval()
    if api == "torchao":
        with _quiet_loggers("torchao", "torch.utils._pytree"):
            from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

        quantize_(copied, Int8DynamicActivationInt8WeightConfig())
        return copied
    warnings.warn(TORCH_AO_DEPRECATED, DeprecationWarning, stacklevel=2)  # shown once per calling line
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own notices say the same at length, three times over
        return quantize_dynamic(copied, {nn.Linear}, dtype=torch.qint8)


def compare_variants(
    predictors: Mapping[str, Callable[[torch.Tensor], object]],
    data: Digits,
    *,
    sizes_bytes: Mapping[str, float] | None = None,
    timed: Iterable[str] | None = None,
    batch_size: int = 128,
    reference: str | None = None,
    device: str = "cpu",
    repeats: int = 5,
) -> list[dict]:
    """One row per variant: size (bytes), latency of one batch (Measurement, interleaved), accuracy (0..1) and
    agreement (0..1) with the reference variant (the first one unless named: eager FP32 is the oracle)."""
    arguments.instance("predictors", predictors, Mapping)
    if not predictors:
        raise ValueError("predictors must name at least one variant")
    for name, fn in predictors.items():
        arguments.function(f"predictors[{name!r}]", fn)
    arguments.instance("data", data, Digits)
    if sizes_bytes is not None:
        arguments.instance("sizes_bytes", sizes_bytes, Mapping)
        for name, size in sizes_bytes.items():
            arguments.positive(f"sizes_bytes[{name!r}]", size)
    if reference is not None:
        arguments.one_of("reference", reference, predictors)
    reference = reference or next(iter(predictors))
    batch_size = arguments.count("batch_size", batch_size, "batch")
    if timed is not None:
        arguments.instance("timed", timed, (list, tuple, set))
        for name in timed:
            arguments.one_of("timed", name, predictors)
    device = bench.resolve_device(device)
    arguments.count("repeats", repeats, "repeats")
    timed = list(predictors if timed is None else timed)
    x = data.x_test[:batch_size]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a noisy machine: the table shows the IQR itself
        measured = bench.compare(
            {n: (lambda f=predictors[n]: f(x)) for n in timed}, device=device, warmup=1, repeats=repeats
        )
    sizes_bytes = sizes_bytes or {}
    return [
        {
            "variant": name,
            "runs_on": runs_on(fn),
            "size_bytes": sizes_bytes.get(name),
            "latency": measured.get(name),
            "accuracy": accuracy(fn, data.x_test, data.y_test),
            "agreement": agreement(fn, predictors[reference], data.x_test),
        }
        for name, fn in predictors.items()
    ]


def runs_on(predictor) -> str:
    """The device a predictor computes on: an ORT Predictor's, a module's first parameter's, else '-'."""
    if isinstance(getattr(predictor, "device", None), str):
        return predictor.device
    if isinstance(predictor, torch.nn.Module):
        parameter = next(predictor.parameters(), None)
        return "-" if parameter is None else parameter.device.type
    return "-"


def format_variants(rows: list[dict]) -> str:
    """The compare_variants rows as an aligned text table (device, kB, ms per batch with IQR, %)."""
    arguments.instance("rows", rows, (list, tuple))
    for i, row in enumerate(rows):
        arguments.instance(f"rows[{i}]", row, dict)
    lines = [f"{'variant':<30}{'runs on':>8}{'size (kB)':>10}{'ms/batch':>10}{'IQR':>8}"
             f"{'accuracy':>10}{'agrees':>8}"]
    for r in rows:
        size = f"{r['size_bytes'] / 1e3:.1f}" if r["size_bytes"] else "-"
        m = r["latency"]
        ms, iqr = (f"{m.median_ms:.2f}", f"{m.iqr_ms:.2f}") if m else ("-", "-")
        lines.append(
            f"{r['variant']:<30}{r.get('runs_on', '-'):>8}{size:>10}{ms:>10}{iqr:>8}"
            f"{r['accuracy']:>10.1%}{r['agreement']:>8.1%}"
        )
    return "\n".join(lines)


def half_precision_verdict(fp32_flops: float, half_flops: float, precision: str = "fp16") -> str:
    """One sentence explaining a measured FP32 vs FP16/BF16 matmul speed (FLOP/s each)."""
    arguments.positive("fp32_flops", fp32_flops)
    arguments.positive("half_flops", half_flops)
    arguments.text("precision", precision)
    ratio = fp32_flops / half_flops
    if ratio > 3:
        return (
            f"{precision} matmul ran {ratio:.0f}x SLOWER than fp32 here ({half_flops / 1e9:,.1f} against "
            f"{fp32_flops / 1e9:,.1f} GFLOP/s): this device has no {precision} multiply-add units, and the "
            f"framework's {precision} matmul path on it is slow (on x86 the conversion itself is in "
            "hardware, F16C for fp16, so what costs is the kernel: PyTorch's CPU half-precision matmul is "
            "not the tuned fp32 one). Halving the bytes only pays on hardware and kernels built for it "
            "(GPU tensor cores, CPUs with AVX-512 BF16/FP16 or AMX)."
        )
    if ratio > 1 / 1.3:
        return (
            f"{precision} matmul ran at about the same speed as fp32 here ({1 / ratio:.2f}x: "
            f"{half_flops / 1e9:,.1f} against {fp32_flops / 1e9:,.1f} GFLOP/s): the device converts but does "
            "not compute faster; the memory saving remains."
        )
    return (
        f"{precision} matmul ran {1 / ratio:.1f}x faster than fp32 here ({half_flops / 1e9:,.1f} against "
        f"{fp32_flops / 1e9:,.1f} GFLOP/s): the device has native {precision} units (tensor cores or matrix "
        "extensions)."
    )


def int8_saturation_verdict(
    max_error_signed: float, max_error_reduced: float, has_vnni: bool | None = None
) -> str:
    """Explain measured max |logit error| of signed-int8 weights vs reduce_range (7-bit) weights."""
    arguments.positive("max_error_signed", max_error_signed, allow_zero=True)
    arguments.positive("max_error_reduced", max_error_reduced, allow_zero=True)
    if has_vnni is not None:
        arguments.boolean("has_vnni", has_vnni)
    vnni = {True: "This CPU has VNNI", False: "This CPU has no VNNI", None: "Without knowing about VNNI"}[
        has_vnni
    ]
    if max_error_signed > 2 * max(max_error_reduced, 1e-12):
        return (
            f"{vnni}: signed int8 weights gave {max_error_signed / max(max_error_reduced, 1e-12):.1f}x the "
            "error of reduce_range. Without VNNI, the u8 x s8 multiply-add (vpmaddubsw) adds pairs into "
            "16 bits and saturates; 7-bit weights (reduce_range=True) or QUInt8 weights leave headroom."
        )
    return (
        f"{vnni}: signed int8 weights were as accurate as reduce_range here "
        f"({max_error_signed:.3g} vs {max_error_reduced:.3g}): no saturation seen; 8-bit weights are safe."
    )


def plot_error_map(
    w: torch.Tensor,
    bits: int,
    *,
    per_channel: bool = False,
    symmetric: bool = True,
    accuracy_value: float | None = None,
    ax=None,
):
    """Heat-map of |w - fake_quantize(w)| for a weight (out, in), with the error summary in the title."""
    if accuracy_value is not None:
        arguments.fraction("accuracy_value", accuracy_value, allow_zero=True)
    err = quantization_error(w, bits, per_channel=per_channel, symmetric=symmetric)
    s = error_summary(w, bits, per_channel=per_channel, symmetric=symmetric)
    title = (
        f"{bits}-bit {'per-channel' if per_channel else 'per-tensor'} "
        f"{'symmetric' if symmetric else 'asymmetric'}: rel. RMS error {s['relative_rmse']:.1%}"
    )
    if accuracy_value is not None:
        title += f"\ntest accuracy {accuracy_value:.1%}"
    ax = plots.axes("input feature (column)", "output channel (row)", title=title, ax=ax)
    image = ax.imshow(
        err.reshape(err.shape[0], -1).numpy(), aspect="auto", cmap="magma", interpolation="nearest"
    )
    ax.grid(False)
    plt.colorbar(image, ax=ax, label="|error| (weight units)")
    return plots.finish(ax, legend=False)


def plot_accuracy_cliff(curves: Mapping[str, Mapping[int, float]], reference: float | None = None, ax=None):
    """Test accuracy (%) vs weight bits, one line per scheme ({'per-tensor': {8: 0.97, ...}, ...})."""
    arguments.instance("curves", curves, Mapping)
    if not curves:
        raise ValueError("curves must map a scheme name to {bits: accuracy}")
    for label, by_bits in curves.items():
        arguments.instance(f"curves[{label!r}]", by_bits, Mapping)
        for bits, value in by_bits.items():
            arguments.between(f"curves[{label!r}] bits", bits, 1, 32, integer=True)
            arguments.fraction(f"curves[{label!r}][{bits}]", value, allow_zero=True)
    if reference is not None:
        arguments.fraction("reference", reference, allow_zero=True)
    ax = plots.axes("weight bits", "test accuracy (%)", title="The accuracy cliff", ax=ax)
    for k, (label, by_bits) in enumerate(curves.items()):
        bits = sorted(by_bits)
        ax.plot(bits, [100 * by_bits[b] for b in bits], marker="o", color=plots.color(k), label=label)
    if reference is not None:
        ax.axhline(100 * reference, color="k", linestyle="--", label="FP32 reference")
    ax.set_ylim(0, 100)
    ax.invert_xaxis()  # fewer bits to the right: stepping down
    return plots.finish(ax)


def precision_explorer(model: nn.Module, data: Digits, layer: str | None = None):
    """Sliders (bits, per-tensor/channel, symmetric/asymmetric) -> error heat-map of a layer + accuracy."""
    layers = linear_layers(model)
    arguments.instance("data", data, Digits)
    layer = next(iter(layers)) if layer is None else arguments.one_of("layer", layer, layers)

    def show(bits, granularity, mode):
        per_channel, symmetric = granularity == "per-channel", mode == "symmetric"
        quantized = quantize_model_weights(model, bits, per_channel=per_channel, symmetric=symmetric)
        acc = accuracy(quantized, data.x_test, data.y_test)
        return plot_error_map(
            layers[layer].weight, bits, per_channel=per_channel, symmetric=symmetric, accuracy_value=acc
        )

    return widgets.explore(
        show,
        bits=widgets.int_slider("weight bits", 2, 8, 4),
        granularity=widgets.toggle("scale", ["per-tensor", "per-channel"]),
        mode=widgets.toggle("range", ["symmetric", "asymmetric"]),
    )
