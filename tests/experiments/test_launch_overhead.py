"""experiments.launch_overhead: the intercept of time per call is the overhead; op counts; CUDA graph path."""

import contextlib

import pytest
import torch

from hwopt.experiments import launch_overhead as lo
from hwopt.machine import bench
from hwopt.models import tiny_decoder as td

pytestmark = pytest.mark.filterwarnings("ignore::hwopt.machine.bench.NoisyMeasurementWarning")


@pytest.fixture(scope="module")
def model():
    return td.make_tiny_decoder(vocab_size=64, d_model=32, n_layers=2, n_heads=4)


def test_fit_recovers_a_known_line():
    fit = lo.fit_overhead([1, 100, 10_000], [5e-6 + n * 1e-9 for n in (1, 100, 10_000)])
    assert fit.overhead_s == pytest.approx(5e-6) and fit.per_element_s == pytest.approx(1e-9)
    assert fit.break_even_elements == pytest.approx(5000) and "5.0 us per call" in str(fit)
    with pytest.raises(ValueError, match="two different sizes"):
        lo.fit_overhead([4, 4], [1e-6, 2e-6])


@pytest.mark.timing
def test_measured_overhead_is_positive_and_small_ops_cost_about_the_same():
    measured = lo.time_per_call([1, 16, 65536], repeats=3)
    fit = lo.fit_measurements(measured)
    assert 0 < fit.overhead_s < 1e-3  # a few microseconds on a CPU; never a millisecond
    assert measured[16].median_s < 5 * measured[1].median_s  # 16 elements: still all overhead, not 16x
    assert lo.plot_overhead(measured, fit) is not None


def test_ops_are_counted_per_decode_step(model):
    assert lo.count_ops(lambda: torch.ones(3) + 1) == 2  # ones, add
    step = lo.decode_step(model, context_len=4)
    per_layer = lo.count_ops(step) - lo.count_ops(lo.decode_step(td.make_tiny_decoder(64, 32, 1, 4), 4))
    assert per_layer > 10  # a transformer block is a dozen or more kernels
    assert step().shape == (1, 1, 64)
    assert lo.overhead_share(100, 5e-6, 1e-3) == pytest.approx(0.5)


class FakeGraph:
    """Stands in for torch.cuda.CUDAGraph on a CPU: records whether capture happened and counts replays."""

    captured, replays = 0, 0

    def replay(self):
        FakeGraph.replays += 1


@pytest.fixture
def fake_cuda(monkeypatch):
    events = []

    class Stream:
        def wait_stream(self, other):
            events.append("wait")

    @contextlib.contextmanager
    def graph(g):
        FakeGraph.captured += 1
        events.append("capture")
        yield

    monkeypatch.setattr(bench, "resolve_device", lambda device="auto": "cuda")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    FakeGraph.captured = FakeGraph.replays = 0
    return events


def test_cuda_graph_warms_up_captures_once_and_replays(fake_cuda):
    calls = []
    replay = lo.cuda_graph(lambda: calls.append(1) or torch.zeros(2), "cuda")
    assert len(calls) == 4 and FakeGraph.captured == 1  # three warm-up calls on a side stream, one captured
    assert fake_cuda == ["wait", "wait", "capture"]
    assert torch.equal(replay(), torch.zeros(2)) and FakeGraph.replays == 1 and len(calls) == 4


def test_compare_graph_times_eager_against_replay(fake_cuda, model):
    timings = lo.compare_graph(model, context_len=4, device="cuda", repeats=2)
    assert set(timings) == {"eager step", "CUDA graph replay"} and FakeGraph.replays > 2


def test_cuda_graph_needs_cuda():
    with pytest.raises(ValueError, match="device"):
        lo.cuda_graph(lambda: None, "cpu")
