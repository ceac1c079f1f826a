"""Google Colab support: the course's public URL, the notebooks' setup cell, badges, and their sync.

`python -m hwopt.course.colab sync` rewrites the first cell of every student notebook (lessons and nbgrader
source versions) and the README's notebook list; `--check` only reports what is out of date (exit 1).
`python -m hwopt.course.colab overlay DIR` puts Colab's widget versions into DIR (compatibility tests).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import nbformat

REPO_URL = "https://github.com/hwopt-course/hardware-optimization-for-ml"
BRANCH = "main"
SETUP_TAG = "colab-setup"
COLAB_CLONE_DIR = "/content/hwopt-course"
ROOT = Path(__file__).resolve().parents[2]

COLAB_BADGE_SVG = "https://colab.research.google.com/assets/colab-badge.svg"
README_START, README_END = "<!-- notebooks:start -->", "<!-- notebooks:end -->"

# What a Colab runtime lacks; their versions come from pyproject's course pins (the one place for pins).
COLAB_MISSING = ("onnx", "onnxruntime", "onnxscript")
# Colab ships these and breaks if they change: the setup cell must never install them.
COLAB_KEEPS = ("torch", "numpy", "ipywidgets", "widgetsnbextension", "jupyterlab_widgets")
# Colab's widget stack, reproduced in an overlay folder by `overlay` for the compatibility tests.
COLAB_WIDGET_PINS = (
    "ipywidgets==7.7.1",
    "widgetsnbextension==3.6.10",
    "jupyterlab_widgets==1.1.11",
    "ipython_genutils==0.2.0",
)


@dataclass(frozen=True)
class StudentNotebook:
    """One notebook a student opens: its path relative to the repository and its title."""

    path: Path
    title: str
    kind: str  # "lesson" | "assignment"
    lesson: str = ""  # assignments: the lessons they practise (the intro's "**Lesson:**" line)
    points: float = 0.0  # assignments: the points of all their graded cells

    @property
    def colab_url(self) -> str:
        """Open-in-Colab address of the notebook on the course's public repository."""
        return colab_url(self.path)


def colab_url(relative_path: Path | str) -> str:
    """Open-in-Colab address of a notebook given by its path inside the repository."""
    path = Path(relative_path).as_posix()
    if Path(path).is_absolute() or not path.endswith(".ipynb"):
        raise ValueError(f"relative_path: expected a notebook path inside the repository, got {path!r}")
    github = REPO_URL.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{github}/blob/{BRANCH}/{path}"


def lesson_paths(root: Path = ROOT) -> list[Path]:
    """Lesson notebooks (notebooks/*.ipynb), sorted, relative to root."""
    return sorted(p.relative_to(root) for p in (root / "notebooks").glob("*.ipynb"))


def source_paths(root: Path = ROOT) -> list[Path]:
    """nbgrader instructor notebooks (source/<assignment>/*.ipynb), sorted, relative to root."""
    return sorted(p.relative_to(root) for p in (root / "source").glob("*/*.ipynb"))


def release_paths(root: Path = ROOT) -> list[Path]:
    """Released assignment notebooks (release/<assignment>/*.ipynb), sorted, relative to root."""
    return sorted(p.relative_to(root) for p in (root / "release").glob("*/*.ipynb"))


def notebook_title(path: Path) -> str:
    """First markdown heading of a notebook, else its file name."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return path.stem


def assignment_facts(path: Path) -> tuple[str, float]:
    """(the lessons an assignment practises, from its "**Lesson:**" line; its total points)."""
    nb = nbformat.read(path, as_version=4)
    lesson = next((m[1].strip() for cell in nb.cells if cell.cell_type == "markdown"
                   for m in [re.search(r"^\*\*Lessons?:\*\*(.+)$", cell.source, re.M)] if m), "")
    points = sum(float(cell.metadata.get("nbgrader", {}).get("points", 0)) for cell in nb.cells
                 if cell.metadata.get("nbgrader", {}).get("grade"))
    return lesson, points


def student_notebooks(root: Path = ROOT) -> list[StudentNotebook]:
    """Lessons then released assignments: what the README lists with Colab badges."""
    lessons = [StudentNotebook(p, notebook_title(root / p), "lesson") for p in lesson_paths(root)]
    tasks = [StudentNotebook(p, notebook_title(root / p), "assignment", *assignment_facts(root / p))
             for p in release_paths(root)]
    tasks.sort(key=lambda nb: course_order(nb.title))  # Assignment 1, 2, ..., 9, 10
    return lessons + tasks


def course_order(title: str) -> tuple[int, str]:
    """Sort key of an assignment title: its number, so that "Assignment 10" comes after "Assignment 9"."""
    number = re.match(r"\D*(\d+)", title)
    return (int(number[1]) if number else 0, title)


def colab_pins(root: Path = ROOT) -> list[str]:
    """Exact pins (name==version) of COLAB_MISSING, read from pyproject's course group."""
    groups = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = {re.split(r"[=<>!~ ]", req, maxsplit=1)[0].lower(): req for req in groups["course"]}
    missing = [name for name in COLAB_MISSING if name not in pins]
    if missing:
        raise ValueError(f"pyproject.toml: course group lacks pins for {missing}")
    return [pins[name] for name in COLAB_MISSING]


def working_folder(relative_path: Path | str) -> str:
    """Folder a notebook runs in, as in Jupyter; an nbgrader source notebook runs where its release does."""
    parts = Path(relative_path).parent.parts
    if parts and parts[0] == "source":
        parts = ("release", *parts[1:])
    return "/".join(parts) or "."


def setup_cell_source(relative_path: Path | str, root: Path = ROOT) -> str:
    """The Colab setup cell for the notebook at relative_path: a no-op outside Colab."""
    clone = COLAB_CLONE_DIR
    pins = ", ".join(f'"{pin}"' for pin in colab_pins(root))
    return f'''# Colab setup: does nothing outside Google Colab.
import sys

if "google.colab" in sys.modules:  # get the course, add what Colab lacks; keep Colab's torch and widgets
    import os
    import subprocess

    url, repo = "{REPO_URL}", "{clone}"
    if not os.path.isdir(repo):
        subprocess.run(["git", "clone", "--depth=1", url, repo], check=True)
        pip = [sys.executable, "-m", "pip", "install", "-q"]
        subprocess.run([*pip, {pins}], check=True)
        subprocess.run([*pip, "--no-deps", "-e", repo], check=True)
    sys.path.insert(0, repo)  # the running kernel sees the editable install only after a restart
    os.chdir(f"{{repo}}/{working_folder(relative_path)}")'''


def _is_setup(cell) -> bool:
    return cell.cell_type == "code" and SETUP_TAG in cell.get("metadata", {}).get("tags", [])


def synced_notebook(nb, source: str):
    """nb with its setup cell (the first tagged one, else a new one) moved first and holding source."""
    cells = list(nb.cells)
    index = next((i for i, cell in enumerate(cells) if _is_setup(cell)), None)
    if index is None:
        cell = nbformat.v4.new_code_cell(source, metadata={"tags": [SETUP_TAG]})
        cell.id = "colab-setup"
    else:
        cell = cells.pop(index)
        cell.source = source
        cell.outputs, cell.execution_count = [], None
    nb.cells = [cell, *cells]
    return nb


def setup_cell_is_current(path: Path, root: Path = ROOT) -> bool:
    """True when the notebook's first cell is the tagged, current setup cell."""
    nb = nbformat.read(path, as_version=4)
    expected = setup_cell_source(path.relative_to(root), root)
    return bool(nb.cells) and _is_setup(nb.cells[0]) and nb.cells[0].source == expected


def readme_block(root: Path = ROOT) -> str:
    """The README's notebook list: one table per kind, a local link and a Colab badge per notebook."""
    lines = []
    for kind, heading in (("lesson", "Lessons"), ("assignment", "Graded assignments (nbgrader)")):
        notebooks = [nb for nb in student_notebooks(root) if nb.kind == kind]
        if not notebooks:
            continue
        extra = " Lesson | Points |" if kind == "assignment" else ""
        lines += [f"**{heading}**", "", f"| Notebook |{extra} Open in Colab |",
                  "|---|" + "---|" * extra.count("|") + "---|"]
        for nb in notebooks:
            badge = f"[![Open In Colab]({COLAB_BADGE_SVG})]({nb.colab_url})"
            facts = f" {nb.lesson} | {nb.points:g} |" if kind == "assignment" else ""
            lines.append(f"| [{nb.title}]({nb.path.as_posix()}) |{facts} {badge} |")
        lines.append("")
    lines += [
        "On Colab, run each notebook's first cell: it fetches this repository and installs the toolkit and",
        "ONNX Runtime, keeping Colab's own torch and widgets (elsewhere it does nothing). Submit an",
        "assignment done on Colab as the file from **File > Download > Download .ipynb**.",
    ]
    return "\n".join(lines).rstrip("\n")


def synced_readme(text: str, block: str) -> str:
    """README text with the part between the notebook markers replaced by block."""
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"README: expected the markers {README_START} and {README_END}, in that order")
    return text[: start + len(README_START)] + "\n" + block + "\n" + text[end:]


def sync(root: Path = ROOT, check: bool = False) -> list[Path]:
    """Bring setup cells (lessons, source/) and the README list up to date; return the out-of-date files."""
    stale = []
    for rel in lesson_paths(root) + source_paths(root):
        path = root / rel
        if setup_cell_is_current(path, root):
            continue
        stale.append(rel)
        if not check:
            nb = synced_notebook(nbformat.read(path, as_version=4), setup_cell_source(rel, root))
            nbformat.write(nb, path)
    readme = root / "README.md"
    text = readme.read_text()
    new_text = synced_readme(text, readme_block(root))
    if new_text != text:
        stale.append(Path("README.md"))
        if not check:
            readme.write_text(new_text)
    return stale


def build_overlay(target: Path) -> Path:
    """Install Colab's widget stack (COLAB_WIDGET_PINS, no dependencies) into target, for PYTHONPATH use."""
    target = Path(target)
    stamp = target / ".installed"
    wanted = "\n".join(COLAB_WIDGET_PINS)
    if stamp.exists() and stamp.read_text() == wanted:
        return target
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade", "--target", str(target),
         *COLAB_WIDGET_PINS],
        check=True,
    )
    stamp.write_text(wanted)
    return target


def main(argv: list[str] | None = None) -> int:
    """Command line: sync [--check] | overlay DIR."""
    parser = argparse.ArgumentParser(prog="python -m hwopt.course.colab", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    sync_parser = commands.add_parser("sync", help="rewrite the notebooks' setup cells and the README list")
    sync_parser.add_argument("--check", action="store_true", help="only report out-of-date files (exit 1)")
    sync_parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this one)")
    overlay_parser = commands.add_parser("overlay", help="install Colab's widget versions into a folder")
    overlay_parser.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    if args.command == "overlay":
        print(f"Colab widget stack in {build_overlay(args.target)}")
        return 0
    stale = sync(args.root, check=args.check)
    for path in stale:
        print(f"{'out of date' if args.check else 'updated'}: {path}")
    if args.check and stale:
        print("run: python -m hwopt.course.colab sync (then `make release` when source/ changed)")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
