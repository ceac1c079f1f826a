"""The toolkit as a grading kernel sees it: the course's tables and the assignments' helpers, no cost model.

Assignments practise what the toolkit computes for the lessons (cost models, simulators, quantizers, the
roofline), so a grading kernel must not find those answers in it under any name, however wrapped. Each
grading kernel sees, at the toolkit's path, a copy (built once per grading process) holding only the files of
SEEN: the chip and model tables, the recorded profiler traces (plain data), the number formats, the course's
trained model (its architecture, weights, tokenizer, text and perplexity), the quiz's bank reader, the visible
tests' helper and the kernel launcher.
Every other module is a stub that imports but holds nothing: taking anything from it raises AttributeError
saying that it is not available while grading. The lessons, the reference solutions and the
grader itself use the whole toolkit.

A module joins SEEN only if it computes no graded quantity:
tests/assignments/test_toolkit_has_no_graded_answers.py tries every function a grading kernel sees on every
graded part, and each assignment whose parts the whole toolkit answers has an adapter sample (toolkit calls
only) that must score 0.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from hwopt.machine.toolchain import cache_dir

SEEN = (  # paths in the hwopt package (fnmatch patterns): what a grading kernel may import or read
    "__init__.py", "arguments.py", "formats.py", "data/__init__.py", "data/*.csv",
    "traces.py", "data/traces/*.json",  # the recorded profiler traces that assignment 8 reads
    "machine/__init__.py", "machine/specs.py",  # the chip table
    "cost/__init__.py", "cost/shapes.py",  # the model table
    "machine/bench.py",  # resolve_device, which loading a model calls
    "models/__init__.py", "models/llama.py", "models/checkpoint.py", "models/tokenizer.py",
    "models/corpus.py", "models/perplexity.py", "models/weights/*.json", "models/weights/*.txt",
    "models/weights/*/config.json", "models/weights/*/model.safetensors",
    "models/weights/*/tokenizer.json",  # the course's trained model
    "course/__init__.py", "course/exercises.py", "course/quiz.py",
    "course/grading/__init__.py", "course/grading/kernel.py", "course/grading/settings.py",
    "course/grading/collect.py", "course/grading/judge.py",
)
STUB = '''"""Not available while grading: {module} computes what assignments grade (the lessons use it)."""


def __getattr__(name):
    raise AttributeError(f"{module}.{{name}} is not available while grading: the graded parts are yours to "
                         "write (the lessons use it)")
'''
SEEN_TEXT = repr((SEEN, STUB))  # part of the fingerprint: a changed rule builds a new copy


def seen(relative: str) -> bool:
    """True when a grading kernel gets the file at this path of the package (a SEEN pattern matches it)."""
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in SEEN)


def build(package: Path, dest: Path) -> Path:
    """Write the grading kernels' copy of package (the hwopt folder) into dest/hwopt; returns that folder.

    SEEN files are copied (with their compiled bytecode, still valid: modification times kept); every other
    module becomes a STUB; other files are left out. Folders 0755, files 0644: any sandbox uid reads them.
    """
    package, root = Path(package), Path(dest) / package.name
    tag = sys.implementation.cache_tag
    for path in sorted(package.rglob("*")):
        relative = path.relative_to(package).as_posix()
        if "__pycache__" in path.parts or not path.is_file():
            continue
        target = root / relative
        if seen(relative):
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            compiled = path.parent / "__pycache__" / f"{path.stem}.{tag}.pyc"
            if path.suffix == ".py" and compiled.is_file():
                (target.parent / "__pycache__").mkdir(exist_ok=True)
                shutil.copy2(compiled, target.parent / "__pycache__" / compiled.name)
        elif path.suffix == ".py":
            target.parent.mkdir(parents=True, exist_ok=True)
            module = ".".join((package.name, *Path(relative).with_suffix("").parts)).removesuffix(".__init__")
            target.write_text(STUB.format(module=module))
    for path in [root, *root.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return root


def fingerprint(package: Path) -> str:
    """A digest of what build(package) writes: the SEEN files' bytes and every other module's name."""
    digest = hashlib.sha256(SEEN_TEXT.encode())
    for path in sorted(Path(package).rglob("*")):
        relative = path.relative_to(package).as_posix()
        if "__pycache__" in path.parts or not path.is_file():
            continue
        if seen(relative):
            digest.update(f"{relative}\0".encode() + path.read_bytes())
        elif path.suffix == ".py":
            digest.update(f"{relative} (stub)\0".encode())
    return digest.hexdigest()[:16]


@functools.cache
def view(package: Path) -> Path:
    """The grading kernels' copy of package, built once per version of the toolkit in the course's cache
    (machine.toolchain.cache_dir()/grading-toolkit/<fingerprint>), shared by every grading process."""
    package = Path(package)
    home = cache_dir() / "grading-toolkit"
    final = home / fingerprint(package)
    if not (final / package.name).is_dir():
        home.mkdir(parents=True, exist_ok=True)
        os.chmod(home, 0o755)
        building = Path(tempfile.mkdtemp(prefix="building-", dir=home))
        try:
            build(package, building)
            os.chmod(building, 0o755)
            os.rename(building, final)  # atomic: another grading process sees the whole copy or none
        except OSError:
            if not (final / package.name).is_dir():
                raise
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return final / package.name
