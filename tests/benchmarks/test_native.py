"""benchmarks.native: the C reference kernels (STREAM, FMA peak) compile and run at a tiny size."""

import shutil

import pytest

from benchmarks import native


def test_compile_kernel_rejects_unknown_kernels_and_missing_compilers(tmp_path):
    with pytest.raises(ValueError, match="name"):
        native.compile_kernel("dgemm", tmp_path)
    with pytest.raises(native.NativeUnavailable, match="no C compiler"):
        native.compile_kernel("stream", tmp_path, cc="no-such-cc-here")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc: the report says so instead of measuring")
def test_stream_and_fma_kernels_compile_and_run_at_a_tiny_size(tmp_path):
    out = native.run_stream(native.compile_kernel("stream", tmp_path), 4096, 2, threads=1, inner=3)
    assert out["threads"] == 1 and out["triad_bytes"] == 24 * 4096 and len(out["triad_s"]) == 2
    assert all(t > 0 for t in out["copy_s"] + out["triad_s"])
    fma = native.run_fma_peak(native.compile_kernel("fma_peak", tmp_path), 1000, 2, threads=1)
    assert fma["flop"] > 0 and len(fma["times_s"]) == 2
