"""benchmarks.effects: the lessons' headline effects as rows: missing lesson code, predictions, rows against
STREAM, the decode setup on every kernel path this CPU runs, lesson 12's split block."""

from pathlib import Path

import numpy as np
import pytest

from benchmarks import effects, native, parallelism, report
from hwopt.experiments import decode, tensor_parallel_block
from hwopt.kernels import lowbit_gemv
from tests.benchmarks.support import m


def test_need_names_the_missing_module_or_function():
    with pytest.raises(effects.Unavailable, match="hwopt.no_such_module"):
        effects.need("no_such_module")
    with pytest.raises(effects.Unavailable, match="no_such_function"):
        effects.need("machine.bench", "no_such_function")


def test_effects_become_rows_even_when_lesson_code_is_missing_or_broken(monkeypatch):
    fake_times = {"slow": [4.0, 5.0, 6.0], "fast": [1.0, 1.0, 2.0]}
    monkeypatch.setattr(effects.bench, "compare", lambda fns, **kw: {k: m(k, fake_times[k]) for k in fns})

    def fine(quick):
        return effects.Setup({"slow": lambda: None, "fast": lambda: None},
                             [effects.Comparison("ok", 1.5, ["slow"], ["fast"])])

    def missing(quick):
        raise effects.Unavailable("hwopt.experiments.fusion is not in the toolkit")

    def broken(quick):
        raise RuntimeError("kaputt")

    section, _ = effects.measure(quick=True, effects=[(fine, [("ok", 1.5)]), (missing, [("missing", 2.0)]),
                                                      (broken, [("broken", None)])])
    ok, gone, bad = section["rows"]
    assert ok["ratio"] == pytest.approx(5.0) and ok["verdict"] == report.MEETS
    assert gone["verdict"] == report.UNAVAILABLE and "hwopt.experiments.fusion" in gone["note"]
    assert bad["verdict"] == report.UNAVAILABLE and "kaputt" in bad["note"]


def test_a_comparison_with_a_prediction_becomes_a_prediction_row(monkeypatch):
    fake_times = {"long": [3.0, 3.0, 3.0], "short": [1.0, 1.0, 1.0]}
    monkeypatch.setattr(effects.bench, "compare", lambda fns, **kw: {k: m(k, fake_times[k]) for k in fns})

    def kv(quick):
        return effects.Setup({"long": lambda: None, "short": lambda: None},
                             [effects.Comparison("kv", (0.7, 1.3), ["long"], ["short"], predicted=6.0)])

    section, _ = effects.measure(quick=True, effects=[(kv, [("kv", (0.7, 1.3))])])
    (row,) = section["rows"]
    assert row["ratio"] == pytest.approx(2.0) and row["verdict"] == report.BELOW


def test_lesson_8_effects_are_declared_with_their_goals():
    assert effects.PHASES[0][1] == 10.0 and effects.KV_BOUND[0][1] == (0.7, 1.3)
    assert (effects.setup_phases, effects.PHASES) in effects.EFFECTS
    assert (effects.setup_kv_bound, effects.KV_BOUND) in effects.EFFECTS


def test_a_prediction_comparison_becomes_a_prediction_row_and_a_band_survives_unavailability(monkeypatch):
    fake_times = {"plain": [4.0, 4.0, 4.0], "fast": [2.0, 2.0, 2.0]}
    monkeypatch.setattr(effects.bench, "compare", lambda fns, **kw: {k: m(k, fake_times[k]) for k in fns})

    def predicted(quick):
        return effects.Setup({"plain": lambda: None, "fast": lambda: None},
                             [effects.Comparison("p", (0.7, 1.3), ["plain"], ["fast"], predicted=2.2)])

    def missing(quick):
        raise effects.Unavailable("not here")

    section, _ = effects.measure(quick=True, effects=[(predicted, [("p", (0.7, 1.3))]),
                                                      (missing, [("q", (0.7, 1.3))])])
    row, gone = section["rows"]
    assert row["ratio"] == pytest.approx(1.1) and row["verdict"] == report.MEETS and row["goal"] == (0.7, 1.3)
    assert gone["verdict"] == report.UNAVAILABLE and gone["goal"] == (0.7, 1.3)
    names = [name for _, declared in effects.EFFECTS for name, *_ in declared]
    assert {"SDPA / naive attention at 4k tokens", "speculative speedup predicted / measured"} <= set(names)


def test_rows_against_stream_pair_each_round_with_its_own_stream_run(monkeypatch):
    """Rounds of STREAM then the callables: the ratio is the median of per-round ratios (bytes moved / time
    over that round's Triad), the best candidate is named, and tokens/s rows read it against a bound."""
    triads = iter([10.0, 20.0, 10.0])  # GB/s: the machine's load changes between rounds
    monkeypatch.setattr(effects, "stream_executable", lambda: Path("stream"))
    monkeypatch.setattr(effects, "stream_triad_gbs", lambda quick: next(triads))
    rounds = iter([{"a": [0.10, 0.12], "b": [0.2, 0.2]}, {"a": [0.05, 0.06], "b": [0.1, 0.1]},
                   {"a": [0.10, 0.10], "b": [0.2, 0.2]}])
    monkeypatch.setattr(effects.bench, "compare",
                        lambda fns, **kw: {k: m(k, t) for k, t in next(rounds).items()})
    setup = effects.Setup({"a": lambda: None, "b": lambda: None},
                          [effects.Comparison("a / b", 1.5, ["b"], ["a"])],
                          items={"a": 1, "b": 10},
                          against_stream=[effects.AgainstStream("best / STREAM", 0.85, ["a", "b"], "fake"),
                                          effects.AgainstStream("b / bound", 0.9, ["b"], unit="tokens/s")],
                          bytes_moved={"a": 0.9e9, "b": 1e9})
    speedup, vs_stream, vs_bound = effects.run_setup(setup, repeats=3)
    assert speedup["candidate"]["repeats"] == 6  # both calls of every round
    # a moves 0.9 GB in its best call of each round: 9, 18, 9 GB/s against 10, 20, 10 -> 0.9 every round
    assert vs_stream["ratio"] == pytest.approx(0.9) and vs_stream["verdict"] == report.MEETS
    assert vs_stream["ratio_q1"] == pytest.approx(0.9) and "best path: a" in vs_stream["note"]
    assert "b 0.50" in vs_stream["note"]  # the other candidate's median ratio
    # b: 10 tokens of 0.1 GB each in 0.2 s -> 50 tokens/s against a bound of 100 (Triad 10 GB/s)
    assert vs_bound["candidate"]["unit"] == "tokens/s"
    assert vs_bound["candidate"]["median"] == pytest.approx(50)
    assert vs_bound["baseline"]["median"] == pytest.approx(100) and vs_bound["ratio"] == pytest.approx(0.5)
    assert vs_bound["verdict"] == report.BELOW


def test_without_a_compiler_the_rows_against_stream_say_so_and_the_others_are_measured(monkeypatch):
    def no_compiler():
        raise native.NativeUnavailable("no C compiler found (tried gcc)")

    monkeypatch.setattr(effects, "stream_executable", no_compiler)
    monkeypatch.setattr(effects.bench, "compare", lambda fns, **kw: {"a": m("a", [1.0]), "b": m("b", [2.0])})
    setup = effects.Setup({"a": lambda: None, "b": lambda: None},
                          [effects.Comparison("a / b", 1.5, ["b"], ["a"])],
                          against_stream=[effects.AgainstStream("a / STREAM", 0.85, ["a"])],
                          bytes_moved={"a": 1.0, "b": 1.0})
    speedup, vs_stream = effects.run_setup(setup, repeats=1)
    assert speedup["ratio"] == pytest.approx(2.0)
    assert vs_stream["verdict"] == report.UNAVAILABLE and "no C compiler" in vs_stream["note"]


def test_per_item_divides_each_repeat_by_the_items_per_call():
    assert effects.per_item(m("b", [8.0, 16.0]), 8).times_s == (1.0, 2.0)
    with pytest.raises(ValueError, match="items"):
        effects.per_item(m("b", [1.0]), 0)


def test_rows_timing_weights_that_fit_in_the_cache_give_no_verdict_on_memory(monkeypatch):
    monkeypatch.setattr(effects, "_llc_bytes", lambda: 480 * 2**20)  # a server's cache: the lesson's cap wins
    why = effects.in_cache(84e6, 1.5)
    assert "no verdict on memory" in why and "(84 MB)" in why and "(480 MiB)" in why
    monkeypatch.setattr(effects, "_llc_bytes", lambda: 32 * 2**20)  # 84 MB is 2.5x this cache
    assert effects.in_cache(84e6, 1.5) == ""
    # the row: measured and shown, but "not available" as a verdict, saying why
    monkeypatch.setattr(effects, "stream_triad_gbs", lambda quick: 10.0)
    monkeypatch.setattr(effects.bench, "compare", lambda fns, **kw: {k: m(k, [0.1, 0.1]) for k in fns})
    rows = [effects.AgainstStream("cached", 0.5, ["a"], in_cache="no verdict on memory: why"),
            effects.AgainstStream("from memory", 0.5, ["a"])]
    setup = effects.Setup({"a": lambda: None}, [], against_stream=rows, bytes_moved={"a": 1e9})
    _, lines = effects.run_against_stream(setup, rounds=2, quick=True)
    assert [r["ratio"] for r in lines] == [pytest.approx(1.0)] * 2
    assert [r["verdict"] for r in lines] == [report.UNAVAILABLE, report.MEETS]
    assert lines[0]["note"].startswith("no verdict on memory: why")


def test_where_the_lessons_stack_fits_in_the_cache_the_c_kernel_is_timed_on_a_stack_twice_the_cache(
        monkeypatch):
    if reason := lowbit_gemv.unavailable_reason():
        pytest.skip(f"no C kernel here: {reason}")
    monkeypatch.setattr(effects, "_llc_bytes", lambda: 2**20)
    for precision in ("fp32", "int4"):
        path, moved = effects.from_memory_path(decode, 256, precision)
        assert path.precision == precision and path.weight_bytes >= 2 * 2**20
        n_layers = int(path.label.rsplit(", ", 1)[1].split()[0])
        assert path.weight_bytes == pytest.approx(n_layers * 256 * 256 * path.bytes_per_weight)
        assert moved == path.weight_bytes + 2 * 4 * 256 * n_layers  # and each layer's input and output
        assert path.fn().shape == (256,)
    monkeypatch.setattr(lowbit_gemv, "unavailable_reason", lambda: "no C compiler")
    assert effects.from_memory_path(decode, 256, "int8") is None


@pytest.mark.parametrize("cpu", ["this CPU", "an AVX2-only CPU"])
def test_the_decode_setup_checks_and_times_every_path_this_cpu_runs(cpu, monkeypatch):
    """The report's decode section on a small stack, as this CPU runs it and as a CPU whose best path is AVX2
    (where there is no wider path to set the AVX2 one against)."""
    if cpu != "this CPU":
        if reason := lowbit_gemv.unavailable_reason():
            pytest.skip(f"no C kernel here: {reason}")
        monkeypatch.setattr(effects.lowbit_gemv, "kernel_path", lambda lib=None: "avx2")
    monkeypatch.setattr(effects, "DECODE_D_MODEL", 256)
    monkeypatch.setattr(effects, "_llc_bytes", lambda: 2**20)
    setup = effects.setup_decode(quick=True)
    labels = set(setup.fns)
    assert {"fp32", "int8", "int4"} <= {p for label in labels for p in ("fp32", "int8", "int4") if p in label}
    assert any("AVX2 path" in label for label in labels) == (
        cpu == "this CPU" and lowbit_gemv.unavailable_reason() is None and lowbit_gemv.kernel_path() != "avx2"
        and "avx2" in lowbit_gemv.runnable_paths())
    for label, fn in setup.fns.items():
        assert np.all(np.isfinite(fn())), label
    assert set(setup.bytes_moved) == labels
    assert [c.name for c in setup.comparisons] == [name for name, _ in effects.DECODE[:2]]


def test_the_c_kernels_avx2_path_is_timed_where_this_cpu_builds_a_wider_one():
    if lowbit_gemv.unavailable_reason():
        pytest.skip(f"the C kernel does not build here: {lowbit_gemv.unavailable_reason()}")
    stack = decode.make_stack(256, 2)
    paths = {k: p for k, p in decode.decode_paths(stack).items() if "C kernel" in k}
    avx2 = effects.avx2_paths(stack, paths)
    if lowbit_gemv.kernel_path() == "avx2" or "avx2" not in lowbit_gemv.runnable_paths():
        assert avx2 == {}  # this CPU runs the AVX2 path already (or cannot run it)
        return
    assert sorted(avx2) == [f"{p} C kernel (AVX2 path)" for p in ("fp32", "int4", "int8")]
    for label, path in avx2.items():
        wide = paths[label.removesuffix(" (AVX2 path)")]
        assert path.precision == wide.precision and path.weight_bytes == wide.weight_bytes
        np.testing.assert_allclose(path.fn(), wide.fn(), rtol=1e-4, atol=1e-4)  # the same step
    assert effects.avx2_paths(stack, {}) == {}


def test_an_effect_measured_elsewhere_hands_back_its_rows():
    row = report.time_prediction_row("tp", [1e-3] * 3, m("s", [1e-3] * 3), (0.7, 1.3))
    section, _ = effects.measure(quick=True, effects=[(lambda quick: [row], [("tp", (0.7, 1.3))])])
    assert section["rows"] == [row]


def test_lesson_12_split_block_is_declared_with_its_goal():
    assert effects.SPLIT_BLOCK[0] == ("tensor-parallel block predicted / measured, batch 128", (0.7, 1.3))
    assert (effects.setup_split_block, effects.SPLIT_BLOCK) in effects.EFFECTS


def test_the_split_block_rows_come_from_real_worker_processes():
    rows = parallelism.rows(tensor_parallel_block, quick=True)
    assert [r["name"] for r in rows] == [name for name, _ in parallelism.SPLIT_BLOCK]
    for row in rows:
        assert row["ratio"] > 0 and row["baseline"]["repeats"] == row["candidate"]["repeats"] == 7
        assert "max difference" in row["note"]
