"""What machine is this: CPU, SIMD features that matter for ML, RAM, GPUs, and the ML runtimes.

Every source (``/proc/cpuinfo``, ``sysctl``, ``torch.cuda``, onnxruntime) is read through a small function
that takes text or can be replaced, so each platform's path is testable on any machine.
"""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import asdict, dataclass, field

import onnxruntime
import psutil
import torch

from hwopt import arguments
from hwopt.machine import probe

GIB = 2**30

# Linux /proc/cpuinfo flag (x86 "flags", ARM "Features") -> the name the course uses, in display order.
LINUX_SIMD_FLAGS = {
    "avx2": "AVX2",
    "fma": "FMA",
    "f16c": "F16C",
    "avx512f": "AVX-512F",
    "avx512_vnni": "AVX-512 VNNI",
    "avx512_bf16": "AVX-512 BF16",
    "avx512_fp16": "AVX-512 FP16",
    "avx_vnni": "AVX-VNNI",
    "amx_tile": "AMX-TILE",
    "amx_bf16": "AMX-BF16",
    "amx_int8": "AMX-INT8",
    "asimd": "NEON",
    "asimdhp": "NEON FP16",
    "asimddp": "NEON DOTPROD",
    "i8mm": "I8MM",
    "bf16": "ARM BF16",
    "sve": "SVE",
    "sve2": "SVE2",
    "sme": "SME",
}
# macOS sysctl keys (Apple silicon hw.optional.*, Intel Macs machdep.cpu.*features tokens) -> course name.
SYSCTL_SIMD_KEYS = {
    "hw.optional.avx2_0": "AVX2",
    "hw.optional.fma": "FMA",
    "hw.optional.avx512f": "AVX-512F",
    "hw.optional.avx512vnni": "AVX-512 VNNI",
    "hw.optional.avx512bf16": "AVX-512 BF16",
    "hw.optional.neon": "NEON",
    "hw.optional.AdvSIMD": "NEON",
    "hw.optional.arm.FEAT_FP16": "NEON FP16",
    "hw.optional.arm.FEAT_DotProd": "NEON DOTPROD",
    "hw.optional.arm.FEAT_I8MM": "I8MM",
    "hw.optional.arm.FEAT_BF16": "ARM BF16",
    "hw.optional.arm.FEAT_SME": "SME",
}
MACHDEP_TOKENS = {"AVX2": "AVX2", "FMA": "FMA", "F16C": "F16C", "AVX512F": "AVX-512F",
                  "AVX512VNNI": "AVX-512 VNNI", "AVX512BF16": "AVX-512 BF16"}
SIMD_ORDER = list(dict.fromkeys(LINUX_SIMD_FLAGS.values()))
# ARM Linux names no model: (CPU implementer, CPU part) -> core name, for common server and board cores.
ARM_PARTS = {("0x41", "0xd08"): "ARM Cortex-A72", ("0x41", "0xd0b"): "ARM Cortex-A76",
             ("0x41", "0xd0c"): "ARM Neoverse-N1", ("0x41", "0xd40"): "ARM Neoverse-V1",
             ("0x41", "0xd49"): "ARM Neoverse-N2", ("0x41", "0xd4f"): "ARM Neoverse-V2"}


@dataclass(frozen=True)
class GPUInfo:
    """One CUDA device: name, memory in GiB, compute capability "major.minor", index."""

    index: int
    name: str
    memory_gb: float
    compute_capability: str


@dataclass
class MachineInfo:
    """What this machine is; ``ram_gb`` and GPU ``memory_gb`` are GiB (2**30 bytes)."""

    os: str
    arch: str
    cpu_model: str
    physical_cores: int | None
    logical_cores: int | None
    simd: list[str] = field(default_factory=list)
    ram_gb: float | None = None
    gpus: list[GPUInfo] = field(default_factory=list)
    mps: bool = False
    torch_version: str | None = None
    torch_threads: int | None = None
    torch_cpu_capability: str | None = None
    ort_version: str | None = None
    ort_providers: list[str] = field(default_factory=list)

    def simd_meaning(self) -> list[str]:
        """Sentences saying what this SIMD set means for ML on the CPU."""
        return simd_meaning(self.simd, self.arch)

    def to_dict(self) -> dict:
        """Plain JSON-ready dict."""
        return asdict(self)

    def summary(self) -> str:
        """A few readable lines."""
        cores = f"{self.physical_cores or '?'} physical / {self.logical_cores or '?'} logical cores"
        ram = f"{self.ram_gb:.1f} GiB RAM" if self.ram_gb else "RAM unknown"
        lines = [f"CPU     {self.cpu_model} ({self.arch}), {cores}, {ram}",
                 f"SIMD    {', '.join(self.simd) or 'none detected'}"]
        if self.gpus:
            lines += [f"GPU {g.index}   {g.name}, {g.memory_gb:.1f} GiB, compute capability "
                      f"{g.compute_capability}" for g in self.gpus]
        else:
            lines.append("GPU     no CUDA GPU")
        lines.append(f"MPS     {'available' if self.mps else 'not available'}")
        ort = f"onnxruntime {self.ort_version} ({', '.join(self.ort_providers)})" if self.ort_version \
            else "onnxruntime not installed"
        lines.append(f"Runtime torch {self.torch_version or 'not installed'}"
                     f" ({self.torch_threads} threads), {ort}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _ordered(names) -> list[str]:
    """Deduplicate SIMD names into the display order."""
    present = set(names)
    return [n for n in SIMD_ORDER if n in present]


def simd_from_flags(flags) -> list[str]:
    """Course SIMD names from /proc/cpuinfo flags (x86 ``flags`` or ARM ``Features``)."""
    arguments.instance("flags", flags, (list, tuple, set, frozenset))
    return _ordered(LINUX_SIMD_FLAGS[f] for f in flags if f in LINUX_SIMD_FLAGS)


def parse_cpuinfo(text: str) -> dict:
    """Parse /proc/cpuinfo text -> {cpu_model, physical_cores, logical_cores, simd}."""
    arguments.text("text", text, allow_empty=True)
    model, flags, logical, cores = None, set(), 0, set()
    phys_id = core_id = implementer = part = None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if key == "processor":
            logical += 1
        elif key in ("model name", "hardware", "cpu model") and model is None and value:
            model = value
        elif key in ("flags", "features"):
            flags.update(value.split())
        elif key == "cpu implementer":
            implementer = value.lower()
        elif key == "cpu part":
            part = value.lower()
        elif key == "physical id":
            phys_id = value
        elif key == "core id":
            core_id = value
            cores.add((phys_id, core_id))
    if model is None and implementer:
        model = ARM_PARTS.get((implementer, part), f"ARM CPU (implementer {implementer}, part {part})")
    return {"cpu_model": model, "physical_cores": len(cores) or (logical or None),
            "logical_cores": logical or None, "simd": simd_from_flags(flags)}


def parse_meminfo(text: str) -> float | None:
    """MemTotal from /proc/meminfo text, in GiB (None when absent)."""
    arguments.text("text", text, allow_empty=True)
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024 / GIB
    return None


def parse_sysctl(text: str) -> dict:
    """Parse macOS ``sysctl hw machdep`` text ("key: value" lines) -> same keys as parse_cpuinfo + ram_gb."""
    arguments.text("text", text, allow_empty=True)
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            values[key.strip()] = value.strip()
    simd = [name for key, name in SYSCTL_SIMD_KEYS.items() if values.get(key) == "1"]
    for key in ("machdep.cpu.features", "machdep.cpu.leaf7_features"):
        simd += [MACHDEP_TOKENS[t] for t in values.get(key, "").upper().split() if t in MACHDEP_TOKENS]

    def number(key):
        try:
            return int(values[key])
        except (KeyError, ValueError):
            return None

    mem = number("hw.memsize")
    return {"cpu_model": values.get("machdep.cpu.brand_string") or None,
            "physical_cores": number("hw.physicalcpu"), "logical_cores": number("hw.logicalcpu"),
            "simd": _ordered(simd), "ram_gb": mem / GIB if mem else None}


def read_text(path: str) -> str | None:
    """The text of a file, or None when it cannot be read (no /proc on macOS and Windows)."""
    arguments.text("path", path)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def run_sysctl() -> str | None:
    """Output of ``sysctl hw machdep`` (macOS, BSD), or None where there is no sysctl."""
    try:
        return subprocess.run(["sysctl", "hw", "machdep"], capture_output=True, text=True,
                              timeout=5, check=False).stdout or None
    except (OSError, subprocess.SubprocessError):
        return None


def cuda_gpus() -> list[GPUInfo]:
    """CUDA devices seen by torch ([] without a GPU)."""
    try:
        if not torch.cuda.is_available():
            return []
        props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    except RuntimeError:  # a broken driver install: report no GPU rather than fail
        return []
    return [GPUInfo(i, p.name, p.total_memory / GIB, f"{p.major}.{p.minor}") for i, p in enumerate(props)]


def mps_available() -> bool:
    """True when torch can use Apple's Metal (MPS) backend."""
    try:
        return bool(torch.backends.mps.is_available())
    except AttributeError:  # a torch build without the MPS backend
        return False


def last_level_cache(device="cpu") -> tuple[str, int | None]:
    """The largest cache a device's kernels read weights through: (its name, its size in bytes or None when
    unknown). "cpu": the CPU's last-level cache (probe.last_level_cache_bytes); "cuda"/"cuda:N": that GPU's
    L2; "mps": Apple's system-level cache, whose size torch does not report."""
    name = str(device).strip().lower()
    kind, _, index = name.partition(":")
    if kind == "cpu" and not index:
        return "last-level cache", probe.last_level_cache_bytes()
    if kind == "cuda" and (not index or index.isdigit()):
        size = getattr(torch.cuda.get_device_properties(int(index or 0)), "L2_cache_size", None)
        return "L2 cache", int(size) if size else None
    if kind == "mps" and not index:
        return "system-level cache", None
    raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'mps' (a resolved device); got {device!r}")


def torch_info() -> dict:
    """torch version, intra-op threads and the CPU kernels' capability (None where torch does not say)."""
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        capability = None
    return {"torch_version": torch.__version__, "torch_threads": torch.get_num_threads(),
            "torch_cpu_capability": capability}


def ort_info() -> dict:
    """onnxruntime version and execution providers."""
    return {"ort_version": onnxruntime.__version__,
            "ort_providers": list(onnxruntime.get_available_providers())}


def _ram_fallback_gb() -> float | None:
    """Total RAM in GiB from psutil, when neither /proc nor sysctl answered."""
    return psutil.virtual_memory().total / GIB


def _physical_fallback() -> int | None:
    return psutil.cpu_count(logical=False)


def cpu_info() -> dict:
    """CPU model, cores, SIMD and RAM from /proc (Linux), sysctl (macOS), else platform/psutil."""
    info = {"cpu_model": None, "physical_cores": None, "logical_cores": None, "simd": [], "ram_gb": None}
    cpuinfo = read_text("/proc/cpuinfo")
    if cpuinfo:
        info.update(parse_cpuinfo(cpuinfo))
        meminfo = read_text("/proc/meminfo")
        info["ram_gb"] = parse_meminfo(meminfo) if meminfo else None
    else:
        sysctl = run_sysctl()
        if sysctl:
            info.update({k: v for k, v in parse_sysctl(sysctl).items() if v})
    info["cpu_model"] = info["cpu_model"] or platform.processor() or platform.machine() or "unknown CPU"
    info["logical_cores"] = info["logical_cores"] or os.cpu_count()
    info["physical_cores"] = info["physical_cores"] or _physical_fallback() or info["logical_cores"]
    info["ram_gb"] = info["ram_gb"] or _ram_fallback_gb()
    return info


def machine() -> MachineInfo:
    """Describe this machine: CPU, SIMD, RAM, CUDA GPUs, MPS, torch and onnxruntime."""
    return MachineInfo(os=platform.system() or "unknown", arch=platform.machine() or "unknown",
                       **cpu_info(), gpus=cuda_gpus(), mps=mps_available(), **torch_info(), **ort_info())


def simd_meaning(simd, arch: str = "x86_64") -> list[str]:
    """Plain-words consequences of a SIMD feature list for ML kernels on the CPU."""
    arguments.instance("simd", simd, (list, tuple, set, frozenset))
    arguments.text("arch", arch)
    s = set(simd)
    out = []
    if arch.lower() in ("arm64", "aarch64") or "NEON" in s:
        out.append("NEON: 128-bit vectors, 4 fp32 FMAs per instruction.")
        if "SVE" in s:
            out.append("SVE: scalable vectors (wider on some server cores).")
        out.append("I8MM/DOTPROD: fast int8 matmul." if s & {"I8MM", "NEON DOTPROD"}
                   else "no int8 dot-product instructions: int8 matmul gains little.")
        out.append("ARM BF16: native bf16 matmul." if "ARM BF16" in s
                   else "no BF16 instructions: bf16 matmul is emulated (slow).")
        if "SME" in s:
            out.append("SME: matrix tiles on the CPU (Apple M4 and newer).")
        return out
    if "AVX-512F" in s:
        out.append("AVX-512: 16 fp32 lanes per FMA (2x AVX2 per instruction).")
    elif {"AVX2", "FMA"} <= s:
        out.append("AVX2 + FMA: 8 fp32 lanes per FMA; fp32 matmul runs near the cores' peak.")
    elif s:
        out.append("no AVX2/FMA: fp32 matmul runs far below a modern CPU's peak.")
    else:
        out.append("SIMD features unknown: nothing to say about the CPU kernels.")
        return out
    if s & {"AMX-INT8", "AMX-BF16"}:
        out.append("AMX: matrix tiles for int8 and bf16 matmul, many times the AVX-512 rate.")
    if s & {"AVX-512 VNNI", "AVX-VNNI"}:
        out.append("VNNI: int8 dot products in one instruction: int8 matmul well above fp32.")
    else:
        out.append("no VNNI: int8 matmul runs on plain AVX2 (a modest gain; u8*s8 sums can saturate).")
    if s & {"AVX-512 BF16", "AMX-BF16"}:
        out.append("native bf16 matmul (AVX-512 BF16 / AMX).")
    if "AVX-512 FP16" in s:
        out.append("native fp16 arithmetic (AVX-512 FP16).")
    if not s & {"AVX-512 BF16", "AMX-BF16", "AVX-512 FP16"}:
        out.append("no native bf16/fp16 matmul: half precision is emulated here (far slower than fp32)."
                   + (" F16C only converts fp16<->fp32." if "F16C" in s else ""))
    return out
