"""The toolkit as grading kernels see it: its tables, and stubs in place of every module that computes."""

import subprocess
import sys
from pathlib import Path

import pytest

import hwopt
from hwopt.course.grading import toolkit

PACKAGE = Path(hwopt.__file__).parent


@pytest.fixture(scope="module")
def view(tmp_path_factory) -> Path:
    return toolkit.build(PACKAGE, tmp_path_factory.mktemp("view"))


def kernel_imports(view: Path, code: str) -> subprocess.CompletedProcess:
    """code run by an interpreter that imports hwopt from view (as a sandboxed kernel does)."""
    prelude = (f"import sys; sys.path.insert(0, {str(view.parent)!r})\n"
               f"import hwopt; assert hwopt.__file__.startswith({str(view)!r}), hwopt.__file__\n")
    return subprocess.run([sys.executable, "-P", "-c", prelude + code], cwd=view.parent, capture_output=True,
                          text=True, timeout=120)


def test_the_tables_are_there_and_every_cost_model_is_a_stub(view):
    done = kernel_imports(view, "from hwopt.cost.shapes import get_shape\n"
                                "from hwopt.machine.specs import get_chip\n"
                                "print(get_shape('Llama-3-8B').n_layers, get_chip('NVIDIA L4').name)\n"
                                "from hwopt import roofline\n"
                                "from hwopt.cost import footprint, batching\n"
                                "for module, name in ((roofline, 'time_s'), (footprint, 'kv_cache_bytes'),\n"
                                "                     (batching, 'fit_latency_model')):\n"
                                "    try:\n"
                                "        getattr(module, name)\n"
                                "    except AttributeError as err:\n"
                                "        print(err)\n")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "32 NVIDIA L4"
    assert lines[1:] == [f"hwopt.{m}.{n} is not available while grading: the graded parts are yours to write "
                         "(the lessons use it)" for m, n in (("roofline", "time_s"),
                                                             ("cost.footprint", "kv_cache_bytes"),
                                                             ("cost.batching", "fit_latency_model"))]


def test_only_seen_files_are_copied(view):
    copied = {p.relative_to(view).as_posix() for p in view.rglob("*")
              if p.is_file() and "__pycache__" not in p.parts}
    assert {"cost/shapes.py", "machine/specs.py", "formats.py", "data/model_shapes.csv"} <= copied
    assert all(toolkit.seen(name) or (view / name).read_text().startswith('"""Not available while grading')
               for name in copied)
    assert "Not available" in (view / "roofline.py").read_text()
    assert not [p for p in view.rglob("*") if p.suffix in (".c", ".so", ".pt", ".gguf", ".onnx")]  # no kernel
    weights = {p.relative_to(view).as_posix() for p in view.rglob("*.safetensors")}
    assert weights == {"models/weights/target/model.safetensors", "models/weights/draft/model.safetensors"}


def test_a_grading_kernel_runs_the_courses_trained_model(view):
    done = kernel_imports(view, "import torch\n"
                                "from hwopt.models import checkpoint, tokenizer\n"
                                "target = checkpoint.load('target')\n"
                                "words = tokenizer.load(checkpoint.WEIGHTS_DIR / 'tokenizer.json')\n"
                                "ids = words.encode('def main():').ids\n"
                                "print(target(torch.tensor([ids])).shape[-1])\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["4096"]


def test_the_view_is_built_once_per_toolkit_version_in_the_course_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HWOPT_CACHE", str(tmp_path))
    first = toolkit.view.__wrapped__(PACKAGE)
    assert first.parent.parent == tmp_path / "grading-toolkit" and first.name == "hwopt"
    assert first.parent.name == toolkit.fingerprint(PACKAGE)
    stamp = (first / "cost" / "shapes.py").stat().st_mtime_ns
    assert toolkit.view.__wrapped__(PACKAGE) == first  # reused, not rebuilt
    assert (first / "cost" / "shapes.py").stat().st_mtime_ns == stamp
    # nothing half-built is left
    assert [p.name for p in (tmp_path / "grading-toolkit").iterdir()] == [first.parent.name]
