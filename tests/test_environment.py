"""The install files agree: environment.yml and requirements.txt repeat pyproject.toml pins; the toolkit
accepts Colab's stack."""

import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from hwopt.course import colab

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


def colab_preinstalled():
    """What Colab ships, from its published pip-freeze stored in the repository: {name: version}."""
    return colab.colab_freeze()


def runtime_requirements():
    return {Requirement(r).name: Requirement(r).specifier for r in pyproject()["project"]["dependencies"]}


def test_runtime_requirements_accept_colabs_preinstalled_stack():
    runtime, colab_has = runtime_requirements(), colab_preinstalled()
    shipped = {name: colab_has[canonicalize_name(name)] for name in runtime
               if canonicalize_name(name) in colab_has}
    for name, version in shipped.items():
        assert Version(version) in runtime[name], f"Colab's {name} {version} must satisfy the toolkit"
    assert {"torch", "numpy", "ipywidgets", "ipython", "scikit-learn", "psutil", "matplotlib"} <= set(shipped)
    assert shipped["torch"].startswith("2.11") and shipped["numpy"].startswith("2.1.")
    assert Version("8.1.9") in runtime["ipywidgets"]


def test_runtime_requirements_accept_the_colab_setup_cell_and_the_course_pins():
    runtime = runtime_requirements()
    for pin in colab.colab_pins():  # what the Colab setup cell installs
        req = Requirement(pin)
        assert req.name in runtime, f"the toolkit imports {req.name} (the setup cell installs it): declare it"
        assert Version(str(req.specifier).removeprefix("==")) in runtime[req.name], f"{pin}: below the floor"
    for name, spec in pinned_in_pyproject().items():  # the course and Colab pins meet the toolkit's floors
        if name in runtime:
            pinned = Version(spec.removeprefix("=="))
            assert pinned in runtime[name], f"{name}{spec} is outside the toolkit's {runtime[name]}"
