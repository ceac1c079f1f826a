"""Helpers shared by the tests (`tests.support`: pytest's `pythonpath` setting puts the root on the path)."""

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from distributed import Client

from hwopt.course.grading import judge


def skip_outside_ci(reason: str) -> None:
    """Skip the test for reason; in CI (CI=true), where `make test` installs what is missing, fail instead."""
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI must run this test)")
    pytest.skip(reason)


def dask_worker_settings(address: str, keys) -> list[tuple]:
    """Each worker of the Dask cluster at address: its values of these Dask settings (dotted keys)."""
    with Client(address) as client:
        return list(client.run(lambda: tuple(__import__("dask").config.get(key) for key in keys)).values())


def dask_scheduler_saturation(address: str) -> float:
    """Tasks the scheduler at address sends a worker per thread before that worker finishes one."""
    with Client(address) as client:
        return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.WORKER_SATURATION)


class ScriptedServer:
    """An OpenAI-compatible server with known delays, for testing a load generator: POST /v1/completions
    (or /v1/chat/completions) streams `tokens` chunks, the first ttft_ms after the request came, then one
    every gap_ms. A prompt 'ttft=30 gap=5 tokens=4' sets the script of its own request. workers=1 answers
    one request at a time (the others queue, as on a saturated engine). `with ScriptedServer() as s: ...`"""

    def __init__(self, ttft_ms: float = 20.0, gap_ms: float = 5.0, tokens: int = 4,
                 workers: int | None = None):
        script = {"ttft": ttft_ms, "gap": gap_ms, "tokens": tokens}
        serial = threading.Semaphore(workers) if workers else None

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                received = time.perf_counter()
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                text = body.get("prompt") or body["messages"][-1]["content"]
                mine = dict(script)
                for part in text.split():
                    key, _, value = part.partition("=")
                    if key in mine:
                        mine[key] = float(value)
                if serial:
                    serial.acquire()
                    received = time.perf_counter()  # served from now: the wait in the queue is the client's
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    chat = self.path.endswith("chat/completions")
                    for i in range(int(mine["tokens"])):
                        due = received + (mine["ttft"] + i * mine["gap"]) / 1000
                        time.sleep(max(0.0, due - time.perf_counter()))
                        piece = {"delta": {"content": f"t{i}"}} if chat else {"text": f"t{i}"}
                        self.wfile.write(f"data: {json.dumps({'choices': [piece]})}\n\n".encode())
                        self.wfile.flush()
                    usage = {"choices": [], "usage": {"completion_tokens": int(mine["tokens"])}}
                    self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass
                finally:
                    if serial:
                        serial.release()

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # every request of a burst connects at once (the default backlog is 5)
            daemon_threads = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()


# ---- profiler traces (hwopt.traces, experiments.profile_traces) ----

def spans_by_thread(events):
    """{(pid, tid): [(start_ns, end_ns), ...]} of the complete events."""
    threads = {}
    for e in events:
        if e["ph"] == "X":
            start = round(e["ts"] * 1000)
            threads.setdefault((e["pid"], e["tid"]), []).append((start, start + round(e["dur"] * 1000)))
    return threads


def nesting_problems(events) -> int:
    """Pairs of events on one thread that overlap without nesting, or share both start and end."""
    problems = 0
    for spans in spans_by_thread(events).values():
        problems += len(spans) - len(set(spans))
        enclosing = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while enclosing and not (enclosing[-1][0] <= start and end <= enclosing[-1][1]):
                problems += start < enclosing.pop()[1]
            enclosing.append((start, end))
    return problems


def drawn(reference, assignment: str, grade_id: str, student: str) -> list[tuple]:
    """Each check of an assignment's grade cell with the cases a student draws: [(check, cases)] (a fixed
    secret)."""
    def rng(index):
        return judge.case_rng(b"test secret", assignment=assignment, notebook=assignment, grade_id=grade_id,
                              student=student, index=index)

    return [(check, judge.draw(check, rng(i))) for i, check in enumerate(reference.checks[grade_id])]


def check_reference_and_draws(reference, assignment: str, students=("ada", "grace")) -> None:
    """The reference passes its own checks for each student (a value where one is expected, the named error
    where one is), and each grade cell draws other cases for each student."""
    for grade_id in reference.checks:
        for student in students:
            for check, cases in drawn(reference, assignment, grade_id, student):
                for one, want in zip(cases, reference.expected(check, cases), strict=True):
                    assert judge.judge_case(check, one, want, want) is None, (grade_id, one.about)
                    assert ("raised" in want) == bool(one.must_name), (grade_id, one.about, want)
                    if one.must_name:
                        assert any(name in want["message"] for name in one.must_name), (one.about, want)
        variables = [[one.variables for _, cases in drawn(reference, assignment, grade_id, student)
                      for one in cases] for student in students]
        assert all(a != b for a, b in zip(variables, variables[1:], strict=False)), grade_id
