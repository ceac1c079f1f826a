"""The install files agree: environment.yml and requirements.txt repeat pyproject.toml pins; the toolkit
accepts Colab's stack."""

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


def pinned_in_requirements_txt():
    lines = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    reqs = [Requirement(line) for line in lines if line and not line.startswith(("#", "-e"))]
    return {r.name: str(r.specifier) for r in reqs}


def test_requirements_txt_repeats_pyproject_pins_and_installs_the_toolkit():
    assert pinned_in_requirements_txt() == pinned_in_pyproject()
    assert "-e ." in (ROOT / "requirements.txt").read_text().splitlines()


def test_environment_yml_uses_conda_forge_and_installs_the_toolkit():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-e ." in pip_section


def test_every_course_and_test_pin_is_exact():
    for name, spec in pinned_in_pyproject().items():
        assert spec.startswith("==") and "," not in spec, f"{name} should be pinned exactly, got {spec!r}"


# What Colab ships (googlecolab/backend-info, commit a724079, 2026-08-19): the toolkit must accept it as is.
COLAB_PREINSTALLED = {"torch": "2.11.0", "numpy": "2.1.3", "matplotlib": "3.10.0", "ipywidgets": "7.7.1",
                      "ipython": "7.34.0", "scikit-learn": "1.6.1", "psutil": "5.9.5"}


def runtime_requirements():
    return {Requirement(r).name: Requirement(r).specifier for r in pyproject()["project"]["dependencies"]}


def test_runtime_requirements_accept_colabs_preinstalled_stack():
    runtime = runtime_requirements()
    for name, version in COLAB_PREINSTALLED.items():
        assert Version(version) in runtime[name], f"Colab's {name} {version} must satisfy the toolkit"
    assert Version("8.1.9") in runtime["ipywidgets"]


def test_runtime_requirements_accept_the_colab_setup_cell_and_the_course_pins():
    from hwopt.course import colab

    runtime = runtime_requirements()
    for pin in colab.colab_pins():  # what the Colab setup cell installs
        req = Requirement(pin)
        assert req.name in runtime, f"the toolkit imports {req.name} (the setup cell installs it): declare it"
    for name, spec in pinned_in_pyproject().items():  # the course and Colab pins meet the toolkit's floors
        if name in runtime:
            pinned = Version(spec.removeprefix("=="))
            assert pinned in runtime[name], f"{name}{spec} is outside the toolkit's {runtime[name]}"
