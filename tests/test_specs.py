"""machine.specs and data/chips.csv: a valid, sourced table; lookups, peaks, ridge points, closest chips."""

import csv
import datetime as dt
import re

import pytest

from hwopt.cost import roofline
from hwopt.machine import specs

ROWS = list(csv.DictReader(open(specs.CHIPS_CSV, encoding="utf-8")))


# --- the table itself -------------------------------------------------------------------------------------


def test_table_has_enough_real_chips_of_every_kind():
    assert len(ROWS) >= 15
    assert {r["kind"] for r in ROWS} == set(specs.KINDS)
    assert len({r["name"] for r in ROWS}) == len(ROWS), "chip names must be unique"
    vendors = {r["vendor"] for r in ROWS}
    assert {"NVIDIA", "AMD", "Intel", "Google", "Apple", "AWS"} <= vendors


def test_every_row_is_sourced_dated_and_positive():
    for r in ROWS:
        assert r["source_url"].startswith("https://"), r["name"]
        assert dt.date.fromisoformat(r["read_date"]) <= dt.date.today(), r["name"]
        assert r["kind"] in specs.KINDS and r["segment"], r["name"]
        assert float(r["bandwidth_gbs"]) > 0, r["name"]
        for col in specs.NUMBER_COLUMNS:
            if r[col]:
                assert float(r[col]) > 0, (r["name"], col)
        if r["instance_price_per_hour_usd"]:
            assert r["price_source_url"].startswith("https://") and r["price_instance"], r["name"]
            assert r["chips_per_instance"], r["name"]


def test_every_gpu_tpu_and_accelerator_gives_a_half_precision_peak():
    for r in ROWS:
        if r["kind"] != "cpu" and r["vendor"] != "Apple":  # Apple quotes fp32 GPU FLOP/s at most
            assert r["fp16_tflops"] or r["fp32_tflops"], r["name"]


def test_cpu_peaks_match_the_formula_written_in_their_notes():
    """CPU vendors publish cores and clocks, not FLOP/s: the note states the product; the column agrees."""
    column = {"fp32": "fp32_tflops", "bf16": "fp16_tflops", "int8": "int8_tops"}
    for r in ROWS:
        if r["kind"] != "cpu":
            continue
        formula = r"(fp32|bf16|int8) = (\d+) cores x ([\d.]+) GHz x (\d+) (?:FLOP|OP)/cycle"
        found = re.findall(formula, r["notes"])
        assert any(f[0] == "fp32" for f in found), r["name"]
        for dtype, cores, ghz, per_cycle in found:
            assert float(r[column[dtype]]) == pytest.approx(int(cores) * float(ghz) * int(per_cycle) / 1e3)
        bw = re.search(r"bandwidth = (\d+) channels x (\d+) MT/s x 8 bytes", r["notes"])
        assert bw, r["name"]
        assert float(r["bandwidth_gbs"]) == pytest.approx(int(bw[1]) * int(bw[2]) * 8 / 1e3)


# --- loader -----------------------------------------------------------------------------------------------


def test_load_chips_parses_numbers_and_blanks():
    chips = specs.load_chips()
    assert len(chips) == len(ROWS)
    tpu = specs.get_chip("TPU v5e")
    assert tpu.fp32_tflops is None and tpu.fp16_tflops == 197 and tpu.kind == "tpu"


def test_load_chips_from_an_override_path_and_bad_files(tmp_path):
    good = tmp_path / "c.csv"
    with open(specs.CHIPS_CSV, encoding="utf-8") as f:
        header, first = f.readline(), f.readline()
    good.write_text(header + first)
    assert len(specs.load_chips(good)) == 1
    with pytest.raises(ValueError, match="path"):
        specs.load_chips(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text(header + first.replace(",cpu,", ",fpga,"))
    with pytest.raises(ValueError, match="kind"):
        specs.load_chips(bad)
    negative = tmp_path / "neg.csv"
    negative.write_text(header + first.replace(",204.8,", ",-1,"))
    with pytest.raises(ValueError, match="bandwidth_gbs"):
        specs.load_chips(negative)
    short = tmp_path / "short.csv"
    short.write_text("name,vendor\nX,Y\n")
    with pytest.raises(ValueError, match="missing columns"):
        specs.load_chips(short)


@pytest.mark.parametrize("query, name", [
    ("NVIDIA H100 SXM", "NVIDIA H100 SXM"), ("h100", "NVIDIA H100 SXM"), ("  nvidia-t4 ", "NVIDIA T4"),
    ("tpu v5e", "Google TPU v5e"), ("A100_80GB", "NVIDIA A100 80GB SXM"), ("M2", "Apple M2"),
    ("graviton 3", "AWS Graviton3"), ("Inferentia 2", "AWS Inferentia2"),
])
def test_get_chip_ignores_case_spaces_dashes_and_vendor(query, name):
    assert specs.get_chip(query).name == name


def test_get_chip_typo_lists_close_names():
    with pytest.raises(ValueError, match=r"name 'RTX 4080' is no chip in the table; did you mean: .*4090"):
        specs.get_chip("RTX 4080")


def test_get_chip_ambiguous_and_bad_names():
    with pytest.raises(ValueError, match="ambiguous.*RTX 4090.*RTX 3090|ambiguous.*RTX 3090.*RTX 4090"):
        specs.get_chip("RTX")
    for bad in ("", None, 42):
        with pytest.raises(ValueError, match="name"):
            specs.get_chip(bad)


def test_chips_by_kind():
    assert {c.kind for c in specs.chips_by_kind("tpu")} == {"tpu"}
    with pytest.raises(ValueError, match="kind"):
        specs.chips_by_kind("fpga")


# --- Chip -------------------------------------------------------------------------------------------------


def test_peak_flops_accepts_every_spelling_including_torch_dtypes():
    import torch

    t4 = specs.get_chip("T4")
    assert t4.peak_flops("fp32") == t4.peak_flops("float32") == t4.peak_flops(torch.float32) == 8.1e12
    assert t4.peak_flops("bf16") == t4.peak_flops(torch.float16) == 65e12
    assert t4.peak_flops("int8") == 130e12
    assert t4.has_dtype("int8") and not specs.get_chip("Gaudi 3").has_dtype("int8")


def test_peak_flops_unknown_or_unspecified_dtype_names_it():
    with pytest.raises(ValueError, match="dtype must be one of"):
        specs.get_chip("T4").peak_flops("float64")
    with pytest.raises(ValueError, match="dtype 'float32'.*TPU v5e"):
        specs.get_chip("TPU v5e").peak_flops("float32")


def test_ridge_point_is_computed_from_peak_and_bandwidth():
    h100 = specs.get_chip("H100")
    assert h100.ridge_point("bf16") == pytest.approx(989.4e12 / 3350e9)
    assert h100.ridge_point("bf16") == roofline.ridge_point(h100.peak_flops("bf16"), h100.bandwidth_gbs)
    ceiling = h100.ceiling("bf16")
    assert ceiling.peak_flops == 989.4e12 and "H100" in ceiling.label


def test_price_per_chip_hour_divides_the_instance_price():
    assert specs.get_chip("A100").price_per_hour_usd == pytest.approx(40.96 / 8)
    assert specs.get_chip("T4").price_per_hour_usd == pytest.approx(0.526)
    assert specs.get_chip("RTX 4090").price_per_hour_usd is None
    d = specs.get_chip("A100").to_dict()
    assert d["price_per_hour_usd"] == pytest.approx(5.12) and d["source_url"].startswith("https://")
    assert "GB/s" in str(specs.get_chip("A100"))


# --- closest chips and table ------------------------------------------------------------------------------


def test_closest_chips_finds_the_exact_match_first():
    t4 = specs.get_chip("T4")
    found = specs.closest_chips(t4.bandwidth_gbs, t4.peak_flops(), n=3)
    assert found[0][0].name == "NVIDIA T4" and found[0][1] == pytest.approx(0)
    assert len(found) == 3 and found[1][1] >= found[0][1]


def test_closest_chips_by_bandwidth_alone_and_by_dtype():
    assert specs.closest_chips(1008)[0][0].name == "NVIDIA RTX 4090"
    tpus = specs.closest_chips(819, 197e12, dtype="bf16", n=1)
    assert tpus[0][0].name == "Google TPU v5e"
    # with fp32 FLOP/s, chips without an fp32 peak (TPUs) are skipped
    assert all(c.has_dtype("fp32") for c, _ in specs.closest_chips(819, 197e12, n=30))


@pytest.mark.parametrize("kwargs, arg", [
    ({"bandwidth_gbs": 0}, "bandwidth_gbs"), ({"bandwidth_gbs": None}, "bandwidth_gbs"),
    ({"bandwidth_gbs": 10, "flops": -1.0}, "flops"), ({"bandwidth_gbs": 10, "n": 0}, "n"),
    ({"bandwidth_gbs": 10, "dtype": "fp64"}, "dtype"),
])
def test_closest_chips_bad_input(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        specs.closest_chips(**kwargs)


def test_table_rows_have_ridge_points_where_the_dtype_exists():
    rows = specs.table(dtype="bf16")
    by_name = {r["name"]: r for r in rows}
    assert by_name["NVIDIA T4"]["ridge_flop_per_byte"] == pytest.approx(65e12 / 320e9)
    assert by_name["AMD EPYC 7763"]["peak_tflops"] is None
    with pytest.raises(ValueError, match="dtype"):
        specs.table(dtype="fp64")
