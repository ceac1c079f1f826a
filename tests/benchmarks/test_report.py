"""benchmarks.report: verdicts, ratio rows, the schema, Markdown, plots and the grading goal's rows (fake
measurements); the committed reference is what the harness renders."""

import json
from pathlib import Path

import jsonschema
import pytest

from benchmarks import figures, report
from tests.benchmarks.support import fake_doc, m, rate

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "benchmarks" / "reference"


@pytest.mark.parametrize(("ratio", "goal", "expected"), [
    (3.0, 2.5, report.MEETS), (2.5, 2.5, report.MEETS), (2.4, 2.5, report.BELOW), (1.2, None, report.NO_GOAL),
    (None, 2.0, report.UNAVAILABLE), (float("nan"), 2.0, report.UNAVAILABLE)])
def test_verdict_compares_the_ratio_with_the_goal(ratio, goal, expected):
    assert report.verdict(ratio, goal) == expected


@pytest.mark.parametrize(("ratio", "expected"), [(0.69, report.BELOW), (0.7, report.MEETS),
                                                (1.0, report.MEETS), (1.3, report.MEETS),
                                                (1.31, report.BELOW)])
def test_a_band_goal_wants_the_ratio_inside_it(ratio, expected):
    assert report.verdict(ratio, (0.7, 1.3)) == expected
    with pytest.raises(ValueError, match="band"):
        report.verdict(1.0, (1.3, 0.7))


def test_prediction_row_divides_the_predicted_speedup_by_the_measured_one():
    row = report.prediction_row("spec", m("plain", [4, 5, 6]), m("fast", [2, 2, 3]), 2.0, goal=(0.7, 1.3))
    assert row["ratio"] == pytest.approx(2.0 / 2.5) and row["verdict"] == report.MEETS
    assert row["kind"] == "fidelity" and row["ratio_of_best"] == pytest.approx(2.0 / 2.0)
    assert "| 0.700-1.30 |" in report.ratio_table([row])
    assert report.prediction_row("spec", m("plain", [4, 4]), m("fast", [1, 1]), 2.0, 0.7, 1.3)["verdict"] == \
        report.BELOW  # predicted 2x, measured 4x: the model is off by half
    with pytest.raises(ValueError, match="predicted"):
        report.prediction_row("spec", m("plain", [4]), m("fast", [2]), 0.0)


def test_verdict_rejects_a_non_positive_goal():
    with pytest.raises(ValueError, match="goal"):
        report.verdict(1.0, 0)


@pytest.mark.parametrize(("ratio", "expected"), [
    (0.7, report.MEETS), (1.0, report.MEETS), (1.3, report.MEETS), (0.69, report.BELOW),
    (1.31, report.BELOW)])
def test_a_band_goal_is_met_only_inside_it(ratio, expected):
    assert report.verdict(ratio, (0.7, 1.3)) == expected == report.verdict(ratio, [0.7, 1.3])  # as in JSON
    for bad in ((1.3, 0.7), (0.0, 1.0), (1.0,)):
        with pytest.raises(ValueError, match="band"):
            report.verdict(1.0, bad)


def test_prediction_row_divides_the_prediction_by_the_measured_ratio():
    row = report.prediction_row("kv", m("long", [4, 5, 6]), m("short", [2, 2, 2]), predicted=2.0,
                                goal=(0.7, 1.3), note="n")
    assert row["ratio"] == pytest.approx(2.0 / 2.5) and row["verdict"] == report.MEETS
    assert row["kind"] == "fidelity" and "predicted 2x, measured 2.5x" in row["note"]
    assert "0.700-1.30" in report.ratio_table([row])
    doc = json.loads(json.dumps(fake_doc(effects={"rows": [row], "notes": []})))  # the band as a JSON list
    assert report.validate(doc) is doc
    assert "| kv | 0.800x | 0.700x-1.30x | meets goal |" in report.summary_table(doc)
    with pytest.raises(ValueError, match="predicted"):
        report.prediction_row("kv", m("a", [1]), m("b", [1]), predicted=0.0)


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
    row = report.unavailable_row("fused", "hwopt.experiments.fusion missing", goal=2.0)
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


def test_a_complete_document_fits_the_schema_and_survives_json():
    doc = json.loads(json.dumps(fake_doc()))
    assert report.validate(doc) is doc
    banded = fake_doc()  # as the effects build it: a band goal is a tuple until the JSON is written
    banded["effects"]["rows"].append(report.prediction_row("p", m("a", [2.0, 2.0]), m("b", [1.0, 1.0]), 2.0,
                                                           goal=(0.7, 1.3)))
    assert report.validate(banded) is banded


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
    assert "not available" in md and "fusion is not in the toolkit" in md
    assert "| notebooks/02_x.ipynb | 120 | ok | <= 90.0 s | below goal |" in md
    assert "| 2 | 8 | 40.0 | 5.00 |" in md  # integers stay integers in tables
    assert "5.00 s per submission-notebook" in md and "UserWarning: careful" in md


def test_the_summary_counts_goals_met_including_notebooks_and_grading():
    table = report.summary_table(fake_doc())
    assert "| int8 / fp32 | 5.00x | >= 2.50x | meets goal |" in table
    assert "| every notebook headless | 1 of 2 within goal (slowest 120 s) | <= 90.0 s each | below goal |" \
        in table
    assert ("| grading (sandboxed, serial) s per notebook | 1.25 s mean, median 1.15 s, "
            "CPU 0.800 s (4 notebooks) | <= 2.00 s | meets goal |") in table
    assert table.endswith("2 of 5 goals met; 1 not available.")  # bandwidth 10 / 12 is below 0.9


def test_the_parallel_grading_goal_is_the_median_speedup_of_the_rounds_against_0_8_per_worker():
    rounds = [(80.0, 45.0), (80.0, 40.0), (90.0, 60.0)]
    row = report.parallel_grading_row(rounds, workers=2, notebooks=20, same_scores=True, note="2 workers")
    assert row["name"] == "parallel grading speedup (2 workers)" and row["goal"] == 1.6
    assert row["speedup"] == pytest.approx(80 / 45) and row["verdict"] == report.MEETS
    assert row["speedups"] == pytest.approx([80 / 45, 2.0, 1.5]) and row["rounds"] == 3
    assert row["speedup_iqr"] == pytest.approx((2.0 + 80 / 45) / 2 - (1.5 + 80 / 45) / 2)  # q3 - q1, linear
    assert (row["serial_s"], row["parallel_s"]) == (80.0, 45.0)
    assert report.parallel_grading_row([(80.0, 60.0)], workers=2, notebooks=20, same_scores=True,
                                       note="")["verdict"] == report.BELOW
    differ = report.parallel_grading_row([(80.0, 40.0)], workers=2, notebooks=20, same_scores=False, note="x")
    assert differ["verdict"] == report.UNAVAILABLE and "scores differ" in differ["note"]
    doc = fake_doc(course_cost={**fake_doc()["course_cost"], "grading_parallel": row})
    report.validate(doc)
    assert ("| parallel grading speedup (2 workers) | 1.78x (45.0 s vs 80.0 s serial, 20 notebooks, "
            "IQR 0.25 over 3 rounds) | >= 1.60x | meets goal |") in report.summary_table(doc)
    assert "**1.78x** the serial speed (median of the rounds)" in report.render_markdown(doc)
    for bad in ({"serial_s": 0.0}, {"parallel_s": float("nan")}, {"workers": 0}, {"notebooks": 1.5}):
        args = {"serial_s": 80.0, "parallel_s": 45.0, "workers": 2, "notebooks": 20, **bad}
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be a positive"):
            report.parallel_grading_row([(args.pop("serial_s"), args.pop("parallel_s"))], same_scores=True,
                                        note="", **args)
    for bad in ([], [(1.0,)], 3.0):
        with pytest.raises(ValueError, match="rounds must be a non-empty sequence"):
            report.parallel_grading_row(bad, workers=2, notebooks=20, same_scores=True, note="")


def test_the_parallel_goal_says_why_it_was_not_measured():
    off = report.parallel_grading_unavailable("PostgreSQL is not installed", 2)
    doc = fake_doc(course_cost={**fake_doc()["course_cost"], "grading_parallel": off})
    report.validate(doc)
    assert "not available: PostgreSQL is not installed" in report.summary_table(doc)
    assert "Grading in parallel: not available (PostgreSQL is not installed)" in report.render_markdown(doc)


def test_the_grading_goal_row_says_why_it_is_not_available():
    doc = fake_doc()
    doc["course_cost"]["grading_honest"] = report.grading_unavailable("the honest class run failed: boom")
    table = report.summary_table(doc)
    assert "| not available: the honest class run failed: boom | <= 2.00 s | not available |" in table
    assert table.endswith("1 of 5 goals met; 2 not available.")
    assert "Grading an honest class: not available (the honest class run failed: boom)" in \
        report.render_markdown(doc)
    with pytest.raises(ValueError, match="reason"):
        report.grading_unavailable("")


def test_markdown_says_when_grading_was_not_available():
    doc = fake_doc()
    doc["course_cost"]["grading"] = {"available": False, "reason": "grading is not in the toolkit"}
    md = report.render_markdown(doc)
    assert "Grading the sample mix: not available (grading is not in the toolkit)" in md
    assert "Grading an honest class, serially, every kernel in the grading sandbox" in md


def test_markdown_tells_the_honest_class_from_the_sample_mix():
    md = report.render_markdown(fake_doc())
    assert ("1 student, each submitting the correct solution of every assignment (4 submission notebooks): "
            "**1.25 s per submission-notebook** (mean; median 1.15 s, range 1.00-1.40 s; CPU 0.800 s per "
            "notebook), 5.00 s in all; goal <= 2.00 s: meets goal.") in md
    assert "Grading the sample mix, a class of 2 students cycling through the sample students" in md
    assert "a class of 1 student cycling" in report.grading_paragraph(None, {
        **fake_doc()["course_cost"]["grading"], "class_size": 1})
    assert "hang until the 10 s cell timeout, the attack samples; this class covers 2 of the 23" in md
    assert "it prices the mix, not the grader" in md
    assert "### Grading time vs class size (the sample mix)" in md


def test_grading_row_takes_the_mean_from_the_wall_time_and_the_median_from_the_notebooks():
    row = report.grading_row([1.0, 3.0, 1.2], 6.0, 2.4, students=1)
    assert row["s_per_notebook"] == pytest.approx(2.0) and row["median_s_per_notebook"] == 1.2
    assert (row["min_s"], row["max_s"], row["notebooks"]) == (1.0, 3.0, 3)
    assert row["cpu_s_per_notebook"] == pytest.approx(0.8) and row["sandboxed"] is True
    assert row["verdict"] == report.MEETS and row["goal_s"] == report.GRADING_GOAL_S == 2.0
    assert "sandboxed" in row["name"] and "serial" in row["name"] and "sandboxed" in row["note"]
    assert report.grading_row([1.0], 2.1, 1.0, students=1)["verdict"] == report.BELOW


def test_grading_row_claims_no_verdict_unsandboxed_or_short_of_full_marks():
    loose = report.grading_row([1.0, 1.0], 2.0, 1.0, students=1, sandbox_reason="no bubblewrap")
    assert loose["verdict"] == report.UNAVAILABLE and loose["sandboxed"] is False
    assert "WITHOUT the sandbox" in loose["note"] and "no bubblewrap" in loose["note"]
    assert "measured WITHOUT the sandbox: no bubblewrap" in report.grading_measured(loose)
    md = report.render_markdown(fake_doc(course_cost={**fake_doc()["course_cost"], "grading_honest": loose}))
    assert "**WITHOUT the grading sandbox**, which cannot start here (no bubblewrap)" in md
    short = report.grading_row([1.0, 1.0], 2.0, 1.0, students=1, not_full_marks=1)
    assert short["verdict"] == report.UNAVAILABLE
    assert "1 of 2 notebooks did not score full marks" in short["note"]
    assert "1 notebooks short of full marks" in report.grading_measured(short)


@pytest.mark.parametrize(("seconds", "wall", "cpu", "students", "match"), [
    ([], 1.0, 1.0, 1, "seconds"), ([1.0, -1.0], 1.0, 1.0, 1, "seconds"),
    ([1.0], float("nan"), 1.0, 1, "wall_s"), ([1.0], 1.0, -1.0, 1, "cpu_s"),
    ([1.0], 1.0, 1.0, 0, "students")])
def test_grading_row_rejects_bad_figures(seconds, wall, cpu, students, match):
    with pytest.raises(ValueError, match=match):
        report.grading_row(seconds, wall, cpu, students=students)


@pytest.mark.parametrize("broken", [
    {"grading_honest": None}, {"grading_honest": {"available": True, "name": "x", "goal_s": 2.0,
                                                   "verdict": report.MEETS}},
    {"grading_honest": {"available": False, "name": "x", "goal_s": 2.0, "verdict": report.UNAVAILABLE}}])
def test_the_schema_wants_the_grading_goal_complete(broken):
    doc = fake_doc()
    doc["course_cost"].update(broken)
    if broken["grading_honest"] is None:
        del doc["course_cost"]["grading_honest"]
    with pytest.raises(jsonschema.ValidationError):
        report.validate(doc)


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
    band = report.prediction_row("p", m("a", [2.0, 2.0]), m("b", [1.0, 1.0]), 2.0, goal=(0.7, 1.3))
    fig = figures.ratio_chart([band, {**band, "name": "q", "goal": 2.0}], "a band goal and a floor")
    assert sorted(fig.axes[0].lines[-1].get_xdata()) == [0.7, 1.3, 2.0]  # the band's two ends, the floor


def test_the_committed_reference_is_generated_not_hand_edited():
    doc = json.loads((REFERENCE / "report.json").read_text())
    assert doc.get("schema_version") == report.SCHEMA_VERSION, (
        f"benchmarks/reference is report schema {doc.get('schema_version')}, the harness writes "
        f"{report.SCHEMA_VERSION}: regenerate it, `make bench OUT=benchmarks/reference`")
    report.validate(doc)
    assert doc["mode"] == "full"
    assert (REFERENCE / "report.md").read_text() == report.render_markdown(doc), \
        "report.md is not what report.json renders to: regenerate it, `make bench OUT=benchmarks/reference`"
    assert all((REFERENCE / name).is_file() for name in doc["plots"].values())


def test_a_time_prediction_row_divides_the_predicted_median_by_the_measured_one():
    measured = m("split block", [2.0e-3, 2.2e-3, 1.8e-3])
    row = report.time_prediction_row("tp", [2.1e-3, 2.0e-3, 1.9e-3], measured, goal=(0.7, 1.3), note="n")
    assert row["ratio"] == pytest.approx(2.0 / 2.0) and row["verdict"] == report.MEETS
    assert row["ratio_q1"] <= 1.0 <= row["ratio_q3"] and row["kind"] == "fidelity"
    assert row["candidate"]["label"] == "predicted: split block" and row["baseline"]["median"] == 2.0
    assert row["note"].startswith("predicted 2 ms, measured 2 ms; n")
    assert report.time_prediction_row("tp", [4e-3] * 3, measured, (0.7, 1.3))["verdict"] == report.BELOW
    report.validate(fake_doc(effects={"rows": [row], "notes": []}))
    with pytest.raises(ValueError, match="predicted_s"):
        report.time_prediction_row("tp", [1e-3, 1e-3], measured)
    with pytest.raises(ValueError, match="predicted_s"):
        report.time_prediction_row("tp", [1e-3, 0.0, 1e-3], measured)
