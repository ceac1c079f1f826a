"""benchmarks.fidelity: the probes against the C references; without a compiler the section says so."""


import numpy as np
import torch

from benchmarks import fidelity, native, report
from hwopt.machine import probe
from tests.benchmarks.support import m


def test_stream_arrays_are_sized_from_the_toolkits_cache_reader():
    assert fidelity.stream_array_bytes(False, 32 * 2**20) == 8 * 32 * 2**20
    assert fidelity.stream_array_bytes(True, 2**20) == 128 * fidelity.MB  # at least 128 MB
    assert fidelity.stream_array_bytes(True, None) == 128 * 2**20  # unknown: 32 MiB assumed


def test_without_a_compiler_the_report_says_so_instead_of_failing(monkeypatch, tmp_path):
    def no_compiler(cc=None):
        raise native.NativeUnavailable("no C compiler found ('gcc' is not on PATH): C references skipped")

    monkeypatch.setattr(native, "find_compiler", no_compiler)
    monkeypatch.setattr(probe, "memory_bandwidth_gbs", lambda **kw: 20.0)
    monkeypatch.setattr(probe, "matmul_flops", lambda *a, **kw: 1e11)

    tiny = np.ones((8, 8), dtype=np.float32)
    monkeypatch.setattr(fidelity, "_gemm_inputs", lambda n: (tiny, tiny, torch.ones(8, 8), torch.ones(8, 8)))
    monkeypatch.setattr(fidelity.bench, "compare", lambda fns, **kw: {k: m(k, [0.1, 0.2]) for k in fns})
    section, stats = fidelity.measure(tmp_path, quick=True, threads=1)
    assert {s["label"] for s in stats} == {"bandwidth probe", "numpy sgemm", "torch sgemm", "FLOP/s probe"}
    row = section["rows"][0]
    assert row["verdict"] == report.UNAVAILABLE and "no C compiler" in row["note"]
    assert not any("FMA" in r["name"] for r in section["rows"])
    assert fidelity.bandwidth_sweep(tmp_path, quick=True, threads=1)[1][0].startswith("C STREAM curve not")
