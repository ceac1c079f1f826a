"""benchmarks.engine: the course's C kernel against llama.cpp on the trained weights, and llama.cpp's goodput,
as report section 6: the stack holds the model's own matrices, rows say why when the engine is missing, a real
interleaved run on the engine, the schema and the Markdown."""

import os

import numpy as np
import pytest

from benchmarks import engine, report
from hwopt.experiments import serving_engine
from hwopt.kernels import lowbit_gemv
from hwopt.machine import loadgen
from hwopt.models import checkpoint
from tests.benchmarks.support import fake_doc, m
from tests.support import skip_outside_ci


def test_the_stack_holds_every_matrix_of_the_trained_model_once_as_square_blocks():
    stack = engine.model_stack("draft")
    weights = checkpoint.load("draft").state_dict()
    matrices = {k: w.numpy() for k, w in weights.items() if w.ndim == 2 and k != "lm_head.weight"}
    d = weights["model.norm.weight" if "model.norm.weight" in weights else "norm.weight"].shape[0]
    assert stack.d_model == d and stack.n_params == sum(w.size for w in matrices.values())
    rows = np.concatenate([b.T for b in stack.layers])  # back to (rows, d): each block is a piece transposed
    first = next(iter(matrices.values()))
    np.testing.assert_array_equal(rows[:len(first)], first[:, :d])
    assert np.linalg.norm(stack.x) == pytest.approx(1.0)


def test_llama_cpp_bytes_per_weight_come_from_its_block_layout():
    assert engine.ggml_bytes_per_weight("Q8_0") == 34 / 32 and engine.ggml_bytes_per_weight("Q4_0") == 18 / 32


def test_the_rows_read_not_available_with_the_reason_where_the_engine_is_not_built(monkeypatch):
    monkeypatch.setattr(engine.llama_build, "unavailable_reason", lambda: "no C++ compiler found")
    section = engine.measure(quick=True)
    rows = section["rows"]
    assert len(rows) == len(engine.kernel_row_names()) + 1
    assert all(r["verdict"] == report.UNAVAILABLE and "no C++ compiler found" in r["note"] for r in rows)
    assert [r["goal"] for r in rows[:2]] == [1.0, 1.0] and rows[-1]["goal"] is None
    assert "Q8_0" in rows[0]["name"] and "Q4_0" in rows[1]["name"]


def test_a_part_that_fails_becomes_rows_saying_so_and_the_other_part_stands(monkeypatch):
    monkeypatch.setattr(engine, "unavailable_reason", lambda: None)

    def broken(quick):
        raise RuntimeError("llama-server exited with status 1")

    monkeypatch.setattr(engine, "kernel_rows", broken)
    monkeypatch.setattr(engine, "goodput_row", lambda quick: (report.unavailable_row("g", "x"), "x"))
    rows = engine.measure(quick=True)["rows"]
    assert len(rows) == len(engine.kernel_row_names()) + 1
    assert all("failed: RuntimeError: llama-server exited" in r["note"] for r in rows[:-1])
    assert rows[-1]["name"] == "g"


def test_busy_cores_counts_what_other_work_takes():
    busy = engine.busy_cores(0.2)
    assert busy is None or 0.0 <= busy <= os.cpu_count()


@pytest.mark.parametrize("busy, threads, verdict", [(None, 2, report.MEETS), (0.1, 2, report.MEETS),
                                                    (0.3, 2, report.UNAVAILABLE), (0.9, 1, report.MEETS),
                                                    (1.9, 1, report.UNAVAILABLE)])
def test_no_verdict_where_other_work_and_the_threads_do_not_fit_in_the_cores(busy, threads, verdict):
    row = report.speedup_row("r", m("llama.cpp", [3e-3]), m("kernel", [1e-3]), goal=1.0, note="measured")
    got = engine.judged(row, threads, busy, cores=2)
    assert got["verdict"] == verdict and got["ratio"] == row["ratio"] and got["note"].endswith("measured")
    assert ("no verdict" in got["note"]) == (verdict == report.UNAVAILABLE)
    no_goal = {**row, "goal": None, "verdict": report.NO_GOAL}
    assert engine.judged(no_goal, threads, busy, cores=2) == no_goal


def _records(*ttft_tpot_s):
    """RequestRecords with a first token at ttft and four more, tpot apart."""
    return tuple(loadgen.RequestRecord(0.1 * i, 0.1 * i, tuple(0.1 * i + t + k * tpot for k in range(5)),
                                       0.1 * i + t + 4 * tpot, 5) for i, (t, tpot) in enumerate(ttft_tpot_s))


@pytest.mark.parametrize("requests, met", [([(0.1, 0.01), (0.2, 0.01), (0.9, 0.01)], 2),
                                           ([(0.2, 1.0), (0.9, 0.01)], 0)])  # TPOT, then TTFT too long
def test_goodput_counts_the_requests_meeting_the_lessons_slo(monkeypatch, requests, met):
    closed = loadgen.LoadResult(_records((0.1, 0.01)), "closed", users=4, label="closed")
    opened = loadgen.LoadResult(_records(*requests), "open", rate_per_s=3.0, label="open")
    monkeypatch.setattr(engine, "busy_cores", lambda: 0.5)
    monkeypatch.setattr(engine.serving_engine, "open_vs_closed",
                        lambda n_requests: serving_engine.LoopComparison(closed, opened))
    row, note = engine.goodput_row(quick=True)
    assert row["verdict"] == report.NO_GOAL and row["goal"] is None
    assert row["ratio"] == pytest.approx(met / len(requests)) and f"goodput {met / opened.span_s:.3g}" in note
    assert "kept 0.50 of" in note
    report.validate(fake_doc(engine={"rows": [row], "notes": []}))


@pytest.fixture(scope="module")
def built():
    reason = engine.unavailable_reason()
    if reason:
        skip_outside_ci(reason)


def test_one_real_interleaved_run_against_llama_cpp(built, monkeypatch):
    monkeypatch.setattr(engine, "busy_cores", lambda: 0.0)  # a quiet machine: the goal rows get a verdict
    rows, notes = engine.kernel_rows(quick=True, rounds=1, tokens=2, model="draft")
    names = engine.kernel_row_names()
    assert [r["name"] for r in rows] == [n for n, *_ in names]
    for row in rows:
        assert row["ratio"] > 0 and row["candidate"]["repeats"] == row["baseline"]["repeats"] == 1
        assert "tokens/s (llama.cpp, whole step" in row["note"] and "0.00 of" in row["note"]
    assert rows[0]["goal"] == 1.0 and rows[0]["verdict"] in (report.MEETS, report.BELOW)
    assert f"{lowbit_gemv.default_threads()} thread" in rows[0]["name"]
    assert "upper bound" in " ".join(notes) and "'draft'" in notes[0]


def test_the_section_fits_the_schema_and_its_goals_reach_the_summary():
    row = report.speedup_row("int8 C kernel GEMV stack / llama.cpp Q8_0 decode, tokens/s, 2 threads",
                             m("llama.cpp", [3e-3, 3e-3]), m("kernel", [2e-3, 2e-3]), goal=1.0, note="n")
    doc = report.validate(fake_doc(engine={"rows": [row], "notes": ["what each side times"]}))
    text = report.render_markdown(doc)
    assert "## 6. The serving engine" in text and "what each side times" in text
    assert f"| {row['name']} | 1.50x | >= 1.00x | meets goal |" in text
    del doc["engine"]
    assert "## 6." not in report.render_markdown(report.validate(doc))  # older reports have none
