"""Command line: `python -m hwopt info [--probe] [--json] [--device auto|cpu|cuda|mps]`: the machine card;
`python -m hwopt lab` and `python -m hwopt test [PYTEST_ARGS]`: what `make lab` and `make test` run, in this
environment (Windows and machines without make; the system packages are left to the Makefile's apt steps);
`python -m hwopt engine`: build llama.cpp's server once (`make engine`); `python -m hwopt serve [--port N]
[--model target|draft|FILE.gguf] [--precision Q8_0|F16|Q4_0]`: the course's model behind an OpenAI-compatible
API on 127.0.0.1 until Ctrl-C."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from hwopt.course import colab
from hwopt.experiments import serving_engine
from hwopt.kernels import llama_build, llama_server
from hwopt.machine.card import machine_card

ROOT = Path(__file__).resolve().parents[1]
LAB_SETTINGS = Path("jupyter-config") / "labconfig" / "default_setting_overrides.json"
COLAB_OVERLAY = ".venv-colab-overlay"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `python -m hwopt`."""
    parser = argparse.ArgumentParser(prog="python -m hwopt", description="Hardware Optimization for ML")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="print the machine card: hardware, measured ceilings, closest chips")
    info.add_argument("--probe", action="store_true", help="measure memory bandwidth and matmul FLOP/s")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    info.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N or mps")
    info.add_argument("--precisions", default=None,
                      help="comma-separated formats to probe matmuls in, e.g. fp32,int8 (default: all)")
    info.add_argument("--full", action="store_true", help="longer, steadier probe (default: quick)")
    lab = sub.add_parser("lab", help="open the course in JupyterLab on 127.0.0.1 (as `make lab`)")
    test = sub.add_parser("test", help="lint, then every test (as `make test`); extra arguments go to pytest")
    for command in (lab, test):
        command.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    test.add_argument("--no-setup", action="store_true",
                      help="skip the setup steps (JupyterLab settings, Colab overlay, the serving engine's "
                           "build): lint and pytest only")
    test.add_argument("pytest_args", nargs=argparse.REMAINDER, help="arguments for pytest (default: none)")
    engine = sub.add_parser("engine", help="build llama.cpp's llama-server once (cached; as `make engine`)")
    engine.add_argument("--jobs", type=int, default=None, help="compile jobs (default: every core)")
    serve = sub.add_parser("serve", help="serve the course's model with llama-server's OpenAI-compatible API "
                                         "on 127.0.0.1 until Ctrl-C (builds the engine first if needed)")
    serve.add_argument("--port", type=int, default=8080, help="port on 127.0.0.1 (default: 8080)")
    serve.add_argument("--model", default="target",
                       help="target (default) or draft, the course's models, or a GGUF file")
    serve.add_argument("--precision", default="Q8_0",
                       help="weights of the course's model: Q8_0 (default), F16 or Q4_0 (or int8_g32, fp16, "
                            "int4_g32)")
    serve.add_argument("--parallel", type=int, default=4, help="parallel slots: requests decoded together "
                                                               "(default: 4)")
    serve.add_argument("--threads", type=int, default=None,
                       help="CPU threads (default: torch's thread count)")
    return parser


def engine_command(args) -> int:
    """Build llama-server (or find it built); prints its path and how long the build took."""
    try:
        binary = llama_build.server_binary(jobs=args.jobs)
    except (llama_build.EngineUnavailable, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    info = llama_build.build_info(binary)
    took = f" (built in {info['seconds']:,.0f} s on {info['jobs']} jobs)" if info else ""
    print(f"llama-server: {binary}{took}")
    return 0


def serve_command(args) -> int:
    """Serve the model until Ctrl-C or SIGTERM; 1 with a message when it cannot start."""
    try:
        llama_build.server_binary()
        server = serving_engine.trained_server(args.model, args.precision, port=args.port,
                                               parallel=args.parallel, threads=args.threads)
        server.start()
    except (llama_build.EngineUnavailable, llama_server.EngineFailed, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill` stops it as Ctrl-C does
    try:
        print(f"serving {server.model.name} on {server.base_url} (OpenAI API; log: {server.log_path})\n"
              f"  curl {server.base_url}/completions -H 'Content-Type: application/json' "
              f"-d '{{\"prompt\": \"def fib(n):\", \"max_tokens\": 32}}'\n"
              f"  openai.OpenAI(base_url=\"{server.base_url}\", api_key=\"none\")\n"
              "Ctrl-C stops it.", flush=True)
        while True:
            server.check()
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0
    except llama_server.EngineFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        server.stop()


def install_lab_settings(prefix: str | Path = sys.prefix) -> Path:
    """Copy the course's JupyterLab defaults into the environment (as `make lab-settings`); their path."""
    target = Path(prefix) / "etc" / "jupyter" / "labconfig" / LAB_SETTINGS.name
    source = ROOT / LAB_SETTINGS
    if not target.exists() or target.read_bytes() != source.read_bytes():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return target


def lab_command() -> list[str]:
    """`make lab`'s JupyterLab command, with this interpreter."""
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    return [sys.executable, "-m", "jupyter", "lab", "--ip=127.0.0.1", *(["--allow-root"] if as_root else []),
            "--notebook-dir=."]


TEST_WORKERS = 2  # the Makefile's default: pytest-xdist processes for the tests that time nothing
NO_TESTS_COLLECTED = 5  # pytest's exit status when a selection holds no test (say, no timing test)


def test_commands(pytest_args=()) -> list[list[str]]:
    """`make test`'s commands after its setup steps: lint (ruff check .), the tests that time nothing in
    parallel, then those marked timing, alone."""
    args = [arg for arg in pytest_args if arg != "--"]
    return [[sys.executable, "-m", "ruff", "check", "."],
            [sys.executable, "-m", "pytest", "-n", str(TEST_WORKERS), "-m", "not timing", *args],
            [sys.executable, "-m", "pytest", "-m", "timing", *args]]


def run_steps(commands: list[list[str]], dry_run: bool) -> int:
    """Run commands in the repository root, stopping at the first that fails; its exit status. A pytest run
    whose selection holds no test (the paths asked for have no timing test) is not a failure."""
    for command in commands:
        print("+", subprocess.list2cmdline(command), flush=True)
        if not dry_run:
            code = subprocess.run(command, cwd=ROOT).returncode
            if code and not (command[1:3] == ["-m", "pytest"] and code == NO_TESTS_COLLECTED):
                return code
    return 0


def course_command(args) -> int:
    """`lab` or `test`: the Makefile's steps (settings, Colab overlay, then the commands) in Python."""
    if args.command == "lab":
        if not args.dry_run:
            install_lab_settings()
        return run_steps([lab_command()], args.dry_run)
    if not (args.no_setup or args.dry_run):
        install_lab_settings()
        colab.build_overlay(ROOT / COLAB_OVERLAY)
        try:  # as `make engine`; where it cannot be built, the engine's tests say why when skipped
            llama_build.server_binary()
        except llama_build.EngineUnavailable as error:
            print(f"note: {error}", file=sys.stderr)
    return run_steps(test_commands(args.pytest_args), args.dry_run)


def main(argv=None, probe_fn=None) -> int:
    """Run the CLI; returns the exit status (2 with a message on bad input)."""
    args = build_parser().parse_args(argv)
    if args.command in ("lab", "test"):
        return course_command(args)
    if args.command == "engine":
        return engine_command(args)
    if args.command == "serve":
        return serve_command(args)

    precisions = (None if args.precisions is None
                  else [d.strip() for d in args.precisions.split(",") if d.strip()])
    try:
        card = machine_card(probe=args.probe, device=args.device, quick=not args.full, probe_fn=probe_fn,
                            precisions=precisions)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(card.to_json() if args.json else card.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
