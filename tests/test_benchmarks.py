"""The performance report's harness: verdicts, ratio rows, schema, Markdown, plots (fake measurements), and a
smoke test of the C reference kernels at a tiny size."""

import json
import shutil
import sys
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `benchmarks` is a folder of the repository, not part of the installed toolkit

from benchmarks import effects, fidelity, figures, grading, native, report  # noqa: E402
from hwopt.bench import Measurement  # noqa: E402


def m(label, times):
    return Measurement(label, tuple(times))


def rate(label="probe", values=(9.0, 10.0, 11.0), unit="GB/s"):
    return report.rate_stats(label, values, unit)


def fake_doc(**changes):
    slow, fast = m("fp32", [4e-3, 5e-3, 6e-3]), m("int8", [1e-3, 1e-3, 2e-3])
    rows = [report.speedup_row("int8 / fp32", slow, fast, goal=2.5, note="decode GEMV"),
            report.unavailable_row("fused / unfused", "hwopt.fusion is not in the toolkit", goal=2.0)]
    triad = rate("triad", (11.0, 12.0))
    fid = [report.fidelity_row("bandwidth probe / STREAM Triad", rate(), triad, goal=0.9)]
    doc = {
        "schema_version": report.SCHEMA_VERSION, "mode": "quick", "started_utc": "2026-01-01 00:00 UTC",
        "duration_s": 12.5, "command": "make bench ARGS=--quick", "machine": {"card": "CPU  test machine"},
        "fidelity": {"rows": fid, "notes": ["2 threads"]}, "effects": {"rows": rows, "notes": []},
        "course_cost": {
            "notebooks": [report.notebook_row("notebooks/01_chips.ipynb", 30.0, "ok"),
                          report.notebook_row("notebooks/02_x.ipynb", 120.0, "ok")],
            "grading": {"available": True, "class_size": 2, "notebooks": 8, "total_s": 40.0,
                        "s_per_notebook": 5.0},
            "notes": []},
        "scaling": {"bandwidth": [], "gemv": [], "notes": [],
                    "grading": [{"class_size": 2, "notebooks": 8, "total_s": 40.0, "s_per_notebook": 5.0}]},
        "noise": report.noise_summary(report.row_stats(rows + fid), ["UserWarning: careful"]),
        "plots": {},
    }
    doc.update(changes)
    return doc


# ---------------------------------------------------------------- verdicts and rows


@pytest.mark.parametrize(("ratio", "goal", "expected"), [
    (3.0, 2.5, report.MEETS), (2.5, 2.5, report.MEETS), (2.4, 2.5, report.BELOW), (1.2, None, report.NO_GOAL),
    (None, 2.0, report.UNAVAILABLE), (float("nan"), 2.0, report.UNAVAILABLE)])
def test_verdict_compares_the_ratio_with_the_goal(ratio, goal, expected):
    assert report.verdict(ratio, goal) == expected


def test_verdict_rejects_a_non_positive_goal():
    with pytest.raises(ValueError, match="goal"):
        report.verdict(1.0, 0)


def test_time_stats_reports_milliseconds_from_the_measurement():
    s = report.time_stats(m("a", [1e-3, 2e-3, 3e-3]))
    assert s["unit"] == "ms" and s["median"] == pytest.approx(2.0) and s["best"] == pytest.approx(1.0)
    assert s["iqr"] == pytest.approx(1.0) and s["repeats"] == 3
    with pytest.raises(ValueError, match="Measurement"):
        report.time_stats({"median": 1})


def test_rate_stats_takes_the_best_as_the_maximum_and_rejects_bad_rates():
    s = rate(values=(10.0, 20.0, 30.0))
    assert s["median"] == 20.0 and s["best"] == 30.0 and s["iqr"] == pytest.approx(10.0)
    assert s["relative_iqr"] == pytest.approx(0.5)
    for bad in ((), (1.0, -2.0), (float("inf"),)):
        with pytest.raises(ValueError, match="values"):
            report.rate_stats("x", bad, "GB/s")


def test_paired_ratios_pair_interleaved_repeats_in_order():
    assert report.paired_ratios(m("b", [4, 6]), m("c", [2, 2])) == [2.0, 3.0]
    with pytest.raises(ValueError, match="same repeats"):
        report.paired_ratios(m("b", [1, 2]), m("c", [1]))


def test_speedup_row_is_the_ratio_of_medians_with_paired_iqr_and_verdict():
    row = report.speedup_row("x", m("slow", [4, 5, 6]), m("fast", [1, 1, 2]), goal=4.0)
    assert row["ratio"] == pytest.approx(5.0) and row["verdict"] == report.MEETS
    assert row["ratio_of_best"] == pytest.approx(4.0)
    assert row["ratio_q1"] <= row["ratio"] <= row["ratio_q3"] or row["ratio_q1"] <= row["ratio_q3"]
    assert row["baseline"]["label"] == "slow" and row["candidate"]["label"] == "fast"


def test_fidelity_row_divides_the_probe_median_by_the_reference_median():
    row = report.fidelity_row("bw", rate(values=(18.0, 20.0, 22.0)), rate("ref", (20.0, 25.0)), goal=0.85,
                              pairs=[0.8, 0.9, 1.0])
    assert row["ratio"] == pytest.approx(20 / 22.5) and row["verdict"] == report.MEETS
    assert row["ratio_of_best"] == pytest.approx(22 / 25)
    assert (row["ratio_q1"], row["ratio_q3"]) == (pytest.approx(0.85), pytest.approx(0.95))
    with pytest.raises(ValueError, match="units"):
        report.fidelity_row("bw", rate(), rate(unit="GFLOP/s"))
    with pytest.raises(ValueError, match="candidate"):
        report.fidelity_row("bw", {"median": 1}, rate())


def test_unavailable_row_says_why():
    row = report.unavailable_row("fused", "hwopt.fusion missing", goal=2.0)
    assert row["verdict"] == report.UNAVAILABLE and row["ratio"] is None and "missing" in row["note"]
    with pytest.raises(ValueError, match="reason"):
        report.unavailable_row("fused", "")


def test_notebook_row_meets_the_goal_only_when_it_ran_in_time():
    assert report.notebook_row("a.ipynb", 30.0, "ok")["verdict"] == report.MEETS
    assert report.notebook_row("a.ipynb", 91.0, "ok")["verdict"] == report.BELOW
    assert report.notebook_row("a.ipynb", 5.0, "error", "boom")["verdict"] == report.BELOW
    assert report.notebook_row("a.ipynb", None, "skipped")["verdict"] == report.UNAVAILABLE
    with pytest.raises(ValueError, match="status"):
        report.notebook_row("a.ipynb", 1.0, "fine")
    with pytest.raises(ValueError, match="seconds"):
        report.notebook_row("a.ipynb", None, "ok")


def test_noise_summary_lists_the_noisiest_first_and_counts_noisy_series():
    stats = [report.time_stats(m("steady", [1.0, 1.0, 1.01])), report.time_stats(m("noisy", [1.0, 2.0, 3.0]))]
    noise = report.noise_summary(stats, ["w", "w", "v"])
    assert [s["label"] for s in noise["series"]] == ["noisy", "steady"]
    assert noise["noisy"] == 1 and noise["warnings"] == ["v", "w"]


def test_many_warnings_of_one_kind_become_one_count_line():
    noisy = [f"NoisyMeasurementWarning: batch {b} is noisy" for b in (1, 2, 4, 8)]
    assert report.summarize_warnings([*noisy, noisy[0], "UserWarning: once"]) == [
        "NoisyMeasurementWarning: 4 distinct warnings, e.g. batch 1 is noisy", "UserWarning: once"]


# ---------------------------------------------------------------- schema, Markdown, files


def test_a_complete_document_fits_the_schema_and_survives_json():
    doc = json.loads(json.dumps(fake_doc()))
    assert report.validate(doc) is doc


@pytest.mark.parametrize("broken", [
    {"mode": "fast"}, {"schema_version": 0}, {"machine": {}},
    {"effects": {"rows": [{"name": "x"}], "notes": []}}])
def test_the_schema_rejects_broken_documents(broken):
    with pytest.raises(jsonschema.ValidationError):
        report.validate(fake_doc(**broken))


def test_markdown_shows_machine_ratios_verdicts_and_reasons():
    md = report.render_markdown(fake_doc())
    assert "CPU  test machine" in md and "make bench ARGS=--quick" in md
    assert "| int8 / fp32 | **5.00**" in md and "meets goal" in md and ">= 2.50" in md
    assert "not available" in md and "hwopt.fusion is not in the toolkit" in md
    assert "| notebooks/02_x.ipynb | 120 | ok | <= 90.0 s | below goal |" in md
    assert "| 2 | 8 | 40.0 | 5.00 |" in md  # integers stay integers in tables
    assert "5.00 s per submission-notebook" in md and "UserWarning: careful" in md


def test_the_summary_counts_goals_met_including_notebooks():
    table = report.summary_table(fake_doc())
    assert "| int8 / fp32 | 5.00x | >= 2.50x | meets goal |" in table
    assert "| every notebook headless | 1 of 2 within goal (slowest 120 s) | <= 90.0 s each | below goal |" \
        in table
    assert table.endswith("1 of 4 goals met; 1 not available.")  # bandwidth 10 / 12 is below 0.9


def test_markdown_says_when_grading_was_not_available():
    doc = fake_doc()
    doc["course_cost"]["grading"] = {"available": False, "reason": "hwopt.grading is not in the toolkit"}
    assert "Autograding: not available (hwopt.grading is not in the toolkit)" in report.render_markdown(doc)


def test_write_report_writes_json_and_markdown(tmp_path):
    json_path, md_path = report.write_report(fake_doc(), tmp_path / "out")
    assert json.loads(json_path.read_text())["mode"] == "quick"
    assert md_path.read_text().startswith("# Performance report")


def test_plots_are_drawn_for_sections_with_data(tmp_path):
    doc = fake_doc()
    doc["scaling"]["bandwidth"] = [
        {"source": src, "kernel": "triad", "working_set_bytes": w, "gbs": g, "q1": g - 1, "q3": g + 1}
        for src in ("STREAM (C)", "probe") for w, g in ((1e5, 80.0), (1e9, 20.0))]
    names = figures.save_all(doc, tmp_path, {"L3": 32 * 2**20})
    assert set(names) == {"fidelity", "effects", "notebooks", "bandwidth", "grading"}
    assert all((tmp_path / n).stat().st_size > 1000 for n in names.values())
    assert figures.ratio_chart([report.unavailable_row("x", "why")], "t") is None


# ---------------------------------------------------------------- effects and machine facts


def test_need_names_the_missing_module_or_function():
    with pytest.raises(effects.Unavailable, match="hwopt.no_such_module"):
        effects.need("no_such_module")
    with pytest.raises(effects.Unavailable, match="no_such_function"):
        effects.need("bench", "no_such_function")


def test_effects_become_rows_even_when_lesson_code_is_missing_or_broken(monkeypatch):
    fake_times = {"slow": [4.0, 5.0, 6.0], "fast": [1.0, 1.0, 2.0]}
    monkeypatch.setattr(effects.bench, "compare", lambda fns, **kw: {k: m(k, fake_times[k]) for k in fns})

    def fine(quick):
        return effects.Setup({"slow": lambda: None, "fast": lambda: None},
                             [effects.Comparison("ok", 1.5, ["slow"], ["fast"])])

    def missing(quick):
        raise effects.Unavailable("hwopt.fusion is not in the toolkit")

    def broken(quick):
        raise RuntimeError("kaputt")

    section, _ = effects.measure(quick=True, effects=[(fine, [("ok", 1.5)]), (missing, [("missing", 2.0)]),
                                                      (broken, [("broken", None)])])
    ok, gone, bad = section["rows"]
    assert ok["ratio"] == pytest.approx(5.0) and ok["verdict"] == report.MEETS
    assert gone["verdict"] == report.UNAVAILABLE and "hwopt.fusion" in gone["note"]
    assert bad["verdict"] == report.UNAVAILABLE and "kaputt" in bad["note"]


def test_per_item_divides_each_repeat_by_the_items_per_call():
    assert effects.per_item(m("b", [8.0, 16.0]), 8).times_s == (1.0, 2.0)
    with pytest.raises(ValueError, match="items"):
        effects.per_item(m("b", [1.0]), 0)


def test_cache_sizes_sum_private_caches_over_the_cpus(tmp_path, monkeypatch):
    monkeypatch.setattr(fidelity.os, "cpu_count", lambda: 2)
    caches = [("1", "Data", "32K", "0"), ("1", "Instruction", "32K", "0"), ("2", "Unified", "512K", "0"),
              ("3", "Unified", "32768K", "0-1")]
    for i, (level, kind, size, shared) in enumerate(caches):
        d = tmp_path / f"index{i}"
        d.mkdir()
        for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
            (d / name).write_text(value + "\n")
    assert fidelity.cache_sizes_bytes(str(tmp_path)) == {"L1": 64 * 2**10, "L2": 2**20, "L3": 32 * 2**20}
    assert fidelity.cache_sizes_bytes(str(tmp_path / "missing")) == {}


# ---------------------------------------------------------------- the C kernels


def test_without_a_compiler_the_report_says_so_instead_of_failing(monkeypatch, tmp_path):
    import numpy as np

    from hwopt import probe

    def no_compiler(cc=None):
        raise native.NativeUnavailable("no C compiler found ('gcc' is not on PATH): C references skipped")

    monkeypatch.setattr(native, "find_compiler", no_compiler)
    monkeypatch.setattr(probe, "memory_bandwidth_gbs", lambda **kw: 20.0)
    monkeypatch.setattr(probe, "matmul_flops", lambda *a, **kw: 1e11)
    import torch

    tiny = np.ones((8, 8), dtype=np.float32)
    monkeypatch.setattr(fidelity, "_gemm_inputs", lambda n: (tiny, tiny, torch.ones(8, 8), torch.ones(8, 8)))
    monkeypatch.setattr(fidelity.bench, "compare", lambda fns, **kw: {k: m(k, [0.1, 0.2]) for k in fns})
    section, stats = fidelity.measure(tmp_path, quick=True, threads=1)
    assert {s["label"] for s in stats} == {"bandwidth probe", "numpy sgemm", "torch sgemm", "FLOP/s probe"}
    row = section["rows"][0]
    assert row["verdict"] == report.UNAVAILABLE and "no C compiler" in row["note"]
    assert not any("FMA" in r["name"] for r in section["rows"])
    assert fidelity.bandwidth_sweep(tmp_path, quick=True, threads=1)[1][0].startswith("C STREAM curve not")



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


# ---------------------------------------------------------------- grading cost


def test_grading_time_by_class_size_accumulates_each_students_notebooks():
    rows = [{"student": "s1", "seconds": "2"}, {"student": "s1", "seconds": "4"},
            {"student": "s2", "seconds": "6"}]
    assert grading.cumulative_by_student(rows) == [
        {"class_size": 1, "notebooks": 2, "total_s": 6.0, "s_per_notebook": 3.0},
        {"class_size": 2, "notebooks": 3, "total_s": 12.0, "s_per_notebook": 4.0}]


def test_grading_is_reported_not_available_without_the_grading_kit(monkeypatch, tmp_path):
    monkeypatch.setattr(grading, "GRADE_CLASS", tmp_path / "autograder" / "grade_class.py")
    summary, series, notes = grading.measure(quick=True)
    assert summary["available"] is False and "grade_class.py" in summary["reason"] and series == []


def test_the_machine_card_shows_the_probe_medians_of_section_one():
    from benchmarks.__main__ import measured_probe

    probe = measured_probe({"fidelity": {"rows": fake_doc()["fidelity"]["rows"] + [report.fidelity_row(
        "FLOP/s probe / best sgemm", rate("p", (90.0, 100.0), "GFLOP/s"), rate("b", (110.0,), "GFLOP/s"))]}})
    assert probe.bandwidth_gbs == 10.0 and probe.flops_by_dtype == {"float32": 95.0e9}
    assert measured_probe({"fidelity": {"rows": []}}) is None


REFERENCE = ROOT / "benchmarks" / "reference"


@pytest.mark.skipif(not (REFERENCE / "report.json").exists(), reason="no committed reference report yet")
def test_the_committed_reference_is_generated_not_hand_edited():
    doc = report.validate(json.loads((REFERENCE / "report.json").read_text()))
    assert doc["mode"] == "full"
    assert (REFERENCE / "report.md").read_text() == report.render_markdown(doc), \
        "report.md is not what report.json renders to: regenerate it, `make bench OUT=benchmarks/reference`"
    assert all((REFERENCE / name).is_file() for name in doc["plots"].values())


def test_quick_mode_runs_the_assignments_and_skips_the_lessons(monkeypatch, tmp_path):
    from benchmarks import course

    for path in ("notebooks/01_x.ipynb", "source/a/a.ipynb"):
        (tmp_path / path).parent.mkdir(parents=True)
        (tmp_path / path).write_text("{}")
    monkeypatch.setattr(course, "ROOT", tmp_path)
    monkeypatch.setattr(course, "course_notebooks", lambda: [tmp_path / "notebooks/01_x.ipynb",
                                                             tmp_path / "source/a/a.ipynb"])
    monkeypatch.setattr(course, "execute_notebook", lambda p, **kw: report.notebook_row(p.name, 1.0, "ok"))
    rows, _ = course.measure_notebooks(quick=True)
    assert [r["status"] for r in rows] == ["skipped", "ok"]
