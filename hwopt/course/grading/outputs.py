"""What a grading kernel's output may become: counted against byte caps, sanitised, and shown in feedback only
while it cannot hold a hidden case's values.

- OutputCaps counts every message a kernel sends for a cell (stream, display, update_display_data,
  clear_output, execute_result, error, comm), so no kind of message gets past the caps; past them the rest is
  dropped, with one note per cell.
- SanitizeStudentHTML (autograde and feedback) runs nbconvert's sanitiser over what the student wrote or
  printed: outputs lose JavaScript and any type that is not plain text, an image or JSON; HTML and Markdown
  outputs, and Markdown cells that are not the release's own locked text, are cleaned by bleach. So neither
  the feedback page nor the graded notebook that formgrader shows runs a student's script.
- Once the grader has sent a grade cell's hidden cases into the kernel, everything the kernel prints after
  can hold their values (a function can keep its arguments and a later cell print them). JudgedExecute marks
  each cell run after that (mark_shown: how many of its last outputs are the grader's own); in feedback,
  WithholdOutputAfterCases shows only those, with a note. The graded notebook keeps everything.
"""

from __future__ import annotations

import json

from nbconvert.preprocessors.sanitize import SanitizeHTML
from nbformat.v4 import new_output
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool

from hwopt.course.grading.notebooks import normalise_source

SHOWN = "hwopt_shown_outputs"  # cell metadata: how many of the cell's last outputs feedback may show
WITHHELD_NOTE = ("[grader: this cell ran after your notebook had received hidden cases, so its output is not "
                 "shown here; run your notebook to see it]\n")


def capped_note(cell_bytes: int, notebook_bytes: int) -> str:
    """The note that replaces a cell's output past the caps."""
    return (f"\n[grader: output beyond {cell_bytes:,} bytes per cell or {notebook_bytes:,} per notebook was "
            "dropped]\n")


def mark_shown(cell, n_outputs: int) -> None:
    """Feedback shows only the cell's last n_outputs (the grader's own) and a note in place of the rest."""
    cell.metadata[SHOWN] = int(n_outputs)


class OutputCaps:
    """Bytes of kernel messages per cell and per notebook; probes count against the cell cap only."""

    def __init__(self, cell_bytes: int, notebook_bytes: int):
        self.cell_bytes, self.notebook_bytes = cell_bytes, notebook_bytes
        self.in_cell = self.in_notebook = 0
        self.capped = False

    def new_cell(self) -> None:
        self.in_cell, self.capped = 0, False

    def admit(self, msg: dict, probing: bool) -> bool:
        """Count a message's content; True while the cell and the notebook are within their caps."""
        size = len(json.dumps(msg.get("content", {}), default=str))
        self.in_cell += size
        if not probing:
            self.in_notebook += size
        return self.in_cell <= self.cell_bytes and (probing or self.in_notebook <= self.notebook_bytes)


class WithholdOutputAfterCases(NbGraderPreprocessor):
    """Feedback: a cell marked by mark_shown shows the grader's own last outputs and a note, nothing else."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and SHOWN in cell.metadata:
            n = cell.metadata[SHOWN]
            valid = isinstance(n, int) and 0 < n <= len(cell.outputs)
            ours = cell.outputs[len(cell.outputs) - n:] if valid else []
            withheld = len(cell.outputs) > len(ours)
            cell.outputs = [new_output("stream", name="stdout", text=WITHHELD_NOTE)] * withheld + ours
        return cell, resources


class SanitizeStudentHTML(SanitizeHTML):
    """nbconvert's SanitizeHTML over outputs and over Markdown cells that are not the release's locked
    text."""

    enabled = Bool(True).tag(config=True)

    def preprocess(self, nb, resources):
        self._locked = set()
        info = resources.get("nbgrader", {})
        if info.get("db_url"):
            with Gradebook(info["db_url"]) as gb:
                try:
                    notebook = gb.find_notebook(info["notebook"], info["assignment"])
                    self._locked = {normalise_source(c.source) for c in notebook.source_cells if c.locked}
                except MissingEntry:
                    pass
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type in ("markdown", "raw") and normalise_source(cell.source) in self._locked:
            return cell, resources  # the instructor's own text, restored from the gradebook
        return super().preprocess_cell(cell, resources, index)
