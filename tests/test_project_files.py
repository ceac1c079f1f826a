"""The files an open course is expected to have exist, are linked from the README, and agree with the project:
licences, citation, contributing guide, changelog, pre-commit hooks and the CI workflow."""

import re
import tomllib
from pathlib import Path

import yaml

import hwopt

ROOT = Path(__file__).resolve().parents[1]
FILES = ("LICENSE", "LICENSE-content.md", "CITATION.cff", "CONTRIBUTING.md", "CHANGELOG.md",
         "requirements.txt", ".pre-commit-config.yaml", ".github/workflows/tests.yml")


def ci_command():
    """The command .ci/run runs (its last line that is neither a comment nor shell set-up)."""
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [line for line in lines if line and not line.startswith(("#", "set ", "cd "))]
    assert len(commands) == 1, f".ci/run should run one command, got {commands}"
    return commands[0]


def test_the_open_course_files_exist_and_the_readme_links_them():
    readme = (ROOT / "README.md").read_text()
    for name in FILES:
        assert (ROOT / name).is_file(), f"{name} is missing"
        if not name.startswith("."):
            assert f"]({name})" in readme, f"the README should link {name}"


def test_the_licences_name_mit_for_code_and_cc_by_for_content():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "MIT"
    content = (ROOT / "LICENSE-content.md").read_text()
    assert "CC BY 4.0" in content and "creativecommons.org/licenses/by/4.0" in content


def test_the_citation_file_is_valid_cff_with_the_toolkits_version():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["title"] and cff["authors"]
    assert cff["version"] == hwopt.__version__ == tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "project"]["version"]
    assert cff["license"] == "MIT"


def test_the_workflow_runs_the_readmes_test_command_on_ubuntu():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "tests.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as True
    assert {"push", "pull_request"} <= set(triggers)
    (job,) = workflow["jobs"].values()
    assert job["runs-on"].startswith("ubuntu")
    runs = [step["run"].strip() for step in job["steps"] if "run" in step]
    command = ci_command()
    assert runs == [command] and command == "make test"
    assert "make test" in (ROOT / "README.md").read_text()
    python = next(step["with"]["python-version"] for step in job["steps"]
                  if "setup-python" in step.get("uses", ""))
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["target-version"]  # py311
    assert python == f"{target[2]}.{target[3:]}", "CI runs the Python the project targets"


def test_pre_commit_runs_the_pinned_ruff_and_the_notebook_outputs_check():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    repos = {repo["repo"]: repo for repo in config["repos"]}
    ruff = repos["https://github.com/astral-sh/ruff-pre-commit"]
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    ruff_pin = next(pin for pin in pins if pin.startswith("ruff=="))
    assert ruff["rev"] == "v" + ruff_pin.removeprefix("ruff==")
    assert [hook["id"] for hook in ruff["hooks"]] == ["ruff"]
    (hook,) = repos["local"]["hooks"]
    assert hook["entry"] == "python -m hwopt.course.notebook_outputs --check"
    assert re.search(hook["files"], "notebooks/01_chips.ipynb") and not re.search(hook["files"], "x.py")


def test_the_changelog_has_a_section_for_this_version():
    assert f"## {hwopt.__version__}" in (ROOT / "CHANGELOG.md").read_text()
