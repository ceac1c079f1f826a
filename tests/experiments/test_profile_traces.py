"""experiments.profile_traces: a workload recorded under torch.profiler and trimmed; the shipped traces are
small, properly nested, start at 0 and say where they come from; variants keep nesting, are deterministic."""

import json

import pytest

from hwopt import traces
from hwopt.experiments import profile_traces
from tests.support import nesting_problems

SMALL = {"n_items": 4, "batch_size": 2, "hidden": 8, "seed": 0}


@pytest.fixture(scope="module")
def recorded():
    return profile_traces.record("pipeline_slow", SMALL, repeats=2)


def test_a_recording_is_torch_profilers_chrome_trace(recorded):
    events = recorded["traceEvents"]
    names = {e["name"] for e in events if e.get("ph") == "X"}
    assert {"data", "preprocess", "compute", "aten::addmm"} <= names
    assert sum(e["name"] == "aten::addmm" for e in events) == 4 * 3  # 4 items one by one, 3 layers each
    assert any(e["name"].startswith("ProfilerStep") for e in events if e.get("ph") == "X")
    assert any(e.get("args") for e in events)  # torch's own fields, before trimming


def test_trim_keeps_operators_and_regions_from_zero(recorded):
    trimmed = profile_traces.trim(recorded, {"name": "small"})
    events = trimmed["traceEvents"]
    timed = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in timed} == set(profile_traces.KEPT_CATEGORIES)
    assert all(set(e) == set(profile_traces.KEPT_KEYS) for e in timed)
    assert min(e["ts"] for e in timed) == 0
    assert {e["name"] for e in events if e["ph"] == "M"} == {"thread_name"}
    assert trimmed["recorded"] == {"name": "small"}
    kept = sum(e.get("ph") == "X" and e.get("cat") in profile_traces.KEPT_CATEGORIES
               for e in recorded["traceEvents"])
    assert len(timed) == kept and nesting_problems(events) == 0
    durations = sorted(round(e["dur"], 3) for e in recorded["traceEvents"]
                       if e.get("ph") == "X" and e.get("cat") in profile_traces.KEPT_CATEGORIES)
    assert sorted(e["dur"] for e in timed) == durations  # nanosecond digits kept


def test_trim_refuses_what_is_not_a_trace():
    with pytest.raises(ValueError, match="traceEvents"):
        profile_traces.trim({"events": []})
    with pytest.raises(ValueError, match="complete events"):
        profile_traces.trim({"traceEvents": [{"ph": "i", "name": "mark", "pid": 1, "tid": 1, "ts": 0}]})


def test_write_traces_records_the_named_ones(tmp_path):
    paths = profile_traces.write_traces(tmp_path, ["pipeline_fixed"], progress=False)
    assert paths == [tmp_path / "pipeline_fixed.json"]
    trace = json.loads(paths[0].read_text())
    assert trace["recorded"]["workload"] == "pipeline_fixed"
    assert trace["recorded"]["command"] == profile_traces.COMMAND
    assert traces.trace_names(tmp_path) == ["pipeline_fixed"]
    assert traces.load_events("pipeline_fixed", tmp_path) == trace["traceEvents"]


@pytest.mark.parametrize("name", list(profile_traces.RECORDINGS))
def test_every_recording_is_shipped_small_nested_and_with_its_provenance(name):
    path = traces.TRACES_DIR / f"{name}.json"
    trace = json.loads(path.read_text())
    workload, sizes = profile_traces.RECORDINGS[name]
    about = trace["recorded"]
    assert about["workload"] == workload and about["sizes"] == sizes and about["torch"] and about["cpu"]
    events = trace["traceEvents"]
    assert path.stat().st_size < 80_000
    assert nesting_problems(events) == 0
    assert min(e["ts"] for e in events if e["ph"] == "X") == 0
    assert any(e["cat"] == "cpu_op" for e in events if e["ph"] == "X")


def test_the_shipped_traces_are_the_recordings_and_small_in_all():
    assert traces.trace_names() == sorted(profile_traces.RECORDINGS)
    assert sum(p.stat().st_size for p in traces.TRACES_DIR.glob("*.json")) < 400_000


def test_bad_input_is_refused_naming_the_argument():
    with pytest.raises(ValueError, match="workload"):
        profile_traces.record("no such workload", SMALL)
    with pytest.raises(ValueError, match="sizes"):
        profile_traces.record("pipeline_slow", {"n_items": 4})
    with pytest.raises(ValueError, match="names item"):
        profile_traces.write_traces(names=["no such trace"])
