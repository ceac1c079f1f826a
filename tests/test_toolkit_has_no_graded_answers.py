"""No function students write in an assignment is importable from the toolkit, by name or by contract.

For every judged function of every assignment, every function of the toolkit is tried in its place on that
part's hidden cases (in a child process with a memory limit and a time limit per call): none may pass them.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "autograder"))
import samples  # noqa: E402

# Modules that measure or start things (timers, probes, compilers, widgets): they own no cost-model answer.
SKIP = ("hwopt.course", "hwopt.machine.bench", "hwopt.machine.probe", "hwopt.machine.hardware",
        "hwopt.machine.card",
        "hwopt.experiments.roofline_points", "hwopt.kernels.lowbit_gemv", "hwopt.kernels.ort",
        "hwopt.experiments.profiling", "hwopt.widgets", "hwopt.plots", "hwopt.__main__",
        "hwopt.machine.power", "hwopt.experiments.distributed", "hwopt.experiments.tensor_parallel_block",
        "hwopt.experiments.pipeline_parallel")  # these three start worker processes

TRY_EVERY_FUNCTION = r"""
import importlib, inspect, json, pkgutil, resource, signal, sys
import hwopt
from hwopt.course.grading import collect, judge
from hwopt.course.grading.reference import Reference

assignment, skip = sys.argv[1], tuple(json.loads(sys.argv[2]))
resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))
signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(TimeoutError()))
ref = Reference.load(f"source/{assignment}/{assignment}.ipynb")
functions = {}
for module in pkgutil.walk_packages(hwopt.__path__, "hwopt."):
    if module.name.startswith(skip):
        continue
    mod = importlib.import_module(module.name)
    for name, f in vars(mod).items():
        if inspect.isfunction(f) and f.__module__ == mod.__name__:
            functions[f"{mod.__name__}.{name}"] = f
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
found = {"same_name": sorted(set(same_name)), "same_contract": same_contract, "tried": len(functions)}
print(json.dumps(found))
"""


@pytest.mark.parametrize("assignment", samples.ASSIGNMENTS)
def test_no_toolkit_function_answers_a_graded_part(assignment):
    out = subprocess.run([sys.executable, "-c", TRY_EVERY_FUNCTION, assignment, json.dumps(SKIP)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["tried"] > 50, "the toolkit's functions were found"
    assert found["same_name"] == [], "a graded function's name is in the toolkit"
    assert found["same_contract"] == [], "a toolkit function gives the graded answers"


def test_the_skipped_modules_exist():
    for name in SKIP:
        path = ROOT / Path(*name.split("."))
        assert path.with_suffix(".py").exists() or path.is_dir(), name
