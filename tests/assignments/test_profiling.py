"""Assignment 8 (profiling): the reference passes its own hidden checks for two students, whose cases
differ; the reference's readings of every recorded trace hold together (categories split the span, self
time within total time, variants of a trace read the same)."""

import json
import math

import pytest

from hwopt import traces
from hwopt.course.grading import judge
from hwopt.course.grading.course import ROOT
from hwopt.course.grading.reference import Reference

STUDENTS = ("student-a", "student-b")
SECRET = b"test secret"


@pytest.fixture(scope="module")
def reference() -> Reference:
    return Reference.load(ROOT / "source" / "profiling" / "profiling.ipynb")


def drawn(reference, student):
    """{(grade_id, check index): (check, cases)} for one student."""
    return {(gid, i): (check, judge.draw(check, judge.case_rng(SECRET, assignment="profiling",
                                                                notebook="profiling", grade_id=gid,
                                                                student=student, index=i)))
            for gid, checks in reference.checks.items() for i, check in enumerate(checks)}


@pytest.mark.parametrize("student", STUDENTS)
def test_the_reference_passes_its_own_checks(reference, student):
    for (gid, _), (check, cases) in drawn(reference, student).items():
        for one, want in zip(cases, reference.expected(check, cases), strict=True):
            assert ("raised" in want) == bool(one.must_name), (gid, one.about, want)
            assert judge.judge_case(check, one, want, json.loads(json.dumps(want))) is None, (gid, one.about)


def test_hidden_cases_differ_between_students(reference):
    first, second = (drawn(reference, s) for s in STUDENTS)
    assert set(first) == set(second)
    cells = {gid for gid, _ in first}
    assert len(cells) == 8
    for gid in cells:
        a = [c.variables for (g, _), (_, cases) in sorted(first.items()) if g == gid for c in cases]
        b = [c.variables for (g, _), (_, cases) in sorted(second.items()) if g == gid for c in cases]
        assert a != b, f"{gid}: every student gets their own cases"


def test_the_checks_cover_every_part(reference):
    calls = {check.call.split("(")[0] for checks in reference.checks.values() for check in checks}
    assert calls == {"operator_times", "hotspots", "category_times", "idle_gaps", "amdahl_speedup",
                     "fix_bound"}


@pytest.mark.parametrize("name", traces.trace_names())
def test_readings_of_a_recorded_trace_hold_together(reference, name):
    ns = reference.namespace
    events = traces.load_events(name)
    times = ns["category_times"](events)
    timed = [e for e in events if e["ph"] == "X"]
    span_us = max(e["ts"] + e["dur"] for e in timed) - min(e["ts"] for e in timed)  # one thread here
    assert math.isclose(sum(times.values()), span_us, rel_tol=1e-9)
    assert all(us >= 0 for us in times.values())
    table = ns["operator_times"](events)
    assert sum(row["calls"] for row in table.values()) == sum(e["cat"] == "cpu_op" for e in timed)
    assert all(0 <= row["self_us"] <= row["total_us"] + 1e-9 for row in table.values())
    operators_us = times["operators"] + times["memory copies"] + _operators_loading(ns, events)
    assert math.isclose(sum(row["self_us"] for row in table.values()), operators_us, rel_tol=1e-9)
    gaps = ns["idle_gaps"](events, 0)
    assert all(gap > 0 for _, gap in gaps) and sum(gap for _, gap in gaps) < span_us
    assert [start for start, _ in gaps] == sorted(start for start, _ in gaps)
    for target in (*ns["CATEGORIES"], "gaps", ns["hotspots"](events)["by_self"]):
        bound = ns["fix_bound"](events, target, math.inf)
        assert bound >= 1 and ns["fix_bound"](events, target, 2) <= bound


def _operators_loading(ns, events) -> float:
    """µs of operators' self time inside data regions (counted as data loading, not as operators)."""
    timed, parents, self_ns = ns["nesting"](events)

    def in_data(i):
        while i is not None:
            e = timed[i]
            loader = e["name"] == "data" or e["name"].startswith("enumerate(DataLoader)")
            if e["cat"] == "user_annotation" and loader:
                return True
            i = parents[i]
        return False

    return sum(own for i, (e, own) in enumerate(zip(timed, self_ns, strict=True))
               if e["cat"] == "cpu_op" and in_data(i)) / 1000


def test_a_variant_reads_as_the_same_run_stretched(reference):
    ns = reference.namespace
    events = traces.load_events("pipeline_slow")
    moved = traces.variant(events, shift_us=1e6, scale=2.0, tid=99, order_seed=1)
    for key, us in ns["category_times"](events).items():
        assert math.isclose(ns["category_times"](moved)[key], 2 * us, rel_tol=1e-9, abs_tol=1e-3), key
    assert ns["hotspots"](moved) == ns["hotspots"](events)
    moved_gaps = [x for s, g in ns["idle_gaps"](moved, 0) for x in (s - 1e6, g)]
    assert moved_gaps == pytest.approx([2 * x for gap in ns["idle_gaps"](events, 0) for x in gap], abs=1e-3)
    assert ns["fix_bound"](moved, "data loading", 3) == pytest.approx(
        ns["fix_bound"](events, "data loading", 3))
