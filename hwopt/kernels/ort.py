"""ONNX Runtime: export (dynamo exporter), sessions with explicit threads and optimization levels,
graph node counts, dynamic and static int8 quantization, TensorRT FP16 where present (lessons 4, 5), and the
quantized graphs of lesson 2's decode step, their weights packed from hwopt.quantization's codes and scales.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import io
import logging
import os
import re
import shutil
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch
from onnx import helper, numpy_helper
from onnxruntime.quantization import QuantFormat, QuantType
from onnxruntime.quantization import quantize_dynamic as ort_quantize_dynamic
from onnxruntime.quantization import quantize_static as ort_quantize_static

from hwopt import arguments, quantization

OPT_LEVELS = ("disable", "basic", "extended", "all")
WEIGHT_TYPES = ("qint8", "quint8")

TENSORRT_FP16_CODE = """import onnxruntime as ort
providers = [("TensorrtExecutionProvider", {"trt_fp16_enable": True,
                                            "trt_engine_cache_enable": True,
                                            "trt_engine_cache_path": "trt_cache"}),
             "CUDAExecutionProvider", "CPUExecutionProvider"]
session = ort.InferenceSession("model.onnx", providers=providers)
logits = session.run(None, {"x": x_numpy})[0]"""


_TEMP_DIRS: list[Path] = []  # folders made by temp_dir, removed when Python exits
_OWNER = re.compile(r"-pid(\d+)-")  # temp_dir names each folder after the process that made it


def temp_dir(prefix: str = "hwopt-onnx-") -> Path:
    """A fresh temporary folder for exported models (never inside the repository), removed at exit.

    A process killed before it exits (a Jupyter kernel shut down at once) cannot remove its folders: the
    next call, in any process, removes those of processes that no longer run (remove_stale_temp_dirs)."""
    if not isinstance(prefix, str) or any(c in prefix for c in "/\\"):
        raise ValueError(f"prefix must be a str without slashes; got {prefix!r}")
    if not _TEMP_DIRS:
        atexit.register(remove_temp_dirs)
    remove_stale_temp_dirs()
    folder = Path(tempfile.mkdtemp(prefix=f"{prefix}pid{os.getpid()}-"))
    _TEMP_DIRS.append(folder)
    return folder


def remove_temp_dirs() -> None:
    """Delete every folder temp_dir made (and the models in them); runs by itself when Python exits."""
    while _TEMP_DIRS:
        shutil.rmtree(_TEMP_DIRS.pop(), ignore_errors=True)


def remove_stale_temp_dirs(folder: str | Path | None = None) -> list[str]:
    """Delete the temp_dir folders (in folder, default the system's temporary folder) of processes that no
    longer run; returns their names."""
    folder = tempfile.gettempdir() if folder is None else arguments.instance("folder", folder, (str, Path))
    root = Path(folder)
    removed = []
    for path in root.glob("hwopt-*-pid*-*"):
        owner = _OWNER.search(path.name)
        if owner and path.is_dir() and not _running(int(owner[1])):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    return sorted(removed)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process, or no such pid on this system
        return True
    return True


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """Silence the exporter's progress prints, warnings and logger chatter (stderr breaks graded cells)."""
    names = ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in names)]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def export_onnx(
    model,
    example_inputs: Sequence,
    path: str | Path | None = None,
    *,
    dynamic_batch: bool = True,
    input_names: Sequence[str] | None = None,
) -> Path:
    """Export a torch module with the dynamo exporter to ONE self-contained .onnx file (temp dir by default).

    example_inputs: tuple of tensors; dim 0 of each is a dynamic 'batch' axis when dynamic_batch.
    """
    arguments.instance("model", model, torch.nn.Module)
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    arguments.instance("example_inputs", example_inputs, (tuple, list))
    example_inputs = tuple(example_inputs)
    if not example_inputs or not all(isinstance(t, torch.Tensor) for t in example_inputs):
        raise ValueError("example_inputs must be a non-empty tuple of tensors")
    for i, t in enumerate(example_inputs):
        arguments.finite_array(f"example_inputs[{i}]", t)
    dynamic_batch = arguments.boolean("dynamic_batch", dynamic_batch)
    if input_names is not None:
        arguments.instance("input_names", input_names, (list, tuple))
        for name in input_names:
            arguments.text("input_names", name)
    path = _path("path", path) if path is not None else temp_dir() / "model.onnx"
    if path.suffix != ".onnx":
        raise ValueError(f"path must end in .onnx, got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    dynamic_shapes = None
    if dynamic_batch:
        batch = torch.export.Dim("batch", min=1)
        dynamic_shapes = tuple({0: batch} for _ in example_inputs)
    model = model.eval()
    with quiet_exporter():
        torch.onnx.export(
            model,
            example_inputs,
            str(path),
            dynamo=True,
            dynamic_shapes=dynamic_shapes,
            input_names=list(input_names) if input_names else None,
            external_data=False,
            verbose=False,
        )
    _drop_initializer_value_info(path)
    return path


def _drop_initializer_value_info(path: Path) -> None:
    """Drop shape entries that duplicate initializers: ORT's quantizer re-lays weights out and then trips."""
    model = onnx.load(str(path))
    initializers = {init.name for init in model.graph.initializer}
    keep = [v for v in model.graph.value_info if v.name not in initializers]
    del model.graph.value_info[:]
    model.graph.value_info.extend(keep)
    onnx.save(model, str(path))


def _path(name: str, path, *, existing: bool = False) -> Path:
    """A str or Path argument as a Path; with existing, the file must be there."""
    path = Path(arguments.instance(name, path, (str, Path)))
    if existing and not path.is_file():
        raise ValueError(f"{name} must be an existing .onnx file, got {str(path)!r}")
    return path


def file_size_bytes(path: str | Path) -> int:
    """Bytes on disk of an .onnx file plus any external-data files next to it."""
    path = _path("path", path, existing=True)
    size = path.stat().st_size
    model = onnx.load(str(path), load_external_data=False)
    locations = {
        entry.value
        for init in model.graph.initializer
        for entry in init.external_data
        if entry.key == "location"
    }
    return size + sum(
        (path.parent / loc).stat().st_size for loc in locations if (path.parent / loc).is_file()
    )


def session_options(
    *,
    threads: int | None = None,
    opt_level: str = "all",
    optimized_model_path: str | Path | None = None,
    allow_spinning: bool = False,
):
    """onnxruntime.SessionOptions: intra-op threads (None = ORT's default), optimization level, quiet logs.

    allow_spinning=False: idle ORT threads sleep instead of spinning, so they do not slow torch code that runs
    in between (interleaved comparisons); True shaves latency off back-to-back ORT calls.
    """
    arguments.one_of("opt_level", opt_level, OPT_LEVELS)
    if threads is not None:
        arguments.count("threads", threads, "threads")
    allow_spinning = arguments.boolean("allow_spinning", allow_spinning)
    if optimized_model_path is not None:
        _path("optimized_model_path", optimized_model_path)
    levels = {
        "disable": onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = levels[opt_level]
    options.log_severity_level = 3  # errors only
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
    if optimized_model_path is not None:
        options.optimized_model_filepath = str(optimized_model_path)
    return options


def providers_for(device: str = "cpu", available: Sequence[str] | None = None) -> list[str]:
    """Execution providers for a course device name: 'cuda' -> CUDA (+CPU fallback) when ORT has it."""
    base = device.split(":")[0].lower() if isinstance(device, str) else device
    arguments.one_of("device", base, ("cpu", "cuda", "mps"))
    available = _providers(available)
    if base == "cuda" and "CUDAExecutionProvider" in available:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def _providers(available) -> list[str]:
    """The providers this onnxruntime offers (None), or the given list of provider names, checked."""
    if available is None:
        return list(onnxruntime.get_available_providers())
    arguments.instance("available", available, (list, tuple))
    for name in available:
        arguments.text("available", name)
    return list(available)


def make_session(
    model: str | Path | bytes,
    *,
    threads: int | None = None,
    opt_level: str = "all",
    device: str = "cpu",
    providers: Sequence | None = None,
):
    """An InferenceSession on model (an .onnx path, or a serialized model's bytes) with explicit threads,
    optimization level and providers."""
    if isinstance(model, bytes | bytearray):
        if not model:
            raise ValueError("model must be an existing .onnx file or a serialized model's bytes, got b''")
        source = bytes(model)
    elif isinstance(model, str | Path) and Path(model).is_file():
        source = str(model)
    else:
        shown = repr(str(model)) if isinstance(model, str | Path) else type(model).__name__
        raise ValueError(f"model must be an existing .onnx file or a serialized model's bytes, got {shown}")
    options = session_options(threads=threads, opt_level=opt_level)
    device_providers = providers_for(device)
    if providers is not None:
        arguments.instance("providers", providers, (list, tuple))
    return onnxruntime.InferenceSession(source, options, providers=list(providers or device_providers))


def run(session, *inputs) -> np.ndarray:
    """First output of session for positional inputs (torch or numpy, float32), as numpy."""
    _check_session(session)
    names = [i.name for i in session.get_inputs()]
    if len(inputs) != len(names):
        raise ValueError(f"inputs must match the model's {len(names)} inputs {names}, got {len(inputs)}")
    arrays = [x.detach().cpu().numpy() if hasattr(x, "detach") else x for x in inputs]
    for i, a in enumerate(arrays):
        arguments.finite_array(f"inputs[{i}]", a)
    feed = {n: np.ascontiguousarray(a, dtype=np.float32) for n, a in zip(names, arrays, strict=True)}
    return session.run(None, feed)[0]


def _check_session(session) -> None:
    if not (callable(getattr(session, "run", None)) and callable(getattr(session, "get_inputs", None))):
        raise ValueError(f"session must be an onnxruntime.InferenceSession; got {type(session).__name__}")


def runs_on(session) -> str:
    """'cuda' when the session's first execution provider is CUDA's or TensorRT's, else 'cpu'.

    A GPU runtime whose onnxruntime has no CUDA provider (Colab's) runs ORT sessions on the CPU: say so."""
    _check_session(session)
    first = session.get_providers()[0]
    return "cuda" if first in TENSORRT_PROVIDERS else "cpu"


class Predictor:
    """Call an ORT session like a torch module: torch or numpy (batch, ...) in, numpy logits out."""

    def __init__(self, session):
        _check_session(session)
        self.session = session
        self.input_name = session.get_inputs()[0].name
        self.device = runs_on(session)

    def __call__(self, x) -> np.ndarray:
        if hasattr(x, "detach"):
            x = x.detach().cpu().numpy()
        return self.session.run(None, {self.input_name: np.ascontiguousarray(x, dtype=np.float32)})[0]


def optimized_graph(model_path: str | Path, opt_level: str = "all", *, threads: int | None = 1):
    """The onnx.ModelProto ORT produces after graph optimization at opt_level (via a scratch file)."""
    model_path = _path("model_path", model_path, existing=True)
    arguments.one_of("opt_level", opt_level, OPT_LEVELS)
    with tempfile.TemporaryDirectory(prefix="hwopt-ort-opt-") as scratch:
        out = Path(scratch) / f"optimized_{opt_level}.onnx"
        options = session_options(threads=threads, opt_level=opt_level, optimized_model_path=out)
        onnxruntime.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        return onnx.load(str(out))


def node_counts(model) -> Counter:
    """Counter of op types in an ONNX graph (path or ModelProto), e.g. Counter({'Gemm': 2, 'Relu': 1})."""
    if isinstance(model, str | Path):
        if not Path(model).is_file():
            raise ValueError(
                f"model must be an existing .onnx path or an onnx.ModelProto, got {str(model)!r}"
            )
        model = onnx.load(str(model), load_external_data=False)
    if not isinstance(model, onnx.ModelProto):
        raise ValueError(f"model must be an .onnx path or an onnx.ModelProto, got {type(model).__name__}")
    return Counter(node.op_type for node in model.graph.node)


def new_node_types(before: Counter, after: Counter) -> list[str]:
    """Op types present after optimization but not before (the fused kernels), sorted."""
    arguments.instance("before", before, Counter)
    arguments.instance("after", after, Counter)
    return sorted(set(after) - set(before))


def quantize_dynamic(
    model_path: str | Path,
    *,
    weight_type: str = "qint8",
    reduce_range: bool = False,
    per_channel: bool = False,
    out_path: str | Path | None = None,
) -> Path:
    """ORT dynamic int8 quantization (weights int8 offline, activations at run time) -> new .onnx path."""
    arguments.one_of("weight_type", weight_type, WEIGHT_TYPES)
    model_path = _path("model_path", model_path, existing=True)
    reduce_range = arguments.boolean("reduce_range", reduce_range)
    per_channel = arguments.boolean("per_channel", per_channel)
    out = _path("out_path", out_path) if out_path is not None else None
    out = out or temp_dir("hwopt-int8-") / f"dynamic_{weight_type}.onnx"
    with quiet_exporter():
        ort_quantize_dynamic(
            str(model_path),
            str(out),
            per_channel=per_channel,
            reduce_range=reduce_range,
            weight_type={"qint8": QuantType.QInt8, "quint8": QuantType.QUInt8}[weight_type],
        )
    return out


class ArrayCalibrationReader:
    """Feeds calibration batches (n, ...) float32 to ORT static quantization, batch_size rows at a time."""

    def __init__(self, input_name: str, data, batch_size: int = 32):
        arguments.text("input_name", input_name)
        batch_size = arguments.count("batch_size", batch_size, "batch")
        if hasattr(data, "detach"):
            data = data.detach().cpu().numpy()
        data = np.asarray(arguments.finite_array("data", data), dtype=np.float32)
        if data.ndim < 1:
            raise ValueError("data must hold at least one calibration example (n, ...)")
        self.input_name = input_name
        self.batches = [data[i : i + batch_size] for i in range(0, len(data), batch_size)]
        self._iter = iter(self.batches)

    def get_next(self) -> dict | None:
        """The next {input_name: batch}, or None when done (ORT's CalibrationDataReader protocol)."""
        batch = next(self._iter, None)
        return None if batch is None else {self.input_name: batch}

    def rewind(self) -> None:
        """Start again from the first batch."""
        self._iter = iter(self.batches)

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        batch = self.get_next()
        if batch is None:
            raise StopIteration
        return batch

    def __len__(self) -> int:
        return len(self.batches)


def quantize_static(
    model_path: str | Path,
    calibration_data,
    *,
    batch_size: int = 32,
    per_channel: bool = False,
    reduce_range: bool = False,
    out_path: str | Path | None = None,
) -> Path:
    """ORT static int8 quantization (QDQ, activation ranges calibrated on calibration_data) -> .onnx path."""
    model_path = _path("model_path", model_path, existing=True)
    per_channel = arguments.boolean("per_channel", per_channel)
    reduce_range = arguments.boolean("reduce_range", reduce_range)
    input_name = onnx.load(str(model_path), load_external_data=False).graph.input[0].name
    batch_size = arguments.count("batch_size", batch_size, "batch")
    def reader_of(data):
        return ArrayCalibrationReader(input_name, data, batch_size)

    reader = arguments.named("calibration_data", reader_of, calibration_data)
    out = temp_dir("hwopt-int8-") / "static_int8.onnx" if out_path is None else _path("out_path", out_path)
    with quiet_exporter():
        ort_quantize_static(
            str(model_path),
            str(out),
            reader,
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=per_channel,
            reduce_range=reduce_range,
        )
    return out


def linear_model(weight, path: str | Path | None = None) -> Path:
    """A one-node ONNX graph y = x @ weight, weight (in, out) float32, written without the exporter."""
    weight = arguments.finite_array("weight", weight, ndim=2)
    if weight.dtype != np.float32:
        raise ValueError(f"weight must be a 2-D float32 array (in, out), got {weight.dtype} {weight.shape}")
    n_in, n_out = weight.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "weight"], ["y"])],
        "linear",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", n_in])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", n_out])],
        [numpy_helper.from_array(weight, "weight")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path = _path("path", path) if path is not None else temp_dir() / "linear.onnx"
    onnx.save(model, str(path))
    return path


INT8_SETTINGS = {
    "signed int8 (QInt8)": ("qint8", False),
    "signed int8, reduce_range": ("qint8", True),
    "unsigned int8 (QUInt8)": ("quint8", False),
}


def int8_saturation_probe(
    n_features: int = 1024, batch_size: int = 8, seed: int = 0, threads: int | None = None
) -> dict[str, float]:
    """Max |error| / max |output| of ORT dynamic int8 on one Linear(n, n) at nn.Linear's uniform init.

    Without VNNI, signed int8 weights (u8 x s8 pairs summed in 16 bits) saturate; 7-bit or u8 weights do not.
    """
    n_features = arguments.count("n_features", n_features, "dimension", minimum=2)
    batch_size = arguments.count("batch_size", batch_size, "batch")
    if threads is not None:
        arguments.count("threads", threads, "threads")
    rng = np.random.default_rng(arguments.count("seed", seed, "seed", minimum=0))
    bound = 1.0 / np.sqrt(n_features)
    weight = rng.uniform(-bound, bound, (n_features, n_features)).astype(np.float32)
    x = rng.standard_normal((batch_size, n_features)).astype(np.float32)
    reference = x @ weight
    errors = {}
    with tempfile.TemporaryDirectory(prefix="hwopt-int8-") as scratch:
        path = linear_model(weight, Path(scratch) / "linear.onnx")
        for label, (weight_type, reduce_range) in INT8_SETTINGS.items():
            out_path = Path(scratch) / f"{weight_type}_{reduce_range}.onnx"
            quantized = quantize_dynamic(path, weight_type=weight_type, reduce_range=reduce_range,
                                         out_path=out_path)
            y = Predictor(make_session(quantized, threads=threads))(x)
            errors[label] = float(np.abs(y - reference).max() / np.abs(reference).max())
    return errors


# ---- lesson 2's decode step as quantized graphs, packed from hwopt.quantization's codes and scales -------

NBITS_BLOCK_SIZES = (16, 32, 64, 128, 256)  # weights per scale that MatMulNBits takes (powers of two >= 16)
NBITS_BITS = (4, 8)  # the widths of MatMulNBits weights packed here


def _weight_codes(q, bits: tuple[int, ...], symmetric: bool, blocks: tuple[int, ...] | None):
    """Codes (K, N), scales and zero points (numpy) of q, checked to be `bits`-bit integer codes of a weight
    w (K, N) along K (axis 0, as in x @ w), symmetric or not, in one of `blocks` (None: per channel)."""
    arguments.instance("q", q, quantization.Quantized)
    codes, scales, zero_points = q.numpy()
    along_k = codes.ndim == 2 and q.axis == 0
    if blocks is None:
        layout, fits = "one scale per output channel", along_k and q.block == codes.shape[0]
    else:
        layout = f"blocks of {' or '.join(map(str, blocks))} weights"
        fits = along_k and q.block in blocks and codes.shape[0] % q.block == 0
    grid = q.precision.kind == "int" and q.precision.bits in bits and q.symmetric == symmetric
    if not (fits and grid):
        kind = "symmetric" if symmetric else "asymmetric"
        widths = " or ".join(map(str, bits))
        raise ValueError(f"q must hold {kind} {widths}-bit integer codes of a weight (K, N) along K (axis 0) "
                         f"in {layout}; got {q.precision.name} codes of shape {codes.shape} "
                         f"along axis {q.axis}, {q.block} per scale, {'' if q.symmetric else 'a'}symmetric")
    return codes, scales, zero_points


def matmul_integer_weights(q: quantization.Quantized) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MatMulInteger's weight from asymmetric 8-bit codes of w (K, N) with a scale and zero point per output
    channel (quantization.quantize(w, "int8", per_channel=True, symmetric=False, axis=0)): B (K, N) uint8, its
    scale (N,) fp32 and zero point (N,) uint8. Unsigned weights avoid the u8 x s8 overflow that costs signed
    int8 accuracy on CPUs without VNNI."""
    codes, scales, zero_points = _weight_codes(q, (8,), False, None)
    return (np.ascontiguousarray(codes, np.uint8), scales.reshape(-1).astype(np.float32),
            zero_points.reshape(-1).astype(np.uint8))


def matmul_nbits_weights(q: quantization.Quantized) -> tuple[np.ndarray, np.ndarray]:
    """MatMulNBits' weight from symmetric 4- or 8-bit block codes of w (K, N) along K
    (quantization.quantize(w, "int4_g32", axis=0)): B (N, K/block, block * bits / 8) uint8 and the scales
    (N, K/block) fp32. Each code is stored plus 2^(bits-1), the zero point the op takes when it is given
    none; 4-bit codes go two to a byte along K, the first in the low nibble."""
    codes, scales, _ = _weight_codes(q, NBITS_BITS, True, NBITS_BLOCK_SIZES)
    k, n = codes.shape
    bits, block = q.precision.bits, q.block
    stored = (codes.T.astype(np.int16) + 2 ** (bits - 1)).astype(np.uint8)  # (N, K): blocks run along K
    if bits == 4:
        stored = stored[:, 0::2] | (stored[:, 1::2] << 4)
    return (np.ascontiguousarray(stored.reshape(n, k // block, block * bits // 8)),
            np.ascontiguousarray(scales.T, dtype=np.float32))


def _add_initializer(graph, name: str, array: np.ndarray) -> None:
    """Add array to graph's initializers in place (make_graph and make_model would copy each weight twice)."""
    init = graph.initializer.add()
    init.name, init.data_type = name, helper.np_dtype_to_tensor_dtype(array.dtype)
    init.dims.extend(array.shape)
    init.raw_data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def decode_step_model(layers: Sequence[quantization.Quantized], accuracy_level: int = 4) -> bytes:
    """Serialized ONNX graph of lesson 2's decode step h <- h + h @ W_i (input h0 (1, d), output (1, d)),
    each W_i (d, d) given as its quantization along K (axis 0): asymmetric 8-bit codes per output channel run
    as DynamicQuantizeLinear -> MatMulInteger -> rescale (matmul_integer_weights); symmetric 4- or 8-bit
    blocks as MatMulNBits (matmul_nbits_weights; accuracy_level 4 rounds the input to int8 and sums in int32,
    0 computes in fp32)."""
    arguments.instance("layers", layers, (list, tuple))
    if not layers:
        raise ValueError("layers must hold at least one quantized (d, d) weight")
    accuracy_level = arguments.between("accuracy_level", accuracy_level, 0, 4, integer=True)
    nodes, weights, d = [], [], None
    for i, q in enumerate(layers):
        name, h, y = f"layers[{i}]", f"h{i}", f"y{i}"
        arguments.instance(name, q, quantization.Quantized)
        d = q.codes.shape[0] if d is None else d
        if tuple(q.codes.shape) != (d, d):
            raise ValueError(f"{name} must be a ({d}, {d}) weight like layers[0]; got codes of shape "
                             f"{tuple(q.codes.shape)}")
        if q.symmetric:
            b, scales = arguments.named(name, matmul_nbits_weights, q)
            weights += [(f"W{i}", b), (f"Ws{i}", scales)]
            level = {"accuracy_level": accuracy_level} if accuracy_level else {}
            nodes.append(helper.make_node("MatMulNBits", [h, f"W{i}", f"Ws{i}"], [y], domain="com.microsoft",
                                          K=d, N=d, bits=q.precision.bits, block_size=q.block, **level))
        else:
            b, scale, zero_point = arguments.named(name, matmul_integer_weights, q)
            weights += [(f"W{i}", b), (f"Ws{i}", scale), (f"Wz{i}", zero_point)]
            nodes += [
                helper.make_node("DynamicQuantizeLinear", [h], [f"x{i}", f"xs{i}", f"xz{i}"]),
                helper.make_node("MatMulInteger", [f"x{i}", f"W{i}", f"xz{i}", f"Wz{i}"], [f"acc{i}"]),
                helper.make_node("Cast", [f"acc{i}"], [f"accf{i}"], to=onnx.TensorProto.FLOAT),
                helper.make_node("Mul", [f"xs{i}", f"Ws{i}"], [f"s{i}"]),
                helper.make_node("Mul", [f"accf{i}", f"s{i}"], [y]),
            ]
        nodes.append(helper.make_node("Add", [h, y], [f"h{i + 1}"]))
    graph = helper.make_graph(
        nodes, "decode_step", [helper.make_tensor_value_info("h0", onnx.TensorProto.FLOAT, [1, d])],
        [helper.make_tensor_value_info(nodes[-1].output[0], onnx.TensorProto.FLOAT, [1, d])])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10  # onnxruntime reads IR <= 10 everywhere the course runs
    for name, array in weights:
        _add_initializer(model.graph, name, array)
    return model.SerializeToString()


TENSORRT_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider")  # TensorRT runs on CUDA's


def tensorrt_status(
    available: Sequence[str] | None = None, *, gpu: bool | None = None, tensorrt_package: bool | None = None
) -> tuple[bool, str]:
    """(usable, why): can ONNX Runtime run TensorRT FP16 here, and the reason in one sentence.

    Usable needs this onnxruntime's providers (onnxruntime.get_available_providers()) to hold both the
    TensorRT and the CUDA execution providers, and a CUDA GPU (gpu: torch.cuda.is_available() by default). The
    `tensorrt` Python package alone is not enough: ORT runs TensorRT only through its own provider.
    """
    available = _providers(available)
    if gpu is not None:
        arguments.boolean("gpu", gpu)
    if tensorrt_package is not None:
        arguments.boolean("tensorrt_package", tensorrt_package)
    if gpu is None:
        gpu = torch.cuda.is_available()
    if tensorrt_package is None:
        tensorrt_package = importlib.util.find_spec("tensorrt") is not None
    missing = [name for name in TENSORRT_PROVIDERS if name not in available]
    if not missing and gpu:
        return True, f"ONNX Runtime has {' and '.join(TENSORRT_PROVIDERS)} and a CUDA GPU is present"
    if not missing:
        return False, "this onnxruntime has the TensorRT provider, but no CUDA GPU is visible"
    if not any(name in available for name in TENSORRT_PROVIDERS):
        why = (
            f"this onnxruntime is a CPU-only build (providers {available}), like the `onnxruntime` wheel "
            "the course installs, on Colab's GPU runtime too: TensorRT needs the `onnxruntime-gpu` wheel "
            "built with TensorRT, an NVIDIA GPU and TensorRT's libraries"
        )
    else:
        why = f"this onnxruntime lacks {' and '.join(missing)} (providers {available})"
    if tensorrt_package:
        why += "; the `tensorrt` package is installed, but ORT uses TensorRT only through its own provider"
    return False, why


def tensorrt_available(available: Sequence[str] | None = None, *, gpu: bool | None = None) -> bool:
    """True when ONNX Runtime can run TensorRT here (see tensorrt_status for the reason when not)."""
    return tensorrt_status(available, gpu=gpu)[0]


def tensorrt_fp16_session(
    model_path: str | Path, *, cache_dir: str | Path | None = None, available: Sequence[str] | None = None
):
    """An ORT session on TensorRT with FP16 enabled; ValueError saying why when TensorRT is absent."""
    model_path = _path("model_path", model_path, existing=True)
    if cache_dir is not None:
        _path("cache_dir", cache_dir)
    available = _providers(available)
    if "TensorrtExecutionProvider" not in available:
        raise ValueError(
            "TensorrtExecutionProvider is not in this onnxruntime's providers "
            f"{list(available)}: install onnxruntime-gpu with TensorRT on an NVIDIA GPU"
        )
    cache = str(cache_dir or temp_dir("hwopt-trt-"))
    providers = [
        (
            "TensorrtExecutionProvider",
            {"trt_fp16_enable": True, "trt_engine_cache_enable": True, "trt_engine_cache_path": cache},
        ),
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    ]
    return onnxruntime.InferenceSession(str(model_path), session_options(), providers=providers)


def tensorrt_fp16_check(
    model_path: str | Path, x, reference, *, tolerance: float = 1e-2, available: Sequence[str] | None = None
) -> dict:
    """Run model_path with TensorRT FP16 on x and compare with reference outputs (eager FP32, the oracle).

    Returns {'session', 'relative_error' (max |out - ref| / max |ref|), 'ok' (error <= tolerance)}.
    """
    tolerance = arguments.positive("tolerance", tolerance)
    arguments.finite_array("x", x)
    ref = arguments.finite_array("reference", reference)
    ref = ref.detach().cpu().numpy() if hasattr(ref, "detach") else np.asarray(ref)
    session = tensorrt_fp16_session(model_path, available=available)
    out = run(session, x)
    error = float(np.abs(out - ref).max() / max(float(np.abs(ref).max()), 1e-12))
    return {"session": session, "relative_error": error, "ok": error <= tolerance}
