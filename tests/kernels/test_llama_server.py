"""kernels.llama_server: the course's model served by llama-server answers the official OpenAI client
(completions, streamed chat) and curl; faults (busy port, not a GGUF file, an engine that dies mid-run or
fails to start, a request that times out, an interrupted start, a parent killed) are told by name, and no
server process is left behind after any of them."""

import gc
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import types

import psutil
import pytest

from hwopt.kernels import llama_build, llama_server
from hwopt.kernels.llama_server import EngineFailed, LlamaServer, PortInUse
from hwopt.machine import loadgen
from hwopt.models import gguf_export
from tests.support import skip_outside_ci


@pytest.fixture(scope="module")
def model():
    if llama_build.built_binary() is None:
        skip_outside_ci(f"llama-server is not built here ({llama_build.unavailable_reason()})")
    return gguf_export.cached("target", "Q8_0")


@pytest.fixture(scope="module")
def server(model):
    with LlamaServer(model, parallel=2) as running:
        yield running


def gone(pid: int, within_s: float = 10.0) -> bool:
    """True once no process pid (or only its zombie) and nothing in its process group is left."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            alive = False
        group = [p for p in psutil.process_iter()
                 if _pgid(p.pid) == pid and p.status() != psutil.STATUS_ZOMBIE]
        if not alive and not group:
            return True
        time.sleep(0.05)
    return False


def _pgid(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def test_openai_client_gets_a_completion_and_a_streamed_chat(server):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.base_url, api_key="none")
    answer = client.completions.create(model="hwopt", prompt="def fibonacci(n):\n", max_tokens=16,
                                       temperature=0)
    assert answer.choices[0].text and answer.usage.completion_tokens > 0
    stream = client.chat.completions.create(model="hwopt", stream=True, max_tokens=12, temperature=0,
                                            messages=[{"role": "system", "content": "a sorting helper"},
                                                      {"role": "user", "content": "sort a list of numbers"}])
    pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert len(pieces) >= 2 and "".join(pieces).strip()
    assert client.models.list().data


def test_curl_gets_a_completion(server):
    body = json.dumps({"prompt": "import os\n", "max_tokens": 8})
    done = subprocess.run(["curl", "-s", "-H", "Content-Type: application/json", "-d", body,
                           f"{server.base_url}/completions"], capture_output=True, text=True, timeout=60)
    assert json.loads(done.stdout)["choices"][0]["text"]


def test_the_engines_own_timings_and_the_load_generator(server):
    timings = server.complete("class Queue:\n", 8)["timings"]
    assert timings["predicted_n"] == 8 and timings["predicted_ms"] > 0
    result = loadgen.run_load(server.base_url, ["def f(x):\n"], users=2, n_requests=4, max_tokens=8,
                              extra={"ignore_eos": True}, progress=False, check=server.check)
    assert len(result.ok) == 4 and all(r.output_tokens == 8 for r in result.ok)
    assert result.percentile_ms("ttft", 50) > 0 and result.percentile_ms("tpot", 50) > 0


def test_a_file_that_is_not_gguf_is_refused_by_name(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(ValueError, match="model must be a GGUF file .*starts with b'PK"):
        LlamaServer(bad)
    with pytest.raises(ValueError, match="does not exist"):
        LlamaServer(tmp_path / "missing.gguf")
    with pytest.raises(ValueError, match="options must be ServerOptions fields.*got slots"):
        LlamaServer(gguf_export.cached("draft", "Q8_0"), slots=2)
    with pytest.raises(ValueError, match="kv_precision"):
        llama_server.ServerOptions(kv_precision="int3")


def test_a_busy_port_is_named_and_nothing_is_started(model):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = LlamaServer(model, port=port)
        with pytest.raises(PortInUse, match=f"port {port} on 127.0.0.1 is already in use"):
            server.start()
        assert server.pid is None and not server.running


def test_an_engine_that_fails_to_start_is_told_with_its_log(model):
    server = LlamaServer(model, extra_args=("--no-such-option",))
    with pytest.raises(EngineFailed, match="(?s)exited with status .* before it was ready.*no-such-option"):
        server.start()
    assert gone(server.pid)
    slow = LlamaServer(model, startup_timeout_s=0.001)
    with pytest.raises(EngineFailed, match="did not answer /health within 0.001 s"):
        slow.start()
    assert gone(slow.pid)


def test_an_engine_killed_mid_run_is_named_and_leaves_nothing(model):
    server = LlamaServer(model).start()
    threading.Timer(0.5, os.kill, (server.pid, signal.SIGKILL)).start()
    with pytest.raises(EngineFailed, match="exited with signal 9 while serving"):
        loadgen.run_load(server.base_url, ["def f():\n"], users=1, n_requests=200, max_tokens=64,
                         extra={"ignore_eos": True}, progress=False, check=server.check)
    assert gone(server.pid) and not server.running
    with pytest.raises(EngineFailed, match="exited"):
        server.complete("x", 1)


def test_a_request_that_takes_too_long_times_out_and_the_server_still_stops(server, model):
    with LlamaServer(model) as own:
        with pytest.raises(TimeoutError, match="no answer from llama-server within 0.01 s"):
            own.complete("def main():\n", 400, timeout_s=0.01)
        pid = own.pid
    assert gone(pid)


def test_an_interrupted_start_leaves_nothing(model, monkeypatch):
    server = LlamaServer(model)

    def interrupt(_):
        raise KeyboardInterrupt

    # Ctrl-C while it waits for /health (the module's own clock only: stopping the server waits as usual)
    clock = types.SimpleNamespace(monotonic=time.monotonic, sleep=interrupt)
    monkeypatch.setattr(llama_server, "time", clock)
    with pytest.raises(KeyboardInterrupt):
        server.start()
    assert gone(server.pid) and not server.log_path.exists()


def test_a_dropped_server_and_a_failing_block_stop_it(model):
    server = LlamaServer(model).start()
    pid = server.pid
    del server
    gc.collect()
    assert gone(pid)
    with pytest.raises(RuntimeError, match="cell failed"), LlamaServer(model) as running:
        pid = running.pid
        raise RuntimeError("cell failed")
    assert gone(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_parent_takes_its_server_along(model):
    script = textwrap.dedent(f"""
        import time
        from hwopt.kernels.llama_server import LlamaServer
        server = LlamaServer({str(model)!r}).start()
        print(server.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    assert psutil.pid_exists(pid)
    parent.kill()  # SIGKILL: no Python code of the parent runs
    parent.wait()
    assert gone(pid)
