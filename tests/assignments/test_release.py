"""release/ is what `nbgrader generate_assignment` makes of source/; source validates, release does not."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hwopt.course.grading.course import ASSIGNMENTS, ROOT, make_api, prepare_course

VOLATILE_METADATA = ("widgets", "execution", "collapsed", "scrolled", "colab", "vscode")


def normalised(path: Path) -> dict:
    """Notebook JSON without metadata that editors change by themselves (nbgrader never writes these)."""
    nb = json.loads(path.read_text())
    for meta in [nb["metadata"], *(c["metadata"] for c in nb["cells"])]:
        for key in VOLATILE_METADATA:
            meta.pop(key, None)
    return nb


@pytest.mark.slow
def test_committed_release_is_what_generate_assignment_makes(tmp_path):
    course = prepare_course(tmp_path / "course")
    api = make_api(course)
    for assignment in ASSIGNMENTS:
        result = api.generate_assignment(assignment, force=True, create=True)
        assert result["success"], result.get("error")
        fresh = course / "release" / assignment / f"{assignment}.ipynb"
        committed = ROOT / "release" / assignment / f"{assignment}.ipynb"
        assert normalised(fresh) == normalised(committed), (
            f"release/{assignment} is out of date: run `make release` and commit release/")
    assert sorted(p.name for p in (ROOT / "release").iterdir() if p.is_dir()) == sorted(ASSIGNMENTS)


def validate_output(paths: list[Path], processes: int = 2) -> dict[str, str]:
    """`nbgrader validate` from the repository root, the paths shared among `processes` concurrent runs (each
    notebook is run by a kernel of its own); its printed verdict per notebook (it exits 0 anyway)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    nbgrader = Path(sys.executable).parent / "nbgrader"
    runs = [subprocess.Popen([nbgrader, "validate", *map(str, paths[i::processes])], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for i in range(processes)]
    verdicts = {}
    for run in runs:
        output = run.communicate(timeout=600)[0]
        assert run.returncode == 0, output
        sections = re.split(r"\[ValidateApp \| INFO\] Validating '([^']+)'", output)[1:]
        pairs = zip(sections[::2], sections[1::2], strict=True)
        verdicts.update({str(Path(name).relative_to(ROOT)): text for name, text in pairs})
    return verdicts


@pytest.mark.slow
def test_validate_passes_every_source_and_fails_every_release_notebook():
    sources = sorted((ROOT / "source").glob("*/*.ipynb"))
    releases = sorted((ROOT / "release").glob("*/*.ipynb"))
    verdicts = validate_output(sources + releases)
    assert len(verdicts) == len(sources) + len(releases) == 2 * len(ASSIGNMENTS)
    for name, text in verdicts.items():
        if name.startswith("source"):
            assert "Success! Your notebook passes all the tests." in text, f"{name}:\n{text[-2000:]}"
        else:
            assert "VALIDATION FAILED" in text and "Success!" not in text, f"{name} passes unsolved:\n{text}"
