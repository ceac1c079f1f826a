"""Colab: every student notebook starts with the current setup cell, the README lists them with badges."""

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from hwopt.course import colab

ROOT = colab.ROOT
SYNCED = colab.lesson_paths() + colab.source_paths()
STUDENT_FACING = SYNCED + colab.release_paths()


@pytest.mark.parametrize("relative_path", STUDENT_FACING, ids=str)
def test_every_student_notebook_starts_with_the_current_setup_cell(relative_path):
    first = nbformat.read(ROOT / relative_path, as_version=4).cells[0]
    assert first.cell_type == "code" and colab.SETUP_TAG in first.metadata.get("tags", []), (
        f"{relative_path}: the first cell should be the code cell tagged {colab.SETUP_TAG!r}; "
        "run `python -m hwopt.course.colab sync`"
    )
    hint = "run `python -m hwopt.course.colab sync`"
    if "release" in relative_path.parts:
        hint += ", then regenerate release/ with `make release`"
    assert first.source == colab.setup_cell_source(relative_path), f"{relative_path}: stale; {hint}"


def test_readme_lists_every_student_notebook_with_a_colab_badge():
    readme = (ROOT / "README.md").read_text()
    assert colab.synced_readme(readme, colab.readme_block()) == readme, (
        "README's notebook list is out of date: run `python -m hwopt.course.colab sync`"
    )
    for notebook in colab.student_notebooks():
        assert f"]({notebook.path.as_posix()})" in readme, f"README should link {notebook.path}"
        assert f"]({notebook.colab_url})" in readme, f"README should have a Colab badge for {notebook.path}"


def test_readme_gives_every_assignment_its_lesson_and_points_in_course_order():
    assignments = [nb for nb in colab.student_notebooks() if nb.kind == "assignment"]
    numbers = [int(nb.title.split()[1]) for nb in assignments]
    assert numbers == sorted(numbers), "Assignment 10 comes after Assignment 9, not after Assignment 1"
    readme = (ROOT / "README.md").read_text()
    for nb in assignments:
        assert nb.lesson and nb.points > 0, f"{nb.path}: its intro needs a '**Lesson:** ...' line and points"
        assert f"| [{nb.title}]({nb.path.as_posix()}) | {nb.lesson} | {nb.points:g} |" in readme


def test_an_assignments_lesson_paragraph_is_read_whole_where_it_wraps(tmp_path):
    intro = ("# Assignment 9 — x\n\n**Lesson:** 7 (The five mistakes), with 2 (The bottleneck: a\nlanguage "
             "model's weights)\n\nYou are to serve a model.")
    path = tmp_path / "a.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(intro)]), path)
    lesson = "7 (The five mistakes), with 2 (The bottleneck: a language model's weights)"
    assert colab.assignment_facts(path) == (lesson, 0.0)
    for nb in colab.student_notebooks():
        assert nb.lesson.count("(") == nb.lesson.count(")"), f"{nb.path}: its lesson is cut: {nb.lesson!r}"


def test_assignments_are_listed_in_the_course_order():
    titles = ["Assignment 10 — c", "Assignment 2 — b", "Assignment 1 — a", "Assignment 9 — d"]
    assert sorted(titles, key=colab.course_order) == [
        "Assignment 1 — a", "Assignment 2 — b", "Assignment 9 — d", "Assignment 10 — c"]
    listed = [nb.title for nb in colab.student_notebooks() if nb.kind == "assignment"]
    assert listed == sorted(listed, key=colab.course_order)

def test_badges_and_setup_cells_use_the_one_repository_url():
    readme = (ROOT / "README.md").read_text()
    github = colab.REPO_URL.removeprefix("https://github.com/")
    for link in (part.split(")")[0] for part in readme.split("(https://colab.research.google.com/github/")[1:]):
        assert link.startswith(f"{github}/blob/{colab.BRANCH}/"), f"badge points elsewhere: {link}"
    assert colab.REPO_URL in colab.setup_cell_source("notebooks/x.ipynb")
    # The address is written once in the code: hwopt/course/colab.py; everything else is generated from it.
    for path in [*ROOT.glob("hwopt/**/*.py"), *ROOT.glob("tests/**/*.py"), ROOT / "Makefile"]:
        if path.name != "colab.py":
            assert colab.REPO_URL not in path.read_text(), f"{path.name} repeats the repository URL"


def run_setup_cell(tmp_path, on_colab, installed=None, cloned=False):
    """Exec the setup cell in a fresh interpreter; report what it changed and which commands it ran.

    installed: {distribution: version} the runtime has (others are missing); cloned: the course is there."""
    script = f"""
import importlib.metadata, json, os, subprocess, sys, types
calls, chdirs = [], []
def fake_run(cmd, **kwargs):
    calls.append(list(cmd))
    return subprocess.CompletedProcess(cmd, 0)
subprocess.run = fake_run
real_chdir, os.chdir = os.chdir, lambda path: chdirs.append(str(path))
installed = {installed or {}!r}
def fake_version(name):
    if name not in installed:
        raise importlib.metadata.PackageNotFoundError(name)
    return installed[name]
importlib.metadata.version = fake_version
real_isdir = os.path.isdir
os.path.isdir = lambda path: {cloned} if str(path).startswith({colab.COLAB_CLONE_DIR!r}) else real_isdir(path)
if {on_colab}:
    sys.modules["google.colab"] = types.ModuleType("google.colab")
before = (os.getcwd(), list(sys.path))
code = compile({colab.setup_cell_source("notebooks/03_batching.ipynb")!r}, "setup-cell", "exec")
exec(code, {{}})
first = list(sys.path)
exec(code, {{}})
print(json.dumps({{"calls": calls, "chdirs": chdirs, "sys_path_changed": first != before[1],
                  "sys_path_grows": list(sys.path) != first,
                  "cwd_changed": os.getcwd() != before[0], "files": os.listdir(".")}}))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def installs(calls):
    """The name==version (or path) arguments of the pip installs among calls."""
    return [arg for cmd in calls if "install" in cmd for arg in cmd[cmd.index("install") + 1:]
            if not arg.startswith("-")]


def test_setup_cell_does_nothing_outside_colab(tmp_path):
    report = run_setup_cell(tmp_path, on_colab=False)
    assert report == {"calls": [], "chdirs": [], "sys_path_changed": False, "sys_path_grows": False,
                      "cwd_changed": False, "files": []}


def test_setup_cell_on_colab_clones_installs_the_toolkit_and_keeps_colabs_packages(tmp_path):
    report = run_setup_cell(tmp_path, on_colab=True)  # nothing installed: both runs try everything
    clone, *pips = report["calls"][: len(report["calls"]) // 2]
    assert clone[:2] == ["git", "clone"] and colab.REPO_URL in clone
    names = {arg.split("==")[0].lower() for arg in installs(pips)}
    touched = names & set(colab.colab_freeze())
    assert not touched, f"the setup cell must not install {touched}: Colab ships them"
    assert set(colab.COLAB_MISSING) <= names
    toolkit = next(cmd for cmd in pips if "-e" in cmd)
    assert "--no-deps" in toolkit, "the toolkit's own install must not resolve (and replace) Colab's torch"
    assert report["sys_path_changed"] and not report["sys_path_grows"], "a re-run adds the course once"
    assert report["chdirs"] == [f"{colab.COLAB_CLONE_DIR}/notebooks"] * 2


def test_setup_cell_rerun_after_a_failure_retries_only_what_is_missing(tmp_path):
    onnx, onnxruntime, onnxscript = colab.colab_pins()
    # The clone and onnx got there; onnxruntime failed; an older onnxscript is there.
    installed = {"onnx": onnx.split("==")[1], "onnxscript": "0.0.1"}
    report = run_setup_cell(tmp_path, on_colab=True, installed=installed, cloned=True)
    calls = report["calls"][: len(report["calls"]) // 2]
    assert not any(cmd[:2] == ["git", "clone"] for cmd in calls), "the clone is there: no second clone"
    assert installs(calls) == [onnxruntime, onnxscript, colab.COLAB_CLONE_DIR]
    done = {pin.split("==")[0]: pin.split("==")[1] for pin in colab.colab_pins()} | {"hwopt": "0.1.0"}
    report = run_setup_cell(tmp_path, on_colab=True, installed=done, cloned=True)
    assert report["calls"] == [], "everything is there: a re-run installs nothing"


def test_setup_cell_pins_what_colab_lacks_to_the_course_pins():
    source = colab.setup_cell_source("notebooks/x.ipynb")
    for pin in colab.colab_pins():
        assert f'"{pin}"' in source and "==" in pin


def test_source_notebooks_run_where_their_release_runs():
    assert colab.working_folder("source/batching/batching.ipynb") == "release/batching"
    assert colab.working_folder("release/batching/batching.ipynb") == "release/batching"
    assert colab.working_folder("notebooks/01_chips.ipynb") == "notebooks"
    same = colab.setup_cell_source("source/a/a.ipynb") == colab.setup_cell_source("release/a/a.ipynb")
    assert same, "nbgrader copies the setup cell into release/: both must be identical"


def test_colab_url_rejects_non_notebook_paths():
    url = colab.colab_url("notebooks/01_chips.ipynb")
    assert url.endswith(f"/blob/{colab.BRANCH}/notebooks/01_chips.ipynb")
    for bad in ("/abs/01.ipynb", "README.md"):
        with pytest.raises(ValueError, match="relative_path"):
            colab.colab_url(bad)


def make_tree(root: Path):
    """A tiny course tree: pyproject pins, a README with markers, a lesson, a source assignment."""
    (root / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    markers = f"{colab.README_START}\nold list\n{colab.README_END}"
    (root / "README.md").write_text(f"# Course\n\n{markers}\n\nmore\n")
    for rel, title in (("notebooks/01_intro.ipynb", "Intro"), ("source/ps1/ps1.ipynb", "Problem set 1")):
        path = root / rel
        path.parent.mkdir(parents=True)
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {title}\nText."),
                                             nbformat.v4.new_code_cell("x = 1")])
        nbformat.write(nb, path)


def test_sync_puts_the_setup_cell_first_and_writes_the_readme_list(tmp_path):
    make_tree(tmp_path)
    stale = colab.sync(tmp_path, check=True)
    assert set(map(str, stale)) == {"notebooks/01_intro.ipynb", "source/ps1/ps1.ipynb", "README.md"}
    assert colab.sync(tmp_path) == stale
    assert colab.sync(tmp_path, check=True) == [], "a second sync has nothing left to do"
    nb = nbformat.read(tmp_path / "notebooks/01_intro.ipynb", as_version=4)
    assert [c.cell_type for c in nb.cells] == ["code", "markdown", "code"]
    assert nb.cells[0].source == colab.setup_cell_source("notebooks/01_intro.ipynb", tmp_path)
    readme = (tmp_path / "README.md").read_text()
    assert "[Intro](notebooks/01_intro.ipynb)" in readme and "old list" not in readme
    assert readme.endswith(f"{colab.README_END}\n\nmore\n")


def test_sync_moves_a_stale_tagged_cell_first_and_clears_its_outputs(tmp_path):
    make_tree(tmp_path)
    path = tmp_path / "notebooks/01_intro.ipynb"
    nb = nbformat.read(path, as_version=4)
    stale = nbformat.v4.new_code_cell("# Colab setup: does nothing outside Google Colab.\nimport sys",
                                      metadata={"tags": [colab.SETUP_TAG]}, execution_count=3)
    nb.cells.insert(1, stale)
    nbformat.write(nb, path)
    colab.sync(tmp_path)
    cells = nbformat.read(path, as_version=4).cells
    assert len(cells) == 3 and cells[0].id == stale.id and cells[0].execution_count is None
    assert colab.setup_cell_is_current(path, tmp_path)


def test_sync_check_exits_1_when_out_of_date_and_readme_needs_markers(tmp_path, capsys):
    make_tree(tmp_path)
    assert colab.main(["sync", "--check", "--root", str(tmp_path)]) == 1
    assert "out of date: README.md" in capsys.readouterr().out
    assert colab.main(["sync", "--root", str(tmp_path)]) == 0
    assert colab.main(["sync", "--check", "--root", str(tmp_path)]) == 0
    with pytest.raises(ValueError, match="README"):
        colab.synced_readme("no markers here", "block")


def test_colab_pins_name_the_missing_pin(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project.optional-dependencies]\ncourse = ["onnx==1.0"]\n')
    with pytest.raises(ValueError, match="onnxruntime"):
        colab.colab_pins(tmp_path)


def test_the_overlay_is_rebuilt_from_scratch_when_its_pins_change(tmp_path, monkeypatch):
    installs = []

    def pip(argv, check):
        installs.append(argv)
        (tmp_path / "overlay" / "new-1.0.dist-info").mkdir(parents=True, exist_ok=True)

    monkeypatch.setattr(colab.subprocess, "run", pip)
    target = tmp_path / "overlay"
    target.mkdir()
    (target / ".installed").write_text("old==0.1")
    (target / "old-0.1.dist-info").mkdir()  # what pip --target --upgrade would leave behind
    colab.build_overlay(target)
    assert sorted(p.name for p in target.iterdir()) == [".installed", "new-1.0.dist-info"]
    colab.build_overlay(target)  # same pins: nothing installed again
    assert len(installs) == 1 and all(pin in installs[0] for pin in colab.colab_stack_pins())
    elsewhere = tmp_path / "somebody's folder"
    elsewhere.mkdir()
    (elsewhere / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="target must be empty or an overlay"):
        colab.build_overlay(elsewhere)
    assert (elsewhere / "notes.txt").read_text() == "keep me"
