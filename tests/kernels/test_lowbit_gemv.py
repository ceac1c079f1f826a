"""kernels.lowbit_gemv: weight layouts by hand; every instruction path of the C kernel this CPU runs
(AVX-512 VNNI, AVX-VNNI, AVX2, portable C) vs its numpy model; which path a CPU builds."""

import os
import platform
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from hwopt import formats, quantization
from hwopt.experiments import decode
from hwopt.kernels import lowbit_gemv
from hwopt.machine import bench
from hwopt.models import tiny_decoder

REASON = lowbit_gemv.unavailable_reason()
needs_kernel = pytest.mark.skipif(REASON is not None, reason=f"C kernel unavailable: {REASON}")
HERE = lowbit_gemv.runnable_paths()  # this CPU's paths, fastest first
EVERY_PATH = [pytest.param(path, marks=pytest.mark.skipif(
    path not in HERE, reason=f"this CPU cannot run the {path} path (it runs {', '.join(HERE)})"))
    for path in lowbit_gemv.PATHS]
on_x86 = pytest.mark.skipif(platform.machine().lower() not in lowbit_gemv.X86_ARCHS, reason="x86 paths")


@pytest.fixture(scope="module")
def stack():
    return decode.make_stack(d_model=320, n_layers=3, seed=2)  # 10 int4 blocks a row: 8 + a leftover 2


def test_int8_rows_by_hand():
    w = np.zeros((64, 64), np.float32)
    w[:, 0] = np.linspace(-1, 1, 64)  # output channel 0: its largest |w| is 1 -> scale 1/127
    q, scale = lowbit_gemv.pack_int8(lowbit_gemv.quantize_weight(w, "int8"))
    # groups of 4 rows, 32 bytes of each in turn: [group, 32-byte piece, row in group, byte]
    assert q.shape == (16, 2, 4, 32) and q.dtype == np.int8 and q.flags.c_contiguous
    assert scale.shape == (64,) and scale.dtype == np.float32
    assert scale[0] == pytest.approx(1 / 127) and q[0, 0, 0, 0] == -127 and q[0, 1, 0, 31] == 127
    assert np.all(scale[1:] == 1.0) and not q[:, :, 1:].any() and not q[1:].any()  # zero channels: scale 1


def test_int4_layout_by_hand():
    w = np.zeros((64, 64), np.float32)
    w[:32, 5] = 7.0   # output channel 5, block 0: every weight at the top code -> scale 1, nibble 15
    w[32:, 5] = -2.0  # block 1: scale 2/7, -2 -> code -7 -> nibble 1
    packed, scale = lowbit_gemv.pack_int4(lowbit_gemv.quantize_weight(w, "int4"))
    assert packed.shape == (16, 1, 4, 32) and scale.shape == (16, 2, 4)  # channel 5 = group 1, row 1
    assert scale[1, 0, 1] == pytest.approx(1.0) and scale[1, 1, 1] == pytest.approx(2 / 7)
    assert np.all(packed[1, 0, 1] == 15 | (1 << 4))  # byte j: weight j low nibble, weight j + 32 high nibble
    others = np.ones(packed.shape, bool)
    others[1, 0, 1] = False
    assert np.all(packed[others] == 8 | (8 << 4))  # zero weights are stored as 8


def test_the_kernel_stores_hwopt_quantizations_codes(stack):
    w = stack.layers[0]
    q8, q4 = lowbit_gemv.quantize_weight(w, "int8"), lowbit_gemv.quantize_weight(w, "int4")
    assert q8.precision.name == "int8" and q4.precision.name == "int4_g32" and q4.axis == q8.axis == 0
    np.testing.assert_array_equal(q4.dequantize(), quantization.fake_quantize(w, "int4_g32", axis=0))
    codes, _ = lowbit_gemv.pack_int8(q8)
    assert np.array_equal(codes.transpose(0, 2, 1, 3).reshape(320, 320), q8.codes.T)  # rows of w.T
    packed, _ = lowbit_gemv.pack_int4(q4)
    rows = packed.transpose(0, 2, 1, 3).reshape(320, -1, 32)  # (row, piece of 64 weights, byte)
    unpacked = np.concatenate([rows & 15, rows >> 4], axis=2).reshape(320, 320).astype(np.int8) - 8
    assert np.array_equal(unpacked, q4.codes.T)


def test_weight_formats_count_the_bytes_the_kernel_stores(stack):
    w = stack.layers[0]
    assert lowbit_gemv.WEIGHT_FORMATS["int4"] == "int4_g32" and lowbit_gemv.INT4_BLOCK == 32  # as in the C
    stored = {"int8": sum(a.nbytes for a in lowbit_gemv.pack_int8(lowbit_gemv.quantize_weight(w, "int8"))),
              "int4": sum(a.nbytes for a in lowbit_gemv.pack_int4(lowbit_gemv.quantize_weight(w, "int4")))}
    assert stored["int4"] == w.size * formats.bytes_per_weight("int4_g32")  # 4 bits + an fp32 scale per 32
    assert stored["int8"] == w.size * formats.bytes_per_weight("int8") + 4 * w.shape[1]  # + a scale per row


@pytest.mark.parametrize("precision", ["fp32", "int8", "int4"])
def test_emulation_stays_within_the_decode_tolerance(stack, precision):
    error = decode.relative_error(lowbit_gemv.emulate(stack, precision), decode.reference(stack))
    assert error < decode.TOLERANCE[precision]


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2, 3])  # 3 threads split 80 groups of 4 rows unevenly
@pytest.mark.parametrize("precision", ["fp32", "int8", "int4"])
@pytest.mark.parametrize("path", EVERY_PATH)
def test_every_path_this_cpu_runs_matches_the_numpy_model(stack, path, precision, threads):
    lib = lowbit_gemv.load(path=path)
    assert lowbit_gemv.kernel_path(lib) == path  # the library reports the path its flags built
    y = lowbit_gemv.step_fn(stack, precision, threads=threads, lib=lib)()
    assert decode.relative_error(y, lowbit_gemv.emulate(stack, precision)) < 1e-5
    assert decode.relative_error(y, decode.reference(stack)) < decode.TOLERANCE[precision]


@needs_kernel
@pytest.mark.parametrize("path", EVERY_PATH)
def test_extreme_values_neither_saturate_nor_overflow(path):
    """Weights and inputs at +-127: u8 x s8 pairs sum to 2 * 127 * 127 in int16 (AVX2), and the VNNI path's
    w + 128 with its 128 * sum(x) correction, stay exact."""
    rng = np.random.default_rng(4)
    signs = rng.choice(np.array([-1.0, 1.0], np.float32), size=(512, 512))
    stack = decode.DecodeStack((signs / 512, -signs / 512), np.sign(signs[0]).astype(np.float32))
    lib = lowbit_gemv.load(path=path)
    for precision in ("int8", "int4"):
        y = lowbit_gemv.step_fn(stack, precision, threads=2, lib=lib)()
        assert decode.relative_error(y, lowbit_gemv.emulate(stack, precision)) < 1e-5


@needs_kernel
def test_this_machine_builds_its_fastest_path():
    assert lowbit_gemv.kernel_path() == lowbit_gemv.best_path() == HERE[0]
    assert HERE[-1] == "portable"


@needs_kernel
@on_x86
def test_every_path_compiles_and_only_runnable_ones_load(tmp_path):
    for path in lowbit_gemv.PATHS:
        try:
            library = lowbit_gemv.build(path=path, out_dir=tmp_path)
        except lowbit_gemv.KernelUnavailable as error:  # a compiler too old for the flags
            assert path not in ("avx2", "portable"), str(error)
            continue
        if path in HERE:
            assert lowbit_gemv.kernel_path(lowbit_gemv.open_library(library)) == path
        else:
            with pytest.raises(lowbit_gemv.KernelUnavailable, match=f"built for the {path} path"):
                lowbit_gemv.open_library(library)


@pytest.mark.parametrize("simd, arch, expected", [
    (["AVX2", "FMA", "F16C"], "x86_64", ["avx2", "portable"]),  # EPYC Milan
    (["AVX2", "FMA", "AVX-512F", "AVX-512 VNNI", "AVX-512 BF16"], "x86_64",
     ["avx512-vnni", "avx2", "portable"]),  # EPYC Genoa
    (["AVX2", "FMA", "AVX-VNNI"], "x86_64", ["avx-vnni", "avx2", "portable"]),  # Alder Lake
    (["AVX2", "FMA", "AVX-512F", "AVX-512 VNNI", "AVX-VNNI", "AMX-INT8"], "AMD64",
     ["avx512-vnni", "avx-vnni", "avx2", "portable"]),  # Sapphire Rapids
    (["AVX-512 VNNI", "AVX-512F"], "x86_64", ["portable"]),  # no AVX2/FMA listed: nothing to build on
    (["NEON", "NEON DOTPROD"], "aarch64", ["portable"]),
    (["AVX2", "FMA"], "arm64", ["portable"]),  # x86 paths never on another architecture
])
def test_paths_follow_the_cpu_features(simd, arch, expected):
    assert lowbit_gemv.runnable_paths(simd, arch) == expected
    assert lowbit_gemv.best_path(simd, arch) == expected[0]


def test_path_flags_name_the_instructions():
    assert "-mavx512vnni" in lowbit_gemv.path_flags("avx512-vnni")
    assert "-mavxvnni" in lowbit_gemv.path_flags("avx-vnni")
    assert lowbit_gemv.path_flags("portable") == lowbit_gemv.PORTABLE_FLAGS
    with pytest.raises(ValueError, match="path must be one of"):
        lowbit_gemv.path_flags("sse2")
    with pytest.raises(ValueError, match="flags or path"):
        lowbit_gemv.build(flags=lowbit_gemv.PORTABLE_FLAGS, path="avx2")


@needs_kernel
def test_path_report_says_which_path_runs():
    report = lowbit_gemv.path_report()
    assert f"runs the {lowbit_gemv.kernel_path()} path" in report
    assert ("no VNNI here" in report) == (lowbit_gemv.kernel_path() in ("avx2", "portable"))


@needs_kernel
@on_x86
def test_path_report_on_a_cpu_without_vnni(monkeypatch, tmp_path):
    """An AVX2-only CPU (EPYC Milan's features) builds the avx2 path, and the report says VNNI is absent."""
    monkeypatch.setattr(lowbit_gemv.hardware, "cpu_info", lambda: {"simd": ["AVX2", "FMA", "F16C"]})
    assert lowbit_gemv.best_path() == "avx2"
    lib = lowbit_gemv.open_library(lowbit_gemv.build(out_dir=tmp_path))
    report = lowbit_gemv.path_report(lib)
    assert "runs the avx2 path" in report and "vpmaddubsw" in report and "no VNNI here" in report
    assert "can also run: portable" in report


def _measurement(label, median_ms, spread=0.0):
    times = [median_ms * (1 - spread / 2), median_ms, median_ms * (1 + spread / 2)]
    return bench.Measurement(label, tuple(t / 1e3 for t in times))


@pytest.mark.parametrize("int8_ms, int4_ms, spread, says", [
    (3.0, 2.0, 0.02, "same speed"),
    (2.0, 2.0, 0.02, "int8 the avx512-vnni path is faster"),
    (3.0, 3.0, 0.02, "int4 the avx2 path is faster"),
    (2.5, 2.0, 0.6, "cannot tell the paths apart"),
])
def test_comparison_verdict_follows_the_ratios_and_the_noise(int8_ms, int4_ms, spread, says):
    medians = {"int8 avx512-vnni": int8_ms, "int8 avx2": 3.0, "int4 avx512-vnni": int4_ms, "int4 avx2": 2.0}
    measured = {label: _measurement(label, ms, spread) for label, ms in medians.items()}
    comparison = lowbit_gemv.PathComparison("avx512-vnni", "avx2", measured)
    assert comparison.precisions == ["int8", "int4"]
    assert comparison.speedup("int8") == pytest.approx(3.0 / int8_ms)
    assert says in comparison.verdict() and says in str(comparison)


@needs_kernel
def test_compare_paths_times_this_path_against_avx2(stack):
    comparison = lowbit_gemv.compare_paths(stack, precisions=("int8",), threads=1, repeats=3)
    if lowbit_gemv.kernel_path() in ("avx2", "portable"):
        assert comparison is None  # nothing to compare
        return
    assert set(comparison.measurements) == {f"int8 {lowbit_gemv.kernel_path()}", "int8 avx2"}
    assert comparison.speedup("int8") > 0
    with pytest.raises(ValueError, match="precisions"):
        lowbit_gemv.compare_paths(stack, precisions=("int2",))
    with pytest.raises(ValueError, match="baseline must be one of"):
        lowbit_gemv.compare_paths(stack, baseline="sse2")


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2, 5])  # 5: more workers than this machine's cores
@pytest.mark.parametrize("rows, cols, bias", [(3072, 1024, True), (50, 32, True), (7, 23, False),
                                              (1, 1, False), (4100, 48, True)])  # tails of rows and columns
@pytest.mark.parametrize("path", EVERY_PATH)
def test_gemv_f32_matches_numpy_on_every_path(path, rows, cols, bias, threads):
    rng = np.random.default_rng(rows + cols)
    w, x = rng.standard_normal((rows, cols), dtype=np.float32), rng.standard_normal(cols, dtype=np.float32)
    b = rng.standard_normal(rows, dtype=np.float32) if bias else None
    y = lowbit_gemv.gemv_f32(w, x, b, threads=threads, lib=lowbit_gemv.load(path=path))
    expected = w.astype(np.float64) @ x + (0 if b is None else b)
    assert y.shape == (rows,) and decode.relative_error(y, expected) < 1e-5


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2, 5])
@pytest.mark.parametrize("shape", [(50, 48, 2, 4), (64, 128, 1, 2)])  # vocab, d, layers, heads: row tails
@pytest.mark.parametrize("path", EVERY_PATH)
def test_decoder_step_matches_torch_on_every_path(path, shape, threads, monkeypatch):
    """lowbit_decoder_step, the tiny decoder's whole single-token step: the logits and caches of torch's step,
    after a prompt (caches with torch's strides) and after a step of its own."""
    vocab, d, layers, heads = shape
    model = tiny_decoder.make_tiny_decoder(vocab, d, layers, heads, seed=3, kernel="c")
    monkeypatch.setattr(tiny_decoder, "_c_kernel", lambda: lowbit_gemv.load(path=path))
    prompt = torch.randint(0, vocab, (1, 6), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode(), bench.threads(threads):
        _, caches = model(prompt[:, :5])
        outputs = {}
        for kernel in ("c", "torch"):
            model.kernel = kernel
            first, after = model(prompt[:, 5:], caches, start=5)
            outputs[kernel] = (first, *model(first[:, -1:].argmax(-1), after, start=6))
    model.kernel = "c"
    assert "decoder step" in model.gemv_runner()
    (c_first, c_second, c_caches), (t_first, t_second, t_caches) = outputs["c"], outputs["torch"]
    torch.testing.assert_close(c_first, t_first, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(c_second, t_second, rtol=1e-4, atol=1e-5)
    for c_kv, t_kv in zip(c_caches, t_caches, strict=True):
        for c, t in zip(c_kv, t_kv, strict=True):
            assert c.shape == t.shape == (1, heads, 7, d // heads)
            torch.testing.assert_close(c, t, rtol=1e-4, atol=1e-5)


@needs_kernel
def test_gemv_f32_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="one value per column"):
        lowbit_gemv.gemv_f32(np.zeros((4, 8)), np.zeros(7))
    with pytest.raises(ValueError, match="bias must hold one value per row"):
        lowbit_gemv.gemv_f32(np.zeros((4, 8)), np.zeros(8), np.zeros(3))
    assert lowbit_gemv.load().lowbit_gemv_f32(0, 8, None, None, None, None, 1) == -1


@needs_kernel
def test_the_worker_pool_serves_changing_thread_counts_and_concurrent_callers(stack):
    """One pool for every call: thread counts that grow and shrink, and Python threads calling at once (the
    call releases the GIL), all get the single-threaded answer."""
    expected = {p: lowbit_gemv.step_fn(stack, p, threads=1)() for p in ("fp32", "int4")}
    # one step function per task: a step writes into its own output buffers, so it is not shared between
    # threads; the kernel's worker pool is
    steps = {(p, t, i): lowbit_gemv.step_fn(stack, p, threads=t)
             for p in expected for t in (4, 2, 3, 1) for i in range(3)}
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda key: (key, [steps[key]() for _ in range(3)]), steps))
    for (precision, _, _), ys in results:
        assert all(decode.relative_error(y, expected[precision]) < 1e-6 for y in ys)


@needs_kernel
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_still_runs_the_step(stack):
    step = lowbit_gemv.step_fn(stack, "int8", threads=2)
    expected = step()  # the parent's pool is running now
    pid = os.fork()
    if pid == 0:  # the child inherits none of the worker threads: the step must not wait for them
        os._exit(0 if np.allclose(step(), expected) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@needs_kernel
def test_repeated_calls_give_the_same_answer(stack):
    step = lowbit_gemv.step_fn(stack, "int4", threads=2)
    first = step()
    assert all(np.array_equal(first, step()) for _ in range(5))


@needs_kernel
def test_build_is_cached_by_source_and_flags(tmp_path):
    first = lowbit_gemv.build(out_dir=tmp_path)
    stamp = first.stat().st_mtime_ns
    assert lowbit_gemv.build(out_dir=tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert lowbit_gemv.build(path=lowbit_gemv.best_path(), out_dir=tmp_path) == first  # the default path
    portable = lowbit_gemv.build(flags=lowbit_gemv.PORTABLE_FLAGS, out_dir=tmp_path)
    assert (portable == first) == (HERE == ["portable"])
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".so")] == []  # no leftovers


@needs_kernel
def test_kernel_rejects_bad_arguments_with_a_code(stack):
    lib = lowbit_gemv.load()
    assert lib.lowbit_decode_step(5, 1, 64, None, None, None, None, None, 1) == -1  # bits
    assert lib.lowbit_decode_step(8, 1, 96, None, None, None, None, None, 1) == -1  # d not a multiple of 64
    assert lib.lowbit_decoder_step(2, 64, 3, 0, 50, None, None, 1e-5, None, 1) == -1  # 3 heads in 64


def test_bad_input_names_the_problem(stack):
    with pytest.raises(ValueError, match="precision"):
        lowbit_gemv.step_fn(stack, "int2")
    with pytest.raises(ValueError, match="threads"):
        lowbit_gemv.step_fn(stack, "int8", threads=0)
    with pytest.raises(ValueError, match="multiple of 64"):
        lowbit_gemv.quantize_weight(np.zeros((96, 96), np.float32), "int8")
    with pytest.raises(ValueError, match="square"):
        lowbit_gemv.quantize_weight(np.zeros((64, 128), np.float32), "int4")
    with pytest.raises(ValueError, match="precision"):
        lowbit_gemv.quantize_weight(np.zeros((64, 64), np.float32), "fp32")
    with pytest.raises(ValueError, match="q must be"):  # int4 codes where int8 rows are packed
        lowbit_gemv.pack_int8(lowbit_gemv.quantize_weight(np.zeros((64, 64), np.float32), "int4"))
    with pytest.raises(ValueError, match="q must be"):  # blocks along the other axis
        lowbit_gemv.pack_int4(quantization.quantize(np.zeros((64, 64), np.float32), "int4_g32"))


def test_missing_compiler_and_failed_build_say_why(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", "no-such-compiler")
    with pytest.raises(lowbit_gemv.KernelUnavailable, match="no C compiler.*no-such-compiler"):
        lowbit_gemv.build(out_dir=tmp_path)
    monkeypatch.delenv("CC")
    if REASON is None:
        with pytest.raises(lowbit_gemv.KernelUnavailable, match="failed"):
            lowbit_gemv.build(flags=("-O3", "--no-such-flag"), out_dir=tmp_path)


@needs_kernel
def test_load_falls_back_to_the_next_path_when_the_compiler_refuses(monkeypatch, tmp_path):
    real_build = lowbit_gemv.build
    calls = []

    def build(cc=None, flags=None, out_dir=None, *, path=None):
        calls.append(path)
        if len(calls) == 1:
            raise lowbit_gemv.KernelUnavailable(f"`cc {path}` failed: unrecognized command-line option")
        return real_build(cc, flags, tmp_path, path=path)

    monkeypatch.setattr(lowbit_gemv, "build", build)
    lib = lowbit_gemv.load.__wrapped__()
    if len(HERE) == 1:  # nothing to fall back to
        return
    assert calls == HERE[:2] and lowbit_gemv.kernel_path(lib) == HERE[1]
