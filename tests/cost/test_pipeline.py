"""cost.pipeline: the bubble formula against a step-by-step schedule, and the measured bubble."""

import pytest

from hwopt.cost import pipeline


def schedule(p, m):
    """GPipe forward schedule by hand: stage s runs micro-batch i at step s + i; (steps, busy chip-steps)."""
    busy = {(s, s + i) for s in range(p) for i in range(m)}
    steps = max(t for _, t in busy) + 1
    return steps, len(busy)


@pytest.mark.parametrize(("p", "m"), [(1, 1), (2, 1), (2, 4), (4, 4), (4, 16), (8, 3)])
def test_the_bubble_formula_matches_the_schedule(p, m):
    steps, busy = schedule(p, m)
    assert pipeline.pipeline_time_s(1.0, p, m) == steps
    assert pipeline.bubble_fraction(p, m) == pytest.approx(1 - busy / (p * steps))


def test_more_micro_batches_shrink_the_bubble_more_stages_grow_it():
    assert pipeline.bubble_fraction(4, 1) == pytest.approx(0.75)
    assert pipeline.bubble_fraction(4, 32) < pipeline.bubble_fraction(4, 8) < pipeline.bubble_fraction(8, 8)
    assert pipeline.bubble_fraction(1, 5) == 0.0


def test_measured_bubble_from_busy_times():
    assert pipeline.measured_bubble([0.4, 0.4], 0.5) == pytest.approx(0.2)
    assert pipeline.measured_bubble([1.0], 1.0) == 0.0
    with pytest.raises(ValueError, match="busy_s must not exceed"):
        pipeline.measured_bubble([0.6, 0.4], 0.5)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: pipeline.bubble_fraction(0, 4), "n_stages"),
    (lambda: pipeline.bubble_fraction(2, 2.5), "n_microbatches"),
    (lambda: pipeline.pipeline_time_s(-1, 2, 2), "stage_time_s"),
    (lambda: pipeline.measured_bubble([], 1.0), "busy_s"),
    (lambda: pipeline.measured_bubble([0.1], float("nan")), "makespan_s"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
