"""Packaging: an installed wheel works without the repository, and every third-party import is declared."""

import ast
import importlib.metadata
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def imported_modules(node) -> set[str]:
    """Top-level modules an ast node imports absolutely (empty for any other node)."""
    if isinstance(node, ast.Import):
        return {alias.name.split(".")[0] for alias in node.names}
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return {node.module.split(".")[0]}
    return set()


def third_party_imports(package: Path = ROOT / "hwopt") -> dict[str, set[str]]:
    """{top-level module: files} of package's absolute imports that are neither stdlib nor hwopt."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for top in imported_modules(node):
                if top not in sys.stdlib_module_names and top != "hwopt":
                    found.setdefault(top, set()).add(path.relative_to(ROOT).as_posix())
    return found


def distribution_of(module: str) -> str:
    """Canonical name of the installed distribution that provides a top-level module."""
    dists = importlib.metadata.packages_distributions().get(module)
    assert dists, f"{module!r} is imported by the toolkit but no installed distribution provides it"
    return canonicalize_name(dists[0])


def requirement_names(requirements) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def test_every_third_party_import_is_a_declared_or_documented_optional_dependency():
    declared = requirement_names(PYPROJECT["project"]["dependencies"])
    optional = PYPROJECT["tool"]["hwopt"]["optional-imports"]
    imports = third_party_imports()
    assert {"numpy", "torch", "onnxruntime", "sklearn"} <= set(imports), "the scan misses imports"
    undeclared = {m: sorted(files) for m, files in imports.items()
                  if m not in optional and distribution_of(m) not in declared}
    assert not undeclared, f"add these to pyproject's [project].dependencies (imported by): {undeclared}"


def test_ruff_keeps_optional_imports_inside_functions_and_their_group_installs_them():
    groups = PYPROJECT["project"]["optional-dependencies"]
    imports = third_party_imports()
    optional = PYPROJECT["tool"]["hwopt"]["optional-imports"]
    banned = PYPROJECT["tool"]["ruff"]["lint"]["flake8-tidy-imports"]["banned-module-level-imports"]
    assert sorted(banned) == sorted(optional), "ruff's banned-module-level-imports: the optional imports"
    for module, group in optional.items():
        assert module in imports, f"{module!r} is listed as an optional import but nothing imports it"
        members = requirement_names(groups[group])
        brought = members | {canonicalize_name(Requirement(r).name) for m in members
                             for r in importlib.metadata.requires(m) or () if "extra ==" not in r}
        assert distribution_of(module) in brought, f"the {group!r} group does not install {module!r}"


INSTALLED_CHECK = """
import json, sys
from pathlib import Path
import hwopt
from hwopt.cost import footprint
from hwopt.data import DATA_DIR
from hwopt.kernels import lowbit_gemv
from hwopt.machine import specs
print(json.dumps({"hwopt": hwopt.__file__, "data": str(DATA_DIR), "chips": len(specs.load_chips()),
                  "shapes": len(footprint.load_shapes()), "kernel_source": lowbit_gemv.SOURCE.is_file(),
                  "chips_csv": specs.CHIPS_CSV.read_text(encoding="utf-8"), "sys_path": sys.path}))
"""


@pytest.mark.slow
def test_a_wheel_installed_elsewhere_finds_the_chip_table_the_shapes_and_the_c_kernel(tmp_path):
    source = tmp_path / "source"  # build from a copy: the build leaves build/ and *.egg-info where it runs
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "hwopt", source / "hwopt", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"),
                    str(source)], check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("hwopt-*.whl")
    target = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    shutil.rmtree(source)  # nothing of the sources is left to import from
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(target), "HOME": str(tmp_path), "MPLBACKEND": "Agg"}
    out = subprocess.run([sys.executable, "-c", INSTALLED_CHECK], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(seen["hwopt"]).is_relative_to(target) and Path(seen["data"]).is_relative_to(target)
    assert not any(Path(p).resolve() == ROOT for p in seen["sys_path"] if p), "the repository is on sys.path"
    assert seen["chips"] > 0 and seen["shapes"] > 0 and seen["kernel_source"]
    assert seen["chips_csv"] == (ROOT / "hwopt" / "data" / "chips.csv").read_text(encoding="utf-8")
