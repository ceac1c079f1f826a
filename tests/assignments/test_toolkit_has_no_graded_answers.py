"""No function students write in an assignment is importable from the toolkit, by name or by contract.

For every judged function of every assignment, every function of the toolkit is tried in its place on that
part's hidden cases (in a child process per assignment, with a memory limit and a time limit per call): none
may pass them.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hwopt.course.grading.course import ASSIGNMENTS, ROOT

# Modules that measure or start things (timers, probes, compilers, widgets): they own no cost-model answer.
SKIP = ("hwopt.course", "hwopt.machine.bench", "hwopt.machine.probe", "hwopt.machine.hardware",
        "hwopt.machine.card",
        "hwopt.experiments.roofline_points", "hwopt.kernels.lowbit_gemv", "hwopt.kernels.ort",
        "hwopt.experiments.profiling", "hwopt.widgets", "hwopt.plots", "hwopt.__main__",
        "hwopt.machine.power", "hwopt.experiments.distributed", "hwopt.experiments.tensor_parallel_block",
        "hwopt.experiments.pipeline_parallel")  # these three start worker processes

TRY_EVERY_FUNCTION = r"""
import importlib, inspect, json, os, pkgutil, resource, signal, sys, traceback
import hwopt
from hwopt.course.grading import collect, judge
from hwopt.course.grading.reference import Reference

assignments, skip, mark = json.loads(sys.argv[1]), tuple(json.loads(sys.argv[2])), sys.argv[3]
functions = {}
for module in pkgutil.walk_packages(hwopt.__path__, "hwopt."):
    if module.name.startswith(skip):
        continue
    mod = importlib.import_module(module.name)
    for name, f in vars(mod).items():
        if inspect.isfunction(f) and f.__module__ == mod.__name__:
            functions[f"{mod.__name__}.{name}"] = f


def try_every_function(assignment):
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))
    signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(TimeoutError()))
    ref = Reference.load(f"source/{assignment}/{assignment}.ipynb")
    same_name, same_contract = [], []
    for gid, checks in ref.checks.items():
        for i, check in enumerate(checks):
            graded = check.call.split("(")[0]
            if not graded.isidentifier() or "(" not in check.call:
                continue  # an answer variable, not a function
            same_name += [q for q in functions if q.endswith("." + graded)]
            cases = judge.draw(check, judge.case_rng(b"toolkit", assignment=assignment, notebook=assignment,
                                                     grade_id=gid, student="toolkit", index=i))
            expected = ref.expected(check, cases)
            for qualname, f in functions.items():
                namespace = {**ref.namespace, graded: f}
                right = True
                for one, want in zip(cases, expected):
                    signal.setitimer(signal.ITIMER_REAL, 1.0)
                    try:
                        got = collect.outcome(check.call, one.variables, namespace)
                    except BaseException:
                        got = None
                    finally:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                    if judge.judge_case(check, one, want, got):
                        right = False
                        break
                if right:
                    same_contract.append(f"{qualname} answers {gid}")
    return {"same_name": sorted(set(same_name)), "same_contract": same_contract, "tried": len(functions)}


for assignment in assignments:  # each in a process of its own, forked once the toolkit is imported
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            found = try_every_function(assignment)
        except BaseException:
            found = {"error": traceback.format_exc()[-3000:]}
        with os.fdopen(write, "w") as out:
            out.write(json.dumps(found))
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        found = json.loads(answer.read() or '{"error": "the process trying the functions died"}')
    os.waitpid(pid, 0)
    print(mark + json.dumps({"assignment": assignment, **found}), flush=True)
"""
MARK = "toolkit-tried:"
ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


@pytest.fixture(scope="module")
def tried() -> dict[str, dict]:
    """Every toolkit function tried in every assignment's graded parts: assignment -> what answered them.

    One process imports the toolkit, then forks one process per assignment (one thread per library: forking
    a process with running thread pools is not safe).
    """
    out = subprocess.run([sys.executable, "-c", TRY_EVERY_FUNCTION, json.dumps(ASSIGNMENTS), json.dumps(SKIP),
                          MARK], cwd=ROOT, capture_output=True, text=True, timeout=1200,
                         env={**os.environ, **ONE_THREAD})
    assert out.returncode == 0, out.stderr[-3000:]
    found = [json.loads(line[len(MARK):]) for line in out.stdout.splitlines() if line.startswith(MARK)]
    return {f.pop("assignment"): f for f in found}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_toolkit_function_answers_a_graded_part(tried, assignment):
    found = tried[assignment]
    assert "error" not in found, found.get("error")
    assert found["tried"] > 50, "the toolkit's functions were found"
    assert found["same_name"] == [], "a graded function's name is in the toolkit"
    assert found["same_contract"] == [], "a toolkit function gives the graded answers"


def test_the_skipped_modules_exist():
    for name in SKIP:
        path = ROOT / Path(*name.split("."))
        assert path.with_suffix(".py").exists() or path.is_dir(), name
