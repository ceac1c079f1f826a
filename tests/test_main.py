"""`python -m hwopt lab` and `python -m hwopt test`: the steps of `make lab` and `make test` in Python."""

import re
import signal
import socket
import subprocess
import sys

import psutil
import pytest

import hwopt.__main__ as cli
from hwopt.kernels import llama_build, llama_server
from tests.support import skip_outside_ci

ROOT = cli.ROOT


def make_recipe(target):
    """The command lines of a Makefile target's recipe."""
    text = (ROOT / "Makefile").read_text()
    recipe = re.search(rf"^{target}:[^\n]*\n((?:\t[^\n]*\n)+)", text, re.M)
    return [line.strip() for line in recipe[1].splitlines()]


def test_test_runs_what_make_test_runs(capsys):
    assert make_recipe("test") == ["ruff check .", '$(PY) -m pytest -n $(TEST_WORKERS) -m "not timing"',
                                   "$(PY) -m pytest -m timing"]
    assert re.search(rf"^TEST_WORKERS \?= {cli.TEST_WORKERS}$", (ROOT / "Makefile").read_text(), re.M)
    assert cli.main(["test", "--dry-run"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        f"+ {subprocess.list2cmdline([sys.executable, '-m', 'ruff', 'check', '.'])}",
        f"+ {subprocess.list2cmdline([sys.executable, '-m', 'pytest', '-n', '2', '-m', 'not timing'])}",
        f"+ {subprocess.list2cmdline([sys.executable, '-m', 'pytest', '-m', 'timing'])}"]


def test_test_passes_its_arguments_to_pytest():
    lint, parallel, timing = cli.test_commands(["--", "tests/test_formats.py", "-q"])
    assert lint[-2:] == ["check", "."]
    asked = ["tests/test_formats.py", "-q"]
    assert parallel == [sys.executable, "-m", "pytest", "-n", "2", "-m", "not timing", *asked]
    assert timing == [sys.executable, "-m", "pytest", "-m", "timing", *asked]


def test_lab_opens_jupyterlab_as_make_lab_does(capsys):
    recipe = make_recipe("lab")
    assert recipe == ["jupyter lab --ip=127.0.0.1 --allow-root --notebook-dir=."]
    command = cli.lab_command()
    assert command[:4] == [sys.executable, "-m", "jupyter", "lab"]
    assert {"--ip=127.0.0.1", "--notebook-dir=."} <= set(command)
    assert cli.main(["lab", "--dry-run"]) == 0
    assert "jupyter lab --ip=127.0.0.1" in capsys.readouterr().out


def test_lab_settings_go_into_the_environment(tmp_path):
    target = cli.install_lab_settings(tmp_path)
    assert target == tmp_path / "etc" / "jupyter" / "labconfig" / "default_setting_overrides.json"
    assert target.read_bytes() == (ROOT / cli.LAB_SETTINGS).read_bytes()
    assert cli.install_lab_settings(tmp_path) == target  # a second call finds it current


@pytest.mark.slow
def test_a_real_test_run_lints_and_runs_pytest_with_its_exit_status():
    command = [sys.executable, "-m", "hwopt", "test", "--no-setup", "--", "tests/test_arguments.py", "-q",
               "-p", "no:cacheprovider", "-n", "0"]  # one process: this test is about the exit status
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "All checks passed" in done.stdout and re.search(r"\d+ passed", done.stdout)
    failing = subprocess.run([*command[:6], "tests/test_no_such_file.py", "-n", "0"], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert failing.returncode != 0


def test_info_still_prints_the_card():
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["nothing"])
    assert cli.build_parser().parse_args(["info", "--json"]).json


@pytest.fixture
def engine():
    if llama_build.built_binary() is None:
        skip_outside_ci(f"llama-server is not built here ({llama_build.unavailable_reason()})")


def test_serve_answers_the_openai_client_and_stops_with_nothing_left(engine):
    openai = pytest.importorskip("openai")
    port = llama_server.free_port()
    serve = subprocess.Popen([sys.executable, "-m", "hwopt", "serve", "--port", str(port), "--model", "draft",
                              "--parallel", "2"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        first = serve.stdout.readline()
        assert first.startswith("serving hwopt-draft-Q8_0") and f"127.0.0.1:{port}/v1" in first, (
            first + serve.stderr.read() if serve.poll() is not None else first)
        engine_pids = [p.pid for p in psutil.Process(serve.pid).children(recursive=True)]
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
        answer = client.completions.create(model="hwopt", prompt="import os\n", max_tokens=8)
        assert answer.choices[0].text
        stream = client.chat.completions.create(model="hwopt", stream=True, max_tokens=8,
                                                messages=[{"role": "user", "content": "read a file"}])
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices).strip()
        body = '{"prompt": "def f():", "max_tokens": 4}'
        done = subprocess.run(["curl", "-s", f"http://127.0.0.1:{port}/v1/completions", "-H",
                               "Content-Type: application/json", "-d", body],
                              capture_output=True, text=True, timeout=60)
        assert '"choices"' in done.stdout
    finally:
        serve.send_signal(signal.SIGTERM)  # as `kill` does; Ctrl-C takes the same path
        code = serve.wait(30)
    assert code == 0
    assert engine_pids and not [p for p in engine_pids if psutil.pid_exists(p)
                                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_serve_on_a_busy_port_says_so(engine):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "hwopt", "serve", "--port", str(port), "--model", "draft"]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and f"port {port} on 127.0.0.1 is already in use" in done.stderr
