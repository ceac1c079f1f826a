"""A course folder and nbgrader's API on it, configured by the repository's nbgrader_config.py.

A course folder holds nbgrader's working folders (release/, submitted/, autograded/, feedback/, the
gradebook); its source/ is the repository's. The repository is the one the toolkit is installed from
(`make env` installs it in place), where nbgrader_config.py, source/ and autograder/ are.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from nbgrader.plugins import CsvExportPlugin
from traitlets.config.loader import PyFileConfigLoader

from hwopt.course import colab
from hwopt.course.grading import settings

ROOT = colab.ROOT  # the repository
CONFIG = "nbgrader_config.py"
ASSIGNMENTS = (  # in the course's order, as their titles number them
    "roofline",  # 1: a kernel's bound, under a real chip's roof (lessons 1, 2)
    "bandwidth_precision",  # 2: weights read per token, tokens/s per precision (lessons 2, 4)
    "batching",  # 3: the fitted latency line, the flattening point (lesson 3)
    "latency_budget",  # 4: the largest batch within a latency budget (lesson 3)
    "serving_queue",  # 5: p99 with queueing under dynamic batching, capacity at an SLO (lessons 3, 11)
    "quantize",  # 6: codes, scales, errors and a precision plan (lesson 4)
    "fusion",  # 7: the bytes a compiler saves, and what it can fuse (lesson 5)
    "profiling",  # 8: reading a real torch.profiler trace (lesson 6)
    "memory_kv",  # 9: weights + KV cache + activations, the largest batch that fits (lessons 7, 8)
    "kv_paging",  # 10: a paged KV block allocator with prefix sharing; the decode bound (lesson 8)
    "continuous_batching",  # 11: a scheduler step, a trace's TTFT/TPOT/goodput, the best policy (8, 11)
    "number_formats",  # 12: FP8, MXFP4 and NVFP4 bit by bit, on the trained model (lesson 9)
    "quantize_layer",  # 13: RTN and GPTQ on a layer of the trained model (lessons 4, 9)
    "speculative_decoding",  # 14: the draft-verify-accept loop on the trained models (lesson 10)
    "beyond_one_chip",  # 15: TP degree, decode bound with all-reduces, MoE bytes (lesson 12)
    "quiz",  # 16: every lesson
)


def notebook_name(assignment: str) -> str:
    """Each assignment has one notebook, named after it."""
    return assignment


def load_notebook(kind: str, assignment: str, root: Path = ROOT):
    """The source/ or release/ notebook of an assignment."""
    return nbformat.read(root / kind / assignment / f"{notebook_name(assignment)}.ipynb", as_version=4)


def gradebook_url(folder: Path, db_url: str | None = None) -> str:
    """The gradebook's SQLAlchemy URL: db_url, else the DB_URL setting, else SQLite in the course folder."""
    return db_url or settings.DB_URL.text() or f"sqlite:///{Path(folder) / 'gradebook.db'}"


def load_config(folder: Path, timeout_s: int | None = None, db_url: str | None = None):
    """The repository's nbgrader_config.py, pointed at a course folder (cell timeout, gradebook)."""
    cfg = PyFileConfigLoader(CONFIG, path=str(ROOT)).load_config()
    cfg.CourseDirectory.root = str(folder)
    cfg.CourseDirectory.db_url = gradebook_url(folder, db_url)
    if timeout_s is not None:
        cfg.Execute.timeout = timeout_s
    return cfg


def make_api(folder: Path, timeout_s: int | None = None, db_url: str | None = None):
    """nbgrader's API object for the course folder."""
    bin_dir = str(Path(sys.executable).parent)  # nbgrader creates a gradebook by running `alembic`
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    cfg = load_config(folder, timeout_s, db_url)
    return NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg)


def prepare_course(folder: Path, root: Path = ROOT) -> Path:
    """A course folder whose source/ is the repository's (linked); nbgrader's working folders go there."""
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "source"
    if folder.resolve() != root.resolve() and not link.exists():
        link.symlink_to((root / "source").resolve(), target_is_directory=True)
    return folder


def release(api, folder: Path, assignments) -> None:
    """generate_assignment for each assignment the gradebook or release/ lacks (autograde needs both)."""
    for assignment in assignments:
        with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
            try:
                known = bool(gb.find_assignment(assignment).notebooks)
            except MissingEntry:
                known = False
        if not known or not (folder / "release" / assignment).exists():
            result = api.generate_assignment(assignment, force=True, create=True)
            if not result["success"]:
                raise RuntimeError(f"generate_assignment {assignment} failed:\n{result.get('error')}")


def export(api, folder: Path) -> Path:
    """nbgrader's standard grades.csv (what `nbgrader export` writes)."""
    dest = folder / "grades.csv"
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        CsvExportPlugin(to=str(dest)).export(gb)
    return dest
