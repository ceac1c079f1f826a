"""Assignment kv_paging: the reference passes its own checks, students draw their own traces, and the traces
show what each grade cell is about."""

import contextlib
import io

import matplotlib
import pytest

from hwopt.cost import footprint, moe, paging, phases, shapes
from hwopt.course.grading import judge, samples
from hwopt.course.grading.course import ROOT
from hwopt.course.grading.plugins import load_reference
from hwopt.machine import specs
from tests import support

ASSIGNMENT = "kv_paging"
STUDENTS = ("ada", "grace")


@pytest.fixture(scope="module")
def reference():
    matplotlib.use("Agg")  # the "See it" cell plots
    return load_reference(ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")


def drawn(reference, grade_id: str, student: str) -> list[tuple[judge.Check, list[judge.Case]]]:
    """Each check of a grade cell with the cases a student draws (a fixed secret)."""
    return support.drawn(reference, ASSIGNMENT, grade_id, student)


def traces(reference, grade_id: str, student: str = STUDENTS[0]) -> list[dict]:
    """The replay cases (their variables) of a grade cell that expect values."""
    return [one.variables for _, cases in drawn(reference, grade_id, student) for one in cases
            if not one.must_name]


def test_the_reference_passes_its_own_checks_and_students_draw_other_cases(reference):
    assert set(reference.checks) == {"test_allocate", "test_sharing", "test_copy_on_write", "test_eviction",
                                     "test_kv_bytes", "test_decode_bound"}
    support.check_reference_and_draws(reference, ASSIGNMENT, STUDENTS)
    for grade_id in reference.checks:
        assert all(len(cases) >= 4 for _, cases in drawn(reference, grade_id, STUDENTS[0])), grade_id


def invariants(stats: list[dict], n_blocks: int) -> None:
    """What every allocator's stats obey: the pool adds up, sharing only saves, counts only grow."""
    for before, after in zip([None, *stats], stats, strict=False):
        assert after["blocks_in_use"] + after["free_blocks"] == n_blocks
        assert after["blocks_in_use"] <= sum(after["blocks_per_seq"].values())
        if before:
            for count in ("cow_copies", "admitted", "refused", "evicted"):
                assert after[count] >= before[count]


def test_each_cell_draws_traces_that_show_what_it_grades(reference):
    replay = reference.namespace["replay"]
    for grade_id in ("test_allocate", "test_sharing", "test_copy_on_write", "test_eviction"):
        for student in STUDENTS:
            last = []
            for variables in traces(reference, grade_id, student):
                stats = replay(**variables)
                invariants(stats, variables["n_blocks"])
                last.append(stats[-1])
            if grade_id == "test_allocate":  # nothing shared, copied, refused or evicted
                assert all(s["cow_copies"] == s["refused"] == s["evicted"] == 0 for s in last)
            if grade_id == "test_sharing":  # sharing without a copy: forks end on full blocks
                assert all(s["cow_copies"] == 0 for s in last)
            if grade_id == "test_copy_on_write":
                assert sum(s["cow_copies"] > 0 for s in last) >= 4
            if grade_id == "test_eviction":
                assert sum(s["evicted"] > 0 and s["refused"] > 0 for s in last) >= 3


def test_paged_blocks_are_the_lessons_paged_allocation(reference):
    """Without sharing, the blocks held are what lesson 8's paging model holds for the same lengths."""
    lengths = [1, 15, 16, 17, 300, 4096]
    events = [{"op": "admit", "seq": f"r{i}", "tokens": [i] * n} for i, n in enumerate(lengths)]
    stats = reference.namespace["replay"](events, 10_000, 16)
    held = paging.held_tokens(lengths, "paged", max_len=4096, block_size=16)
    assert stats[-1]["blocks_in_use"] * 16 == held.sum()


@pytest.mark.parametrize("name", [s.name for s in shapes.load_shapes()
                                  if s.attention != "MLA" and not s.is_moe and not s.sliding_window])
def test_the_bytes_are_the_toolkits(reference, name):
    ns = reference.namespace
    model, h100 = ns["model"](name), ns["chip"]("NVIDIA H100 SXM")
    shape = footprint.get_shape(name)
    assert ns["kv_bytes"](model, 100, 16, 2)["per_token"] == phases.kv_bytes_per_token(shape, "fp16")
    step = ns["decode_step_bound"](model, h100, 8, 1000, 2, 2)
    read = moe.weight_bytes_read(shape, 8, "fp16") + footprint.kv_cache_bytes(shape, 8, 1000, "fp16")
    bandwidth_gbs = specs.get_chip("NVIDIA H100 SXM").bandwidth_gbs
    assert step["step_ms"] == pytest.approx(read / (bandwidth_gbs * 1e9) * 1e3)


def test_the_model_helper_refuses_what_its_formula_leaves_out(reference):
    for name in ("DeepSeek-V3", "Qwen3-30B-A3B", "gpt-oss-20b"):
        with pytest.raises(ValueError, match="name"):
            reference.namespace["model"](name)


@pytest.mark.parametrize(("sample", "failing"), [("wrong", "test_sharing"),
                                                 ("kv_paging_slip", "test_copy_on_write")])
def test_each_misconception_fails_a_visible_test_that_names_it(sample, failing):
    """The student sees what is wrong before submitting: a visible assert fails, its message on the
    concept."""
    matplotlib.use("Agg")
    nb, namespace, messages = samples.submission(sample, ASSIGNMENT), {}, {}
    for cell in nb.cells:
        if cell.cell_type != "code" or "colab-setup" in cell.metadata.get("tags", []):
            continue
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(cell.source.replace("plt.show()", ""), namespace)  # noqa: S102
        except AssertionError as err:
            messages[cell.metadata["nbgrader"]["grade_id"]] = str(err)
    assert failing in messages
    assert "copy" in messages[failing] if sample == "kv_paging_slip" else "holds" in messages[failing]

