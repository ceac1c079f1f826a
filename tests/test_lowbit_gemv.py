"""experiments.lowbit_gemv: weight layouts by hand; C kernel (vectorized, portable) vs its numpy model."""

import numpy as np
import pytest

from hwopt import formats
from hwopt.experiments import decode, lowbit_gemv

REASON = lowbit_gemv.unavailable_reason()
needs_kernel = pytest.mark.skipif(REASON is not None, reason=f"C kernel unavailable: {REASON}")


@pytest.fixture(scope="module")
def stack():
    return decode.make_stack(d_model=320, n_layers=3, seed=2)  # 10 int4 blocks a row: 8 + a leftover 2


def test_int8_rows_by_hand():
    w = np.zeros((64, 64), np.float32)
    w[:, 0] = np.linspace(-1, 1, 64)  # output channel 0: its largest |w| is 1 -> scale 1/127
    q, scale = lowbit_gemv.quantize_int8_rows(w)
    # groups of 4 rows, 32 bytes of each in turn: [group, 32-byte piece, row in group, byte]
    assert q.shape == (16, 2, 4, 32) and q.dtype == np.int8 and q.flags.c_contiguous
    assert scale[0] == pytest.approx(1 / 127) and q[0, 0, 0, 0] == -127 and q[0, 1, 0, 31] == 127
    assert np.all(scale[1:] == 1.0) and not q[:, :, 1:].any() and not q[1:].any()  # zero channels: scale 1
    assert np.abs(lowbit_gemv.dequantize_int8_rows(q, scale) - w).max() <= scale[0] / 2 + 1e-7


def test_int4_layout_by_hand():
    w = np.zeros((64, 64), np.float32)
    w[:32, 5] = 7.0   # output channel 5, block 0: every weight at the top level -> scale 1, nibble 15
    w[32:, 5] = -2.0  # block 1: scale 2/7, -2 -> level -7 -> nibble 1
    packed, scale = lowbit_gemv.quantize_int4_rows(w)
    assert packed.shape == (16, 1, 4, 32) and scale.shape == (16, 2, 4)  # channel 5 = group 1, row 1
    assert scale[1, 0, 1] == pytest.approx(1.0) and scale[1, 1, 1] == pytest.approx(2 / 7)
    assert np.all(packed[1, 0, 1] == 15 | (1 << 4))  # byte j: weight j low nibble, weight j + 32 high nibble
    others = np.ones(packed.shape, bool)
    others[1, 0, 1] = False
    assert np.all(packed[others] == 8 | (8 << 4))  # zero weights are stored as 8
    np.testing.assert_allclose(lowbit_gemv.dequantize_int4_rows(packed, scale), w, atol=1e-6)


def test_round_trips_stay_within_half_a_step(stack):
    w = stack.layers[0]
    q, scale = lowbit_gemv.quantize_int8_rows(w)
    assert np.all(np.abs(lowbit_gemv.dequantize_int8_rows(q, scale) - w) <= scale[None, :] / 2 + 1e-7)
    packed, scale4 = lowbit_gemv.quantize_int4_rows(w)
    step = np.repeat(scale4.transpose(0, 2, 1).reshape(w.shape[1], -1), 32, axis=1).T
    assert np.all(np.abs(lowbit_gemv.dequantize_int4_rows(packed, scale4) - w) <= step / 2 + 1e-6)


def test_weight_formats_count_the_bytes_the_kernel_stores(stack):
    w = stack.layers[0]
    assert lowbit_gemv.WEIGHT_FORMATS["int4"] == "int4_g32" and lowbit_gemv.INT4_BLOCK == 32  # as in the C
    stored = {"int8": sum(a.nbytes for a in lowbit_gemv.quantize_int8_rows(w)),
              "int4": sum(a.nbytes for a in lowbit_gemv.quantize_int4_rows(w))}
    assert stored["int4"] == w.size * formats.bytes_per_weight("int4_g32")  # 4 bits + an fp32 scale per 32
    assert stored["int8"] == w.size * formats.bytes_per_weight("int8") + 4 * w.shape[1]  # + a scale per row


def test_quantize_input():
    xq, scale = lowbit_gemv.quantize_input([0.5, -1.0, 0.25])
    assert scale == pytest.approx(1 / 127) and list(xq) == [64, -127, 32]
    assert lowbit_gemv.quantize_input(np.zeros(4))[1] == 1.0


@pytest.mark.parametrize("precision", ["fp32", "int8", "int4"])
def test_emulation_stays_within_the_decode_tolerance(stack, precision):
    error = decode.relative_error(lowbit_gemv.emulate(stack, precision), decode.reference(stack))
    assert error < decode.TOLERANCE[precision]


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2, 3])  # 3 threads split 80 groups of 4 rows unevenly
@pytest.mark.parametrize("precision", ["fp32", "int8", "int4"])
def test_kernel_matches_its_numpy_model(stack, precision, threads):
    y = lowbit_gemv.step_fn(stack, precision, threads=threads)()
    assert decode.relative_error(y, lowbit_gemv.emulate(stack, precision)) < 1e-5
    assert decode.relative_error(y, decode.reference(stack)) < decode.TOLERANCE[precision]


@needs_kernel
def test_portable_build_matches_too(stack, tmp_path):
    """Without -march=native (no AVX2 on x86) the plain C loops run: same results."""
    lib = lowbit_gemv.open_library(lowbit_gemv.build(flags=lowbit_gemv.PORTABLE_FLAGS, out_dir=tmp_path))
    for precision in ("fp32", "int8", "int4"):
        y = lowbit_gemv.step_fn(stack, precision, threads=2, lib=lib)()
        assert decode.relative_error(y, lowbit_gemv.emulate(stack, precision)) < 1e-5


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
    assert lowbit_gemv.build(flags=lowbit_gemv.PORTABLE_FLAGS, out_dir=tmp_path) != first
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".so")] == []  # no leftovers


@needs_kernel
def test_kernel_rejects_bad_arguments_with_a_code(stack):
    lib = lowbit_gemv.load()
    assert lib.lowbit_decode_step(5, 1, 64, None, None, None, None, None, 1) == -1  # bits
    assert lib.lowbit_decode_step(8, 1, 96, None, None, None, None, None, 1) == -1  # d not a multiple of 64


def test_bad_input_names_the_problem(stack):
    with pytest.raises(ValueError, match="precision"):
        lowbit_gemv.step_fn(stack, "int2")
    with pytest.raises(ValueError, match="threads"):
        lowbit_gemv.step_fn(stack, "int8", threads=0)
    with pytest.raises(ValueError, match="multiple of 64"):
        lowbit_gemv.quantize_int8_rows(np.zeros((96, 96), np.float32))
    with pytest.raises(ValueError, match="square"):
        lowbit_gemv.quantize_int4_rows(np.zeros((64, 128), np.float32))


def test_missing_compiler_and_failed_build_say_why(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", "no-such-compiler")
    with pytest.raises(lowbit_gemv.KernelUnavailable, match="no C compiler.*no-such-compiler"):
        lowbit_gemv.build(out_dir=tmp_path)
    monkeypatch.delenv("CC")
    if REASON is None:
        with pytest.raises(lowbit_gemv.KernelUnavailable, match="failed"):
            lowbit_gemv.build(flags=("-O3", "--no-such-flag"), out_dir=tmp_path)


@needs_kernel
def test_load_falls_back_to_portable_flags(monkeypatch, tmp_path):
    real_build = lowbit_gemv.build
    calls = []

    def build(cc=None, flags=lowbit_gemv.FLAGS, out_dir=None):
        calls.append(flags)
        if flags == lowbit_gemv.FLAGS:
            raise lowbit_gemv.KernelUnavailable("`cc -march=native` failed: unknown target CPU")
        return real_build(cc, flags, tmp_path)

    monkeypatch.setattr(lowbit_gemv, "build", build)
    lib = lowbit_gemv.load.__wrapped__()
    assert calls == [lowbit_gemv.FLAGS, lowbit_gemv.PORTABLE_FLAGS] and hasattr(lib, "lowbit_decode_step")


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HWOPT_CACHE", str(tmp_path / "k"))
    assert lowbit_gemv.cache_dir() == tmp_path / "k"
    monkeypatch.delenv("HWOPT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert lowbit_gemv.cache_dir() == tmp_path / "hwopt"
