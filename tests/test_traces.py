"""traces: the recorded traces read; variants shift, stretch, thin, rename and shuffle a trace
deterministically and keep its nesting; bad events are refused naming the argument."""

import json

import pytest

from hwopt import traces
from tests.support import nesting_problems, spans_by_thread


def test_the_recorded_traces_are_read_as_plain_events():
    names = traces.trace_names()
    assert "pipeline_slow" in names and names == sorted(names)
    events = traces.load_events("pipeline_slow")
    assert isinstance(events, list) and all(isinstance(e, dict) for e in events)
    assert json.loads(json.dumps(events)) == events
    with pytest.raises(ValueError, match="name"):
        traces.load_events("no such trace")


def test_variant_shifts_stretches_and_keeps_nesting():
    events = traces.load_events("mlp_train")
    moved = traces.variant(events, shift_us=-250.125, scale=1.7)
    before, after = spans_by_thread(events), spans_by_thread(moved)
    assert list(before) == list(after)
    for thread, spans in before.items():
        for (start, end), (new_start, new_end) in zip(spans, after[thread], strict=True):
            assert new_start == round(start * 1.7) - 250_125 and new_end == round(end * 1.7) - 250_125
    assert nesting_problems(moved) == 0
    assert moved != events and events == traces.load_events("mlp_train")  # the input left as it was


def test_variant_drops_operators_renames_the_main_thread_and_shuffles():
    events = traces.load_events("decoder_generate")
    operators = sum(e.get("cat") == "cpu_op" for e in events)
    thinned = traces.variant(events, drop_every=4, tid=4242)
    assert sum(e.get("cat") == "cpu_op" for e in thinned) == operators - operators // 4
    assert {e["tid"] for e in thinned} == {4242}
    assert nesting_problems(thinned) == 0
    shuffled = traces.variant(events, order_seed=3)
    assert shuffled != events
    assert sorted(map(json.dumps, shuffled)) == sorted(map(json.dumps, events))
    assert traces.variant(events, order_seed=3) == shuffled  # deterministic


def test_bad_events_are_refused_naming_the_argument():
    with pytest.raises(ValueError, match="dur"):
        traces.variant([{"ph": "X", "pid": 1, "tid": 1, "ts": 0.0, "dur": -1.0}])
    with pytest.raises(ValueError, match="ts"):
        traces.check_events("events", [{"ph": "X", "pid": 1, "tid": 1, "ts": float("nan"), "dur": 1.0}])
    with pytest.raises(ValueError, match="pid"):
        traces.check_events("events", [{"ph": "M", "pid": -1, "tid": 1}])
    assert traces.ns(1.2345) == 1234 and traces.ns(0.0005) == 0  # whole nanoseconds, rounded half to even
