"""Process groups for the lessons (lesson 12): a few worker processes joined by torch.distributed.

`run(task, world_size)` starts world_size processes, joins them into one process group and calls
task(group, **kwargs) in each; it returns every rank's result, rank 0 first. The group talks gloo over the
loopback interface on the CPU, or NCCL with one GPU per process where there are enough CUDA GPUs
(`backend_for` says which and why). Its rendezvous is a free TCP port on 127.0.0.1.

Nothing is left running: the workers are stopped (terminate, then kill) when the task returns, raises, or
passes timeout_s, and when the caller is interrupted (a notebook cell stopped); on Linux a worker whose
parent dies is killed with it (PR_SET_PDEATHSIG). A task must be a module-level function: the workers are
started fresh ('spawn') and import it by name.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import multiprocessing
import os
import queue
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from hwopt import arguments

__all__ = ["Group", "backend_for", "free_port", "loopback_interface", "run", "describe", "WorkerError"]

MAX_WORLD = 8  # worker processes one call may start


class WorkerError(RuntimeError):
    """A worker failed, died or did not finish in time; the message carries its traceback or exit code."""


@dataclass(frozen=True)
class Group:
    """What a task sees: its rank, the group's size, the backend, its device and its torch threads."""

    rank: int
    world_size: int
    backend: str  # "gloo" or "nccl"
    device: str  # "cpu" or "cuda:<rank>"
    threads: int

    def barrier(self) -> None:
        """Wait for every rank (on the group's device)."""
        if self.backend == "nccl":
            dist.barrier(device_ids=[self.rank])
        else:
            dist.barrier()

    def sync(self) -> None:
        """Wait until this rank's queued GPU work is done (nothing to wait for on the CPU)."""
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)


def backend_for(device: str, world_size: int) -> tuple[str, str, str]:
    """(backend, device of rank 0's kind, why): NCCL on CUDA when there is a GPU per process, else gloo."""
    arguments.one_of("device", device, ("cpu", "cuda"))
    world_size = arguments.between("world_size", world_size, 1, MAX_WORLD, integer=True)
    if device == "cuda":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus >= world_size:
            return "nccl", "cuda", f"NCCL on {world_size} CUDA GPUs, one per process"
        return "gloo", "cpu", (f"gloo on the CPU: NCCL needs a GPU per process and this machine has {gpus} "
                               f"for {world_size} processes")
    return "gloo", "cpu", f"gloo on the CPU, {world_size} processes talking over the loopback interface"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that no one listens on (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loopback_interface() -> str | None:
    """The name of the loopback network interface ('lo' on Linux, 'lo0' on macOS), None if not found."""
    with contextlib.suppress(OSError, AttributeError):
        for _, name in socket.if_nameindex():
            if name.startswith("lo"):
                return name
    return None


def _die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies, so no worker outlives a killed notebook."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _worker(rank, world_size, port, backend, threads, timeout_s, parent, task, kwargs, results) -> None:
    """One process of the group: join it, run task(group, **kwargs), put (rank, ok, result) on results."""
    _die_with_parent()
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    torch.set_num_threads(threads)
    interface = loopback_interface()
    if interface:
        os.environ["GLOO_SOCKET_IFNAME"] = interface
    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s))
        try:
            result = task(Group(rank, world_size, backend, device, threads), **kwargs)
        finally:
            dist.destroy_process_group()
        results.put((rank, True, result))
    except BaseException:  # noqa: B036 - reported to the parent, which raises it there
        results.put((rank, False, traceback.format_exc(limit=8)))


def _stop(processes) -> None:
    """Terminate, then kill, every process still alive, and reap them all (those that started)."""
    processes = [p for p in processes if p.pid is not None]
    for p in processes:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 2.0
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1.0)


def run(task: Callable, world_size: int = 2, *, device: str = "cpu", timeout_s: float = 60.0,
        threads: int | None = None, **kwargs) -> list:
    """task(group, **kwargs) in world_size fresh processes joined into one group: their results, by rank.

    threads: torch threads per process (default: this machine's cores / world_size, at least 1). Raises
    WorkerError with the worker's traceback when a rank fails, dies or runs past timeout_s. From a script,
    call it under `if __name__ == "__main__":` (the fresh processes import the script; a notebook needs
    nothing)."""
    arguments.function("task", task)
    where = getattr(task, "__module__", "__main__"), getattr(task, "__qualname__", "<locals>")
    if where[0] == "__main__" or "<locals>" in where[1] or "<lambda>" in where[1]:
        raise ValueError("task must be a function defined at the top of a module (workers import it by name)")
    backend, _, _ = backend_for(device, world_size)
    timeout_s = arguments.positive("timeout_s", timeout_s, maximum=arguments.LIMITS["seconds"])
    cores = os.cpu_count() or 1
    threads = max(1, cores // world_size) if threads is None else arguments.count("threads", threads,
                                                                                   "threads")
    if not torch.distributed.is_available():
        raise WorkerError("torch.distributed is not available in this PyTorch build")
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port, parent = free_port(), os.getpid()
    processes = [context.Process(target=_worker, daemon=True, name=f"hwopt-rank-{rank}",
                                 args=(rank, world_size, port, backend, threads, timeout_s, parent, task,
                                       kwargs, results))
                 for rank in range(world_size)]
    done: dict[int, object] = {}
    try:
        for p in processes:
            p.start()
        deadline = time.monotonic() + timeout_s
        while len(done) < world_size:
            try:
                rank, ok, value = results.get(timeout=0.1)
            except queue.Empty:
                dead = [r for r, p in enumerate(processes) if r not in done and p.exitcode is not None]
                if dead and results.empty():
                    time.sleep(0.2)  # a result put just before exiting may still be in the pipe
                    if results.empty():
                        codes = ", ".join(f"rank {r} exit code {processes[r].exitcode}" for r in dead)
                        raise WorkerError(f"a worker died without a result ({codes})") from None
                if time.monotonic() > deadline:
                    raise WorkerError(f"the workers ran past timeout_s={timeout_s:g} s") from None
                continue
            if not ok:
                raise WorkerError(f"rank {rank} failed:\n{value}")
            done[rank] = value
    finally:
        _stop(processes)
        results.close()
        results.cancel_join_thread()
    return [done[rank] for rank in range(world_size)]


def describe(group: Group, sleep_s: float = 0.0) -> dict:
    """A task that reports who ran it (rank, size, backend, device, threads, process id) after sleep_s."""
    arguments.instance("group", group, Group)
    time.sleep(arguments.positive("sleep_s", sleep_s, allow_zero=True, maximum=arguments.LIMITS["seconds"]))
    return {"rank": group.rank, "world_size": group.world_size, "backend": group.backend,
            "device": group.device, "threads": group.threads, "pid": os.getpid()}
