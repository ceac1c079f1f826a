"""machine.specs and hwopt/data/chips.csv: a sourced table in stated units; lookups, peaks, closest chips."""

import csv
import datetime as dt
import re

import pytest
import torch

from hwopt import formats, roofline
from hwopt.machine import specs

ROWS = list(csv.DictReader(open(specs.CHIPS_CSV, encoding="utf-8")))


# --- the table itself -------------------------------------------------------------------------------------

# Plausible ranges per kind: a GB/s typed as TB/s, or a GB typed as MB, falls outside them.
BANDWIDTH_GBS = {"cpu": (20, 1500), "gpu": (50, 20_000), "tpu": (300, 20_000), "accelerator": (50, 20_000)}
MEMORY_GIB = {"cpu": (8, 16_384), "gpu": (8, 1024), "tpu": (8, 1024), "accelerator": (8, 1024)}
NAMED = ("NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA B200", "NVIDIA GB200", "NVIDIA B300",
         "NVIDIA RTX 5090", "AMD Instinct MI325X", "AMD Instinct MI355X", "Google TPU v7 (Ironwood)",
         "AWS Trainium2", "Intel Gaudi 2", "Qualcomm Cloud AI 100", "Apple M3", "Apple M4")


def number(row, column):
    return float(row[column]) if row[column] else None


def test_table_has_enough_real_chips_of_every_kind_and_the_named_ones():
    assert len(ROWS) >= 35
    assert {r["kind"] for r in ROWS} == set(specs.KINDS)
    assert len({r["name"] for r in ROWS}) == len(ROWS), "chip names must be unique"
    vendors = {r["vendor"] for r in ROWS}
    assert {"NVIDIA", "AMD", "Intel", "Google", "Apple", "AWS", "Qualcomm"} <= vendors
    for name in NAMED:
        assert any(r["name"].startswith(name) for r in ROWS), f"{name} is missing from the chip table"


def test_columns_carry_units_and_one_column_per_format():
    header = list(ROWS[0])
    for column in (*specs.PEAK_COLUMNS, "memory_gib", "bandwidth_gbs", "tdp_w", "price_source_url",
                   "price_read_date"):
        assert column in header, column
    assert "memory_gb" not in header, "memory is GiB: one unit for the whole column"
    for fmt in formats.FORMATS.values():  # every format with a peak column finds it in the table
        assert not fmt.peak_column or fmt.peak_column in header, (fmt.name, fmt.peak_column)


def test_every_row_is_sourced_dated_and_positive():
    for r in ROWS:
        assert r["source_url"].startswith("https://"), r["name"]
        assert dt.date.fromisoformat(r["read_date"]) <= dt.date.today(), r["name"]
        assert r["kind"] in specs.KINDS and r["segment"], r["name"]
        assert float(r["bandwidth_gbs"]) > 0, r["name"]
        for col in specs.NUMBER_COLUMNS:
            if r[col]:
                assert float(r[col]) > 0, (r["name"], col)


def test_every_price_has_its_own_source_and_date():
    priced = [r for r in ROWS if r["instance_price_per_hour_usd"]]
    assert len(priced) >= 5
    for r in priced:
        assert r["price_source_url"].startswith("https://") and r["price_instance"], r["name"]
        assert dt.date.fromisoformat(r["price_read_date"]) <= dt.date.today(), r["name"]
        assert r["chips_per_instance"], r["name"]
        assert "on-demand" in r["price_instance"], r["name"]
    for r in ROWS:
        if not r["instance_price_per_hour_usd"]:
            assert not (r["price_source_url"] or r["price_read_date"]), f"{r['name']}: a date without a price"


def test_units_are_plausible_for_the_kind():
    for r in ROWS:
        low, high = BANDWIDTH_GBS[r["kind"]]
        assert low <= float(r["bandwidth_gbs"]) <= high, (r["name"], r["bandwidth_gbs"])
        if r["memory_gib"]:
            low, high = MEMORY_GIB[r["kind"]]
            assert low <= float(r["memory_gib"]) <= high, (r["name"], r["memory_gib"])
        for col in specs.PEAK_COLUMNS:
            if r[col]:
                assert 0.1 <= float(r[col]) <= 50_000, (r["name"], col, "TFLOPS expected")
        if r["tdp_w"]:
            assert 10 <= float(r["tdp_w"]) <= 2000, r["name"]


def test_dense_peaks_are_ordered_by_bits():
    """Narrower formats run at least as fast: fp4 >= fp8 >= bf16, int4 >= int8, and fp16 >= fp32 on GPUs."""
    for r in ROWS:
        for fp4 in ("mxfp4_tflops", "nvfp4_tflops"):
            chain = [(c, number(r, c)) for c in (fp4, "fp8_tflops", "bf16_tflops") if r[c]]
            for (narrow_col, narrow), (wide_col, wide) in zip(chain, chain[1:], strict=False):
                assert narrow >= wide, (r["name"], narrow_col, wide_col)
        if r["int4_tops"] and r["int8_tops"]:
            assert number(r, "int4_tops") >= number(r, "int8_tops"), r["name"]
        if r["kind"] == "gpu" and r["fp16_tflops"] and r["fp32_tflops"]:
            assert number(r, "fp16_tflops") >= number(r, "fp32_tflops"), r["name"]


def test_sparsity_figures_are_halved_where_the_notes_name_them():
    for r in ROWS:
        if "sparsity" in r["notes"]:
            assert "dense" in r["notes"], f"{r['name']}: the notes name sparsity but not the dense figure"


def test_fp16_and_bf16_differ_where_the_hardware_does():
    t4, xeon = specs.get_chip("NVIDIA T4"), specs.get_chip("Xeon Platinum 8480+")
    assert t4.fp16_tflops and t4.bf16_tflops is None  # Turing has no BF16 units
    assert xeon.bf16_tflops > 5 * xeon.fp16_tflops  # AMX does BF16, not FP16
    assert specs.get_chip("MI300X").fp32_matrix_tflops and specs.get_chip("Trainium2").fp32_tflops is None


def test_every_gpu_tpu_and_accelerator_gives_a_peak_or_says_how_it_is_used():
    for r in ROWS:
        peaks = [r[c] for c in specs.PEAK_COLUMNS if r[c]]
        if r["kind"] != "cpu" and r["vendor"] != "Apple":
            assert r["fp16_tflops"] or r["bf16_tflops"] or r["fp32_tflops"], r["name"]
        if not peaks:
            assert "publishes no FLOP/s" in r["notes"] and "bandwidth" in r["notes"], r["name"]


def test_cpu_peaks_match_the_formula_written_in_their_notes():
    """CPU vendors publish cores and clocks, not FLOP/s: the note states the product; the column agrees."""
    column = {"fp32": "fp32_tflops", "fp16": "fp16_tflops", "bf16": "bf16_tflops", "int8": "int8_tops"}
    for r in ROWS:
        if r["kind"] != "cpu":
            continue
        formula = r"(fp32|fp16|bf16|int8) = (\d+) cores x ([\d.]+) GHz x (\d+) (?:FLOP|OP)/cycle"
        found = re.findall(formula, r["notes"])
        assert any(f[0] == "fp32" for f in found), r["name"]
        for dtype, cores, ghz, per_cycle in found:
            assert float(r[column[dtype]]) == pytest.approx(int(cores) * float(ghz) * int(per_cycle) / 1e3)
        for col in specs.PEAK_COLUMNS:  # every CPU peak comes from a formula in the notes
            assert not r[col] or col in {column[f[0]] for f in found}, (r["name"], col)
        bw = re.search(r"bandwidth = (\d+) channels x (\d+) MT/s x 8 bytes", r["notes"])
        assert bw, r["name"]
        assert float(r["bandwidth_gbs"]) == pytest.approx(int(bw[1]) * int(bw[2]) * 8 / 1e3)


# --- loader -----------------------------------------------------------------------------------------------


def test_load_chips_parses_numbers_and_blanks():
    chips = specs.load_chips()
    assert len(chips) == len(ROWS)
    tpu = specs.get_chip("TPU v5e")
    assert tpu.fp32_tflops is None and tpu.fp16_tflops is None and tpu.bf16_tflops == 197
    assert tpu.kind == "tpu"
    assert tpu.memory_bytes == 16 * 2**30


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
    undated = tmp_path / "undated.csv"
    undated.write_text(header + first.replace(",2026-11-30,", ",30 Nov 2026,"))
    with pytest.raises(ValueError, match="read_date"):
        specs.load_chips(undated)
    short = tmp_path / "short.csv"
    short.write_text("name,vendor\nX,Y\n")
    with pytest.raises(ValueError, match="missing columns"):
        specs.load_chips(short)


@pytest.mark.parametrize("query, name", [
    ("NVIDIA H100 SXM", "NVIDIA H100 SXM"), ("h100 sxm", "NVIDIA H100 SXM"), ("  nvidia-t4 ", "NVIDIA T4"),
    ("tpu v5e", "Google TPU v5e"), ("A100_80GB", "NVIDIA A100 80GB SXM"), ("M2", "Apple M2"),
    ("graviton 3", "AWS Graviton3"), ("Inferentia 2", "AWS Inferentia2"), ("B200", "NVIDIA B200"),
    ("GB200", "NVIDIA GB200"), ("TPU v7", "Google TPU v7 (Ironwood)"), ("M4", "Apple M4"),
])
def test_get_chip_ignores_case_spaces_dashes_and_vendor(query, name):
    assert specs.get_chip(query).name == name


def test_get_chip_typo_lists_close_names():
    with pytest.raises(ValueError, match=r"name 'RTX 4080' is no chip in the table; did you mean: .*4090"):
        specs.get_chip("RTX 4080")


def test_get_chip_ambiguous_and_bad_names():
    with pytest.raises(ValueError, match="ambiguous.*RTX 4090.*RTX 3090|ambiguous.*RTX 3090.*RTX 4090"):
        specs.get_chip("RTX")
    with pytest.raises(ValueError, match="ambiguous.*H100 SXM.*H100 PCIe.*H100 NVL"):
        specs.get_chip("H100")
    for bad in ("", None, 42):
        with pytest.raises(ValueError, match="name"):
            specs.get_chip(bad)


def test_chips_by_kind():
    assert {c.kind for c in specs.chips_by_kind("tpu")} == {"tpu"}
    with pytest.raises(ValueError, match="kind"):
        specs.chips_by_kind("fpga")


# --- Chip -------------------------------------------------------------------------------------------------


def test_peak_flops_accepts_every_spelling_including_torch_dtypes():
    t4 = specs.get_chip("T4")
    assert t4.peak_flops("fp32") == t4.peak_flops("float32") == t4.peak_flops(torch.float32) == 8.1e12
    assert t4.peak_flops("fp16") == t4.peak_flops(torch.float16) == t4.peak_flops("half") == 65e12
    assert t4.peak_flops("int8") == 130e12 and t4.peak_flops("int4_g128") == 260e12
    assert not t4.has_peak_column("bf16") and not t4.has_peak_column(torch.bfloat16)
    assert t4.has_peak_column("int8") and not specs.get_chip("Gaudi 3").has_peak_column("int8")


def test_each_format_reads_its_own_column():
    h100, b200 = specs.get_chip("H100 SXM"), specs.get_chip("B200")
    assert h100.peak_column("fp8") == h100.peak_column("fp8_e5m2") == "fp8_tflops"
    assert h100.peak_flops("fp8_e4m3") == 1978.9e12 and not h100.has_peak_column("nvfp4")
    assert b200.peak_flops("nvfp4") == b200.peak_flops("mxfp4") == 9000e12
    assert specs.get_chip("A100").peak_column("bf16") == "bf16_tflops"
    mi355x = specs.get_chip("MI355X")  # CDNA 4 scales blocks of 32 by E8M0: MXFP4, not NVFP4
    assert mi355x.peak_column("mxfp4") == "mxfp4_tflops" and not mi355x.has_peak_column("nvfp4")


def test_the_format_table_and_the_chip_table_agree_on_fp4():
    """A chip lists an MXFP4 or NVFP4 peak exactly when formats.py names its family as computing it."""
    for name in ("mxfp4", "nvfp4"):
        fmt = formats.get(name)
        listed = fmt.native_on.replace(")", "(").split("(")[1::2]  # 'B200, B300, RTX 50'
        families = [f.strip() for part in listed for f in part.split(",")]
        families += [f.split()[-1] for f in fmt.native_on.split(", ") if "(" not in f]  # 'AMD MI355X'
        for r in ROWS:
            native = any(family in r["name"] for family in families)
            assert bool(r[fmt.peak_column]) == native, (name, r["name"], families)
    assert "MI355X" in formats.get("mxfp4").native_on and "MI355X" not in formats.get("nvfp4").native_on


def test_zen_4_cpus_list_their_avx512_bf16_peak_at_twice_fp32():
    zen4 = [r for r in ROWS if "Zen 4" in r["notes"]]
    assert len(zen4) >= 3
    for r in zen4:
        assert number(r, "bf16_tflops") == pytest.approx(2 * number(r, "fp32_tflops")), r["name"]
    with_bf16 = [r["name"] for r in ROWS if r["kind"] == "cpu" and r["bf16_tflops"]]
    assert len(with_bf16) > len([r for r in ROWS if r["kind"] == "cpu"]) / 2  # most CPUs in the table


def test_every_interconnect_figure_is_named_sourced_dated_and_plausible():
    linked = [r for r in ROWS if r["interconnect_gbs"]]
    kinds = {r["interconnect"].split()[0] for r in linked}
    assert {"NVLink", "PCIe", "ICI", "Infinity"} <= kinds, kinds
    for r in linked:
        assert r["interconnect"] and r["interconnect_source_url"].startswith("https://"), r["name"]
        assert dt.date.fromisoformat(r["interconnect_read_date"]) <= dt.date.today(), r["name"]
        assert 10 <= float(r["interconnect_gbs"]) <= 10_000, (r["name"], "GB/s per chip expected")
        assert float(r["interconnect_gbs"]) < float(r["bandwidth_gbs"]), r["name"]  # slower than memory
    for r in ROWS:
        if not r["interconnect_gbs"]:
            link = ("interconnect", "interconnect_source_url", "interconnect_read_date")
            assert not any(r[c] for c in link), r["name"]
    for r in linked:  # figures computed from links or ports: the column agrees with the product in the notes
        links = re.search(r"= (\d+) links x ([\d.]+) GB/s", r["notes"])
        ports = re.search(r"= (\d+) ports x (\d+) Gb/s x 2 directions / 8", r["notes"])
        if links:
            assert float(r["interconnect_gbs"]) == pytest.approx(int(links[1]) * float(links[2])), r["name"]
        if ports:
            per_chip = int(ports[1]) * int(ports[2]) * 2 / 8
            assert float(r["interconnect_gbs"]) == pytest.approx(per_chip), r["name"]
    h100 = specs.get_chip("H100 SXM")
    assert h100.interconnect == "NVLink 4" and h100.interconnect_one_way_gbs == 450
    assert specs.get_chip("EPYC 7763").interconnect_one_way_gbs is None


def test_an_interconnect_figure_without_its_source_is_refused(tmp_path):
    with open(specs.CHIPS_CSV, encoding="utf-8") as f:
        header, *lines = f.readlines()
    h100 = next(line for line in lines if line.startswith("NVIDIA H100 SXM,"))
    bad = tmp_path / "bad.csv"
    source = ",https://www.nvidia.com/en-us/data-center/h100/,2026-12-03,"
    bad.write_text(header + h100.replace(source, ",,,", 1))
    with pytest.raises(ValueError, match="interconnect_source_url"):
        specs.load_chips(bad)


def test_fp32_matmuls_use_matrix_units_where_the_vendor_lists_them():
    trn2 = specs.get_chip("Trainium2")
    assert trn2.peak_column("fp32") == "fp32_matrix_tflops" and trn2.peak_flops("fp32") == 181e12
    assert specs.get_chip("T4").peak_column("fp32") == "fp32_tflops"


def test_peak_flops_unknown_or_unspecified_precision_names_it():
    with pytest.raises(ValueError, match="precision must be one of"):
        specs.get_chip("T4").peak_flops("float128")
    with pytest.raises(ValueError, match="precision 'float64'.*no fp64 peak in the chip table"):
        specs.get_chip("T4").peak_flops("float64")
    with pytest.raises(ValueError, match="precision 'float32'.*TPU v5e.*no fp32_tflops"):
        specs.get_chip("TPU v5e").peak_flops("float32")
    with pytest.raises(ValueError, match="Apple M4 has no dense fp32 figure: no FLOP/s published"):
        specs.get_chip("Apple M4").peak_flops()


def test_ridge_point_is_computed_from_peak_and_bandwidth():
    h100 = specs.get_chip("H100 SXM")
    assert h100.ridge_point("bf16") == pytest.approx(989.4e12 / 3350e9)
    assert h100.ridge_point("bf16") == roofline.ridge_point(h100.peak_flops("bf16"), h100.bandwidth_gbs)
    ceiling = h100.ceiling("bfloat16")
    assert ceiling.peak_flops == 989.4e12 and "H100" in ceiling.label and "bf16" in ceiling.label


def test_price_per_chip_hour_divides_the_instance_price():
    assert specs.get_chip("Trainium").price_per_hour_usd == pytest.approx(1.34375)
    assert specs.get_chip("T4").price_per_hour_usd == pytest.approx(0.526)
    assert specs.get_chip("RTX 4090").price_per_hour_usd is None
    assert specs.get_chip("A100").price_per_hour_usd is None  # today's on-demand price was not found
    d = specs.get_chip("T4").to_dict()
    assert d["price_per_hour_usd"] == pytest.approx(0.526) and d["price_source_url"].startswith("https://")
    assert "GB/s" in str(specs.get_chip("A100")) and "no FLOP/s published" in str(specs.get_chip("Apple M4"))


# --- closest chips and table ------------------------------------------------------------------------------


def test_closest_chips_finds_the_exact_match_first():
    t4 = specs.get_chip("T4")
    found = specs.closest_chips(t4.bandwidth_gbs, t4.peak_flops(), n=3)
    assert found[0][0].name == "NVIDIA T4" and found[0][1] == pytest.approx(0)
    assert len(found) == 3 and found[1][1] >= found[0][1]


def test_closest_chips_by_bandwidth_alone_and_by_precision():
    assert specs.closest_chips(1008)[0][0].name == "NVIDIA RTX 4090"
    tpus = specs.closest_chips(819, 197e12, precision="bf16", n=1)
    assert tpus[0][0].name == "Google TPU v5e"
    # with fp32 FLOP/s, chips without an fp32 peak (TPUs, Apple M3/M4) are skipped
    assert all(c.has_peak_column("fp32") for c, _ in specs.closest_chips(819, 197e12, n=60))


@pytest.mark.parametrize("kwargs, arg", [
    ({"bandwidth_gbs": 0}, "bandwidth_gbs"), ({"bandwidth_gbs": None}, "bandwidth_gbs"),
    ({"bandwidth_gbs": 10, "flops": -1.0}, "flops"), ({"bandwidth_gbs": 10, "n": 0}, "n"),
    ({"bandwidth_gbs": 10, "precision": "fp128"}, "precision"),
])
def test_closest_chips_bad_input(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        specs.closest_chips(**kwargs)


def test_table_rows_have_ridge_points_where_the_dtype_exists():
    rows = specs.table(precision="bf16")
    by_name = {r["name"]: r for r in rows}
    assert by_name["NVIDIA A100 80GB SXM"]["ridge_flop_per_byte"] == pytest.approx(312e12 / 2039e9)
    assert by_name["NVIDIA T4"]["peak_tflops"] is None and by_name["AMD EPYC 7763"]["peak_column"] is None
    with pytest.raises(ValueError, match="dtype"):
        specs.table(precision="fp128")


def test_compare_bandwidth_puts_datasheet_against_datasheet():
    server, l4, h100 = map(specs.get_chip, ["AMD EPYC 9654", "NVIDIA L4", "NVIDIA H100 SXM"])
    assert specs.compare_bandwidth(l4, server).startswith("NVIDIA L4 (gpu) streams less than AMD EPYC 9654")
    assert "7.3x the GB/s of AMD EPYC 9654" in specs.compare_bandwidth(h100, server)


def test_datasheet_share_of_a_measurement():
    t4 = specs.get_chip("T4")
    assert "= 50% of its own datasheet (NVIDIA T4, 320 GB/s)" in specs.datasheet_share(160.0, t4, "this cuda")
    assert "no datasheet for this chip" in specs.datasheet_share(12.5, None)
    with pytest.raises(ValueError, match="measured_gbs"):
        specs.datasheet_share(0, t4)


def test_every_row_is_found_by_its_own_name():
    for r in ROWS:
        assert specs.get_chip(r["name"]).name == r["name"]


def test_memory_is_gib_in_the_table_and_gb_of_1e9_bytes_beside_the_footprint_model():
    h100 = specs.get_chip("NVIDIA H100 SXM")
    assert h100.memory_bytes == h100.memory_gib * 2**30
    assert h100.memory_gb == pytest.approx(h100.memory_gib * 1.073741824)
