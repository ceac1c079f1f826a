"""experiments.decode: estimates by hand, each path (numpy, torch, ORT, the C kernel) vs the oracle, the bytes
each stores, timing and verdicts."""

import dataclasses
import itertools
import time

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper

from hwopt import formats, quantization
from hwopt.experiments import decode
from hwopt.kernels import lowbit_gemv, ort
from hwopt.machine import bench

pytestmark = pytest.mark.filterwarnings("ignore::hwopt.machine.bench.NoisyMeasurementWarning")


def test_weights_gb_and_tokens_per_s_by_hand():
    # 7B params at fp16 = 14 GB; at 100 GB/s each token reads 14 GB -> 7.14 tokens/s; int4 -> 4x that
    assert decode.weights_gb(7e9, 2) == pytest.approx(14.0)
    assert decode.tokens_per_s_estimate(7e9, 2, 100) == pytest.approx(100 / 14)
    assert decode.tokens_per_s_estimate(7e9, 0.5, 100) == pytest.approx(4 * 100 / 14)
    assert "14.00 GB" in decode.size_and_speed_report(7e9, 2, 100)


@pytest.mark.parametrize(("args", "word"), [
    ((0, 2, 100), "params"), ((1e9, 0, 100), "bytes_per_weight"),
    ((1e9, 2, -1), "bandwidth_gbs"), ((1e9, 2, float("nan")), "bandwidth_gbs"),
])
def test_estimate_rejects_bad_input(args, word):
    with pytest.raises(ValueError, match=word):
        decode.tokens_per_s_estimate(*args)


def test_layers_for_working_set():
    # 4096 x 4096 int4 = 8 MiB-ish (8,388,608 bytes) per layer: 64 MB needs 8 layers
    assert decode.layers_for_working_set(4096, 64 * 2**20, 0.5) == 8
    assert decode.layers_for_working_set(4096, 1, 4) == 1
    # by default the narrowest copy the paths store, int4_g32 (10,485,760 bytes a layer: scales count)
    assert decode.layers_for_working_set(4096, 64 * 2**20) == 7
    with pytest.raises(ValueError, match="d_model"):
        decode.layers_for_working_set(0, 1)


@pytest.fixture(scope="module")
def stack():
    return decode.make_stack(d_model=64, n_layers=2, seed=1)


def test_make_stack_shapes_and_bytes(stack):
    assert stack.d_model == 64 and len(stack.layers) == 2 and stack.layers[0].dtype == np.float32
    assert stack.n_params == 2 * 64 * 64 and stack.weight_bytes("int4") == 64 * 64
    assert stack.weight_bytes("int4_g32") == 2 * 64 * 64 * (0.5 + 4 / 32)  # + an fp32 scale per 32 weights
    assert stack.activation_bytes == 2 * 2 * 4 * 64  # each layer reads and writes one fp32 vector
    with pytest.raises(ValueError, match="precision"):
        stack.weight_bytes(0.5)
    with pytest.raises(ValueError, match="n_layers"):
        decode.make_stack(64, 0)


def test_reference_is_the_residual_stack(stack):
    h = stack.x.astype(np.float64)
    for w in stack.layers:
        h = h + h @ w
    assert np.allclose(decode.reference(stack), h)


def test_relative_error():
    assert decode.relative_error([1.0, 0.0], [1.0, 0.0]) == 0.0
    assert decode.relative_error([2.0], [1.0]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="same number"):
        decode.relative_error([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="zeros"):
        decode.relative_error([1.0], [0.0])


def test_every_cpu_path_matches_the_oracle_within_tolerance(stack):
    paths = decode.decode_paths(stack, threads=1)
    assert {"fp32 numpy", "fp32 torch", "int8 ORT MatMulInteger", "int8 ORT MatMulNBits",
            "int4 ORT MatMulNBits"} <= set(paths)  # the C kernel's: tests/kernels/test_lowbit_gemv.py
    errors = decode.check_paths(paths, stack)
    assert errors["fp32 numpy"] < 1e-5 and errors["fp32 torch"] < 1e-5
    for int8 in ("int8 ORT MatMulInteger", "int8 ORT MatMulNBits"):
        assert 0 < errors[int8] < decode.TOLERANCE["int8"]
        assert errors[int8] < errors["int4 ORT MatMulNBits"] < decode.TOLERANCE["int4"]
    assert paths["int4 ORT MatMulNBits"].weight_bytes == stack.n_params * 0.625  # 4 bits + fp32 per 32


def _nbytes(*arrays) -> int:
    return sum(a.nbytes for a in arrays)


def test_each_path_counts_the_bytes_its_layout_really_stores(stack):
    """Bytes a path predicts from its format == bytes of the arrays it stores (to the per-channel scales)."""
    w = stack.layers[0]
    stored = decode.storage_precisions(stack.d_model)
    assert stored["int4 ORT MatMulNBits"] == "int4_g32" and stored["int8 ORT MatMulNBits"] == "int8_g32"
    assert decode.storage_precisions(4096)["int8 ORT MatMulNBits"] == "int8_g128"
    int4 = ort.matmul_nbits_weights(quantization.quantize(w, "int4_g32", axis=0))
    arrays = {"int4 ORT MatMulNBits": int4,
              "int8 ORT MatMulNBits": ort.matmul_nbits_weights(quantization.quantize(w, "int8_g32", axis=0)),
              "int8 ORT MatMulInteger": ort.matmul_integer_weights(
                  quantization.quantize(w, "int8", per_channel=True, symmetric=False, axis=0)),
              "fp32 numpy": (w,)}
    for label, stored_arrays in arrays.items():
        nbytes, predicted = _nbytes(*stored_arrays), w.size * formats.bytes_per_weight(stored[label])
        if formats.get(stored[label]).block or stored[label] == "fp32":
            assert nbytes == predicted, label  # block scales: exactly counted
        else:  # a scale and zero point per column (d_model weights): formats calls it negligible
            assert nbytes == predicted + 5 * w.shape[1], label
    # ORT reads the same arrays from the graph: its initializers hold exactly the stored bytes (+ the names)
    model = decode.nbits_model_bytes(decode.DecodeStack((w,), stack.x), bits=4, block_size=32)
    assert _nbytes(*int4) < len(model) < _nbytes(*int4) + 2000


def test_nbits_format_names_the_layout_or_refuses():
    assert decode.nbits_format(4, 32).name == "int4_g32" and decode.nbits_format(8, 128).name == "int8_g128"
    with pytest.raises(ValueError, match="block_size"):
        decode.nbits_format(4, 64)  # no 4-bit format with an fp32 scale per 64 (int4_g128 has fp16 scales)


def test_prediction_table_counts_scales(stack):
    text = decode.prediction_table(stack, 10.0)
    int4 = next(line for line in text.splitlines() if line.startswith("int4_g32"))
    assert "0.625" in int4 and "fp32 scale per 32" in int4 and "int4 ORT MatMulNBits" in int4
    assert f"{stack.weight_bytes('int4_g32') / 10e9 * 1e3:.2f}" in int4


@pytest.mark.parametrize("bits", [4, 8])
def test_nbits_kernels_compute_what_their_dequantized_weights_say(stack, bits):
    """Kernel check apart from quantization: ORT's stack vs the same stack with dequantized weights."""
    deq = tuple(quantization.quantize(w, bits, block=32, axis=0).dequantize() for w in stack.layers)
    expected = decode.reference(dataclasses.replace(stack, layers=deq))
    session = ort.make_session(decode.nbits_model_bytes(stack, bits), threads=1)
    # accuracy_level 4 rounds activations to int8 too: agreement to ~1%, not to float precision
    assert decode.relative_error(decode.ort_step(session, stack)(), expected) < 0.02
    exact = ort.make_session(decode.nbits_model_bytes(stack, bits, accuracy_level=0), threads=1)
    assert decode.relative_error(decode.ort_step(exact, stack)(), expected) < 1e-5
    with pytest.raises(ValueError, match="bits"):
        decode.nbits_model_bytes(stack, bits=3)


def test_matmul_integer_computes_what_its_dequantized_weights_say(stack):
    deq = tuple(quantization.quantize(w, "int8", per_channel=True, symmetric=False, axis=0).dequantize()
                for w in stack.layers)
    expected = decode.reference(dataclasses.replace(stack, layers=deq))
    session = ort.make_session(decode.int8_model_bytes(stack), threads=1)
    assert decode.relative_error(decode.ort_step(session, stack)(), expected) < 0.02  # uint8 activations too


def test_check_paths_names_a_path_beyond_tolerance(stack):
    bad = {"broken": decode.DecodePath("broken", "int8", "int8", lambda: np.zeros(64), 1.0)}
    with pytest.raises(ValueError, match="broken"):
        decode.check_paths(bad, stack)


def test_time_paths_reports_ratios_and_gbs(stack):
    paths = decode.decode_paths(stack, threads=1)
    result = decode.time_paths(paths, repeats=2, settle_s=0.01)
    assert result.paths[result.best_fp32].precision == "fp32"
    assert result.speedup(result.best_fp32) == pytest.approx(1.0)
    assert result.best("int4") in ("int4 ORT MatMulNBits", "int4 C kernel")
    assert all(result.achieved_gbs(k) > 0 for k in paths)
    assert "vs best fp32" in result.table()


def test_time_paths_settles_each_path_before_timing_it():
    calls = []

    def path(label, precision):
        def fn():
            calls.append(label)
            time.sleep(0.002)

        return decode.DecodePath(label, precision, precision, fn, 1.0)

    paths = {k: path(k, k.split()[0]) for k in ("fp32 numpy", "int8 ORT")}
    result = decode.time_paths(paths, repeats=1, settle_s=0.03)
    assert set(result.measurements) == set(paths)
    after_warmup = calls[2 * 3:]  # bench.compare's 3 interleaved warm-up rounds, then the repeat
    runs = [(label, len(list(group))) for label, group in itertools.groupby(after_warmup)]
    assert [label for label, _ in runs] == ["fp32 numpy", "int8 ORT"]
    # each path runs alone (untimed) for settle_s, then for its timed calls: more calls than timing alone
    assert all(n > result.measurements[label].number for label, n in runs)


def test_decode_paths_include_the_c_kernel_when_it_builds(stack, monkeypatch):
    if lowbit_gemv.unavailable_reason() is None:
        paths = decode.decode_paths(stack, threads=1)
        assert {"fp32 C kernel", "int8 C kernel", "int4 C kernel"} <= set(paths)
        assert paths["int4 C kernel"].weight_bytes == stack.weight_bytes("int4_g32")
    monkeypatch.setattr(lowbit_gemv, "unavailable_reason", lambda: "no C compiler found")
    assert not any("C kernel" in k for k in decode.decode_paths(stack, threads=1))


def test_ort_sessions_run_on_the_cores_torch_uses(stack, monkeypatch):
    seen = []
    real = ort.make_session
    monkeypatch.setattr(ort, "make_session", lambda m, **kw: seen.append(kw["threads"]) or real(m, **kw))
    decode.decode_paths(stack, threads=1)
    assert seen == [1, 1, 1]
    seen.clear()
    decode.decode_paths(stack)
    assert seen == [torch.get_num_threads()] * 3


@pytest.mark.parametrize(("bits", "block_size", "accuracy_level"), [(4, 32, 4), (8, 64, 4), (4, 16, 0)])
def test_nbits_graph_is_matmulnbits_with_the_asked_blocks(stack, bits, block_size, accuracy_level):
    model = onnx.load_from_string(decode.nbits_model_bytes(stack, bits, block_size, accuracy_level))
    assert [n.op_type for n in model.graph.node] == ["MatMulNBits", "Add"] * len(stack.layers)
    d = stack.d_model
    expected = {"K": d, "N": d, "bits": bits, "block_size": block_size}
    if accuracy_level:
        expected["accuracy_level"] = accuracy_level  # absent means 0: fp32 compute
    for node in model.graph.node[::2]:
        assert node.domain == "com.microsoft" and len(node.input) == 3  # symmetric: no zero points
        assert {a.name: helper.get_attribute_value(a) for a in node.attribute} == expected
    sizes = {init.name: len(init.raw_data) for init in model.graph.initializer}
    weights, scales = ([sizes.pop(n.input[i]) for n in model.graph.node[::2]] for i in (1, 2))
    assert sum(weights) == stack.n_params * bits // 8 and sum(scales) == 4 * stack.n_params // block_size
    assert sizes == {}, "no fp32 weight is left in the graph"


def test_the_graph_holds_the_common_codes_and_scales_and_refuses_bad_blocks(stack):
    model = onnx.load_from_string(decode.nbits_model_bytes(stack, 4, block_size=32))
    inits = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    packed, scales = ort.matmul_nbits_weights(quantization.quantize(stack.layers[0], "int4_g32", axis=0))
    node = model.graph.node[0]
    assert np.array_equal(inits[node.input[1]], packed) and np.array_equal(inits[node.input[2]], scales)
    with pytest.raises(ValueError, match="block_size"):
        decode.nbits_model_bytes(stack, bits=4, block_size=48)
    with pytest.raises(ValueError, match="block_size"):
        decode.nbits_model_bytes(decode.make_stack(48, 1), bits=4, block_size=32)


def test_memory_or_compute_verdict():
    assert decode.memory_or_compute(20.0, 25.0) == "memory"
    assert decode.memory_or_compute(5.0, 25.0) == "compute"
    with pytest.raises(ValueError, match="bandwidth_gbs"):
        decode.memory_or_compute(5.0, 0)


def test_torch_step_precision_and_cuda_paths_on_cpu(stack, monkeypatch):
    """GPU paths move weights with .to(device); a fake 'cuda' that maps to the CPU exercises them."""
    with pytest.raises(ValueError, match="precision"):
        decode.torch_step(stack, "cpu", "int8")
    monkeypatch.setattr(bench, "resolve_device", lambda device="auto": str(device).replace("auto", "cuda"))
    real_to = torch.Tensor.to

    def fake_to(self, *args, **kwargs):
        kwargs.pop("device", None)
        args = tuple(a for a in args if a != "cuda")
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", fake_to)
    paths = decode.decode_paths(stack, device="cuda", threads=1)
    assert {"fp32 torch cuda", "fp16 torch cuda"} <= set(paths)
    assert paths["fp16 torch cuda"].precision == "fp16"
    result = decode.time_paths(paths, repeats=1, settle_s=0)
    assert result.best_fp32_cpu in ("fp32 numpy", "fp32 torch", "fp32 C kernel")
    assert sorted(result.fastest_on("cuda")) == ["fp16 torch cuda", "fp32 torch cuda"]
    assert [result.paths[k].precision for k in result.fastest_on("cpu")] == ["fp32", "int8", "int4"]
    assert result.speedup(result.best_fp32_cpu, baseline=result.best_fp32_cpu) == 1.0
    y = paths["fp32 torch cuda"].fn()
    assert decode.relative_error(y, decode.reference(stack)) < 1e-5


def fake_result(seconds: dict[str, float], precision: dict[str, str], n_params: float = 1e9,
                storage_precision: dict[str, str] | None = None):
    stored = {**precision, **(storage_precision or {})}
    paths = {k: decode.DecodePath(k, precision[k], stored[k], lambda: None,
                                  n_params * formats.bytes_per_weight(stored[k])) for k in seconds}
    return decode.DecodeResult(paths, {k: bench.Measurement(k, (s,)) for k, s in seconds.items()})


def test_prediction_table_and_int8_verdicts():
    # fp32 4 GB in 0.2 s = 20 GB/s; int8 1 GB in 0.05 s = 20 GB/s (memory-bound) or 0.5 s = 2 GB/s (compute)
    kinds = {"fp32": "fp32", "int8": "int8", "int8 lib": "int8"}
    fast = fake_result({"fp32": 0.2, "int8": 0.05}, kinds)
    text = fast.vs_prediction(25.0)
    assert "pred/meas" in text and "80%" in text.splitlines()[1] and " B/weight " in text.splitlines()[0]
    # int4_g32: 0.625 GB of weights and scales in 0.04 s = 15.6 GB/s, 62% of 25 GB/s (not 0.5 GB: 50%)
    int4 = fake_result({"int4": 0.04}, {"int4": "int4"}, storage_precision={"int4": "int4_g32"})
    assert int4.achieved_gbs("int4") == pytest.approx(15.625)
    assert " int4_g32    0.625 " in int4.vs_prediction(25.0) and "62%" in int4.vs_prediction(25.0)
    verdict = decode.int8_verdict(fast, 25.0)
    assert "int8: 20.0 GB/s (80% of bandwidth) -> memory-bound" in verdict
    assert "Every int8 kernel keeps up with memory" in verdict
    slow = fake_result({"fp32": 0.2, "int8": 0.5}, kinds)
    assert "Every int8 kernel here is limited by compute" in decode.int8_verdict(slow, 25.0)
    # everything slow (a busy machine): int8 streams as fast as fp32 does -> memory-bound after all
    busy = fake_result({"fp32": 1.0, "int8": 0.25}, kinds)
    assert "memory-bound" in decode.int8_verdict(busy, 25.0)
    assert "no int8 dot-product" in decode.int8_verdict(slow, 25.0, ["AVX2", "FMA"])
    assert "AVX-512 VNNI" in decode.int8_verdict(slow, 25.0, ["AVX-512 VNNI"])
    # two kernels, same bytes: the library's is compute-bound, the other keeps up
    mixed = decode.int8_verdict(fake_result({"fp32": 0.2, "int8 lib": 0.5, "int8": 0.05}, kinds), 25.0)
    assert mixed.splitlines()[1].startswith("  int8: ")  # fastest first
    assert "int8 lib is limited by compute" in mixed and "int8 reads the same bytes" in mixed
    blocks = decode.int8_verdict(fake_result({"fp32": 0.2, "int8 lib": 0.5, "int8": 0.05}, kinds,
                                             storage_precision={"int8 lib": "int8_g128"}), 25.0)
    assert "int8 reads about the same bytes (1 vs 1.031 B/weight)" in blocks
    with pytest.raises(ValueError, match="int8"):
        decode.int8_verdict(fake_result({"fp32": 0.2}, kinds), 25.0)
    with pytest.raises(ValueError, match="bandwidth_gbs"):
        slow.vs_prediction(0)
