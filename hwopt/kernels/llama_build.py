"""llama.cpp's OpenAI-compatible server, `llama-server`, built from source on this machine (lesson 11).

PyPI has no binary of llama.cpp; its source ships whole inside the llama-cpp-python sdist
(`vendor/llama.cpp`, `tools/server` included). `server_binary()` fetches that sdist with pip, checks its
sha256, unpacks the llama.cpp tree, and builds only the `llama-server` target with CMake and the system C++
compiler: Release, static, tuned to this CPU (GGML_NATIVE), with no tests, examples, web UI, TLS or
downloads, on every core. The binary is cached under toolchain.cache_dir() / "llama.cpp", keyed by the
source, the compilers, the flags and this CPU's instruction sets (a machine with another CPU builds its own).
`python -m hwopt engine` (the Makefile's `engine` step) runs the build once, beforehand.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from tqdm.auto import tqdm

try:
    import fcntl  # POSIX: the build lock
except ImportError:  # Windows, where _tools() refuses to build
    fcntl = None

from hwopt import arguments
from hwopt.machine import hardware, toolchain

__all__ = [
    "EngineUnavailable",
    "SDIST",
    "SDIST_VERSION",
    "CMAKE_FLAGS",
    "server_binary",
    "built_binary",
    "unavailable_reason",
    "build_info",
]

SDIST, SDIST_VERSION = "llama-cpp-python", "0.3.36"  # the source of llama.cpp: this sdist's vendor/llama.cpp
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SERVER_ENV = "HWOPT_LLAMA_SERVER"  # a llama-server binary to use instead of building one
TARGET = "llama-server"
# Only what llama-server needs, nothing fetched at build time (no web UI download, no TLS, no tools).
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
# Folders of the llama.cpp tree the build never reads (vocabulary files, documentation, images, Python tools).
_SKIPPED = (
    "models",
    "docs",
    "media",
    "benches",
    ".github",
    "gguf-py",
    "conversion",
    "tests",
    "examples",
    "pocs",
    "tools/ui/src",
    "tools/ui/static",
    "tools/ui/tests",
)
_STEP = re.compile(r"^\[(\d+)/(\d+)\]")  # ninja's progress: [12/206]
_PERCENT = re.compile(r"^\[\s*(\d+)%\]")  # make's progress: [ 42%]


class EngineUnavailable(RuntimeError):
    """llama-server cannot be built or found here: the message says why and what to install."""


def _folder() -> Path:
    return toolchain.cache_dir() / "llama.cpp"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sdist() -> Path:
    """The llama-cpp-python sdist, fetched once by pip into the cache and checked against SDIST_SHA256."""
    downloads = _folder() / "downloads"
    archive = downloads / f"{SDIST.replace('-', '_')}-{SDIST_VERSION}.tar.gz"
    if archive.is_file() and _sha256(archive) == SDIST_SHA256:
        return archive
    downloads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=downloads) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"{SDIST}=={SDIST_VERSION}",
            "-d",
            tmp,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        fetched = list(Path(tmp).glob("*.tar.gz"))
        if done.returncode != 0 or not fetched:
            raise EngineUnavailable(
                f"could not download the {SDIST} {SDIST_VERSION} sdist (llama.cpp's source) "
                f"with pip: {done.stderr.strip()[-400:] or 'no archive'}"
            )
        if _sha256(fetched[0]) != SDIST_SHA256:
            raise EngineUnavailable(
                f"the {SDIST} {SDIST_VERSION} sdist pip fetched does not have the expected "
                f"sha256 {SDIST_SHA256}: refusing to build it"
            )
        os.replace(fetched[0], archive)
    return archive


def _source() -> Path:
    """The llama.cpp tree of the sdist, unpacked once (without the folders the build never reads)."""
    tree = _folder() / f"src-{SDIST_VERSION}"
    if (tree / "CMakeLists.txt").is_file():
        return tree
    archive = _sdist()
    prefix = f"{SDIST.replace('-', '_')}-{SDIST_VERSION}/vendor/llama.cpp/"
    with tempfile.TemporaryDirectory(dir=_folder()) as tmp, tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            if not member.name.startswith(prefix):
                continue
            rel = member.name[len(prefix) :]
            if any(rel == s or rel.startswith(s + "/") for s in _SKIPPED):
                continue
            member.name = rel
            members.append(member)
        tar.extractall(tmp, members=members, filter="data")
        shutil.rmtree(tree, ignore_errors=True)
        os.replace(tmp, tree)
        os.mkdir(tmp)  # TemporaryDirectory removes what it made
    return tree


def _version(tool: str) -> str:
    done = subprocess.run([tool, "--version"], capture_output=True, text=True)
    return done.stdout.splitlines()[0] if done.stdout else tool


def _tools() -> tuple[str, str, str]:
    """(cmake, C compiler, C++ compiler) found here; EngineUnavailable saying what to install."""
    if os.name == "nt":
        raise EngineUnavailable(
            "llama-server is built with the Linux/macOS toolchain: on Windows run the "
            "course in WSL (Ubuntu), where it builds as on Linux"
        )
    try:
        return toolchain.cmake(), toolchain.c_compiler(), toolchain.cxx_compiler()
    except toolchain.ToolMissing as error:
        raise EngineUnavailable(f"cannot build llama-server: {error}") from None


def _key(cmake: str, cc: str, cxx: str) -> str:
    """What the binary depends on: the source, the tools' versions, the flags and this CPU."""
    parts = [
        SDIST_SHA256,
        _version(cmake),
        _version(cc),
        _version(cxx),
        *CMAKE_FLAGS,
        platform.machine(),
        *sorted(hardware.cpu_info()["simd"]),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _binary_path(key: str) -> Path:
    return _folder() / f"{TARGET}-{key}"


def built_binary() -> Path | None:
    """The llama-server to run: $HWOPT_LLAMA_SERVER, else the one built here for this CPU; None if neither."""
    given = os.environ.get(SERVER_ENV, "").strip()
    if given:
        path = Path(given).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise EngineUnavailable(f"${SERVER_ENV} names {given!r}, which is not an executable file")
        return path
    try:
        path = _binary_path(_key(*_tools()))
    except EngineUnavailable:
        return None
    return path if path.is_file() else None


def build_info(binary: Path | None = None) -> dict:
    """What the build of binary recorded (seconds, jobs, cores, flags, date); {} if it recorded nothing."""
    binary = built_binary() if binary is None else Path(arguments.instance("binary", binary, (str, Path)))
    record = Path(f"{binary}.json") if binary else None
    return json.loads(record.read_text()) if record and record.is_file() else {}


def server_binary(jobs: int | None = None, progress: bool = True) -> Path:
    """Path of llama-server: the cached build (or $HWOPT_LLAMA_SERVER), else built now on `jobs` cores
    (default: all). EngineUnavailable naming the missing tool, or the failed step with its log's tail."""
    if jobs is not None:
        jobs = arguments.count("jobs", jobs, "threads")
    progress = arguments.boolean("progress", progress)
    found = built_binary()
    if found:
        return found
    cmake, cc, cxx = _tools()
    binary = _binary_path(_key(cmake, cc, cxx))
    _folder().mkdir(parents=True, exist_ok=True)
    with open(_folder() / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process building the same binary: wait for it
        if binary.is_file():
            return binary
        return _build(cmake, cc, cxx, binary, jobs or os.cpu_count() or 1, progress)


def _build(cmake: str, cc: str, cxx: str, binary: Path, jobs: int, progress: bool) -> Path:
    source = _source()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=_folder(), prefix="build-") as build:
        log = Path(build) / "build.log"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        _run(
            [
                cmake,
                "-S",
                str(source),
                "-B",
                build,
                *generator,
                f"-DCMAKE_C_COMPILER={cc}",
                f"-DCMAKE_CXX_COMPILER={cxx}",
                *CMAKE_FLAGS,
            ],
            log,
            "configure",
            None,
        )
        _run(
            [cmake, "--build", build, "--target", TARGET, "--parallel", str(jobs)],
            log,
            "build",
            tqdm(total=100, desc=f"building {TARGET} on {jobs} cores", unit="%", disable=not progress),
        )
        os.replace(Path(build) / "bin" / TARGET, binary)
    seconds = time.perf_counter() - started
    Path(f"{binary}.json").write_text(
        json.dumps(
            {
                "seconds": round(seconds, 1),
                "jobs": jobs,
                "cores": os.cpu_count(),
                "source": f"{SDIST} {SDIST_VERSION}",
                "flags": list(CMAKE_FLAGS),
                "compiler": _version(cxx),
                "date": time.strftime("%Y-%m-%d"),
            },
            indent=1,
        )
    )
    return binary


def _run(cmd: list[str], log: Path, step: str, bar) -> None:
    """Run one build step, its output appended to log; the bar follows ninja's or make's progress."""
    with open(log, "a", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            out.write(line)
            if bar is not None:
                step_of = _STEP.match(line)
                percent = _PERCENT.match(line)
                done = (
                    100 * int(step_of[1]) // int(step_of[2])
                    if step_of
                    else int(percent[1])
                    if percent
                    else None
                )
                if done is not None and done > bar.n:
                    bar.update(done - bar.n)
        code = proc.wait()
    if bar is not None:
        bar.close()
    if code != 0:
        tail = "".join(log.read_text(encoding="utf-8", errors="replace").splitlines(True)[-25:])
        raise EngineUnavailable(
            f"the llama.cpp {step} step failed (`{' '.join(cmd)}` exited {code}):\n{tail}"
        )


def unavailable_reason() -> str | None:
    """None when a llama-server binary is ready here, else why not and how to get one."""
    try:
        if built_binary():
            return None
        _tools()
    except EngineUnavailable as error:
        return str(error)
    return (
        "llama-server is not built on this machine yet: run `make engine` or `python -m hwopt engine` "
        "once (about 4 minutes on 2 idle cores: 262 s with GCC 12, 231 s with GCC 11, Colab's compiler)"
    )
