"""Assignment continuous_batching: the reference passes its own checks, every student draws other cases, the
case generators hold what their descriptions say, and the two misconception samples lose what EXPECTED
says."""

import contextlib
import io
import random

import pytest

from hwopt.course.grading import collect, judge, samples
from hwopt.course.grading.course import ROOT
from hwopt.course.grading.reference import Reference

A = "continuous_batching"
SECRET = b"a test secret"
STUDENTS = ("ada", "grace")


@pytest.fixture(scope="module")
def reference() -> Reference:
    return Reference.load(ROOT / "source" / A / f"{A}.ipynb")


def drawn(reference, student: str) -> dict[str, list[list[judge.Case]]]:
    """Every grade cell's cases (per check) as this student draws them."""
    return {gid: [judge.draw(check, judge.case_rng(SECRET, assignment=A, notebook=A, grade_id=gid,
                                                   student=student, index=i))
                  for i, check in enumerate(checks)]
            for gid, checks in reference.checks.items()}


@pytest.mark.parametrize("student", STUDENTS)
def test_the_reference_passes_its_own_checks(reference, student):
    for gid, per_check in drawn(reference, student).items():
        for check, cases in zip(reference.checks[gid], per_check, strict=True):
            for one, want in zip(cases, reference.expected(check, cases), strict=True):
                if one.must_name:
                    assert want.get("raised", [None])[0] == "ValueError", (gid, one.about, want)
                    assert any(name in want["message"] for name in one.must_name), (gid, one.about)
                else:
                    assert "value" in want, (gid, one.about, want)
                assert judge.judge_case(check, one, want, want) is None, (gid, one.about)


def test_every_part_draws_other_cases_for_another_student(reference):
    mine, theirs = (drawn(reference, student) for student in STUDENTS)
    assert set(mine) == {"test_step", "test_step_edges", "test_simulate_alone", "test_simulate_load",
                         "test_goodput", "test_best_policy"}
    for gid in mine:
        assert [[c.variables for c in cases] for cases in mine[gid]] != \
            [[c.variables for c in cases] for cases in theirs[gid]], gid


def cases_about(reference, gid: str, about: str, student: str = STUDENTS[0]) -> list[judge.Case]:
    found = [c for cases in drawn(reference, student)[gid] for c in cases if c.about.startswith(about)]
    assert found, (gid, about)
    return found


@pytest.mark.parametrize("student", STUDENTS)
def test_the_scheduler_edge_cases_are_what_they_say(reference, student):
    for one in cases_about(reference, "test_step", "a long prompt admitted before", student):
        v = one.variables
        assert v["running"][0]["prompt_left"] > v["max_num_batched_tokens"]
        assert all(seq["prompt_left"] == 0 for seq in v["running"][1:]) and len(v["running"]) >= 2
    for one in cases_about(reference, "test_step_edges", "the budget exactly used", student):
        v = one.variables
        assert sum(seq["prompt_left"] or 1 for seq in v["running"]) == v["max_num_batched_tokens"]
        assert len(v["running"]) < v["max_num_seqs"] and v["waiting"]  # a slot is free: the budget stops
    for one in cases_about(reference, "test_step_edges", "no free slot", student):
        v = one.variables
        assert len(v["running"]) == v["max_num_seqs"] and v["waiting"]
        assert len(v["running"]) < v["max_num_batched_tokens"]  # budget is left: the slots stop the queue
    for one in cases_about(reference, "test_step_edges", "a prompt longer than", student):
        assert one.variables["waiting"][0]["prompt_len"] > one.variables["max_num_batched_tokens"]


def test_a_step_keeps_its_budget_its_slots_and_decodes_first(reference):
    schedule_step = reference.namespace["schedule_step"]
    rng = random.Random(0)
    for _ in range(2000):
        max_num_seqs = rng.choice((1, 2, 4, 8, 16))
        budget = rng.randint(max_num_seqs, 600)
        running = [{"id": f"r{i}", "prompt_left": rng.choice((0, 0, rng.randint(1, 900)))}
                   for i in range(rng.randint(0, max_num_seqs))]
        waiting = [{"id": f"w{i}", "prompt_len": rng.randint(1, 900)} for i in range(rng.randint(0, 4))]
        step = schedule_step(running, waiting, budget, max_num_seqs)
        assert 0 < sum(step.values()) <= budget or not (running or waiting)
        assert all(tokens > 0 for tokens in step.values())
        assert all(step[seq["id"]] == 1 for seq in running if seq["prompt_left"] == 0)
        joined = [r["id"] for r in waiting if r["id"] in step]
        assert joined == [r["id"] for r in waiting[:len(joined)]], "first come, first served"
        assert len(running) + len(joined) <= max_num_seqs


def test_requests_served_alone_are_alone_and_loaded_traces_share_steps(reference):
    simulate = reference.namespace["simulate"]
    for one in cases_about(reference, "test_simulate_alone", "requests served one at a time"):
        v = one.variables
        done = simulate(v["requests"], v["max_num_batched_tokens"], v["max_num_seqs"], v["cost"])["done_ms"]
        assert all(end < later["arrival_ms"] for end, later in zip(done, v["requests"][1:], strict=False))
    for one in cases_about(reference, "test_simulate_load", "a "):
        v = one.variables
        done = simulate(v["requests"], v["max_num_batched_tokens"], v["max_num_seqs"], v["cost"])["done_ms"]
        overlapping = sum(end > later["arrival_ms"]
                          for end, later in zip(done, v["requests"][1:], strict=False))
        assert overlapping >= len(v["requests"]) // 4, one.about  # under load, requests share steps


def test_best_policy_ties_go_to_the_smaller_budget_then_fewer_sequences(reference):
    (tie,) = cases_about(reference, "test_best_policy", "a light load")
    v = tie.variables
    simulate, goodput = reference.namespace["simulate"], reference.namespace["goodput_per_s"]
    every = {goodput(v["requests"], simulate(v["requests"], b, s, v["cost"]), v["slo"])
             for b in v["budgets"] for s in v["seq_limits"]}
    assert len(every) == 1, "the case is a tie"
    best = reference.namespace["best_policy"](**v)
    assert (best["max_num_batched_tokens"], best["max_num_seqs"]) == (min(v["budgets"]), min(v["seq_limits"]))


def points(reference, sample: str, student: str) -> dict[str, float]:
    """Each grade cell's points for a sample submission, its cells run here and judged on the hidden cases."""
    nb, namespace = samples.submission(sample, A), {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and not meta.get("grade") and meta.get("grade_id") != "explore":
            with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()):
                exec(cell.source, namespace)  # noqa: S102
    got = {}
    for gid, per_check in drawn(reference, student).items():
        right = all(
            judge.judge_case(check, one, want, collect.outcome(check.call, one.variables, namespace)) is None
            for check, cases in zip(reference.checks[gid], per_check, strict=True)
            for one, want in zip(cases, reference.expected(check, cases), strict=True))
        got[gid] = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == gid
                        ).metadata["nbgrader"]["points"] * right
    return got


@pytest.mark.parametrize("student", STUDENTS)
def test_each_misconception_loses_the_parts_it_breaks_whoever_draws_the_cases(reference, student):
    assert sum(points(reference, "correct", student).values()) == samples.FULL[A]
    wrong = points(reference, "wrong", student)  # prompt chunks before the decodes
    lost = ["test_step", "test_simulate_load", "test_best_policy"]
    assert [gid for gid, p in wrong.items() if not p] == lost
    slip = points(reference, f"{A}_slip", student)  # the first token at the first chunk
    assert [gid for gid, p in slip.items() if not p] == ["test_simulate_alone", "test_simulate_load",
                                                         "test_best_policy"]
    assert sum(wrong.values()) == samples.EXPECTED["wrong", A][0]
    assert sum(slip.values()) == samples.EXPECTED[f"{A}_slip", A][0]
