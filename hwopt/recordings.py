"""Recorded runs of the lessons: the headline figures a lesson reports, and other chips' runs read back.

A lesson calls `headline(name, value, unit)` in a summary cell: nothing is shown; while a run is being
recorded (`make record`, which points $HWOPT_HEADLINES at a file), the figure is written there.
data/recordings/<chip>/ holds one recorded run per chip: every executed lesson, headline.json (the figures,
lesson by lesson) and machine_card.json. `load(chip)` reads one; `compare(lesson, figures)` sets the learner's
figures beside each recorded chip's, so a learner on a laptop sees what the same cell measured on a GPU.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from hwopt import arguments

HEADLINES_ENV = "HWOPT_HEADLINES"  # a file: while set, headline() appends one JSON line per figure to it
RECORDINGS_DIR = Path(__file__).resolve().parents[1] / "data" / "recordings"
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


def compare(lesson: str, figures: dict, folder: Path | str = RECORDINGS_DIR) -> str:
    """Lines setting this run's figures ({name: value}) beside what each recorded chip measured in lesson."""
    lesson = arguments.text("lesson", lesson)
    arguments.instance("figures", figures, dict)
    mine = {arguments.text("figures key", k): float(arguments.number(f"figures[{k!r}]", v))
            for k, v in figures.items()}
    runs = [load(chip, folder) for chip in available(folder)]
    runs = [run for run in runs if lesson in run.figures]
    if not runs:
        return f"No recorded run of {lesson} yet (`make record` saves one under data/recordings/)."
    lines = []
    for name, value in mine.items():
        for run in runs:
            theirs = run.figures[lesson].get(name)
            if theirs is None:
                continue
            ratio = f" = {theirs.value / value:.3g}x yours" if value else ""
            lines.append(f"{name}: yours {Figure(value, theirs.unit)}; {run.label}: {theirs}{ratio}")
    return "\n".join(lines) or f"The recorded runs of {lesson} hold none of {sorted(mine)}."
