"""Assignment 14 (speculative decoding): the reference passes its own checks, every student draws other
prompts, and the loop's output is the target's greedy output, the same bits in another process."""

import json
import subprocess
import sys

import pytest
import torch

from hwopt.cost import speculative as cost_model
from hwopt.course.grading import judge
from hwopt.course.grading.course import ROOT
from hwopt.course.grading.reference import Reference
from hwopt.experiments.llm_speculative import Run

ASSIGNMENT = "speculative_decoding"
SOURCE = ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
STUDENTS = ("ada", "grace")


@pytest.fixture(scope="module")
def ref() -> Reference:
    return Reference.load(SOURCE)  # runs the notebook: its visible checks pass on the reference


def drawn(ref, gid, student, secret=b"test"):
    return [judge.draw(check, judge.case_rng(secret, assignment=ASSIGNMENT, notebook=ASSIGNMENT, grade_id=gid,
                                             student=student, index=i))
            for i, check in enumerate(ref.checks[gid])]


def test_the_reference_answers_its_checks_for_two_students_whose_cases_differ(ref):
    assert set(ref.checks) == {
        "test_greedy", "test_verify", "test_speculative_tokens", "test_speculative_calls", "test_acceptance",
        "test_tokens_per_call", "test_best_k"}
    for gid, checks in ref.checks.items():
        cases = {student: drawn(ref, gid, student) for student in STUDENTS}
        for student in STUDENTS:
            for check, mine in zip(checks, cases[student], strict=True):
                for one, outcome in zip(mine, ref.expected(check, mine), strict=True):
                    if one.must_name:
                        assert outcome["raised"][0] == "ValueError", (gid, one.about, outcome)
                        assert any(name in outcome["message"] for name in one.must_name), (gid, one.about)
                    else:
                        assert "value" in outcome, (gid, one.about, outcome)
        variables = {s: [[c.variables for c in each] for each in cases[s]] for s in STUDENTS}
        assert variables["ada"] != variables["grace"], gid


def test_drawn_prompts_are_slices_of_the_validation_code(ref):
    stream = ref.namespace["prompt_of"](ref.namespace["VALIDATION"])
    text = " ".join(map(str, stream))
    for gid in ("test_greedy", "test_speculative_tokens", "test_speculative_calls"):
        for cases in drawn(ref, gid, "ada"):
            for one in (c for c in cases if "example" not in c.about):  # the example is the visible one
                prompt = one.variables["prompt"]
                assert len(prompt) >= 12 and " ".join(map(str, prompt)) in text, (gid, one.about)


def test_the_loop_gives_the_greedy_tokens_and_consistent_counts(ref):
    ns = ref.namespace
    for cases in drawn(ref, "test_speculative_tokens", "grace"):
        for one in cases:
            prompt, n_new, k = one.variables["prompt"], one.variables["n_new"], one.variables["k"]
            run = ns["speculative"](ns["target"], ns["draft"], prompt, n_new, k)
            assert run["tokens"] == ns["greedy"](ns["target"], prompt, n_new), one.about
            assert sum(run["accepted"]) + run["target_calls"] == n_new
            assert run["draft_calls"] == sum(run["drafted"]) and max(run["drafted"]) <= k
            assert run["drafted"][-1] <= n_new - 1 and all(
                0 <= a <= d for a, d in zip(run["accepted"], run["drafted"], strict=True))


def test_a_wrong_guess_comes_before_guesses_the_target_agrees_with(ref):
    """The verify case that tells a prefix from a count of agreements: a guess the target rejects, then the
    target's own continuation of that text."""
    ns = ref.namespace
    for student in STUDENTS:
        one = next(c for c in drawn(ref, "test_verify", student)[0] if c.about.startswith("one wrong guess"))
        ids, guesses = one.variables["ids"], one.variables["guesses"]
        choices = ns["logits_of"](ns["target"], ids + guesses)[len(ids) - 1:].argmax(-1).tolist()
        agreeing = [g == c for g, c in zip(guesses, choices, strict=False)]
        first_wrong = agreeing.index(False)
        assert any(agreeing[first_wrong + 1:]), "a guess after the rejected one agrees with the target"


def test_the_prediction_agrees_with_the_lessons_cost_model(ref):
    ns = ref.namespace
    for acceptance, cost_ratio in ((0.0, 0.1), (0.55, 0.17), (0.8, 0.1), (0.97, 0.01), (1.0, 0.3)):
        table = ns["draft_len_table"](acceptance, cost_ratio, 16)
        assert table["tokens_per_call"] == pytest.approx(
            [cost_model.expected_tokens_per_step(acceptance, k) for k in range(17)], rel=1e-12)
        assert table["speedup"] == pytest.approx(
            [cost_model.predicted_speedup(acceptance, k, cost_ratio) for k in range(17)], rel=1e-12)
        assert table["best_k"] == cost_model.best_draft_len(acceptance, cost_ratio, 16)
    drafted, accepted = [4, 4, 2, 4, 1], [4, 1, 2, 0, 1]
    run = Run(torch.zeros(1, 1), tuple(drafted), tuple(accepted), 4, 13)
    assert ns["measured_acceptance"](drafted, accepted) == pytest.approx(run.acceptance)


SECOND_PROCESS = r"""
import json, sys
import nbformat
nb = nbformat.read(sys.argv[1], as_version=4)
ns = {}
for cell in nb.cells:
    if cell.metadata.get("nbgrader", {}).get("grade_id") in ("helpers", "greedy", "verify", "speculative"):
        exec(cell.source, ns)
stream = ns["prompt_of"](ns["VALIDATION"])
ns["greedy"](ns["draft"], stream[500:540], 5)  # another history than the first process's
print(json.dumps([ns["speculative"](ns["target"], ns["draft"], prompt, 10, k)
                  for prompt, k in json.loads(sys.argv[2])]))
"""


def test_another_process_computes_the_same_run(ref):
    """The grading process and a student's kernel make the same calls and must get the same bits."""
    ns = ref.namespace
    stream = ns["prompt_of"](ns["VALIDATION"])
    jobs = [(stream[2000:2016], 3), (stream[7000:7020], 5)]
    here = [ns["speculative"](ns["target"], ns["draft"], prompt, 10, k) for prompt, k in jobs]
    out = subprocess.run([sys.executable, "-c", SECOND_PROCESS, str(SOURCE), json.dumps(jobs)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == here
