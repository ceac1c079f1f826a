"""course.grading.settings: every environment variable of grading declared once, and documented from there."""

import re

import pytest

from hwopt.course.grading import sandbox, settings
from hwopt.course.grading.course import ROOT

DOCS = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "Makefile", "nbgrader_config.py", "autograder")
CODE = ("hwopt", "benchmarks", "tests", "nbgrader_config.py", "source", "release", "notebooks")


def files(*names: str):
    """The repository's files at these paths (folders: every file in them)."""
    for name in names:
        path = ROOT / name
        yield from (sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
                    if path.is_dir() else [path])


def test_every_setting_has_a_name_of_its_own_a_unit_and_a_meaning():
    names = [s.name for s in settings.SETTINGS]
    assert len(set(names)) == len(names) and all(n.startswith(settings.PREFIX) for n in names)
    assert all(s.unit and s.help for s in settings.SETTINGS)
    declared = {v.name for v in vars(settings).values() if isinstance(v, settings.Setting)}
    assert declared == set(names), "every Setting of the module is in SETTINGS"


def test_the_kernel_gets_its_own_settings_and_no_other():
    passed = {name for name in sandbox.KEPT_ENV if name.startswith(settings.PREFIX)}
    assert passed == {s.name for s in settings.KERNEL_SETTINGS}
    assert settings.SECRET not in settings.KERNEL_SETTINGS and settings.SECRET.name not in sandbox.KEPT_ENV


def test_defaults_are_valid_values_of_their_settings():
    for setting in (settings.MEMORY_GB, settings.CPU_S, settings.MAX_PROCESSES):
        assert settings.positive_number(setting, {}) == float(setting.default)
    assert settings.positive_whole_number(settings.THREADS, "threads", {}) == 1
    assert settings.positive_whole_number(settings.TIMEOUT_S, "seconds", {}) == 60
    assert settings.flag(settings.UNSANDBOXED, {}) is False


def test_values_are_read_as_set_and_bad_ones_named():
    env = {settings.MEMORY_GB.name: " 2.5 ", settings.UNSANDBOXED.name: "Yes", settings.THREADS.name: ""}
    assert settings.positive_number(settings.MEMORY_GB, env) == 2.5
    assert settings.flag(settings.UNSANDBOXED, env) and not settings.flag(settings.UNSANDBOXED, {
        settings.UNSANDBOXED.name: "no"})
    assert settings.positive_whole_number(settings.THREADS, "threads", env) == 1  # empty: the default
    for bad in ("0", "-1", "nan", "inf", "four"):
        with pytest.raises(ValueError, match=f"{settings.MEMORY_GB.name} must be a positive finite number"):
            settings.positive_number(settings.MEMORY_GB, {settings.MEMORY_GB.name: bad})
    for bad in ("0", "2.5", "²", "two"):
        with pytest.raises(ValueError, match=f"{settings.TIMEOUT_S.name} must be a positive whole number"):
            settings.positive_whole_number(settings.TIMEOUT_S, "seconds", {settings.TIMEOUT_S.name: bad})


def test_the_readme_table_is_generated_from_the_settings():
    readme = (ROOT / "README.md").read_text()
    assert settings.synced_readme(readme) == readme, (
        "README's table of grading settings is out of date: run `python -m hwopt.course.grading settings "
        "--readme`")
    assert all(f"| `{s.name}` | " in readme for s in settings.SETTINGS)
    with pytest.raises(ValueError, match="markers"):
        settings.synced_readme("no table here")


def test_the_docs_name_only_declared_settings():
    declared = {s.name for s in settings.SETTINGS}
    for path in files(*DOCS):
        named = set(re.findall(settings.PREFIX + r"[A-Z0-9_]+", path.read_text(errors="replace")))
        assert named <= declared, f"{path.relative_to(ROOT)} names undeclared settings: {named - declared}"


def test_code_takes_every_settings_name_from_the_settings_module():
    here = ROOT / "hwopt" / "course" / "grading" / "settings.py"
    typed = [str(p.relative_to(ROOT)) for p in files(*CODE) if p != here and p.suffix in (".py", ".ipynb")
             and settings.PREFIX in p.read_text(errors="replace")]
    assert typed == [], "use the constants of hwopt.course.grading.settings instead of the names"
