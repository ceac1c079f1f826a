"""Fake measurements and a fake report document shared by the performance report's tests."""

from benchmarks import report
from hwopt.machine.bench import Measurement


def m(label, times):
    return Measurement(label, tuple(times))


def rate(label="probe", values=(9.0, 10.0, 11.0), unit="GB/s"):
    return report.rate_stats(label, values, unit)


def fake_doc(**changes):
    slow, fast = m("fp32", [4e-3, 5e-3, 6e-3]), m("int8", [1e-3, 1e-3, 2e-3])
    rows = [report.speedup_row("int8 / fp32", slow, fast, goal=2.5, note="decode GEMV"),
            report.unavailable_row("fused / unfused", "fusion is not in the toolkit", goal=2.0)]
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
                        "s_per_notebook": 5.0, "cell_timeout_s": 10, "samples_covered": 2,
                        "samples_total": 23},
            "grading_honest": report.grading_row([1.0, 1.2, 1.1, 1.4], 5.0, 3.2, students=1),
            "notes": []},
        "scaling": {"bandwidth": [], "gemv": [], "notes": [],
                    "grading": [{"class_size": 2, "notebooks": 8, "total_s": 40.0, "s_per_notebook": 5.0}]},
        "noise": report.noise_summary(report.row_stats(rows + fid), ["UserWarning: careful"]),
        "plots": {},
    }
    doc.update(changes)
    return doc
