"""Google Colab support: the course's public URL, the notebooks' setup cell, badges, and their sync.

`python -m hwopt.course.colab sync` rewrites the first cell of every student notebook (lessons and nbgrader
source versions) and the README's notebook list; `--check` only reports what is out of date (exit 1).
`python -m hwopt.course.colab overlay DIR` puts Colab's widget and IPython versions into DIR (compatibility
tests); `freeze --update FILE-OR-URL --commit SHA` replaces the stored Colab pip-freeze, colab_pip_freeze.txt.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote
from urllib.request import urlopen

import nbformat

REPO_URL = "https://github.com/hwopt-course/hardware-optimization-for-ml"
BRANCH = "main"
SETUP_TAG = "colab-setup"
COLAB_CLONE_DIR = "/content/hwopt-course"
ROOT = Path(__file__).resolve().parents[2]

COLAB_BADGE_SVG = "https://colab.research.google.com/assets/colab-badge.svg"
README_START, README_END = "<!-- notebooks:start -->", "<!-- notebooks:end -->"

# What a Colab runtime lacks; their versions come from pyproject's course pins (the one place for pins),
# except where pyproject's [tool.hwopt.colab-setup] names versions that keep Colab's packages as they are.
COLAB_MISSING = ("onnx", "onnxruntime", "onnxscript")
# Colab's packages as published (a pip-freeze, its source commit in its header): the setup cell must change
# none of them (tests/course/test_colab_resolution.py resolves its installs against this file).
COLAB_FREEZE = Path(__file__).with_name("colab_pip_freeze.txt")
# Colab's widget and IPython stack (versions from COLAB_FREEZE), put in front of this environment's packages
# by `overlay` for the compatibility tests: the packages and those dependencies whose versions differ.
COLAB_STACK = ("ipywidgets", "widgetsnbextension", "jupyterlab_widgets", "ipython", "ipykernel",
               "jupyter_client", "ipython-genutils", "traitlets", "backcall", "pickleshare", "nest-asyncio",
               "entrypoints", "decorator")


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
    """(the lessons an assignment practises, from its "**Lesson:**" paragraph, wrapped lines joined; its total
    points)."""
    nb = nbformat.read(path, as_version=4)
    lesson = next((" ".join(m[1].split()) for cell in nb.cells if cell.cell_type == "markdown"
                   for m in [re.search(r"^\*\*Lessons?:\*\*(.+?)(?:\n\s*\n|\Z)", cell.source, re.M | re.S)]
                   if m), "")
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
    """Pins (name==version) of COLAB_MISSING: the course pins, or pyproject's [tool.hwopt.colab-setup]."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    groups = pyproject["project"]["optional-dependencies"]
    pins = {re.split(r"[=<>!~ ]", req, maxsplit=1)[0].lower(): req for req in groups["course"]}
    overrides = pyproject.get("tool", {}).get("hwopt", {}).get("colab-setup", {})
    pins |= {name.lower(): f"{name.lower()}=={version}" for name, version in overrides.items()}
    missing = [name for name in COLAB_MISSING if name not in pins]
    if missing:
        raise ValueError(f"pyproject.toml: course group lacks pins for {missing}")
    return [pins[name] for name in COLAB_MISSING]


def read_freeze(text: str) -> dict[str, str]:
    """{canonical name: version} of a pip-freeze: `name==version` lines and `name @ URL` wheel lines
    (version from the wheel's file name); comments, editable and source-tree lines are skipped."""
    from packaging.utils import canonicalize_name, parse_wheel_filename

    versions = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("#", "-")):
            continue
        if "==" in line:
            name, version = (part.strip() for part in line.split("==", 1))
            versions[canonicalize_name(name)] = version
        elif " @ " in line and line.endswith(".whl"):
            _, version, _, _ = parse_wheel_filename(unquote(line.rsplit("/", 1)[-1]))
            versions[canonicalize_name(line.split(" @ ")[0])] = str(version)
    return versions


def colab_freeze(path: Path = COLAB_FREEZE) -> dict[str, str]:
    """Colab's packages as stored in the repository: {canonical name: version}."""
    return read_freeze(Path(path).read_text())


def freeze_header(path: Path = COLAB_FREEZE) -> dict[str, str]:
    """The stored freeze's `# key: value` header lines (source, commit, python)."""
    lines = Path(path).read_text().splitlines()
    return {m[1]: m[2] for line in lines for m in [re.match(r"# (\w+): (.+)$", line)] if m}


def update_freeze(source: str, commit: str, python: str = "3.13", path: Path = COLAB_FREEZE) -> int:
    """Replace the stored freeze with a whole published pip-freeze (a file, or a URL) and its source commit;
    return the number of packages written."""
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise ValueError(f"commit: expected the hex id of the freeze's commit, got {commit!r}")
    if re.match(r"https?://", source):
        with urlopen(source, timeout=60) as response:
            text = response.read().decode()
    else:
        text = Path(source).read_text()
    versions = read_freeze(text)
    if not versions:
        raise ValueError(f"source: expected a pip-freeze (name==version lines), got none in {source}")
    header = [
        "# Colab's Python packages: googlecolab/backend-info, pip-freeze.txt (the CPU runtime)",
        f"# source: {source}",
        f"# commit: {commit}",
        f"# python: {python}",
        "# Refresh: python -m hwopt.course.colab freeze --update PATH-OR-URL-OF-pip-freeze.txt --commit SHA",
    ]
    lines = header + [f"{name}=={version}" for name, version in versions.items()]
    Path(path).write_text("\n".join(lines) + "\n")
    return len(versions)


def working_folder(relative_path: Path | str) -> str:
    """Folder a notebook runs in, as in Jupyter; an nbgrader source notebook runs where its release does."""
    parts = Path(relative_path).parent.parts
    if parts and parts[0] == "source":
        parts = ("release", *parts[1:])
    return "/".join(parts) or "."


def setup_cell_source(relative_path: Path | str, root: Path = ROOT) -> str:
    """The Colab setup cell for the notebook at relative_path: a no-op outside Colab. On Colab it clones the
    course and installs what Colab lacks, each step only when its result is missing (a re-run retries it)."""
    clone = COLAB_CLONE_DIR
    pins = ", ".join(f'"{pin}"' for pin in colab_pins(root))
    return f'''# Colab setup: does nothing outside Google Colab.
import sys

if "google.colab" in sys.modules:  # get the course, add what Colab lacks; change nothing Colab ships
    import importlib.metadata
    import os
    import shutil
    import subprocess

    def absent(pin):  # not installed at that version: a re-run after a failure retries it
        name, _, version = pin.partition("==")
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return True
        return bool(version) and installed != version

    url, repo = "{REPO_URL}", "{clone}"
    if not os.path.isdir(f"{{repo}}/.git"):
        shutil.rmtree(repo, ignore_errors=True)  # what a failed clone left
        subprocess.run(["git", "clone", "--depth=1", url, repo], check=True)
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    todo = [pin for pin in ({pins}) if absent(pin)]
    if todo:
        subprocess.run([*pip, *todo], check=True)
    if absent("hwopt"):
        subprocess.run([*pip, "--no-deps", "-e", repo], check=True)
    if repo not in sys.path:
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


def colab_stack_pins(path: Path = COLAB_FREEZE) -> list[str]:
    """name==version of COLAB_STACK at Colab's versions (the stored freeze)."""
    from packaging.utils import canonicalize_name

    versions = colab_freeze(path)
    missing = [name for name in COLAB_STACK if canonicalize_name(name) not in versions]
    if missing:
        raise ValueError(f"path: the Colab freeze {path} lacks {missing}")
    return [f"{name}=={versions[canonicalize_name(name)]}" for name in COLAB_STACK]


def build_overlay(target: Path) -> Path:
    """Install Colab's widget and IPython stack (colab_stack_pins, no dependencies) into target."""
    target = Path(target)
    stamp = target / ".installed"
    pins = colab_stack_pins()
    wanted = "\n".join(["# built from scratch", *pins])  # older stamps lack the header: rebuilt once
    if stamp.exists() and stamp.read_text() == wanted:
        return target
    if stamp.exists():  # other pins: start over (pip --target --upgrade leaves old versions' metadata behind)
        shutil.rmtree(target)
    elif target.exists() and any(target.iterdir()):
        raise ValueError(f"target must be empty or an overlay this command built; {target} is neither")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade", "--target", str(target),
         *pins],
        check=True,
    )
    stamp.write_text(wanted)
    return target


def main(argv: list[str] | None = None) -> int:
    """Command line: sync [--check] | overlay DIR | freeze --update FILE-OR-URL --commit SHA."""
    parser = argparse.ArgumentParser(prog="python -m hwopt.course.colab", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    sync_parser = commands.add_parser("sync", help="rewrite the notebooks' setup cells and the README list")
    sync_parser.add_argument("--check", action="store_true", help="only report out-of-date files (exit 1)")
    sync_parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this one)")
    overlay_parser = commands.add_parser("overlay", help="install Colab's widget versions into a folder")
    overlay_parser.add_argument("target", type=Path)
    freeze_parser = commands.add_parser("freeze", help="replace the stored Colab pip-freeze")
    freeze_parser.add_argument("--update", required=True, metavar="FILE-OR-URL",
                               help="Colab's published pip-freeze.txt (googlecolab/backend-info)")
    freeze_parser.add_argument("--commit", required=True, help="the commit of backend-info it comes from")
    freeze_parser.add_argument("--python", default="3.13", help="Colab's Python (default: 3.13)")
    freeze_parser.add_argument("--path", type=Path, default=COLAB_FREEZE, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.command == "overlay":
        print(f"Colab widget and IPython stack in {build_overlay(args.target)}")
        return 0
    if args.command == "freeze":
        count = update_freeze(args.update, args.commit, args.python, args.path)
        print(f"{args.path}: {count} packages from {args.update} at {args.commit}")
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
