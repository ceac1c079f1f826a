"""experiments.distributed: real worker processes joined by torch.distributed, always stopped afterwards."""

import signal
import time

import psutil
import pytest

from hwopt.experiments import distributed


def workers_alive() -> list:
    """This process's children that are group workers (multiprocessing's resource tracker excepted)."""
    children = psutil.Process().children(recursive=True)
    return [c for c in children if "resource_tracker" not in " ".join(c.cmdline())]


def test_each_rank_runs_the_task_in_its_own_process():
    ranks = distributed.run(distributed.describe, 2)
    assert [r["rank"] for r in ranks] == [0, 1] and {r["world_size"] for r in ranks} == {2}
    assert ranks[0]["pid"] != ranks[1]["pid"] and {r["backend"] for r in ranks} == {"gloo"}
    assert all(r["threads"] >= 1 and r["device"] == "cpu" for r in ranks)
    assert workers_alive() == []


def test_a_failing_task_raises_its_traceback_and_leaves_nothing_running():
    with pytest.raises(distributed.WorkerError, match=r"rank \d failed:(.|\n)*TypeError"):
        distributed.run(int, 2)  # int(group) raises in every worker
    assert workers_alive() == []


def test_a_task_past_its_time_is_stopped():
    start = time.monotonic()
    with pytest.raises(distributed.WorkerError, match="timeout_s=1"):
        distributed.run(distributed.describe, 2, timeout_s=1, sleep_s=60)
    assert time.monotonic() - start < 30 and workers_alive() == []


def test_an_interrupted_caller_stops_its_workers():
    def interrupt(*_):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.alarm(4)  # as a notebook's interrupt button: KeyboardInterrupt while the workers run
    try:
        with pytest.raises(KeyboardInterrupt):
            distributed.run(distributed.describe, 2, timeout_s=60, sleep_s=60)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert workers_alive() == []


def test_backend_choice_says_why():
    assert distributed.backend_for("cpu", 2)[0] == "gloo"
    backend, device, why = distributed.backend_for("cuda", 8)
    if backend == "gloo":  # fewer than 8 GPUs here
        assert device == "cpu" and "NCCL needs a GPU per process" in why
    port = distributed.free_port()
    assert 0 < port < 65536
    assert distributed.loopback_interface() in (None, "lo", "lo0")


@pytest.mark.parametrize(("call", "match"), [
    (lambda: distributed.run(distributed.describe, 0), "world_size"),
    (lambda: distributed.run(distributed.describe, 9), "world_size"),
    (lambda: distributed.run(distributed.describe, 2, device="tpu"), "device"),
    (lambda: distributed.run(lambda group: 1, 2), "top of a module"),
    (lambda: distributed.run(distributed.describe, 2, timeout_s=float("nan")), "timeout_s"),
    (lambda: distributed.run(distributed.describe, 2, threads=0), "threads"),
    (lambda: distributed.run("describe", 2), "task"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
    assert workers_alive() == []
