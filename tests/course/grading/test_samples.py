"""course.grading.samples: every sample submission builds from the current source/ and release/."""

import contextlib
import io

import nbformat
import pytest

from hwopt.course.grading import collect, course, judge, samples
from hwopt.course.grading.course import ROOT
from hwopt.course.grading.plugins import load_reference


def test_every_sample_builds_a_submission_for_every_assignment(tmp_path):
    written = samples.write_submissions(tmp_path / "submitted")
    missing = {(s, a) for s in samples.STUDENTS for a in course.ASSIGNMENTS} - set(written)
    assert missing == {("missing", "latency_budget")}  # the sample whose notebook never arrives
    for student, assignment in written:
        path = tmp_path / "submitted" / student / assignment / f"{assignment}.ipynb"
        if (student, assignment) != ("invalid_json", "quiz"):
            nbformat.validate(nbformat.read(path, as_version=4))


def test_every_expected_score_is_of_a_target_and_within_the_assignments_points():
    for (student, assignment), (score, status) in samples.EXPECTED.items():
        assert assignment in samples.TARGETS[student], (student, assignment)
        assert 0 <= score <= samples.FULL[assignment] and status
    assert {a for _, a in samples.EXPECTED} == set(course.ASSIGNMENTS)
    assert set(samples.TARGETS) == set(samples.STUDENTS)


def test_a_class_cycles_through_the_samples():
    klass = samples.class_of(len(samples.STUDENTS) + 2)
    assert list(klass)[:2] == ["student01", "student02"]
    assert set(klass.values()) == set(samples.STUDENTS)


def test_the_quiz_is_solved_for_the_id_it_is_graded_under():
    mine, theirs = (samples.submission("correct", "quiz", student_id=who) for who in ("ada", "grace"))
    answers = [next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "answers")
               for nb in (mine, theirs)]
    assert answers[0] != answers[1]


def points_with_the_whole_toolkit(assignment: str) -> float:
    """The adapter sample's points on an assignment when its kernel sees the whole toolkit (as the lessons
    do): its cells run here, every grade cell judged on its hidden cases against the reference."""
    nb, namespace = samples.submission("adapter", assignment), {}
    for cell in nb.cells:
        if cell.cell_type == "code" and not cell.metadata.get("nbgrader", {}).get("grade"):
            with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()):
                exec(cell.source, namespace)  # the release's unanswered cells raise NotImplementedError
    ref = load_reference(ROOT / "source" / assignment / f"{assignment}.ipynb")
    points = 0.0
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("grade") or cell.cell_type != "code":  # written answers are graded by people
            continue
        right = True
        for i, check in enumerate(ref.checks.get(meta["grade_id"], [])):
            cases = judge.draw(check, judge.case_rng(b"adapter", assignment=assignment, notebook=assignment,
                                                     grade_id=meta["grade_id"], student="adapter", index=i))
            right &= not any(judge.judge_case(check, one, want, collect.outcome(check.call, one.variables,
                                                                                  namespace))
                             for one, want in zip(cases, ref.expected(check, cases), strict=True))
        points += meta["points"] * right
    return points


# The adapter's points with the whole toolkit, measured: what the grading kernels' toolkit takes away. Not
# attacked: the quiz (no toolkit function answers it), profiling (the toolkit has no union of intervals nor
# the fix table, and its Amdahl speedup refuses the infinite local speedup that part checks) and
# continuous_batching (the toolkit's chunked-prefill simulator keeps decodes out of the token budget and gives
# no time per output token per request; the load generator's goodput, fed the results, converts ms to s and
# misses the cases that sit exactly on the SLO).
WOULD_SCORE = {"roofline": 6.0, "memory_kv": 2.0, "batching": 5.0, "latency_budget": 9.0,
               "bandwidth_precision": 6.0, "fusion": 5.0, "quantize": 10.0, "serving_queue": 5.0,
               "beyond_one_chip": 6.0, "kv_paging": 4.0, "quantize_layer": 6.0, "speculative_decoding": 4.0,
               "number_formats": 2.0}


def test_every_assignment_the_toolkit_could_answer_has_an_adapter():
    unattacked = {"quiz", "profiling", "continuous_batching"}
    assert set(samples.ADAPTERS) == set(WOULD_SCORE) == set(course.ASSIGNMENTS) - unattacked
    assert samples.TARGETS["adapter"] == tuple(samples.ADAPTERS)


@pytest.mark.parametrize("assignment", sorted(samples.ADAPTERS))
def test_an_adapter_would_score_with_the_whole_toolkit_and_must_score_zero_graded(assignment):
    assert points_with_the_whole_toolkit(assignment) == WOULD_SCORE[assignment] > 0  # it attacks real work
    assert samples.EXPECTED["adapter", assignment] == (0.0, "ok")  # grading kernels see none of it
