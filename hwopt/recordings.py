"""Recorded runs of the lessons: the headline figures a lesson reports, and other chips' runs read back.

A lesson calls `headline(name, value, unit)` in a summary cell: nothing is shown; while a run is being
recorded (`make record`, which points $HWOPT_HEADLINES at a file), the figure is written there.
data/recordings/<chip>/ holds one recorded run per chip: every executed lesson, headline.json (the figures,
lesson by lesson), machine_card.json and run.json (per notebook: status, seconds and the SHA-256 of each
cell's source). `load(chip)` reads one; `compare(lesson, figures)` sets the learner's figures beside each
recorded chip's, so a learner on a laptop sees what the same cell measured on a GPU. A recorded lesson whose
cells no longer hash as its notebook's do is stale: `stale(folder)` says which and why, compare() leaves it
out, and a test fails.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from hwopt import arguments

HEADLINES_ENV = "HWOPT_HEADLINES"  # a file: while set, headline() appends one JSON line per figure to it
RECORDINGS_DIR = Path(__file__).resolve().parents[1] / "data" / "recordings"
LESSONS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
HEADLINE_FILE, CARD_FILE, RUN_FILE = "headline.json", "machine_card.json", "run.json"


@dataclass(frozen=True)
class Figure:
    """One headline figure: its value in unit."""

    value: float
    unit: str = ""

    def __str__(self) -> str:
        shown = f"{self.value:,.0f}" if abs(self.value) >= 1000 else f"{self.value:.3g}"
        return f"{shown} {self.unit}".strip()


def headline(name: str, value, unit: str = "") -> None:
    """Report a headline figure of this lesson (e.g. 'memory bandwidth', 42.1, 'GB/s'); shows nothing.

    While a run is recorded ($HWOPT_HEADLINES names a file) the figure is appended to that file.
    """
    name = arguments.text("name", name)
    value = float(arguments.number("value", value))
    unit = arguments.text("unit", unit, allow_empty=True)
    target = os.environ.get(HEADLINES_ENV, "").strip()
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.write(json.dumps({"name": name, "value": value, "unit": unit}) + "\n")


def read_headlines(path: Path | str) -> dict[str, Figure]:
    """The figures a lesson's run appended to the file path (the last value of each name wins), in order."""
    arguments.instance("path", path, (str, Path))
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must be a file of headline figures; got {str(path)!r}")
    figures: dict[str, Figure] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            figures[row["name"]] = Figure(float(row["value"]), row.get("unit", ""))
    return figures


@dataclass(frozen=True)
class Recording:
    """One chip's recorded run of the lessons: its figures lesson by lesson and its machine card."""

    chip: str
    folder: Path
    device: str
    device_name: str
    recorded_on: str
    figures: dict[str, dict[str, Figure]] = field(default_factory=dict)
    card: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        """'NVIDIA H200 (cuda, 2026-12-01)': the device and the day of the run."""
        return f"{self.device_name} ({self.device}, {self.recorded_on})"

    def notebook(self, lesson: str) -> Path | None:
        """The executed lesson (name without .ipynb, e.g. '02_memory_bandwidth') of this run, if recorded."""
        path = self.folder / f"{arguments.text('lesson', lesson)}.ipynb"
        return path if path.exists() else None


def available(folder: Path | str = RECORDINGS_DIR) -> list[str]:
    """Chips with a recorded run under folder (data/recordings/), sorted."""
    folder = Path(folder)
    return sorted(p.parent.name for p in folder.glob(f"*/{HEADLINE_FILE}")) if folder.is_dir() else []


def load(chip: str, folder: Path | str = RECORDINGS_DIR) -> Recording:
    """The recorded run of chip (a folder name under data/recordings/, e.g. 'nvidia-h200')."""
    chip, chips = arguments.text("chip", chip), available(folder)
    if chip not in chips:
        raise ValueError(f"chip must be one of the recorded runs {chips} (under {folder}); got {chip!r}")
    return load_folder(Path(folder) / chip)


def load_folder(folder: Path | str) -> Recording:
    """The recorded run saved in folder (its headline.json and machine_card.json)."""
    base = Path(folder)
    if not (base / HEADLINE_FILE).exists():
        raise ValueError(f"folder must hold a recorded run ({HEADLINE_FILE}); got {str(folder)!r}")
    data = json.loads((base / HEADLINE_FILE).read_text(encoding="utf-8"))
    figures = {lesson: {name: Figure(float(f["value"]), f.get("unit", "")) for name, f in rows.items()}
               for lesson, rows in data.get("lessons", {}).items()}
    card = json.loads((base / CARD_FILE).read_text(encoding="utf-8")) if (base / CARD_FILE).exists() else {}
    return Recording(data.get("chip", base.name), base, data.get("device", ""),
                     data.get("device_name", base.name), data.get("recorded_on", ""), figures, card)


def cell_sha256(notebook) -> list[str]:
    """SHA-256 (hex) of each cell of a notebook, in order: its type and source; outputs and metadata ignored.

    notebook: the path of an .ipynb file, or the notebook as a dict (an nbformat NotebookNode is one).
    """
    if isinstance(notebook, str | Path):
        path = Path(notebook)
        if path.suffix != ".ipynb" or not path.is_file():
            raise ValueError(f"notebook must be an existing .ipynb file or a notebook dict; "
                             f"got {str(path)!r}")
        notebook = json.loads(path.read_text(encoding="utf-8"))
    cells = arguments.instance("notebook", notebook, dict).get("cells")
    if not isinstance(cells, list):
        raise ValueError("notebook must hold a list of cells")
    hashes = []
    for cell in cells:
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)  # .ipynb may split lines
        hashes.append(hashlib.sha256(json.dumps([cell.get("cell_type"), source]).encode()).hexdigest())
    return hashes


def changed_cells(recorded: list[str], current: list[str]) -> str:
    """What changed between two lists of cell hashes, in words ('' when equal): cells of the current notebook
    that changed or were added (0-based indices), and how many were removed."""
    recorded, current = _texts("recorded", recorded), _texts("current", current)
    changed, added, removed = [], [], 0
    matcher = difflib.SequenceMatcher(a=recorded, b=current, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op != "equal":  # pair old and new cells in order; the rest were added or removed
            common = min(i2 - i1, j2 - j1)
            changed += range(j1, j1 + common)
            added += range(j1 + common, j2)
            removed += (i2 - i1) - common
    parts = [f"{what} {', '.join(map(str, cells))}" for what, cells in
             (("changed cells", changed), ("added cells", added)) if cells]
    return "; ".join(parts + ([f"{removed} cell{'s' if removed > 1 else ''} removed"] if removed else []))


def _texts(name: str, values) -> list[str]:
    """values as a list of strings (a list, tuple or the keys of a dict); ValueError naming name otherwise."""
    if not isinstance(values, list | tuple | dict):
        raise ValueError(f"{name} must be a list of strings; got {type(values).__name__}")
    return [arguments.text(f"{name}[{i}]", v, allow_empty=True) for i, v in enumerate(values)]


def _run_rows(folder: Path) -> dict[str, dict]:
    """run.json's rows by notebook file name ({} without one)."""
    path = folder / RUN_FILE
    rows = json.loads(path.read_text(encoding="utf-8")).get("notebooks", []) if path.exists() else []
    return {Path(row["path"]).name: row for row in rows}


def lesson_staleness(folder: Path | str, lesson: str, lessons_dir: Path | str = LESSONS_DIR) -> str:
    """Why the recorded lesson (name without .ipynb) in folder no longer matches its notebook in lessons_dir,
    in words; '' when every cell still hashes as recorded."""
    folder, lessons_dir = Path(folder), Path(lessons_dir)
    name = f"{arguments.text('lesson', lesson)}.ipynb"
    notebook = lessons_dir / name
    if not notebook.exists():
        return f"{lessons_dir.name}/{name} no longer exists"
    row = _run_rows(folder).get(name)
    if row is None or not row.get("cell_sha256"):
        return f"{RUN_FILE} holds no cell hashes for it (recorded before they were kept)"
    return changed_cells(row["cell_sha256"], cell_sha256(notebook))


def stale(folder: Path | str, lessons_dir: Path | str = LESSONS_DIR) -> dict[str, str]:
    """The lessons recorded in folder (one chip's run) that no longer match their notebooks: {lesson: why}."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder must be a folder of recorded runs; got {str(folder)!r}")
    lessons = sorted({p.stem for p in folder.glob("*.ipynb")} | {Path(n).stem for n in _run_rows(folder)})
    found = {lesson: lesson_staleness(folder, lesson, lessons_dir) for lesson in lessons}
    return {lesson: why for lesson, why in found.items() if why}


def regenerate_command(recording: Recording, lessons) -> str:
    """The command that records lessons again into recording's folder (run on a machine of that chip)."""
    arguments.instance("recording", recording, Recording)
    lessons = [lesson for lesson in _texts("lessons", lessons) if lesson]
    paths = " ".join(f"{LESSONS_DIR.name}/{lesson}.ipynb" for lesson in lessons)
    rows = _run_rows(recording.folder)
    seconds = sum(rows.get(f"{lesson}.ipynb", {}).get("seconds") or 0 for lesson in lessons)
    took = f"; the last run of these took {seconds:,.0f} s there" if seconds else ""
    out = f"data/recordings/{recording.folder.name}"
    return (f"make record DEVICE={recording.device or 'auto'} ARGS=\"--out {out} {paths}\" on a machine of "
            f"that chip ({recording.device_name}; it rewrites these lessons in {out}/ and keeps the "
            f"others{took}), then commit {out}/")


def compare(lesson: str, figures: dict, folder: Path | str = RECORDINGS_DIR, *,
            lessons_dir: Path | str = LESSONS_DIR) -> str:
    """Lines setting this run's figures ({name: value}) beside what each recorded chip measured in lesson.

    A chip whose recording of lesson is stale (its cells no longer hash as lessons_dir's notebook does) is
    left out, with a line saying so: its figures came from another version of the lesson.
    """
    lesson = arguments.text("lesson", lesson)
    arguments.instance("figures", figures, dict)
    mine = {arguments.text("figures key", k): float(arguments.number(f"figures[{k!r}]", v))
            for k, v in figures.items()}
    runs = [load(chip, folder) for chip in available(folder)]
    runs = [run for run in runs if lesson in run.figures]
    if not runs:
        return f"No recorded run of {lesson} yet (`make record` saves one under data/recordings/)."
    outdated = {run.chip: why for run in runs if (why := lesson_staleness(run.folder, lesson, lessons_dir))}
    lines = []
    for name, value in mine.items():
        for run in runs:
            theirs = run.figures[lesson].get(name)
            if theirs is None or run.chip in outdated:
                continue
            ratio = f" = {theirs.value / value:.3g}x yours" if value else ""
            lines.append(f"{name}: yours {Figure(value, theirs.unit)}; {run.label}: {theirs}{ratio}")
    if not lines and not outdated:
        lines.append(f"The recorded runs of {lesson} hold none of {sorted(mine)}.")
    for run in runs:
        if run.chip in outdated:
            lines.append(f"{run.label}: not compared, recorded from another version of this lesson "
                         f"({outdated[run.chip]}); {regenerate_command(run, [lesson])}")
    return "\n".join(lines)
