"""machine.hardware: each platform's sources parsed (Linux x86/ARM, macOS), CUDA through a fake torch."""

import json
import types

import pytest
import torch

from hwopt.machine import hardware, probe
from hwopt.machine.hardware import GPUInfo, MachineInfo

# Two sockets, two cores each, two threads per core: 8 logical, 4 physical.
CPUINFO_SPR = "\n\n".join(
    f"processor\t: {i}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
    f"physical id\t: {i // 4}\ncore id\t\t: {(i % 4) // 2}\n"
    "flags\t\t: fpu sse sse2 avx avx2 fma f16c avx512f avx512_vnni avx512_bf16 avx512_fp16 amx_tile amx_bf16"
    " amx_int8 avx_vnni\n"
    for i in range(8)
)
CPUINFO_MILAN = "\n\n".join(
    f"processor\t: {i}\nmodel name\t: AMD EPYC 7763 64-Core Processor\nphysical id\t: 0\ncore id\t\t: {i}\n"
    "flags\t\t: fpu sse avx avx2 fma f16c sha_ni\n"
    for i in range(2)
)
# ARM Linux (Graviton3): no model name, no physical/core id; "Features" instead of "flags".
CPUINFO_GRAVITON = "\n\n".join(
    f"processor\t: {i}\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd evtstrm aes asimdhp asimddp sve i8mm bf16\n"
    "CPU implementer\t: 0x41\nCPU part\t: 0xd40\n"
    for i in range(4)
)
SYSCTL_M2 = """hw.ncpu: 8
hw.physicalcpu: 8
hw.logicalcpu: 8
hw.memsize: 25769803776
hw.optional.AdvSIMD: 1
hw.optional.arm.FEAT_FP16: 1
hw.optional.arm.FEAT_DotProd: 1
hw.optional.arm.FEAT_I8MM: 1
hw.optional.arm.FEAT_BF16: 1
hw.optional.arm.FEAT_SME: 0
machdep.cpu.brand_string: Apple M2
"""
SYSCTL_INTEL_MAC = """hw.physicalcpu: 6
hw.logicalcpu: 12
hw.memsize: 17179869184
hw.optional.avx2_0: 1
hw.optional.avx512f: 0
machdep.cpu.brand_string: Intel(R) Core(TM) i7-9750H CPU @ 2.60GHz
machdep.cpu.features: FPU VME SSE SSE2 AVX1.0 FMA F16C
machdep.cpu.leaf7_features: RDWRFSGS AVX2 BMI2
"""


# --- parsers ----------------------------------------------------------------------------------------------


def test_parse_cpuinfo_counts_physical_cores_across_sockets_and_maps_amx_vnni():
    info = hardware.parse_cpuinfo(CPUINFO_SPR)
    assert info["cpu_model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert (info["physical_cores"], info["logical_cores"]) == (4, 8)
    assert info["simd"] == ["AVX2", "FMA", "F16C", "AVX-512F", "AVX-512 VNNI", "AVX-512 BF16", "AVX-512 FP16",
                            "AVX-VNNI", "AMX-TILE", "AMX-BF16", "AMX-INT8"]


def test_parse_cpuinfo_milan_has_avx2_but_no_avx512():
    info = hardware.parse_cpuinfo(CPUINFO_MILAN)
    assert info["simd"] == ["AVX2", "FMA", "F16C"]
    assert info["physical_cores"] == 2


def test_parse_cpuinfo_arm_reads_features_and_falls_back_to_logical_count():
    info = hardware.parse_cpuinfo(CPUINFO_GRAVITON)
    assert info["cpu_model"] == "ARM Neoverse-V1"
    assert (info["physical_cores"], info["logical_cores"]) == (4, 4)
    assert info["simd"] == ["NEON", "NEON FP16", "NEON DOTPROD", "I8MM", "ARM BF16", "SVE"]


def test_parse_cpuinfo_rejects_non_text():
    with pytest.raises(ValueError, match="text"):
        hardware.parse_cpuinfo(None)


def test_parse_meminfo_in_gib():
    assert hardware.parse_meminfo("MemFree: 1 kB\nMemTotal:       24576000 kB\n") == pytest.approx(
        24576000 * 1024 / 2**30)
    assert hardware.parse_meminfo("nothing here") is None


def test_parse_sysctl_apple_silicon():
    info = hardware.parse_sysctl(SYSCTL_M2)
    assert info["cpu_model"] == "Apple M2"
    assert (info["physical_cores"], info["logical_cores"]) == (8, 8)
    assert info["ram_gb"] == pytest.approx(24.0)
    assert info["simd"] == ["NEON", "NEON FP16", "NEON DOTPROD", "I8MM", "ARM BF16"]  # SME is 0


def test_parse_sysctl_intel_mac_merges_optional_and_feature_tokens():
    info = hardware.parse_sysctl(SYSCTL_INTEL_MAC)
    assert info["simd"] == ["AVX2", "FMA", "F16C"]
    assert (info["physical_cores"], info["logical_cores"]) == (6, 12)


def test_simd_from_flags_ignores_unknown_flags():
    assert hardware.simd_from_flags(["sse", "avx2", "foo"]) == ["AVX2"]


# --- what the SIMD set means ------------------------------------------------------------------------------


def test_simd_meaning_without_vnni_or_bf16_says_so():
    text = " ".join(hardware.simd_meaning(["AVX2", "FMA", "F16C"]))
    assert "no VNNI" in text and "no native bf16/fp16" in text and "F16C" in text


def test_simd_meaning_sapphire_rapids_mentions_amx_and_native_bf16():
    text = " ".join(hardware.simd_meaning(hardware.parse_cpuinfo(CPUINFO_SPR)["simd"]))
    assert "AMX" in text and "VNNI:" in text and "native bf16" in text and "no VNNI" not in text


def test_simd_meaning_arm_with_and_without_bf16():
    assert "native bf16" in " ".join(hardware.simd_meaning(["NEON", "ARM BF16", "I8MM"], "arm64"))
    text = " ".join(hardware.simd_meaning(["NEON"], "aarch64"))
    assert "emulated" in text and "no int8 dot-product" in text


def test_simd_meaning_unknown_and_old_x86():
    assert "unknown" in hardware.simd_meaning([])[0]
    assert "no AVX2/FMA" in hardware.simd_meaning(["F16C"])[0]


def test_simd_meaning_rejects_a_string():
    with pytest.raises(ValueError, match="simd"):
        hardware.simd_meaning("AVX2")


# --- sources: CUDA, MPS, ORT through fakes ----------------------------------------------------------------


class _Props:
    name, total_memory, major, minor = "NVIDIA H100 80GB HBM3", 85_520_809_984, 9, 0


def _fake_torch(cuda=True, n=2, mps=False):
    cuda_ns = types.SimpleNamespace(is_available=lambda: cuda, device_count=lambda: n,
                                    get_device_properties=lambda i: _Props())
    backends = types.SimpleNamespace(mps=types.SimpleNamespace(is_available=lambda: mps),
                                     cpu=types.SimpleNamespace(get_cpu_capability=lambda: "AVX512"))
    return types.SimpleNamespace(cuda=cuda_ns, backends=backends, __version__="2.11.0+cu126",
                                 get_num_threads=lambda: 8)


def test_cuda_gpus_reads_every_device_from_torch(monkeypatch):
    monkeypatch.setattr(hardware, "torch", _fake_torch())
    gpus = hardware.cuda_gpus()
    assert len(gpus) == 2 and gpus[1].index == 1
    assert gpus[0].name == "NVIDIA H100 80GB HBM3" and gpus[0].compute_capability == "9.0"
    assert gpus[0].memory_gb == pytest.approx(79.65, abs=0.01)


def test_cuda_gpus_empty_without_gpu(monkeypatch):
    monkeypatch.setattr(hardware, "torch", _fake_torch(cuda=False))
    assert hardware.cuda_gpus() == [] and hardware.mps_available() is False


def test_cuda_gpus_broken_driver_reports_no_gpu(monkeypatch):
    fake = _fake_torch()

    def broken():
        raise RuntimeError("CUDA driver version is insufficient")

    fake.cuda.is_available = broken
    monkeypatch.setattr(hardware, "torch", fake)
    assert hardware.cuda_gpus() == []


def test_mps_and_torch_info_from_fake_torch(monkeypatch):
    monkeypatch.setattr(hardware, "torch", _fake_torch(mps=True))
    assert hardware.mps_available() is True
    assert hardware.torch_info() == {"torch_version": "2.11.0+cu126", "torch_threads": 8,
                                     "torch_cpu_capability": "AVX512"}


def test_ort_info_names_the_providers():
    info = hardware.ort_info()
    assert info["ort_version"] and "CPUExecutionProvider" in info["ort_providers"]


def test_read_text_missing_file_is_none(tmp_path):
    assert hardware.read_text(str(tmp_path / "nope")) is None
    (tmp_path / "f").write_text("hi")
    assert hardware.read_text(str(tmp_path / "f")) == "hi"


def test_run_sysctl_without_the_command_is_none(monkeypatch):
    def boom(*a, **k):
        raise FileNotFoundError("sysctl")

    monkeypatch.setattr(hardware.subprocess, "run", boom)
    assert hardware.run_sysctl() is None


# --- machine(): whole description per platform ------------------------------------------------------------


def test_cpu_info_on_macos_uses_sysctl_when_there_is_no_proc(monkeypatch):
    monkeypatch.setattr(hardware, "read_text", lambda path: None)
    monkeypatch.setattr(hardware, "run_sysctl", lambda: SYSCTL_M2)
    info = hardware.cpu_info()
    assert info["cpu_model"] == "Apple M2" and info["ram_gb"] == pytest.approx(24.0)
    assert "ARM BF16" in info["simd"]


def test_cpu_info_with_neither_proc_nor_sysctl_falls_back_to_platform(monkeypatch):
    monkeypatch.setattr(hardware, "read_text", lambda path: None)
    monkeypatch.setattr(hardware, "run_sysctl", lambda: None)
    info = hardware.cpu_info()
    assert info["logical_cores"] >= 1 and info["physical_cores"] >= 1
    assert info["cpu_model"] and info["simd"] == [] and info["ram_gb"] > 0


def test_machine_with_fake_cuda_gpu_lists_it(monkeypatch):
    monkeypatch.setattr(hardware, "cuda_gpus", lambda: [GPUInfo(0, "Tesla T4", 14.7, "7.5")])
    m = hardware.machine()
    assert isinstance(m, MachineInfo) and m.gpus[0].name == "Tesla T4"
    assert "Tesla T4" in str(m) and "compute capability 7.5" in str(m)


def test_machine_here_describes_this_cpu_and_is_json_ready():
    m = hardware.machine()
    assert m.logical_cores >= 1 and m.physical_cores >= 1 and m.ram_gb > 0
    assert m.torch_version and m.cpu_model
    d = json.loads(json.dumps(m.to_dict()))
    assert d["logical_cores"] == m.logical_cores and isinstance(d["simd"], list)
    assert m.simd_meaning() and "SIMD" in m.summary()


def test_last_level_cache_per_device_kind(monkeypatch):
    """CPU: the probe's sysfs size; CUDA: the GPU's L2 (a fake torch device here); MPS: not reported."""
    monkeypatch.setattr(probe, "last_level_cache_bytes", lambda: 32 * 2**20)
    assert hardware.last_level_cache("cpu") == ("last-level cache", 32 * 2**20)
    asked = []

    def properties(index):
        asked.append(index)
        return types.SimpleNamespace(name="NVIDIA H100", L2_cache_size=50 * 2**20)

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    assert hardware.last_level_cache("cuda") == ("L2 cache", 50 * 2**20)
    assert hardware.last_level_cache("cuda:1") == ("L2 cache", 50 * 2**20) and asked == [0, 1]
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(name="old"))
    assert hardware.last_level_cache("cuda") == ("L2 cache", None)  # a torch without the field
    assert hardware.last_level_cache("mps") == ("system-level cache", None)
    for bad in ("auto", "tpu", "mps:1", "cuda:x"):
        with pytest.raises(ValueError, match="device must be"):
            hardware.last_level_cache(bad)
