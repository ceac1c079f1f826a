"""experiments.pipeline_parallel: stages in real processes; the bubble measured and the formula's."""

import pytest
import torch

from hwopt.cost import pipeline
from hwopt.experiments import pipeline_parallel as pp


def test_the_stack_runs_layer_after_layer():
    layers = pp.make_stack(3, 16, seed=1)
    x = torch.randn(4, 16)
    expected = x
    for w in layers:
        expected = torch.relu(expected @ w.T)
    assert torch.equal(pp.run_stack(layers, x), expected)


def test_a_pipeline_of_two_processes_measures_its_bubble():
    run = pp.measure_pipeline(2, (1, 4), n_layers=4, width=128, batch=32, repeats=3)
    assert run.microbatch_counts == (1, 4) and run.backend == "gloo"
    for m in (1, 4):
        assert run.predicted_bubble(m) == pipeline.bubble_fraction(2, m)
        assert 0 <= run.measured_bubble(m) < 1
        assert len(run.busy_s[m]) == 2 and all(len(stage) == 3 for stage in run.busy_s[m])
    assert "(p-1)/(m+p-1)" in run.report() and len(run.plot().axes[0].get_lines()) == 2


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"n_stages": 1}, "n_stages"),
    ({"n_layers": 5}, "n_layers"),
    ({"microbatch_counts": (3,), "batch": 32}, "microbatch_counts"),
    ({"repeats": 2}, "repeats"),
    ({"width": 0}, "width"),
])
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pp.measure_pipeline(**kwargs)
