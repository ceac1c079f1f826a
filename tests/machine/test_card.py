"""machine.card and `python -m hwopt info`: the machine card as data, text and JSON; fake probes and GPUs."""

import json
import subprocess
import sys
import types

import pytest

import hwopt.machine.bench
from hwopt import __main__ as cli
from hwopt import roofline
from hwopt.machine import card as card_module
from hwopt.machine import hardware, specs
from hwopt.machine.card import machine_card
from hwopt.machine.hardware import GPUInfo


def fake_probe(bandwidth_gbs=24.0, **flops):
    """A probe_fn that returns fixed ceilings and records what it was asked."""
    flops = flops or {"fp32": 120e9, "int8": 230e9}
    calls = []

    def probe_fn(device, precisions, quick):
        calls.append((device, precisions, quick))
        return types.SimpleNamespace(bandwidth_gbs=bandwidth_gbs, flops_by_precision=flops)

    probe_fn.calls = calls
    return probe_fn


@pytest.fixture(scope="module")
def here():
    return hardware.machine()


def gpu_machine(here, name="NVIDIA A100-SXM4-80GB"):
    info = hardware.MachineInfo(**{**here.to_dict(), "gpus": []})
    info.gpus = [GPUInfo(0, name, 79.2, "8.0")]
    return info


# --- matching a device to the table -----------------------------------------------------------------------


@pytest.mark.parametrize("device_name, chip", [
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB SXM"), ("Tesla T4", "NVIDIA T4"),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"), ("NVIDIA GeForce RTX 4090", "NVIDIA RTX 4090"),
    ("NVIDIA L4", "NVIDIA L4"), ("Apple M2 Max", "Apple M2 Max"), ("Apple M2", "Apple M2"),
    ("AMD EPYC 7763 64-Core Processor", "AMD EPYC 7763"), ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA H100 NVL", "NVIDIA H100 NVL"), ("NVIDIA B200", "NVIDIA B200"), ("NVIDIA GB200", "NVIDIA GB200"),
    ("NVIDIA GeForce RTX 5090", "NVIDIA RTX 5090"), ("NVIDIA H200", "NVIDIA H200 SXM"),
])
def test_spec_for_device_name_finds_the_row(device_name, chip):
    assert card_module.spec_for_device_name(device_name).name == chip


def test_spec_for_device_name_unknown_and_bad_input():
    assert card_module.spec_for_device_name("NVIDIA L40S") is None
    assert card_module.spec_for_device_name("AMD EPYC") is None  # a VM that hides the model number
    with pytest.raises(ValueError, match="device_name"):
        card_module.spec_for_device_name(None)


def test_closest_chips_show_the_fp32_matmul_peak_matrix_units_included():
    assert card_module._fp32_tflops(specs.get_chip("Trainium2")) == pytest.approx(181)
    assert card_module._fp32_tflops(specs.get_chip("T4")) == pytest.approx(8.1)
    assert card_module._fp32_tflops(specs.get_chip("TPU v5e")) is None


def test_format_flops_picks_the_unit():
    assert card_module.format_flops(1.234e14) == "123 TFLOP/s"
    assert card_module.format_flops(5e9) == "5 GFLOP/s"
    assert card_module.format_flops(2e15) == "2 PFLOP/s"
    assert card_module.format_flops(3e6) == "3 MFLOP/s" and card_module.format_flops(12.0) == "12 FLOP/s"
    assert card_module.format_flops(2.3e11, "OP/s") == "230 GOP/s"


# --- building the card ------------------------------------------------------------------------------------


def test_card_without_probe_says_how_to_measure(here):
    c = machine_card(device="cpu", machine=here)
    assert not c.measured and c.ridge_points() == {} and c.ceilings() == []
    text = c.render()
    assert "Machine card" in text and "SIMD" in text and "--probe" in text
    assert json.loads(c.to_json())["measured"] is None


def test_card_with_fake_probe_computes_ridges_and_closest_chips(here):
    probe_fn = fake_probe()
    c = machine_card(probe=True, device="cpu", precisions=["fp32", "int8"], machine=here, probe_fn=probe_fn)
    assert probe_fn.calls == [("cpu", ["fp32", "int8"], True)]
    assert c.ridge_points() == {"fp32": pytest.approx(5.0), "int8": pytest.approx(230 / 24)}
    assert [x.measured for x in c.ceilings()] == [True, True]
    assert all(isinstance(x, roofline.Ceiling) for x in c.ceilings())
    assert len(c.closest) == 3 and "fp32" in c.closest_basis
    expected = specs.closest_chips(24.0, 120e9, n=3)
    assert [ch.name for ch, _ in c.closest] == [ch.name for ch, _ in expected]
    text = str(c)
    assert "24.0 GB/s" in text and "120 GFLOP/s" in text and "ridge   5.00 FLOP/byte" in text
    assert "230 GOP/s" in text
    assert "Closest chips" in text and expected[0][0].name in text
    d = json.loads(c.to_json())
    assert d["measured"]["ridge_flop_per_byte"]["fp32"] == pytest.approx(5.0)
    assert d["closest_chips"][0]["source_url"].startswith("https://")


def test_card_on_a_fake_cuda_gpu_compares_measured_with_spec(monkeypatch, here):
    monkeypatch.setattr(hwopt.machine.bench, "resolve_device", lambda device="auto": "cuda")
    probe_fn = fake_probe(1631.2, float32=18.5e12, bfloat16=280.8e12)
    c = machine_card(probe=True, device="cuda", machine=gpu_machine(here), probe_fn=probe_fn)
    assert c.device == "cuda" and c.device_spec.name == "NVIDIA A100 80GB SXM"
    text = c.render()
    assert "80% of spec" in text  # 1631.2 / 2039 GB/s
    assert "90% of spec" in text  # 280.8 / 312 TFLOP/s bf16
    assert "NVIDIA A100-SXM4-80GB" in text


def test_card_on_a_known_gpu_without_probe_lists_spec_neighbours(monkeypatch, here):
    monkeypatch.setattr(hwopt.machine.bench, "resolve_device", lambda device="auto": "cuda")
    c = machine_card(device="cuda", machine=gpu_machine(here, "Tesla T4"))
    assert c.device_spec.name == "NVIDIA T4"
    assert len(c.closest) == 3 and all(ch.name != "NVIDIA T4" for ch, _ in c.closest)
    assert "neighbours of NVIDIA T4" in c.render()


def test_card_n_closest_zero_and_repr_pretty(here):
    c = machine_card(device="cpu", machine=here, n_closest=0, probe=True, probe_fn=fake_probe())
    assert c.closest == []
    printed = []
    c._repr_pretty_(types.SimpleNamespace(text=printed.append), cycle=False)
    assert printed == [c.render()]


@pytest.mark.parametrize("kwargs, arg", [
    ({"probe": "yes"}, "probe"), ({"precisions": "fp32"}, "precisions"), ({"precisions": []}, "precisions"),
    ({"precisions": ["float128"]}, "precisions"), ({"n_closest": -1}, "n_closest"),
    ({"device": "tpu"}, "device"),
])
def test_machine_card_bad_input_names_the_argument(kwargs, arg, here):
    with pytest.raises(ValueError, match=arg):
        machine_card(machine=here, **{"device": "cpu", **kwargs})


# --- command line -----------------------------------------------------------------------------------------


def test_cli_main_probe_and_json_in_process(capsys):
    assert cli.main(["info", "--probe", "--device", "cpu", "--precisions", "fp32,int8"], fake_probe()) == 0
    assert "Measured ceilings on cpu" in capsys.readouterr().out
    assert cli.main(["info", "--probe", "--json", "--device", "cpu"], fake_probe()) == 0
    assert json.loads(capsys.readouterr().out)["measured"]["bandwidth_gbs"] == 24.0


def test_cli_main_bad_device_exits_2_with_a_message(capsys):
    assert cli.main(["info", "--device", "tpu"]) == 2
    assert "device" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args([])


def test_python_m_hwopt_info_prints_text_and_json():
    text = subprocess.run([sys.executable, "-m", "hwopt", "info", "--device", "cpu"], capture_output=True,
                          text=True, timeout=120, check=True).stdout
    assert text.startswith("Machine card") and "SIMD" in text
    out = subprocess.run([sys.executable, "-m", "hwopt", "info", "--json", "--device", "cpu"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    d = json.loads(out)
    assert d["device"] == "cpu" and d["machine"]["logical_cores"] >= 1


def test_slug_names_the_gpu_or_the_cpu_model_simd_set_and_cores(monkeypatch, here):
    monkeypatch.setattr(hwopt.machine.bench, "resolve_device", lambda device="auto": "cuda")
    assert machine_card(device="cuda", machine=gpu_machine(here, "NVIDIA H200")).slug == "nvidia-h200"
    cpu = {**here.to_dict(), "gpus": [], "cpu_model": "Intel(R) Xeon(R) CPU @ 2.20GHz", "logical_cores": 2}
    monkeypatch.setattr(hwopt.machine.bench, "resolve_device", lambda device="auto": "cpu")
    slugs = [machine_card(machine=hardware.MachineInfo(**{**cpu, "simd": simd})).slug
             for simd in (["AVX2", "FMA"], ["AVX2", "AVX-512F"], [])]
    assert slugs == ["intel-xeon-cpu-2-20ghz-avx2-2cpu", "intel-xeon-cpu-2-20ghz-avx512-2cpu",
                     "intel-xeon-cpu-2-20ghz-2cpu"]


def test_widest_simd_picks_the_widest_vector_set_and_rejects_a_string():
    assert card_module.widest_simd(["FMA", "AVX2", "AVX-512F"]) == "AVX-512F"
    assert card_module.widest_simd(("NEON", "SVE")) == "SVE" and card_module.widest_simd([]) == ""
    with pytest.raises(ValueError, match="simd must be"):
        card_module.widest_simd("AVX2")
