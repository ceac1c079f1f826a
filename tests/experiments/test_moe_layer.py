"""experiments.moe_layer: the routed layer equals a dense oracle; distinct experts counted and timed."""

import pytest
import torch
import torch.nn.functional as F

from hwopt.cost import moe
from hwopt.experiments import moe_layer


def oracle(layer, x):
    """Every expert on every token, weighted by the router's top-k softmax (zero elsewhere)."""
    scores = x @ layer.router.T
    top, experts = torch.topk(scores, layer.experts_per_token, dim=-1)
    gate = torch.zeros_like(scores).scatter(1, experts, torch.softmax(top, dim=-1))
    outs = [F.linear(F.gelu(F.linear(x, layer.w_up[e])), layer.w_down[e]) for e in range(layer.n_experts)]
    return sum(gate[:, e:e + 1] * outs[e] for e in range(layer.n_experts))


def test_the_routed_layer_equals_running_every_expert_densely():
    layer = moe_layer.make_moe(32, 64, 8, 2, seed=2)
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(1))
    out, used = moe_layer.forward(layer, x)
    assert torch.allclose(out, oracle(layer, x), atol=1e-5)
    assert used == len(torch.unique(moe_layer.route(layer, x)[0]))
    assert layer.expert_bytes == 2 * 32 * 64 * 4
    assert layer.step_bytes(2) == 8 * 32 * 4 + 2 * layer.expert_bytes


def test_counted_distinct_experts_follow_the_formula():
    """A random router in a wide enough space picks experts about uniformly, as the formula assumes."""
    layer = moe_layer.make_moe(512, 16, 32, 2, seed=0)
    for b in (1, 4, 32):
        expected = moe.expected_distinct_experts(32, 2, b)
        assert moe_layer.count_distinct(layer, b, trials=400) == pytest.approx(expected, rel=0.05)


def test_the_sweep_reports_bytes_and_times():
    sweep = moe_layer.measure_moe(moe_layer.make_moe(64, 64, 16, 2), (1, 4, 16), repeats=3, trials=50)
    assert sweep.batch_sizes == (1, 4, 16) and sweep.timed_distinct[1] == 2
    assert sweep.step_bytes(16) > sweep.step_bytes(1) and sweep.slowdown(1) == (1.0, 1.0)
    assert "E(1-(1-k/E)^b)" in sweep.report() and len(sweep.plot().axes) == 2


@pytest.mark.parametrize(("call", "match"), [
    (lambda: moe_layer.make_moe(32, 16, 4, 5), "experts_per_token"),
    (lambda: moe_layer.forward(moe_layer.make_moe(32, 16, 4, 2), torch.zeros(3, 31)), "x"),
    (lambda: moe_layer.route("layer", torch.zeros(3, 32)), "layer"),
    (lambda: moe_layer.count_distinct(moe_layer.make_moe(32, 16, 4, 2), 0), "batch_size"),
    (lambda: moe_layer.make_moe(32, 16, 4, 2).step_bytes(5), "distinct_experts"),
    (lambda: moe_layer.measure_moe(moe_layer.make_moe(32, 16, 4, 2), (1, 0)), "batch_sizes"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
