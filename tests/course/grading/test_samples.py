"""course.grading.samples: every sample submission builds from the current source/ and release/."""

import nbformat

from hwopt.course.grading import course, samples


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
