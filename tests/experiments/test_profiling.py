"""experiments.profiling: slow, fixed pipelines agree; the profiler sees the categories, traces are written,
CUDA activities are chosen for a GPU (tested without one), and the Nsight commands are well formed."""

import contextlib
import json
import subprocess

import pytest
import torch
from torch.profiler import ProfilerActivity

from hwopt import widgets
from hwopt.experiments import profiling


@pytest.fixture(scope="module")
def pipeline():
    return profiling.make_pipeline(n_items=20, batch_size=8, hidden=16, io_ms=0.2)


def test_every_variant_computes_the_same_logits(pipeline):
    reference = profiling.slow_pipeline(pipeline)
    assert reference.shape == (20, 10)
    for kwargs in ({"prefetch": True}, {"batched": True}, {"prefetch": True, "batched": True, "workers": 3}):
        assert torch.allclose(profiling.run_pipeline(pipeline, **kwargs), reference, atol=1e-5)
    assert torch.allclose(profiling.fixed_pipeline(pipeline), reference, atol=1e-5)


def test_preprocessing_item_and_batch_agree(pipeline):
    raw = pipeline.raw[:3]
    batch = profiling.preprocess_batch(raw)
    assert batch.dtype.name == "float32" and batch.min() >= -1 and batch.max() <= 1
    assert torch.allclose(
        torch.tensor([profiling.preprocess_item(r) for r in raw]), torch.from_numpy(batch), atol=1e-6
    )


def test_profile_categories_hotspot_and_trace(pipeline, tmp_path):
    prof, wall_ms = profiling.run_profiled(lambda: profiling.slow_pipeline(pipeline))
    times = profiling.time_by_category_ms(prof, wall_ms)
    assert set(times) == {"data", "preprocess", "compute", "other"}
    assert times["data"] >= 20 * 0.2 * 0.9  # 20 sequential reads of 0.2 ms
    assert profiling.hotspot({"data": 3.0, "compute": 1.0}) == "data"
    assert "data" in profiling.key_averages_table(prof, row_limit=5)
    path = profiling.save_trace(prof, "slow", tmp_path / "traces")
    assert path.parent == tmp_path / "traces" and "traceEvents" in json.loads(path.read_text())


def test_plot_time_by_category():
    fig = profiling.plot_time_by_category({"slow": {"data": 3.0, "compute": 1.0}, "fixed": {"data": 0.5}})
    ax = fig.axes[0]
    assert ax.get_xlabel() == "time (ms)" and [t.get_text() for t in ax.get_yticklabels()] == [
        "slow",
        "fixed",
    ]


def test_profiler_activities_include_cuda_for_a_gpu():
    assert profiling.profiler_activities("cpu") == [ProfilerActivity.CPU]
    assert profiling.profiler_activities("cuda:0") == [ProfilerActivity.CPU, ProfilerActivity.CUDA]


def test_cuda_sync_is_called_on_the_gpu_path(monkeypatch, pipeline):
    calls = []
    monkeypatch.setattr(profiling.bench, "sync", calls.append)
    p = profiling.Pipeline(pipeline.model, pipeline.raw[:4], batch_size=4, io_ms=0, device="cpu")
    object.__setattr__(p, "device", "cuda")  # pretend: tensors stay on the CPU, sync is recorded
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **k: self)
    profiling.run_pipeline(p, batched=True)
    assert calls == ["cuda"]


def test_nsys_commands(monkeypatch):
    assert profiling.nsys_command("train.py", "out")[:2] == ["nsys", "profile"]
    assert profiling.nsys_command("train.py", "out")[-2:] == ["python", "train.py"]
    assert profiling.nsys_stats_command("out")[-1] == "out.nsys-rep"
    monkeypatch.setattr(profiling.shutil, "which", lambda name: None)
    assert not profiling.nsys_available()
    monkeypatch.setattr(profiling.shutil, "which", lambda name: "/usr/bin/nsys")
    assert profiling.nsys_available()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: profiling.make_pipeline(n_items=0), "n_items"),
        (lambda: profiling.Pipeline(torch.nn.Identity(), torch.zeros(3).numpy()), "raw"),
        (lambda: profiling.make_pipeline(batch_size=0), "batch_size"),
        (lambda: profiling.make_pipeline(io_ms=-1), "io_ms"),
    (lambda: profiling.make_pipeline(threads=0), "threads"),
        (lambda: profiling.run_pipeline(profiling.make_pipeline(n_items=2), workers=0), "workers"),
        (lambda: profiling.profiler_activities("tpu"), "device"),
        (lambda: profiling.run_profiled(3), "fn"),
        (
            lambda: profiling.time_by_category_ms(type("P", (), {"key_averages": lambda self: []})(), -1),
            "wall_ms",
        ),
        (lambda: profiling.hotspot({}), "times_ms"),
        (lambda: profiling.save_trace(None, "a/b"), "name"),
        (lambda: profiling.plot_time_by_category({}), "by_pipeline"),
        (lambda: profiling.nsys_command(""), "script"),
        (lambda: profiling.nsys_stats_command(""), "output"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_amdahl_overall_speedup_and_explorer(monkeypatch):
    times = {"data": 80.0, "compute": 20.0}
    assert profiling.amdahl(times, "compute", 10) == {"data": 80.0, "compute": 2.0}
    assert profiling.overall_speedup(times, "compute", 10) == pytest.approx(100 / 82)
    assert profiling.overall_speedup(times, "data", 1e9) == pytest.approx(5.0, rel=1e-3)
    shown = []
    monkeypatch.setattr(widgets, "display", shown.append)
    box = profiling.amdahl_explorer(times)
    box.controls["category"].value = "compute"
    assert len(shown) == 2 and "overall" in shown[-1].axes[0].get_title()
    for call, match in (
        (lambda: profiling.amdahl(times, "disk", 2), "category"),
        (lambda: profiling.amdahl(times, "data", 0), "factor"),
        (lambda: profiling.amdahl_explorer({}), "times_ms"),
    ):
        with pytest.raises(ValueError, match=match):
            call()


def test_run_nsys_runs_profile_then_stats(monkeypatch, tmp_path):
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="kernel table")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(profiling.shutil, "which", lambda name: "/usr/bin/nsys")
    assert profiling.run_nsys(tmp_path / "s.py", tmp_path / "out") == "kernel table"
    assert calls[0][:2] == ["nsys", "profile"] and calls[1][:2] == ["nsys", "stats"]
    monkeypatch.setattr(profiling.shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match="nsys"):
        profiling.run_nsys("s.py", "out")


def test_pipeline_script_is_valid_python(tmp_path):
    path = profiling.write_pipeline_script(tmp_path / "nsys" / "pipeline.py")
    compile(path.read_text(), str(path), "exec")
    with pytest.raises(ValueError, match="path"):
        profiling.write_pipeline_script(tmp_path / "pipeline.txt")


def test_pipeline_script_labels_its_regions_inside_emit_nvtx(monkeypatch, tmp_path):
    """record_function makes NVTX ranges only under emit_nvtx: every labelled region must run inside it."""
    state = {"emit_nvtx": 0, "ranges": [], "regions": []}

    @contextlib.contextmanager
    def emit_nvtx(**kwargs):
        state["emit_nvtx"] += 1
        yield
        state["emit_nvtx"] -= 1

    @contextlib.contextmanager
    def nvtx_range(name):
        state["ranges"].append((name, state["emit_nvtx"]))
        yield

    @contextlib.contextmanager
    def record_function(name):
        state["regions"].append((name, state["emit_nvtx"]))
        yield

    small = profiling.make_pipeline(n_items=4, batch_size=2, hidden=8, io_ms=0)
    monkeypatch.setattr(torch.autograd.profiler, "emit_nvtx", emit_nvtx)
    monkeypatch.setattr(torch.cuda.nvtx, "range", nvtx_range)
    monkeypatch.setattr(profiling, "record_function", record_function)
    monkeypatch.setattr(profiling, "make_pipeline", lambda **kwargs: small)
    path = profiling.write_pipeline_script(tmp_path / "pipeline.py")
    exec(compile(path.read_text(), str(path), "exec"), {"__name__": "__main__"})
    assert [name for name, _ in state["ranges"]] == ["slow pipeline", "fixed pipeline"] * 3
    assert all(active for _, active in state["ranges"])
    profiled = [(name, active) for name, active in state["regions"] if active]
    assert {name for name, _ in profiled} == set(profiling.CATEGORIES)
    assert state["emit_nvtx"] == 0  # left again at the end
