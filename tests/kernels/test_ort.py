"""kernels.ort: export, sessions, graph optimization, int8 quantization (checked against the FP32 oracle),
and the TensorRT / CUDA provider choices (tested without a GPU)."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from hwopt import quantization
from hwopt.kernels import ort as hort
from hwopt.models import classifier


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    model = classifier.make_classifier(hidden=32).eval()
    path = hort.export_onnx(model, (torch.randn(2, 64),), tmp_path_factory.mktemp("onnx") / "mlp.onnx")
    return model, path


def test_export_writes_one_self_contained_file_with_dynamic_batch(exported):
    model, path = exported
    assert path.is_file() and list(path.parent.iterdir()) == [path]  # no external data files
    assert hort.file_size_bytes(path) == path.stat().st_size
    assert hort.node_counts(path) == {"Gemm": 3, "Relu": 2}
    x = torch.randn(5, 64)
    predictor = hort.Predictor(hort.make_session(path, threads=1))
    out = predictor(x)
    assert out.shape == (5, 10) and predictor.device == "cpu"
    np.testing.assert_allclose(out, model(x).detach().numpy(), atol=1e-4)  # eager FP32 is the oracle


def test_export_defaults_to_a_temp_dir_outside_the_repo_removed_at_exit():
    path = hort.export_onnx(torch.nn.Linear(4, 2), torch.randn(1, 4), dynamic_batch=False)
    assert "hwopt-onnx-" in str(path) and path.name == "model.onnx"
    assert Path(__file__).resolve().parents[2] not in path.parents
    hort.remove_temp_dirs()  # what runs when Python exits
    assert not path.parent.exists()


def test_folders_of_a_killed_process_are_removed_by_the_next_temp_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stale = tmp_path / f"hwopt-onnx-pid{killed.pid}-abc"
    stale.mkdir()
    assert hort.remove_stale_temp_dirs() == []  # its process still runs: its folder stays
    killed.kill()
    killed.wait()
    mine = hort.temp_dir()  # a Jupyter kernel shut down at once cannot clean up: the next use does
    assert not stale.exists() and mine.is_dir() and f"pid{os.getpid()}-" in mine.name
    hort.remove_temp_dirs()


def test_optimized_graph_and_saturation_probe_leave_no_files(tmp_path, monkeypatch, exported):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    hort.optimized_graph(exported[1], "all")
    hort.int8_saturation_probe(n_features=64, batch_size=2)
    assert list(tmp_path.iterdir()) == []


def test_optimization_levels_fuse_gemm_and_relu(exported):
    _, path = exported
    before = hort.node_counts(hort.optimized_graph(path, "disable"))
    after = hort.node_counts(hort.optimized_graph(path, "all"))
    assert sum(after.values()) < sum(before.values())
    assert hort.new_node_types(before, after) == ["FusedGemm"]


def test_session_from_bytes_with_an_explicit_thread_count(exported):
    model, path = exported
    session = hort.make_session(path.read_bytes(), threads=1)
    assert session.get_session_options().intra_op_num_threads == 1
    x = torch.randn(3, 64)
    np.testing.assert_allclose(hort.Predictor(session)(x), model(x).detach().numpy(), atol=1e-4)
    with pytest.raises(ValueError, match="threads"):
        hort.make_session(path.read_bytes(), threads=0)


def test_session_options_threads_and_levels():
    options = hort.session_options(threads=2, opt_level="basic")
    assert options.intra_op_num_threads == 2
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC


def test_dynamic_quantization_agrees_with_fp32(exported, tmp_path):
    model, path = exported
    x = torch.rand(64, 64)
    ref = model(x).detach().numpy()
    for weight_type, reduce_range in (("qint8", True), ("quint8", False)):
        q = hort.quantize_dynamic(path, weight_type=weight_type, reduce_range=reduce_range,
                                  out_path=tmp_path / f"{weight_type}.onnx")
        assert "MatMulInteger" in hort.node_counts(q)
        out = hort.Predictor(hort.make_session(q, threads=1))(x)
        assert np.abs(out - ref).max() < 0.05 * np.abs(ref).max()  # stated tolerance: 5% of the largest logit
        assert hort.file_size_bytes(q) < hort.file_size_bytes(path)


def test_static_quantization_with_calibration(exported, tmp_path):
    model, path = exported
    x = torch.rand(64, 64)
    q = hort.quantize_static(path, x, batch_size=16, out_path=tmp_path / "static.onnx")
    assert "QuantizeLinear" in hort.node_counts(q)
    out = hort.Predictor(hort.make_session(q, threads=1))(x)
    ref = model(x).detach().numpy()
    # activations quantized too (per tensor): tolerance 20% of the largest logit of this untrained net
    assert np.abs(out - ref).max() < 0.2 * np.abs(ref).max()


def test_calibration_reader_batches_and_rewinds():
    reader = hort.ArrayCalibrationReader("x", np.zeros((10, 3)), batch_size=4)
    sizes = [len(batch["x"]) for batch in reader]
    assert sizes == [4, 4, 2] and len(reader) == 3 and reader.get_next() is None
    reader.rewind()
    assert reader.get_next()["x"].dtype == np.float32


def test_int8_saturation_probe_reports_each_setting():
    errors = hort.int8_saturation_probe(n_features=64, batch_size=2)
    assert set(errors) == set(hort.INT8_SETTINGS) and all(0 <= e < 1 for e in errors.values())
    assert errors["signed int8, reduce_range"] < 0.05


def test_linear_model_is_x_times_weight(tmp_path):
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    path = hort.linear_model(w, tmp_path / "lin.onnx")
    out = hort.Predictor(hort.make_session(path))(np.ones((1, 2)))
    np.testing.assert_allclose(out, [[3, 5, 7]])


def test_providers_for_cuda_and_cpu():
    assert hort.providers_for("cpu", available=["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert hort.providers_for("cuda", available=["CUDAExecutionProvider", "CPUExecutionProvider"]) == [
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    ]
    assert hort.providers_for("cuda:0", available=["CPUExecutionProvider"]) == ["CPUExecutionProvider"]


def test_tensorrt_needs_ort_providers_and_a_gpu_not_the_tensorrt_package(monkeypatch, exported):
    gpu_build = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert hort.tensorrt_available(gpu_build, gpu=True)
    assert not hort.tensorrt_available(gpu_build, gpu=False)
    # the tensorrt package without ORT's TensorRT provider (a CPU-only onnxruntime, as on Colab): not usable
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CPUExecutionProvider"])
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object() if name == "tensorrt" else None)
    usable, why = hort.tensorrt_status(gpu=True)
    assert not usable and not hort.tensorrt_available(gpu=True)
    assert "CPU-only" in why and "Colab" in why and "`tensorrt` package is installed" in why
    usable, why = hort.tensorrt_status(["TensorrtExecutionProvider", "CPUExecutionProvider"], gpu=True)
    assert not usable and "CUDAExecutionProvider" in why  # TensorRT's provider needs CUDA's too
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert "package" not in hort.tensorrt_status(["CPUExecutionProvider"], gpu=False)[1]
    with pytest.raises(ValueError, match="TensorrtExecutionProvider"):
        hort.tensorrt_fp16_session(exported[1], available=["CPUExecutionProvider"])
    assert "trt_fp16_enable" in hort.TENSORRT_FP16_CODE


def test_tensorrt_session_asks_for_fp16(monkeypatch, exported, tmp_path):
    seen = {}
    monkeypatch.setattr(
        onnxruntime, "InferenceSession", lambda path, options, providers: seen.update(providers=providers)
    )
    hort.tensorrt_fp16_session(exported[1], cache_dir=tmp_path, available=["TensorrtExecutionProvider"])
    name, options = seen["providers"][0]
    assert name == "TensorrtExecutionProvider" and options["trt_fp16_enable"] is True


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: hort.export_onnx("not a model", (torch.zeros(1),)), "model"),
        (lambda: hort.export_onnx(torch.nn.Linear(2, 2), ()), "example_inputs"),
        (lambda: hort.export_onnx(torch.nn.Linear(2, 2), torch.zeros(1, 2), "m.txt"), "path"),
        (lambda: hort.file_size_bytes("missing.onnx"), "path"),
        (lambda: hort.session_options(opt_level="max"), "opt_level"),
        (lambda: hort.session_options(threads=0), "threads"),
        (lambda: hort.providers_for("tpu", available=[]), "device"),
        (lambda: hort.make_session("missing.onnx"), "model"),
        (lambda: hort.make_session(b""), "model"),
        (lambda: hort.make_session(3), "model"),
        (lambda: hort.node_counts("missing.onnx"), "model"),
        (lambda: hort.node_counts(42), "model"),
        (lambda: hort.quantize_dynamic("missing.onnx"), "model_path"),
        (lambda: hort.quantize_dynamic("missing.onnx", weight_type="int4"), "weight_type"),
        (lambda: hort.quantize_static("missing.onnx", np.zeros((2, 2))), "model_path"),
        (lambda: hort.ArrayCalibrationReader("x", np.zeros((0, 2))), "data"),
        (lambda: hort.ArrayCalibrationReader("x", np.zeros((2, 2)), batch_size=0), "batch_size"),
        (lambda: hort.linear_model(np.zeros(3, dtype=np.float32)), "weight"),
        (lambda: hort.int8_saturation_probe(n_features=1), "n_features"),
        (lambda: hort.int8_saturation_probe(batch_size=0), "batch_size"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_onnx_files_are_valid(exported):
    onnx.checker.check_model(onnx.load(str(exported[1])))


def test_run_feeds_several_inputs(tmp_path):
    class Add(torch.nn.Module):
        def forward(self, a, b):
            return a + b

    path = hort.export_onnx(Add(), (torch.ones(2, 3), torch.ones(2, 3)), tmp_path / "add.onnx")
    session = hort.make_session(path)
    np.testing.assert_allclose(
        hort.run(session, torch.ones(4, 3), np.full((4, 3), 2.0)), np.full((4, 3), 3.0)
    )
    with pytest.raises(ValueError, match="inputs"):
        hort.run(session, np.ones((1, 3)))


class _FakeSession:
    def __init__(self, out):
        self.out = out

    def get_inputs(self):
        return [type("I", (), {"name": "x"})()]

    def run(self, names, feed):
        return [self.out]


def test_tensorrt_fp16_check_compares_with_the_oracle(monkeypatch, exported):
    monkeypatch.setattr(
        hort,
        "tensorrt_fp16_session",
        lambda path, available=None: _FakeSession(np.array([[1.0, 2.005]], dtype=np.float32)),
    )
    good = hort.tensorrt_fp16_check(exported[1], np.zeros((1, 64)), np.array([[1.0, 2.0]]))
    assert good["ok"] and good["relative_error"] == pytest.approx(0.0025, rel=1e-3)
    bad = hort.tensorrt_fp16_check(exported[1], np.zeros((1, 64)), torch.tensor([[1.0, 1.0]]), tolerance=0.1)
    assert not bad["ok"]
    with pytest.raises(ValueError, match="tolerance"):
        hort.tensorrt_fp16_check(exported[1], np.zeros((1, 64)), np.zeros((1, 2)), tolerance=0)


def test_the_toolkit_uses_onnxruntimes_public_api_only():
    root = Path(__file__).resolve().parents[2] / "hwopt"
    private = [p.relative_to(root).as_posix() for p in root.rglob("*.py") if "_pybind_state" in p.read_text()]
    assert not private, f"onnxruntime.capi._pybind_state is private (use onnxruntime.quantization): {private}"


class _SessionOn:
    """A stand-in for an InferenceSession that reports the given providers."""

    def __init__(self, *providers):
        self.providers = list(providers)

    def run(self, *args):
        raise AssertionError("not run")

    def get_inputs(self):
        return []

    def get_providers(self):
        return self.providers


def test_runs_on_labels_cpu_sessions_on_a_gpu_runtime_as_cpu():
    assert hort.runs_on(_SessionOn("CUDAExecutionProvider", "CPUExecutionProvider")) == "cuda"
    assert hort.runs_on(_SessionOn("TensorrtExecutionProvider", "CUDAExecutionProvider")) == "cuda"
    assert hort.runs_on(_SessionOn("CPUExecutionProvider")) == "cpu"  # Colab's GPU runtime: CPU-only ORT
    with pytest.raises(ValueError, match="session"):
        hort.runs_on(object())


# ---- lesson 2's decode step: quantized graphs packed from hwopt.quantization ----------------------------


def _layers(d=128, n=3, seed=1):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32) for _ in range(n)], \
        rng.standard_normal(d).astype(np.float32)


def _step(layers, x):
    """The float64 oracle: h <- h + h @ W_i."""
    h = x.astype(np.float64)
    for w in layers:
        h = h + h @ np.asarray(w, np.float64)
    return h


@pytest.mark.parametrize("precision, kwargs", [
    ("int4_g32", {}), ("int8_g32", {}), ("int8_g128", {}), ("int4", {"block": 16}), ("int4", {"block": 128}),
    ("int8", {"per_channel": True, "symmetric": False}),
])
def test_decode_step_computes_what_the_dequantized_weights_say(precision, kwargs):
    """ORT reads the packed codes and scales as hwopt.quantization means them: with fp32 compute
    (accuracy_level 0) the graph agrees with the float64 oracle on the dequantized weights to rounding."""
    weights, x = _layers()
    layers = [quantization.quantize(w, precision, axis=0, **kwargs) for w in weights]
    session = hort.make_session(hort.decode_step_model(layers, accuracy_level=0), threads=1)
    expected = _step([q.dequantize() for q in layers], x)
    y = session.run(None, {"h0": x[None]})[0][0]
    tolerance = 1e-6 if layers[0].symmetric else 0.02  # MatMulInteger rounds its input to uint8 too
    assert np.linalg.norm(y - expected) / np.linalg.norm(expected) < tolerance
    assert np.linalg.norm(y - _step(weights, x)) / np.linalg.norm(expected) < 0.2


def test_nbits_weights_by_hand():
    w = np.zeros((32, 2), np.float32)
    w[:, 0] = np.arange(32) - 16.0  # codes round(w / (16 / 7)): -7 .. 6 along K, stored + 8
    packed, scales = hort.matmul_nbits_weights(quantization.quantize(w, "int4_g32", axis=0))
    assert packed.shape == (2, 1, 16) and scales.shape == (2, 1) and scales[0, 0] == np.float32(16 / 7)
    codes = np.clip(np.rint(w[:, 0] / np.float32(16 / 7)), -7, 7).astype(int) + 8
    assert packed[0, 0].tolist() == [lo | hi << 4 for lo, hi in zip(codes[0::2], codes[1::2], strict=True)]
    assert np.all(packed[1] == 8 | 8 << 4) and scales[1, 0] == 1.0  # a zero channel: code 0, scale 1
    packed8, _ = hort.matmul_nbits_weights(quantization.quantize(w, "int8_g32", axis=0))
    assert packed8.shape == (2, 1, 32) and packed8[0, 0, 0] == 128 - 127
    assert packed8[1].tolist() == [[128] * 32]
    b, scale, zero_point = hort.matmul_integer_weights(
        quantization.quantize(w, "int8", per_channel=True, symmetric=False, axis=0))
    assert b.shape == (32, 2) and b.dtype == zero_point.dtype == np.uint8 and scale.shape == (2,)
    assert b[0, 0] == 0 and b[-1, 0] == 255 and zero_point[0] == 132  # round(16 / (31 / 255))


def test_decode_step_graph_is_valid_and_refuses_other_layouts():
    weights, _ = _layers(64, 2)
    model = onnx.load_from_string(hort.decode_step_model([quantization.quantize(w, "int4_g32", axis=0)
                                                          for w in weights]))
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node] == ["MatMulNBits", "Add"] * 2
    w = weights[0]
    with pytest.raises(ValueError, match="q must hold"):  # blocks along the other axis
        hort.matmul_nbits_weights(quantization.quantize(w, "int4_g32"))
    with pytest.raises(ValueError, match="q must hold"):  # no such MatMulNBits block
        hort.matmul_nbits_weights(quantization.quantize(w, "int4", block=8, axis=0))
    with pytest.raises(ValueError, match="q must hold"):  # asymmetric codes where symmetric ones are packed
        hort.matmul_nbits_weights(quantization.quantize(w, "int4", block=32, axis=0, symmetric=False))
    with pytest.raises(ValueError, match="q must hold"):
        hort.matmul_integer_weights(quantization.quantize(w, "int8", per_channel=True, axis=0))
    with pytest.raises(ValueError, match=r"layers\[0\]"):
        hort.decode_step_model([quantization.quantize(w, "mxfp4", axis=0)])
    with pytest.raises(ValueError, match=r"layers\[1\]"):
        hort.decode_step_model([quantization.quantize(w, "int4_g32", axis=0),
                                quantization.quantize(w[:32, :32], "int4_g32", axis=0)])
    with pytest.raises(ValueError, match="layers"):
        hort.decode_step_model([])
    with pytest.raises(ValueError, match="accuracy_level"):
        hort.decode_step_model([quantization.quantize(w, "int4_g32", axis=0)], accuracy_level=5)
