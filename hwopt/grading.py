"""Grading (the assignments): nbgrader plug-ins that make autograding robust, and a memory-limited kernel.

nbgrader_config.py wires these in:
- ``python -m hwopt.grading kernel -f CONNECTION_FILE`` starts an IPython kernel whose address space is capped
  (RLIMIT_AS, HWOPT_GRADER_MEMORY_GB, default 4): a huge allocation raises MemoryError in the student's cell.
- RestoreCellMetadata puts back nbgrader cell metadata lost on the way (copy-pasted cells, edited flags).
- RobustExecute restarts a kernel that ignores the interrupt after a timeout (or died) and carries on.
- StripTestTracebacks keeps only the last line of errors in test cells of the feedback (no hidden test lines).
- LmsFileNameCollector maps LMS file names ("Copy of quiz (1).ipynb") to the released notebook names.
"""

from __future__ import annotations

import copy
import os
import re
import resource
import sys

DEFAULT_MEMORY_GB = 4.0
HIDDEN_BEGIN, HIDDEN_END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"


def set_memory_limit(limit_gb: float) -> int:
    """Cap this process's address space at limit_gb GiB (soft and hard); returns the limit in bytes."""
    if isinstance(limit_gb, bool) or not isinstance(limit_gb, int | float) or not limit_gb > 0:
        raise ValueError(f"limit_gb must be a positive number of GiB; got {limit_gb!r}")
    limit_bytes = int(limit_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    return limit_bytes


def launch_kernel(argv: list[str]) -> None:
    """Set the memory limit, then replace this process with an ipykernel (the limit survives exec)."""
    set_memory_limit(float(os.environ.get("HWOPT_GRADER_MEMORY_GB", DEFAULT_MEMORY_GB)))
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *argv])


def strip_hidden_tests(source: str) -> str:
    """The source as students see it: lines between the hidden-test delimiters (inclusive) removed."""
    kept, hidden = [], False
    for line in source.split("\n"):
        if HIDDEN_BEGIN in line:
            hidden = True
        elif HIDDEN_END in line:
            hidden = False
        elif not hidden:
            kept.append(line)
    return "\n".join(kept)


def _normalise(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def normalise_notebook_name(filename: str, released: list[str]) -> str | None:
    """Released notebook name (without .ipynb) that an LMS/Colab file name refers to, or None."""
    stem = os.path.splitext(os.path.basename(filename))[0].lower()
    stem = re.sub(r"^(copy of |copy_of_)+", "", stem)  # Colab "Save a copy in Drive"
    stem = re.sub(r"([ _-]*(\(\d+\)|-\d+))+$", "", stem)  # browser/LMS duplicates: " (1)", "-1"
    stem = re.sub(r"[\s-]+", "_", stem)
    names = {os.path.splitext(name)[0].lower(): os.path.splitext(name)[0] for name in released}
    for candidate in (stem, *(name for name in names if stem.endswith("_" + name))):
        if candidate in names:
            return names[candidate]
    return None


if __name__ == "__main__":  # the kernel launcher: exec before the nbgrader imports below cost time/memory
    if len(sys.argv) < 2 or sys.argv[1] != "kernel":
        sys.exit("usage: python -m hwopt.grading kernel -f CONNECTION_FILE")
    launch_kernel(sys.argv[2:])

# ---- nbgrader plug-ins ----------------------------------------------------------------------------------

from nbclient.exceptions import CellTimeoutError, DeadKernelError  # noqa: E402
from nbclient.util import ensure_async, run_sync  # noqa: E402
from nbformat import NotebookNode  # noqa: E402
from nbgrader import utils as nbutils  # noqa: E402
from nbgrader.api import Gradebook, MissingEntry  # noqa: E402
from nbgrader.plugins import FileNameCollectorPlugin  # noqa: E402
from nbgrader.preprocessors import Execute, NbGraderPreprocessor  # noqa: E402
from traitlets import Integer  # noqa: E402


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
                if name not in present and cell_type == cell.cell_type and _normalise(
                        strip_hidden_tests(source)) == _normalise(cell.source):
                    self.log.warning("Restoring nbgrader metadata of cell %s (matched by its content)", name)
                    cell.metadata["nbgrader"] = copy.deepcopy(meta[name])
                    present.add(name)
                    break
        return nb, resources


class RobustExecute(Execute):
    """Execute that survives a cell ignoring the interrupt (or a dead kernel): restart, replay, continue."""

    max_restarts = Integer(3, help="Kernel restarts per notebook before the remaining cells are skipped").tag(
        config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._done: list[tuple[int, NotebookNode]] = []
        self._restarts = 0
        return super().preprocess(nb, resources, km)

    def _error(self, cell, ename: str, evalue: str) -> None:
        cell.outputs.append(NotebookNode(output_type="error", ename=ename, evalue=evalue,
                                         traceback=[f"{ename}: {evalue}"]))

    def preprocess_cell(self, cell, resources, index):
        if self._restarts > self.max_restarts:
            if cell.cell_type == "code":
                cell.outputs = []
                self._error(cell, "KernelLost", "not run: the kernel had to be restarted too often")
            return cell, resources
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except (CellTimeoutError, DeadKernelError) as err:
            what = "died" if isinstance(err, DeadKernelError) else f"did not stop within {self.timeout} s"
            self.log.error("Cell %d %s; restarting the kernel and re-running earlier cells", index, what)
            self._error(cell, type(err).__name__, f"the cell {what}; the kernel was restarted")
            self._recover()
            return cell, resources
        if cell.cell_type != "code":
            return cell, resources
        failed = any(o.output_type == "error" for o in cell.outputs)
        if not failed and not nbutils.is_grade(cell):
            self._done.append((index, cell))  # test cells define nothing later cells need: not replayed
        return cell, resources

    def _recover(self) -> None:
        while self._restarts <= self.max_restarts:
            self._restarts += 1
            try:
                run_sync(self._restart_kernel)()
                for index, done in self._done:  # replay: rebuild the state later cells depend on
                    super().preprocess_cell(copy.deepcopy(done), self.resources, index)
                return
            except (CellTimeoutError, DeadKernelError):
                self.log.error("Replay after a restart failed; trying again")

    async def _restart_kernel(self) -> None:
        self.kc.stop_channels()
        await ensure_async(self.km.restart_kernel(now=True))
        self.kc = self.km.client()
        await ensure_async(self.kc.start_channels())
        await ensure_async(self.kc.wait_for_ready(timeout=self.startup_timeout))


class StripTestTracebacks(NbGraderPreprocessor):
    """Feedback: errors in grade cells keep only 'Name: message' (tracebacks would quote hidden tests)."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and nbutils.is_grade(cell):
            for output in cell.outputs:
                if output.output_type == "error":
                    output.traceback = [f"{output.ename}: {output.evalue}"]
        return cell, resources


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

