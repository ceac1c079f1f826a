"""llama.cpp's server, started and stopped from Python (lesson 11): one `llama-server` process serving a GGUF
model's OpenAI-compatible API on 127.0.0.1.

`LlamaServer` starts it on a free port (or the one asked for), waits until /health answers, keeps its log,
and stops it with its whole process group. Nothing is left running: `with LlamaServer(...)` stops it at the
end of the block (an interrupted cell included), a finalizer when the object is dropped or Python exits, and
on Linux the kernel itself when the process that started it dies (PR_SET_PDEATHSIG). Faults are told as
what they are: a busy port (PortInUse), a file that is not GGUF (ValueError), an engine that exits before it
is ready or while it runs (EngineFailed, with its exit status and the end of its log), a request that takes
too long (TimeoutError).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch

from hwopt import arguments, formats
from hwopt.kernels import llama_build

__all__ = [
    "ServerOptions",
    "LlamaServer",
    "EngineFailed",
    "PortInUse",
    "GGML_TYPES",
    "ggml_type",
    "check_gguf",
    "port_in_use",
    "free_port",
    "command",
]

HOST = "127.0.0.1"
GGUF_MAGIC = b"GGUF"
# The course's names of the formats llama.cpp stores weights and KV caches in, and llama.cpp's names of them.
GGML_TYPES = {"fp32": "F32", "fp16": "F16", "bf16": "BF16", "int8_g32": "Q8_0", "int4_g32": "Q4_0"}
_STOP_WAIT_S = 5.0  # SIGTERM, then SIGKILL after this long
# Run by the server's launcher on Linux: the kernel sends SIGTERM to the server when the process that started
# it dies (even by SIGKILL, which runs no Python), then the launcher becomes llama-server (exec).
_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)\n"  # PR_SET_PDEATHSIG
    "os.getppid() == int(sys.argv[1]) or sys.exit(1)\n"  # the parent died before prctl: do not start
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class EngineFailed(RuntimeError):
    """llama-server exited (before it was ready, or while serving): the message gives its exit status and the
    end of its log."""


class PortInUse(EngineFailed):
    """The port asked for is already taken on 127.0.0.1."""


def ggml_type(precision: str, argument: str = "precision") -> str:
    """llama.cpp's name ('F16', 'Q8_0', 'Q4_0', ...) of a precision given as the course's name ('fp16',
    'int8_g32', 'int4_g32', ...) or as llama.cpp's (any case)."""
    arguments.text("argument", argument)
    arguments.text(argument, precision)
    by_ggml = {v.lower(): v for v in GGML_TYPES.values()}
    if precision.lower() in by_ggml:
        return by_ggml[precision.lower()]
    return GGML_TYPES[formats.name(precision, argument, supported=GGML_TYPES)]


def check_gguf(path, argument: str = "path") -> Path:
    """path, checked to be a GGUF file (it starts with the bytes 'GGUF'); ValueError naming argument
    otherwise."""
    arguments.text("argument", argument)
    path = Path(arguments.instance(argument, path, (str, Path))).expanduser()
    if not path.is_file():
        raise ValueError(f"{argument} must be a GGUF file; {str(path)!r} does not exist")
    with open(path, "rb") as f:
        head = f.read(4)
    if head != GGUF_MAGIC:
        raise ValueError(
            f"{argument} must be a GGUF file (starting with the bytes 'GGUF'); {str(path)!r} "
            f"starts with {head!r}"
        )
    return path


def port_in_use(port: int, host: str = HOST) -> bool:
    """True when something listens on host:port (or binding it is refused)."""
    port = arguments.between("port", port, 1, 65535, integer=True)
    arguments.text("host", host)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def free_port(host: str = HOST) -> int:
    """A port nothing listens on now (the system's choice)."""
    arguments.text("host", host)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class ServerOptions:
    """How llama-server runs the model: threads, parallel slots (continuous batching), context per slot
    (tokens), logical batch and micro-batch (tokens per step and per compute pass), KV cache format, a draft
    model for speculative decoding and how many tokens it drafts, polling (0-100: how long idle threads
    spin)."""

    threads: int | None = None  # default: torch's intra-op threads, as the course's C kernel
    parallel: int = 1
    ctx_per_slot: int = 512
    batch_size: int = 2048
    ubatch_size: int = 512
    kv_precision: str = "fp16"
    draft: Path | str | None = None
    draft_max: int = 8
    poll: int = 0  # threads that spin while waiting stall every step when the cores are shared
    extra_args: tuple[str, ...] = ()

    def __post_init__(self):
        if self.threads is not None:
            arguments.count("threads", self.threads, "threads")
        arguments.count("parallel", self.parallel, "batch")
        arguments.count("ctx_per_slot", self.ctx_per_slot, "tokens")
        arguments.count("batch_size", self.batch_size, "tokens")
        arguments.count("ubatch_size", self.ubatch_size, "tokens")
        ggml_type(self.kv_precision, "kv_precision")
        if self.draft is not None:
            check_gguf(self.draft, "draft")
        arguments.count("draft_max", self.draft_max, "tokens")
        arguments.between("poll", self.poll, 0, 100, integer=True)
        arguments.instance("extra_args", self.extra_args, tuple)
        for i, arg in enumerate(self.extra_args):
            arguments.text(f"extra_args[{i}]", arg)


def command(
    binary, model, port: int, options: ServerOptions = ServerOptions(), host: str = HOST
) -> list[str]:
    """The llama-server command line for model on host:port with options."""
    binary = arguments.instance("binary", binary, (str, Path))
    model = check_gguf(model, "model")
    port = arguments.between("port", port, 1, 65535, integer=True)
    arguments.instance("options", options, ServerOptions)
    arguments.text("host", host)
    threads = options.threads or torch.get_num_threads()
    kv = ggml_type(options.kv_precision, "kv_precision").lower()
    args = [
        str(binary),
        "--model",
        str(model),
        "--host",
        host,
        "--port",
        str(port),
        "--threads",
        str(threads),
        "--threads-batch",
        str(threads),
        "--parallel",
        str(options.parallel),
        "--ctx-size",
        str(options.ctx_per_slot * options.parallel),
        "--batch-size",
        str(options.batch_size),
        "--ubatch-size",
        str(min(options.ubatch_size, options.batch_size)),
        "--cache-type-k",
        kv,
        "--cache-type-v",
        kv,
        "--flash-attn",
        "on" if kv != "f16" else "auto",
        "--poll",
        str(options.poll),
        # no repacked weight layouts: the AMX one (Xeons since Sapphire Rapids) crashes on this model's shapes
        "--no-repack",
        "--metrics",
        "--no-webui",
        "--n-gpu-layers",
        "0",
    ]
    if options.draft is not None:
        args += [
            "--model-draft",
            str(options.draft),
            "--spec-type",  # llama.cpp speculates only when told how (default: none)
            "draft-simple",
            "--spec-draft-n-max",
            str(options.draft_max),
            "--threads-draft",
            str(threads),
            "--threads-batch-draft",
            str(threads),
        ]
    return args + list(options.extra_args)


def _terminate(proc: subprocess.Popen, log, folder: Path | None) -> None:
    """Stop the server's process group: SIGTERM, then SIGKILL after _STOP_WAIT_S; close its log, and remove
    folder (the log's own temporary folder) when given."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
    else:
        try:  # the server is gone; anything it started in its group goes too
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    log.close()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


class LlamaServer:
    """One llama-server serving `model` (a GGUF file) on 127.0.0.1: `with LlamaServer(path) as server:` ...

    port: the port to serve on (default: a free one). startup_timeout_s: how long to wait for /health.
    binary: the llama-server to run (default: the course's build, llama_build.built_binary()). The options
    are ServerOptions' fields. Start it from the main thread: on Linux the server stops when the thread that
    started it ends.
    """

    def __init__(
        self,
        model,
        *,
        port: int | None = None,
        startup_timeout_s: float = 60.0,
        binary=None,
        log_path=None,
        **options,
    ):
        self.model = check_gguf(model, "model")
        self.port = None if port is None else arguments.between("port", port, 1, 65535, integer=True)
        self.startup_timeout_s = arguments.positive(
            "startup_timeout_s", startup_timeout_s, maximum=arguments.LIMITS["seconds"]
        )
        unknown = set(options) - {f.name for f in fields(ServerOptions)}
        if unknown:
            raise ValueError(
                f"options must be ServerOptions fields ({', '.join(f.name for f in fields(ServerOptions))}); "
                f"got {', '.join(sorted(unknown))}"
            )
        self.options = replace(ServerOptions(), **options)
        self._binary = None if binary is None else Path(arguments.instance("binary", binary, (str, Path)))
        # default: a temporary folder of its own, made when the server starts and removed when it stops (every
        # error message carries the end of the log)
        self._log_path = (None if log_path is None
                          else Path(arguments.instance("log_path", log_path, (str, Path))))
        self._log_is_temporary = log_path is None
        self._proc: subprocess.Popen | None = None
        self._finalizer = None

    # ---- life cycle ------------------------------------------------------------------------------------

    def start(self) -> LlamaServer:
        """Start the server and wait until it answers /health; itself. EngineFailed (PortInUse) if it
        cannot, the process stopped in every case."""
        if self.running:
            return self
        binary = self._binary or llama_build.built_binary()
        if binary is None:
            raise llama_build.EngineUnavailable(llama_build.unavailable_reason())
        chosen = self.port
        if chosen is not None and port_in_use(chosen):
            raise PortInUse(
                f"port {chosen} on {HOST} is already in use: stop what listens there, or leave port "
                "unset for a free one"
            )
        for attempt in range(3):  # a free port can be taken between choosing it and the server binding it
            port = chosen or free_port()
            self._spawn(binary, port)
            try:
                self._wait_ready()
                self.port = port
                return self
            except EngineFailed as error:
                bind_failed = "bind" in str(error).lower() or "address already in use" in str(error).lower()
                if chosen is None and bind_failed and attempt < 2:
                    continue
                if chosen is not None and bind_failed:
                    raise PortInUse(f"port {chosen} on {HOST} is already in use ({error})") from None
                raise
            except BaseException:  # an interrupted cell, a timeout: nothing left running
                self.stop()
                raise
        raise AssertionError("unreachable")

    @property
    def log_path(self) -> Path | None:
        """The server's log file (stdout and stderr); None before the first start. A log not asked for
        (log_path=None) is removed when the server stops."""
        return self._log_path

    def _spawn(self, binary: Path, port: int) -> None:
        folder = None
        if self._log_is_temporary:
            # named as ort.temp_dir names its folders: the folder of a killed process is removed by
            # ort.remove_stale_temp_dirs, which knows it by its owner's pid
            folder = Path(tempfile.mkdtemp(prefix=f"hwopt-llama-server-pid{os.getpid()}-"))
            self._log_path = folder / "server.log"
        cmd = command(binary, self.model, port, self.options)
        if sys.platform.startswith("linux"):
            cmd = [sys.executable, "-c", _LAUNCHER, str(os.getpid()), *cmd]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "a", encoding="utf-8")
        log.write(
            f"$ {subprocess.list2cmdline(cmd[-len(command(binary, self.model, port, self.options)) :])}\n"
        )
        log.flush()
        self._proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )  # its own process group, stopped as one
        self._finalizer = weakref.finalize(self, _terminate, self._proc, log, folder)
        self._port_now = port

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        url = f"http://{HOST}:{self._port_now}/health"
        while True:
            if self._proc.poll() is not None:
                self._fail(f"llama-server exited with status {self._proc.returncode} before it was ready")
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                self._fail(f"llama-server did not answer /health within {self.startup_timeout_s:g} s")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server (SIGTERM to its process group, SIGKILL after 5 s); safe to call twice."""
        if self._finalizer is not None:
            self._finalizer()  # runs _terminate once, then detaches
        self._finalizer = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- state -----------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._proc is not None and self._proc.poll() is None and self._finalizer is not None

    @property
    def pid(self) -> int | None:
        """The server's process id (its process group's too), None before start."""
        return None if self._proc is None else self._proc.pid

    @property
    def url(self) -> str:
        """http://127.0.0.1:PORT, the server's root."""
        if self.port is None:
            raise EngineFailed("the server has not been started: call start() or use `with`")
        return f"http://{HOST}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI API's base URL (http://127.0.0.1:PORT/v1), for openai.OpenAI(base_url=...)."""
        return f"{self.url}/v1"

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's log."""
        lines = arguments.count("lines", lines, "items")
        if self.log_path is None or not self.log_path.is_file():
            return ""
        return "".join(self.log_path.read_text(encoding="utf-8", errors="replace").splitlines(True)[-lines:])

    def check(self) -> None:
        """EngineFailed if the server has exited since it started (killed, crashed)."""
        if self._proc is not None and self._proc.poll() is not None and self._finalizer is not None:
            code = self._proc.returncode
            how = f"signal {-code}" if code < 0 else f"status {code}"
            self._fail(f"llama-server (pid {self._proc.pid}) exited with {how} while serving")

    def _fail(self, what: str):
        """Stop the server and raise EngineFailed saying what happened, with the end of its log."""
        tail = self.log_tail()
        where = "" if self._log_is_temporary else f" ({self.log_path})"
        self.stop()
        raise EngineFailed(f"{what}; the end of its log{where}:\n{tail}")

    def __repr__(self) -> str:
        state = f"running on {self.url}" if self.running else "stopped"
        return f"LlamaServer({self.model.name}, {state})"

    # ---- requests --------------------------------------------------------------------------------------

    def request(self, path: str, body: dict | None = None, timeout_s: float = 60.0) -> dict:
        """POST body as JSON to path (GET when body is None), the JSON answer. TimeoutError after timeout_s;
        EngineFailed when the server has died."""
        arguments.text("path", path)
        timeout_s = arguments.positive("timeout_s", timeout_s, maximum=arguments.LIMITS["seconds"])
        if body is not None:
            arguments.instance("body", body, dict)
        self.check()
        if not self.running:
            raise EngineFailed("llama-server is not running: it was never started, was stopped or exited; "
                               "start() it again")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as answer:
                return json.loads(answer.read())
        except TimeoutError:
            raise TimeoutError(f"{path}: no answer from llama-server within {timeout_s:g} s") from None
        except urllib.error.HTTPError as error:
            raise EngineFailed(
                f"{path}: llama-server answered {error.code}: {error.read().decode(errors='replace')[:300]}"
            ) from None
        except (urllib.error.URLError, ConnectionError) as error:
            self.check()
            if isinstance(getattr(error, "reason", None), TimeoutError):
                raise TimeoutError(f"{path}: no answer from llama-server within {timeout_s:g} s") from None
            raise EngineFailed(f"{path}: llama-server did not answer ({error})") from None

    def complete(self, prompt: str, max_tokens: int, timeout_s: float = 60.0, **fields_) -> dict:
        """llama.cpp's own /completion (not streamed): its answer, with the engine's `timings` (prompt_n,
        prompt_ms, predicted_n, predicted_ms, draft_n, draft_n_accepted...). Greedy, the end-of-text token
        ignored, unless fields_ say otherwise."""
        arguments.text("prompt", prompt)
        max_tokens = arguments.count("max_tokens", max_tokens, "tokens")
        body = {
            "prompt": prompt,
            "n_predict": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "cache_prompt": True,
            **fields_,
        }
        return self.request("/completion", body, timeout_s)
