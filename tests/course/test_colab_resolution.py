"""The Colab setup cell changes no package Colab ships: its installs, resolved by pip for Colab's CPython 3.13
on Linux x86-64 with every package of Colab's published pip-freeze (hwopt/course/colab_pip_freeze.txt, its
source commit in its header) held at Colab's version, must resolve, and add only packages Colab lacks.

Needs the package index (pip reads the wheels' metadata); `python -m hwopt.course.colab freeze --update ...`
refreshes the freeze.
"""

import json
import re
import subprocess
import sys

import pytest
from packaging.utils import canonicalize_name

from hwopt.course import colab

# Colab's runtime: Ubuntu 22.04 (glibc 2.35); pip's --platform takes each manylinux tag it may install.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(17, 36)] + ["manylinux2014_x86_64"]


def resolve_for_colab(pins, tmp_path):
    """pip resolving pins for Colab's Python, the freeze as constraints: (returncode, installs, stderr)."""
    freeze = colab.colab_freeze()
    constraints = tmp_path / "colab-constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in freeze.items()))
    python = colab.freeze_header()["python"]
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--report", str(report), "--python-version", python, "--implementation", "cp",
               "--only-binary=:all:", *(f"--platform={tag}" for tag in PLATFORMS), "-c", str(constraints),
               *pins]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    installed = {}
    if result.returncode == 0:
        installed = {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
                     for item in json.loads(report.read_text())["install"]}
    return result.returncode, installed, result.stderr


def test_the_stored_freeze_names_its_source_commit_and_colabs_python():
    header = colab.freeze_header()
    assert re.fullmatch(r"[0-9a-f]{40}", header["commit"].split()[0]), header
    assert header["commit"].split()[0] in header["source"] and "backend-info" in header["source"]
    assert re.fullmatch(r"3\.\d+", header["python"])
    freeze = colab.colab_freeze()
    for name in ("torch", "numpy", "protobuf", "grpcio-status", "google-ai-generativelanguage",
                 *colab.COLAB_STACK):
        assert canonicalize_name(name) in freeze, f"the freeze lacks {name}"


def test_the_setup_cell_installs_nothing_colab_has():
    freeze = colab.colab_freeze()
    for pin in colab.colab_pins():
        name = canonicalize_name(pin.split("==")[0])
        assert name not in freeze, f"the setup cell installs {pin}, but Colab ships {name} {freeze[name]}"


def test_the_setup_cells_installs_resolve_on_colab_without_changing_a_colab_package(tmp_path):
    pins = colab.colab_pins()
    code, installed, stderr = resolve_for_colab(pins, tmp_path)
    assert code == 0, f"pip cannot install {pins} on Colab and keep every Colab package:\n{stderr[-3000:]}"
    freeze = colab.colab_freeze()
    changed = {name: (freeze[name], version) for name, version in installed.items()
               if name in freeze and freeze[name] != version}
    assert not changed, f"these Colab packages would change (Colab's, new): {changed}"
    for pin in pins:
        name, version = pin.split("==")
        assert installed[canonicalize_name(name)] == version
    assert installed["protobuf"] == freeze["protobuf"]


def test_the_check_catches_an_install_that_would_upgrade_colabs_protobuf(tmp_path):
    """onnx 1.23.1 (the local course pin) needs protobuf >= 6.31.1; Colab's packages need protobuf < 6."""
    pins = [pin for pin in colab.colab_pins() if not pin.startswith("onnx==")] + ["onnx==1.23.1"]
    code, _, stderr = resolve_for_colab(pins, tmp_path)
    assert code != 0, "pip resolved onnx 1.23.1 with Colab's protobuf held: the check cannot see a conflict"
    assert "protobuf" in stderr or "conflict" in stderr.lower(), stderr[-2000:]


@pytest.mark.parametrize("line, expected", [
    ("numpy==2.1.3", {"numpy": "2.1.3"}),
    ("torch @ https://download.pytorch.org/whl/cpu/torch-2.11.0%2Bcpu-cp313-cp313-manylinux_2_28_x86_64.whl",
     {"torch": "2.11.0+cpu"}),
    ("jupyter_kernel_gateway @ git+https://example.org/kernel_gateway@b134e99", {}),
    ("# comment\n-e /content/x\nTyping_Extensions==4.16.0", {"typing-extensions": "4.16.0"}),
])
def test_read_freeze_takes_pins_and_wheel_urls(line, expected):
    assert colab.read_freeze(line) == expected


def test_update_freeze_rewrites_the_file_with_its_source(tmp_path):
    published = tmp_path / "pip-freeze.txt"
    published.write_text("numpy==2.1.3\nprotobuf==5.29.6\n")
    stored = tmp_path / "colab_pip_freeze.txt"
    argv = ["freeze", "--update", str(published), "--commit", "a724079", "--path", str(stored)]
    assert colab.main(argv) == 0
    assert colab.colab_freeze(stored) == {"numpy": "2.1.3", "protobuf": "5.29.6"}
    assert colab.freeze_header(stored)["commit"] == "a724079"
    with pytest.raises(ValueError, match="commit"):
        colab.update_freeze(str(published), "main", path=stored)
    published.write_text("nothing here\n")
    with pytest.raises(ValueError, match="source"):
        colab.update_freeze(str(published), "a724079", path=stored)
