"""benchmarks.grading: the report's grading section (honest class, parallel rounds, sample mix), with grading
itself replaced by a fake that grades nothing; CPU time of processes nobody reaps."""

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import grading, postgres, report
from hwopt.course.grading import cluster, demo, grade, samples, settings
from tests.support import skip_outside_ci

SECRET, UNSANDBOXED = settings.SECRET.name, settings.UNSANDBOXED.name


def test_grading_time_by_class_size_accumulates_each_students_notebooks():
    rows = [{"student": "s1", "seconds": "2"}, {"student": "s1", "seconds": "4"},
            {"student": "s2", "seconds": "6"}]
    assert grading.cumulative_by_student(rows) == [
        {"class_size": 1, "notebooks": 2, "total_s": 6.0, "s_per_notebook": 3.0},
        {"class_size": 2, "notebooks": 3, "total_s": 12.0, "s_per_notebook": 4.0}]


def test_environment_sets_only_unset_variables_and_restores_them(monkeypatch):
    monkeypatch.setenv("HWOPT_BENCH_KEPT", "mine")
    monkeypatch.delenv("HWOPT_BENCH_NEW", raising=False)
    with grading.environment(HWOPT_BENCH_KEPT="demo", HWOPT_BENCH_NEW="demo", HWOPT_BENCH_NONE=None):
        assert os.environ["HWOPT_BENCH_KEPT"] == "mine" and os.environ["HWOPT_BENCH_NEW"] == "demo"
        assert "HWOPT_BENCH_NONE" not in os.environ
    assert os.environ["HWOPT_BENCH_KEPT"] == "mine" and "HWOPT_BENCH_NEW" not in os.environ


class FakeGrading:
    """What benchmarks/grading.py calls of hwopt.course.grading, grading nothing (set in place by `fake`)."""

    ASSIGNMENTS = ("a", "b")

    def __init__(self, monkeypatch, rows=None, fail=None, on_cluster="ok"):
        self.rows, self.fail, self.on_cluster, self.seen = rows, fail, on_cluster, {}
        names = ("correct", "blank", "hangs")
        for owner, name, value in (
                (samples, "STUDENTS", dict.fromkeys(names)),
                (samples, "class_of", lambda n: {f"s{i}": names[i % 3] for i in range(n)}),
                (samples, "write_submissions", self.write_submissions),
                (grade, "grade_class", self.grade_class), (cluster, "local_cluster", self.local_cluster),
                (demo, "demo", self.demo),
                (grading, "released_course", self.released_course)):
            monkeypatch.setattr(owner, name, value)

    def released_course(self, folder, db_url=None):
        self.seen.setdefault("released", []).append(db_url)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    @contextlib.contextmanager
    def local_cluster(self, workers):
        self.seen["cluster"] = (workers, os.environ.get(SECRET))
        yield SimpleNamespace(scheduler_address="tcp://127.0.0.1:8786")

    def write_submissions(self, submitted, students, targets_only=False):
        self.seen["students"] = students
        return [(s, a) for s in students for a in self.ASSIGNMENTS]

    def grade_class(self, folder, log=print, **options):
        self.seen["env"] = {k: os.environ.get(k) for k in (SECRET, UNSANDBOXED)}
        self.seen.setdefault("options", []).append(options)
        if self.fail:
            raise self.fail
        status = self.on_cluster if "scheduler" in options else "ok"
        return self.rows if self.rows is not None else [
            SimpleNamespace(student=s, assignment=a, status=status, score=5.0, max_score=5.0, seconds=0.01,
                            notes=[] if status == "ok" else ["ModuleNotFoundError: hwopt"])
            for s in self.seen["students"] for a in self.ASSIGNMENTS]

    def demo(self, folder, n, timeout_s, targets_only=False, log=print):
        self.seen["env"] = os.environ.get(SECRET)
        self.seen["cpu_seconds"] = demo.cpu_seconds
        self.seen["targets_only"] = targets_only
        folder.mkdir(parents=True)
        (folder / "grades_report.csv").write_text("student,status,seconds\ns0,ok,2.0\ns0,ok,4.0\n")
        return {"students": 1, "notebooks_submitted": 2, "seconds": 6.5, "seconds_per_notebook": 3.25,
                "cpu_seconds_per_notebook": 1.5, "unexpected": []}


@pytest.fixture
def fake(monkeypatch):
    """A FakeGrading in place, with no secret and no unsandboxed setting in the environment."""
    for name in (SECRET, UNSANDBOXED):
        monkeypatch.delenv(name, raising=False)
    return lambda **options: FakeGrading(monkeypatch, **options)


def test_the_honest_class_submits_correct_solutions_under_the_demo_secret(fake, tmp_path):
    graded = fake()
    row = grading.measure_honest(tmp_path, quick=False)
    assert set(graded.seen["students"].values()) == {"correct"} and len(graded.seen["students"]) == 5
    assert graded.seen["env"] == {SECRET: demo.DEMO_SECRET, UNSANDBOXED: None}
    assert SECRET not in os.environ  # set for the run only
    assert row["available"] and row["notebooks"] == 10 and row["students"] == 5 and row["sandboxed"]
    assert grading.measure_honest(tmp_path, quick=True)["students"] == grading.HONEST_STUDENTS[True] == 2


def test_an_instructors_secret_is_kept(fake, monkeypatch, tmp_path):
    monkeypatch.setenv(SECRET, "the instructor's")
    graded = fake()
    grading.measure_honest(tmp_path, quick=True)
    assert graded.seen["env"][SECRET] == "the instructor's"


def test_without_a_sandbox_the_honest_class_is_graded_unsandboxed_and_says_so(fake, tmp_path):
    graded = fake()
    row = grading.measure_honest(tmp_path, quick=True, sandbox_reason="bubblewrap is not installed")
    assert graded.seen["env"][UNSANDBOXED] == "1" and UNSANDBOXED not in os.environ
    assert row["sandboxed"] is False and row["verdict"] == report.UNAVAILABLE
    assert "bubblewrap is not installed" in row["note"]


def test_an_honest_class_short_of_full_marks_or_failing_grading_gives_no_verdict(fake, tmp_path):
    rows = [SimpleNamespace(assignment="a", status="ok", score=5.0, max_score=5.0, seconds=0.01),
            SimpleNamespace(assignment="b", status="autograde failed", score=0.0, max_score=5.0,
                            seconds=0.01)]
    fake(rows=rows)
    row = grading.measure_honest(tmp_path, quick=True, n_students=1)  # 2 assignments: 2 notebooks
    assert row["not_full_marks"] == 1 and row["verdict"] == report.UNAVAILABLE
    fake(rows=rows[:1])
    lost = grading.measure_honest(tmp_path, quick=True, n_students=1)
    assert lost["available"] is False and lost["reason"] == "2 notebooks submitted, 1 graded"
    fake(fail=SystemExit("no instructor secret"))
    failed = grading.measure_honest(tmp_path, quick=True)
    assert failed["available"] is False and "no instructor secret" in failed["reason"]
    with pytest.raises(ValueError, match="n_students"):
        grading.measure_honest(tmp_path, quick=True, n_students=-1)


def test_the_sample_mix_counts_the_kernels_cpu_and_covers_every_sample(fake):
    graded, cpu_seconds = fake(), demo.cpu_seconds
    summary, series, notes = grading.measure_samples(quick=False)
    assert graded.seen["env"] == demo.DEMO_SECRET and SECRET not in os.environ
    assert graded.seen["cpu_seconds"] != cpu_seconds  # the demo's clock replaced for the run, then restored
    assert demo.cpu_seconds is cpu_seconds
    assert graded.seen["targets_only"] and summary["targets_only"]  # each sample: what it is about
    assert summary["samples_covered"] == summary["samples_total"] == 3 and summary["cell_timeout_s"] == 10
    assert summary["statuses"] == {"ok": 2} and series[-1]["total_s"] == 6.0
    assert "), each submitting the assignments its sample is about" in report.grading_paragraph(None, summary)
    assert grading.measure_samples(quick=True)[0]["samples_covered"] == 1


def test_without_a_sandbox_the_attack_samples_are_not_graded(monkeypatch, fake):
    fake()
    monkeypatch.setattr(grading, "sandbox_state", lambda: ("no user namespaces", False))
    monkeypatch.setattr(grading, "measure_samples", lambda *a, **k: pytest.fail("graded the attack samples"))
    honest, mix, series, notes, parallel = grading.measure(quick=True)
    assert mix["available"] is False and "attack samples" in mix["reason"]
    assert "no user namespaces" in mix["reason"] and series == []
    assert honest["sandboxed"] is False and "no user namespaces" in honest["note"]
    assert parallel["verdict"] == report.UNAVAILABLE and "no verdict" in parallel["reason"]  # nothing run


def test_grading_is_reported_not_available_when_the_assignments_cannot_be_released(monkeypatch, fake):
    fake()

    def broken(folder, db_url=None):
        raise RuntimeError("generate_assignment latency_budget failed")

    monkeypatch.setattr(grading, "released_course", broken)
    honest, mix, series, notes, parallel = grading.measure(quick=True)
    for row in (honest, mix, parallel):
        assert row["available"] is False and "releasing the assignments failed" in row["reason"]
        assert "generate_assignment latency_budget failed" in row["reason"]
    assert series == [] and honest["verdict"] == parallel["verdict"] == report.UNAVAILABLE


def test_the_parallel_goal_is_not_measured_without_a_serial_verdict_or_a_second_core(fake, tmp_path):
    fake()
    short = report.grading_unavailable("the honest class run failed: boom")
    assert "no verdict (the honest class run failed: boom)" in grading.measure_parallel(
        tmp_path, short, quick=True, workers=2)["reason"]
    assert "one core" in grading.measure_parallel(tmp_path, short, quick=True, workers=1)["reason"]


def test_the_parallel_goal_grades_rounds_on_a_cluster_started_with_the_secret(fake, tmp_path):
    if postgres.why_no_server():
        skip_outside_ci(postgres.why_no_server())
    serial = report.grading_row([1.0] * 4, 4.0, 3.0, students=2)
    graded = fake()
    row = grading.measure_parallel(tmp_path, serial, quick=False, workers=2)
    rounds = grading.PARALLEL_ROUNDS[False][1]
    assert rounds >= 3, "a median of fewer rounds is one unlucky minute away from the wrong verdict"
    assert row["available"] and row["same_scores"] and row["rounds"] == len(row["speedups"]) == rounds
    assert graded.seen["cluster"] == (2, demo.DEMO_SECRET)  # its workers get the secret when they start
    (template,) = graded.seen["released"]  # the assignments released once, into the template database
    on_cluster = [o for o in graded.seen["options"] if "scheduler" in o]
    urls = {o["db_url"] for o in on_cluster}
    assert len(on_cluster) == len(urls) == rounds + 1  # warm-up and every round: a fresh gradebook
    assert all(url.startswith("postgresql://") and url != template for url in urls)
    assert "the cluster was started and warmed" in row["note"]
    fake(on_cluster="grader error")
    failed = grading.measure_parallel(tmp_path, serial, quick=True, workers=2)
    assert failed["verdict"] == report.UNAVAILABLE
    assert "graded 2 of 2 notebooks 'grader error' (ModuleNotFoundError: hwopt)" in failed["reason"]


def test_proc_stat_lines_parse_even_with_brackets_in_the_command():
    line = "4242 (a (weird) name) S 17 4242 4242 0 -1 4194560 100 0 0 0 25 7 3 1 20 0 1 0 98765 0 0"
    assert grading.parse_proc_stat(line) == (4242, 17, 32, 98765)
    with pytest.raises(ValueError, match="stat"):
        grading.parse_proc_stat("garbage")


def test_the_process_tree_keeps_orphans_and_ignores_reused_pids():
    known = grading.grow_tree({}, [(12, 11, 5, 1), (11, 10, 3, 1), (10, 1, 1, 1), (20, 1, 9, 1)], root=10)
    assert known == {(11, 1): 3, (12, 1): 5}  # children listed before their parents still join
    known = grading.grow_tree(known, [(12, 1, 8, 1), (13, 12, 2, 5), (11, 1, 4, 9), (14, 11, 6, 9)], root=10)
    assert known == {(11, 1): 3, (12, 1): 8, (13, 5): 2}  # 12 reparented stays; pid 11 reused is not ours


def test_tree_cpu_counts_a_process_its_parent_never_reaps():
    loop = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.4: pass"
    burn = f"{sys.executable} -c '{loop}' &"
    with grading.TreeCPU(interval_s=0.02) as tree:
        pid = int(subprocess.run(["sh", "-c", burn + " echo $!; sleep 0.1"], capture_output=True,
                                 text=True, check=True).stdout)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            if (Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split() or ["Z"])[0] == "Z":
                break
            time.sleep(0.02)
    assert tree.seconds >= 0.3
