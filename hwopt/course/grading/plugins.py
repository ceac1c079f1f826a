"""The nbgrader plug-ins of the course (nbgrader_config.py wires them in).

- RestoreCellMetadata puts back nbgrader cell metadata lost on the way (copy-pasted cells, edited flags).
- JudgedExecute runs the submission in a sandboxed kernel, leaving hidden regions out; after each grade cell
  it asks the kernel for the student's outcomes on that cell's cases and lets the judge, in this process,
  decide the points. A cell that ignores the interrupt (or a dead kernel) costs a restart, not the grade;
  every message beyond a byte cap per cell and per notebook is dropped with a note (grading.outputs); the
  whole notebook has a wall-clock cap (notebook_timeout): the cells not reached by then are not run, and
  their parts score 0 with that reason.
- FeedbackExporter writes nbgrader's feedback page with its templates compiled once per grading process.
- LmsFileNameCollector maps LMS file names ("Copy of quiz (1).ipynb") to the released notebook names.
"""

from __future__ import annotations

import copy
import json
import math
import os
import secrets
import time
from pathlib import Path

import jinja2
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import ensure_async, run_sync
from nbconvert.exporters import HTMLExporter
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.coursedir import CourseDirectory
from nbgrader.plugins import FileNameCollectorPlugin
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Integer

from hwopt.course.grading import collect, judge, kernel, settings
from hwopt.course.grading.notebooks import normalise_notebook_name, normalise_source, strip_hidden_tests
from hwopt.course.grading.outputs import SHOWN, OutputCaps, capped_note, mark_shown
from hwopt.course.grading.reference import Reference, grade_id
from hwopt.course.grading.sandbox import SandboxedKernelManager

COLLECT_SOURCE = Path(collect.__file__).read_text()
_references: dict[tuple[str, float], Reference] = {}


def load_reference(path: Path) -> Reference:
    """The assignment notebook's reference, run once per process (again when the file changes), whichever
    course folder's link to source/ leads to it."""
    path = Path(path).resolve()
    key = (str(path), path.stat().st_mtime)
    if key not in _references:
        _references[key] = Reference.load(path)
    return _references[key]


def collect_code(call: str, cases: list[judge.Case], mark: str) -> str:
    """The code the student's kernel runs to report its outcomes of call on the cases."""
    variables = json.dumps([c.variables for c in cases])
    return (f"__hwopt_judge = {{}}\nexec({COLLECT_SOURCE!r}, __hwopt_judge)\n"
            f"__hwopt_judge['report']({call!r}, {variables!r}, globals(), {mark!r})\ndel __hwopt_judge")


def timed_out(cell) -> bool:
    """True when the cell ran past the timeout (nbclient interrupted it and recorded the error)."""
    return any(o.output_type == "error" and o.ename == "CellTimeoutError" for o in cell.outputs)


def no_points(cell, why: str) -> judge.Verdict:
    """The verdict on a grade cell whose cases could not be run: 0 points, and why."""
    return judge.verdict(float(cell.metadata["nbgrader"]["points"]), [], 0, why)


JUDGED_OUTPUTS = 2  # the outputs judged_outputs adds after the student's: the verdict, then the score


def judged_outputs(outputs: list, result: judge.Verdict) -> list:
    """A grade cell's outputs after judging: its own output as plain text, the verdict, then the score.

    Nothing the student's kernel sent can score: errors and stderr become text, results become displays,
    and the last JUDGED_OUTPUTS outputs are the judge's (the verdict; a score nbgrader reads, or an error
    for 0).
    """
    shown = []
    for out in outputs:
        if out.output_type == "stream":
            shown.append(new_output("stream", name="stdout", text=out.text))
        elif out.output_type == "error":
            text = f"Visible check: {out.ename}: {out.evalue}\n"
            shown.append(new_output("stream", name="stdout", text=text))
        elif out.output_type in ("display_data", "execute_result"):
            shown.append(new_output("display_data", data=out.data, metadata=out.get("metadata", {})))
    shown.append(new_output("stream", name="stdout", text=result.text()))
    if result.points > 0:
        score = {"text/plain": repr(result.points)}
        shown.append(new_output("execute_result", data=score, execution_count=None))
    else:
        evalue = f"0 of {result.max_points:g} points"
        shown.append(new_output("error", ename="Judged", evalue=evalue, traceback=[f"Judged: {evalue}"]))
    return shown


class RestoreCellMetadata(NbGraderPreprocessor):
    """Re-attach nbgrader metadata to cells that lost it, and reset edited flags, from the gradebook."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            try:
                notebook = gb.find_notebook(info["notebook"], info["assignment"])
            except MissingEntry:
                return nb, resources
            points = {c.name: float(c.max_score) for c in notebook.grade_cells}
            solutions = {c.name for c in notebook.solution_cells}
            template = [(c.name, c.cell_type, bool(c.locked), c.source) for c in notebook.source_cells]
        meta = {
            name: {"grade": name in points, "solution": name in solutions, "locked": locked, "grade_id": name,
                   "schema_version": 3, **({"points": points[name]} if name in points else {})}
            for name, _, locked, _ in template
        }
        present = set()
        for cell in nb.cells:  # known ids: reset the flags a student may have edited
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in meta:
                cell.metadata["nbgrader"] = {**cell.metadata["nbgrader"], **meta[grade_id]}
                present.add(grade_id)
        for cell in nb.cells:  # cells without metadata: match unchanged locked/stub cells by their source
            if cell.metadata.get("nbgrader", {}).get("grade_id"):
                continue
            for name, cell_type, _, source in template:
                if name not in present and cell_type == cell.cell_type and normalise_source(
                        strip_hidden_tests(source)) == normalise_source(cell.source):
                    self.log.warning("Restoring nbgrader metadata of cell %s (matched by its content)", name)
                    cell.metadata["nbgrader"] = copy.deepcopy(meta[name])
                    present.add(name)
                    break
        # Answers that lost their metadata (a written answer, edited): the cell of the same type right after
        # the restored cell that precedes them in the source (nbgrader cannot place a missing grade cell after
        # a cell that is neither a grade nor a solution cell, such as a written answer's question)
        where = {c.metadata.get("nbgrader", {}).get("grade_id"): i for i, c in enumerate(nb.cells)}
        for (before, _, _, _), (name, cell_type, _, _) in zip(template, template[1:], strict=False):
            after = where.get(before, len(nb.cells)) + 1
            if name in solutions and name not in present and after < len(nb.cells):
                cell = nb.cells[after]
                if cell.cell_type == cell_type and not cell.metadata.get("nbgrader", {}).get("grade_id"):
                    self.log.warning("Restoring nbgrader metadata of cell %s (matched by its place)", name)
                    cell.metadata["nbgrader"] = copy.deepcopy(meta[name])
                    present.add(name)
                    where[name] = after
        self._restore_written_answers(nb, template, meta, present)
        return nb, resources

    def _restore_written_answers(self, nb, template, meta, present) -> None:
        """A deleted written answer comes back unanswered, after the cell it follows in the release.

        nbgrader's OverwriteCells re-adds a deleted grade cell after the previous grade or solution cell, and
        fails when that is a locked question (a markdown cell that is neither).
        """
        names = [name for name, *_ in template]
        for i, (name, cell_type, locked, source) in enumerate(template):
            if name in present or cell_type != "markdown" or locked or not meta[name]["grade"]:
                continue
            self.log.warning("Restoring deleted written answer %s (unanswered)", name)
            answer = new_markdown_cell(source, metadata={"nbgrader": copy.deepcopy(meta[name])})
            ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
            before = names[i - 1] if i else None
            nb.cells.insert(ids.index(before) + 1 if before in ids else len(nb.cells), answer)
            present.add(name)


class JudgedExecute(Execute):
    """Execute in a sandboxed kernel; every grade cell's points come from the judge, outside that kernel."""

    max_restarts = Integer(3, help="Kernel restarts per notebook before the remaining cells are skipped").tag(
        config=True)
    max_cell_output_bytes = Integer(1_000_000, help="Output kept per cell (bytes)").tag(config=True)
    max_notebook_output_bytes = Integer(5_000_000, help="Output kept per notebook (bytes)").tag(config=True)
    notebook_timeout = Integer(int(settings.NOTEBOOK_TIMEOUT_S.default), help=(
        "Seconds one notebook may take in all, kernel starts, restarts and re-runs included: the cells not "
        f"reached by then are not run and their parts score 0 (also {settings.NOTEBOOK_TIMEOUT_S.name})"),
    ).tag(config=True)

    def __init__(self, **kwargs):
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(**kwargs)

    def preprocess(self, nb, resources=None, km=None):
        info = resources["nbgrader"]
        self._who = {key: info[key] for key in ("assignment", "notebook", "student")}
        self._secret = judge.load_secret()  # no secret, no grading: MissingSecret says how to make one
        kernel.check_environment()  # a bad kernel setting: named here, not by a kernel dying
        coursedir = CourseDirectory(config=self.config)
        source = Path(coursedir.format_path(coursedir.source_directory, ".", info["assignment"]))
        self._reference = load_reference(source / f"{info['notebook']}.ipynb")
        self._done: list[tuple[int, NotebookNode]] = []
        self._restarts, self._probing, self._cases_sent = 0, False, False
        self._caps = OutputCaps(self.max_cell_output_bytes, self.max_notebook_output_bytes)
        self._deadline = time.monotonic() + self.notebook_timeout
        for cell in nb.cells:
            cell.metadata.pop(SHOWN, None)  # only this grader says what feedback shows, never a submission
        return super().preprocess(nb, resources, km)

    def _time_left(self) -> float:
        """Seconds left of the notebook's wall-clock cap."""
        return self._deadline - time.monotonic()

    def _get_timeout(self, cell) -> int | None:
        """The cell timeout, or less: what is left of the notebook's cap (at least a second)."""
        timeout = super()._get_timeout(cell)
        return max(1, min(timeout or math.inf, math.ceil(self._time_left())))

    async def async_start_new_kernel_client(self):
        client = await super().async_start_new_kernel_client()
        self.km.seal_run_dir()  # the kernel has bound its sockets: it may create no more files there
        return client

    # ---- running cells ----------------------------------------------------------------------------------

    def _error(self, cell, ename: str, evalue: str) -> None:
        cell.outputs.append(NotebookNode(output_type="error", ename=ename, evalue=evalue,
                                         traceback=[f"{ename}: {evalue}"]))

    def _run(self, cell, index: int, store_history: bool = True) -> bool:
        """Execute one cell; a hang past the interrupt or a dead kernel restarts it (False then)."""
        self._caps.new_cell()
        try:
            self.execute_cell(cell, index, store_history=store_history)
            return True
        except (CellTimeoutError, DeadKernelError) as err:
            what = ("died" if isinstance(err, DeadKernelError)
                    else f"did not stop within {self._get_timeout(cell)} s")
            self.log.error("Cell %d %s; restarting the kernel and re-running earlier cells", index, what)
            self._error(cell, type(err).__name__, f"the cell {what}; the kernel was restarted")
            self._recover()
            return False

    def _not_run(self) -> str | None:
        """Why no more cells run (the kernel lost, the notebook's time up), or None while they do."""
        if self._restarts > self.max_restarts:
            return "the kernel had to be restarted too often"
        if self._time_left() <= 0:
            return f"the notebook's {self.notebook_timeout} s ran out"
        return None

    def preprocess_cell(self, cell, resources, index):
        after_cases = self._cases_sent  # its output may hold hidden values: feedback shows only the grader's
        if why := self._not_run():
            if cell.cell_type == "code":
                if why.startswith("the notebook") and not getattr(self, "_expiry_logged", False):
                    self._expiry_logged = True
                    self.log.error("Notebook time limit reached (%d s): cells from %d on not run",
                                   self.notebook_timeout, index)
                cell.outputs = []
                self._error(cell, "NotRun", f"not run: {why}")
                if grade_id(cell):
                    cell.outputs = judged_outputs(cell.outputs, no_points(cell, f"not run: {why}"))
                mark_shown(cell, len(cell.outputs))  # every output is the grader's
            return cell, resources
        if cell.cell_type != "code":
            return cell, resources
        gid = grade_id(cell)
        source = cell.source
        cell.source = strip_hidden_tests(source)  # the hidden region is the judge's, never the kernel's
        ok = self._run(cell, index) and not timed_out(cell)
        cell.source = source
        if gid:
            stopped = self._not_run() or f"the cell did not finish within {self.timeout} s"
            result = self._judge(cell, gid, index) if ok else no_points(
                cell, f"{stopped}, so its cases were not run")
            cell.outputs = judged_outputs(cell.outputs, result)
        elif not any(o.output_type == "error" for o in cell.outputs):
            self._done.append((index, copy.deepcopy(cell)))  # replayed after a restart
        if after_cases:
            mark_shown(cell, JUDGED_OUTPUTS if gid else 0)
        return cell, resources

    def _recover(self) -> None:
        while self._not_run() is None:
            self._restarts += 1
            try:
                run_sync(self._restart_kernel)()
                for index, done in self._done:  # replay: rebuild the state later cells depend on
                    self.execute_cell(copy.deepcopy(done), index, store_history=True)
                return
            except (CellTimeoutError, DeadKernelError, RuntimeError):  # RuntimeError: no reply in time
                self.log.error("Replay after a restart failed; trying again")

    async def _restart_kernel(self) -> None:
        self.kc.stop_channels()
        await ensure_async(self.km.restart_kernel(now=True))
        self.kc = self.km.client()
        await ensure_async(self.kc.start_channels())
        ready_s = max(1, min(self.startup_timeout, self._time_left()))
        await ensure_async(self.kc.wait_for_ready(timeout=ready_s))
        self.km.seal_run_dir()

    def process_message(self, msg, cell, cell_index):
        """Every message with content counts against the byte caps (stream, displays and their updates,
        clear_output, results, errors, comms); past them the rest is dropped, with one note per cell."""
        if msg["msg_type"] in ("status", "execute_input") or self._caps.admit(msg, self._probing):
            return super().process_message(msg, cell, cell_index)
        self._note_capped(cell, cell_index)
        return None

    def on_cell_executed(self, **kwargs):
        # nbgrader adds the execute reply's error (the kernel's own ename, evalue and traceback) when IOPub
        # carried none: it counts against the caps like any output.
        reply = kwargs["execute_reply"]["content"]
        if reply.get("status") == "error" and not self._caps.admit({"content": reply}, self._probing):
            self._note_capped(kwargs["cell"], kwargs["cell_index"])
            return None
        return super().on_cell_executed(**kwargs)

    def _note_capped(self, cell, cell_index: int) -> None:
        if not self._caps.capped:
            self._caps.capped = True
            self.log.warning("Output capped in cell %d (%d bytes per cell, %d per notebook)", cell_index,
                             self.max_cell_output_bytes, self.max_notebook_output_bytes)
            cell.outputs.append(new_output("stream", name="stdout", text=capped_note(
                self.max_cell_output_bytes, self.max_notebook_output_bytes)))

    # ---- judging ----------------------------------------------------------------------------------------

    def _judge(self, cell, gid: str, index: int) -> judge.Verdict:
        """The verdict on one grade cell: its checks' outcomes from the student's kernel, judged here."""
        checks = self._reference.checks.get(gid) or []
        if not checks:
            self.log.error("Grade cell %s has no checks in its hidden region: it earns nothing", gid)
            return no_points(cell, "this part has no checks (tell your instructor)")
        max_points = float(cell.metadata["nbgrader"]["points"])
        drawn = [judge.draw(c, judge.case_rng(self._secret, grade_id=gid, index=i, **self._who))
                 for i, c in enumerate(checks)]
        n_cases = sum(map(len, drawn))
        wrong = []
        for check, cases in zip(checks, drawn, strict=True):
            got = self._collect(check, cases, index)
            if isinstance(got, str):
                return judge.verdict(max_points, [], n_cases, got)
            expected = self._reference.expected(check, cases)
            for one, want, outcome in zip(cases, expected, got, strict=True):
                why = judge.judge_case(check, one, want, outcome)
                if why:
                    wrong.append((one.about, why))
        return judge.verdict(max_points, wrong, n_cases)

    def _collect(self, check: judge.Check, cases: list[judge.Case], index: int) -> list | str:
        """The student's outcomes of check.call on the cases, as their kernel reported them (or why not)."""
        mark = f"hwopt-judge-{secrets.token_hex(8)}:"
        probe = new_code_cell(collect_code(check.call, cases, mark))
        cell, self._probing, self._cases_sent = self.nb.cells[index], True, True
        try:
            finished = self._run(probe, index, store_history=False)
        finally:
            self.nb.cells[index] = cell  # nbclient stores what it ran at the index: put the grade cell back
            self._probing = False
        if not finished:
            return "no result came back from your notebook (the kernel had to be restarted)"
        text = "".join(o.text for o in probe.outputs if o.output_type == "stream" and o.name == "stdout")
        if timed_out(probe):
            return f"no result came back from your notebook within {self._get_timeout(probe)} s"
        return judge.parse_report(text, mark, len(cases))


class CompiledTemplates(jinja2.BytecodeCache):
    """Jinja templates compiled once per process: a page's templates are loaded from here, not re-parsed.

    Jinja keys each template by its name and file, and recompiles one whose source changed (a checksum).
    """

    def __init__(self):
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        if bucket.key in self._code:
            bucket.bytecode_from_string(self._code[bucket.key])

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()


_compiled_templates = CompiledTemplates()


class FeedbackExporter(HTMLExporter):
    """nbgrader's feedback page (HTMLExporter, its templates and settings), templates compiled once.

    nbgrader makes a new exporter, so a new Jinja environment, for every page; compiling the feedback
    template and the ones it extends, again for every page, was a large share of a page's time.
    """

    def _create_environment(self):
        environment = super()._create_environment()
        environment.bytecode_cache = _compiled_templates
        return environment


class LmsFileNameCollector(FileNameCollectorPlugin):
    """zip_collect: named_regexp gives student_id and file_id; file_id is mapped to a released notebook."""

    def collect(self, submitted_file: str):
        info = super().collect(submitted_file)
        if not info:
            return info
        release = os.path.join(self.parent.coursedir.format_path(
            self.parent.coursedir.release_directory, ".", self.parent.coursedir.assignment_id))
        released = [f for f in os.listdir(release) if f.endswith(".ipynb")] if os.path.isdir(release) else []
        name = normalise_notebook_name(info["file_id"], released)
        if name is None and len(released) == 1:
            name = os.path.splitext(released[0])[0]  # one notebook per assignment: any .ipynb is it
        if name is None:
            self.log.warning("No released notebook matches %s", submitted_file)
            return None
        return {**info, "file_id": name}

