"""The install files agree: environment.yml repeats pyproject.toml pins; the toolkit accepts Colab's stack."""

import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def pinned_in_pyproject():
    extras = pyproject()["project"]["optional-dependencies"]
    return {Requirement(r).name: str(Requirement(r).specifier) for group in extras.values() for r in group}


def pinned_in_environment_yml():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    reqs = [Requirement(line) for line in pip_section if not line.startswith("-e")]
    return {r.name: str(r.specifier) for r in reqs}


def test_environment_yml_repeats_pyproject_pins():
    assert pinned_in_environment_yml() == pinned_in_pyproject()


def test_environment_yml_uses_conda_forge_and_installs_the_toolkit():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-e ." in pip_section


def test_every_course_and_test_pin_is_exact():
    for name, spec in pinned_in_pyproject().items():
        assert spec.startswith("==") and "," not in spec, f"{name} should be pinned exactly, got {spec!r}"


def test_runtime_requirements_accept_colabs_preinstalled_stack():
    runtime = {Requirement(r).name: Requirement(r).specifier for r in pyproject()["project"]["dependencies"]}
    assert Version("2.11.0") in runtime["torch"], "Colab's torch 2.11 must satisfy the toolkit"
    assert Version("7.7.1") in runtime["ipywidgets"], "Colab's ipywidgets 7.7.1 must satisfy the toolkit"
    assert Version("8.1.9") in runtime["ipywidgets"]
