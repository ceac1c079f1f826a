"""formats: the one precision vocabulary: spellings, bytes per weight with block scales, torch dtypes."""

import ast
from pathlib import Path

import pytest
import torch

from hwopt import formats


@pytest.mark.parametrize("spelling, name", [
    ("fp32", "fp32"), ("float32", "fp32"), (torch.float32, "fp32"), ("BF16", "bf16"),
    (torch.bfloat16, "bf16"), ("half", "fp16"), ("fp8", "fp8_e4m3"), (torch.float8_e5m2, "fp8_e5m2"),
    ("qint8", "int8"), (" MXFP4 ", "mxfp4"),
])
def test_every_spelling_names_one_format(spelling, name):
    assert formats.get(spelling).name == name
    assert formats.get(formats.get(spelling)) is formats.get(spelling)


@pytest.mark.parametrize("name, bits", [
    ("fp32", 32), ("bf16", 16), ("int8", 8), ("int4", 4), ("int4_g32", 5), ("int4_g128", 4.125),
    ("mxfp4", 4.25), ("nvfp4", 4.5), ("int4_g64", 4.25),
])
def test_bits_per_weight_count_the_block_scales(name, bits):
    assert formats.get(name).bits_per_weight == bits
    assert formats.bytes_per_weight(name) == bits / 8


def test_torch_dtypes_exist_and_round_trip():
    for f in formats.FORMATS.values():
        if f.torch_dtype:
            assert formats.get(getattr(torch, f.torch_dtype)) is f


def test_spellings_are_unique():
    spellings = [s for f in formats.FORMATS.values() for s in (f.name, *f.aliases)]
    assert len(spellings) == len(set(spellings))


@pytest.mark.parametrize("bad", ["fp7", "", None, 8, 3.5, True, [], torch.complex64])
def test_unknown_formats_raise_naming_the_argument(bad):
    with pytest.raises(ValueError, match="kv_precision must be one of"):
        formats.get(bad, argument="kv_precision")


def test_torch_dtype_names_what_torch_stores_or_refuses():
    assert formats.torch_dtype("bf16") == "bfloat16" and formats.torch_dtype(torch.float64) == "float64"
    with pytest.raises(ValueError, match="dtypes must be a format with a torch dtype"):
        formats.torch_dtype("int4_g32", argument="dtypes")


def test_describe_states_the_layout_and_the_bytes():
    assert formats.get("int4_g32").describe() == \
        "int4_g32 (4-bit int + an fp32 scale per 32: 0.625 B/weight incl. scales)"
    assert formats.get("fp32").describe() == "fp32 (32-bit float: 4 B/weight)"
    assert formats.get("int8_g128").layout == "8-bit int + an fp32 scale per 128"


@pytest.mark.parametrize("fmt", [f for f in formats.FORMATS.values() if f.torch_dtype and f.element])
def test_float_encodings_agree_with_torch(fmt):
    info, enc = torch.finfo(getattr(torch, fmt.torch_dtype)), fmt.encoding
    assert enc.max_value == info.max and 2.0**enc.min_exponent == info.tiny
    assert 1 + enc.exponent_bits + enc.mantissa_bits == fmt.bits == info.bits


def test_scale_encodings_of_the_block_formats():
    e8m0 = formats.get("mxfp4").scale_encoding
    assert (e8m0.name, e8m0.max_value, e8m0.min_subnormal) == ("E8M0", 2.0**127, 2.0**-127)
    assert e8m0.max_value == torch.finfo(torch.float8_e8m0fnu).max
    assert formats.get("nvfp4").scale_encoding is formats.get("fp8_e4m3").encoding
    assert formats.get("int4_g128").scale_encoding is formats.get("fp16").encoding
    assert formats.get("mxfp4").encoding.max_value == 6 and formats.get("nvfp4").tensor_scale_format == "fp32"


def test_with_block_regroups_a_block_format_only():
    regrouped = formats.get("mxfp4").with_block(16)
    assert regrouped.bits_per_weight == 4.5 and regrouped.scale_format == "E8M0"
    assert formats.get("nvfp4").with_block(16) is formats.get("nvfp4")
    with pytest.raises(ValueError, match="block: fp8_e4m3 has no block scales"):
        formats.get("fp8_e4m3").with_block(32)
    with pytest.raises(ValueError, match="block must be an integer"):
        formats.get("mxfp4").with_block(0)


# ---- each fact in one place --------------------------------------------------------------------------------

HWOPT = Path(formats.__file__).parent


def _copied_facts(node: ast.Dict) -> list[str]:
    """Keys of a dict literal whose value restates that format's bits, bytes, torch dtype or chip column."""
    copied = []
    for key, value in zip(node.keys, node.values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            continue
        try:
            f = formats.get(key.value)
        except ValueError:
            continue
        facts = {f.bits, f.bits_per_weight, f.bytes_per_weight, f.torch_dtype, f.peak_column} - {None, ""}
        restated = (isinstance(value, ast.Constant) and not isinstance(value.value, bool)
                    and value.value in facts) or (isinstance(value, ast.Attribute) and value.attr in facts)
        copied += [key.value] if restated else []
    return copied


def precision_tables(source: str) -> list[str]:
    """'line N: keys' for each dict literal in source that restates facts of two or more formats."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict) and len(keys := _copied_facts(node)) >= 2:
            found.append(f"line {node.lineno}: {', '.join(keys)}")
    return found


@pytest.mark.parametrize("source, copies", [
    ('BYTES = {"fp32": 4.0, "fp16": 2.0, "int8": 1.0, "int4": 0.5}', True),
    ('BITS = {"fp32": 32, "int8": 8, "int4": 4}', True),
    ('ALIASES = {"fp32": "float32", "bf16": "bfloat16"}', True),
    ('DTYPES = {"fp32": torch.float32, "fp16": torch.float16}', True),
    ('COLUMNS = {"float32": "fp32_tflops", "int8": "int8_tops"}', True),
    ('TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "int8": 0.05}', False),  # a fact about a test, not a format
    ('LAYOUT = {"fp32": "fp32", "int4": "int4_g32"}', False),  # which format a kernel stores: its own fact
])
def test_the_scan_finds_copied_tables(source, copies):
    assert bool(precision_tables(source)) == copies


def test_each_precision_fact_lives_in_formats_alone():
    """No module but formats restates the bits, bytes, torch dtype or chip column of formats, or defines
    canonical_dtype."""
    tables, canonicalisers = [], []
    for path in sorted(HWOPT.rglob("*.py")):
        name = path.relative_to(HWOPT).as_posix()
        if name == "formats.py":
            continue
        source = path.read_text()
        tables += [f"{name} {where}" for where in precision_tables(source)]
        canonicalisers += [name for node in ast.walk(ast.parse(source))
                           if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                           and node.name == "canonical_dtype"]
    assert not tables, f"tables of format facts outside hwopt/formats.py: {tables}"
    assert not canonicalisers, f"canonical_dtype outside hwopt/formats.py (use formats.get): {canonicalisers}"
    assert len(list(HWOPT.rglob("*.py"))) > 20  # the scan saw the package


def test_name_and_get_check_against_the_supported_formats():
    assert formats.name("bfloat16") == "bf16"
    assert formats.name(torch.float32) == "fp32"
    assert formats.name("i8", "precision", supported=("fp32", "int8")) == "int8"
    assert formats.get(formats.FORMATS["fp16"], supported=("fp16",)).name == "fp16"
    with pytest.raises(ValueError, match=r"^kv_precision must be one of fp64, fp32"):
        formats.name("fp7", "kv_precision")
    with pytest.raises(ValueError, match=r"precision must be one of fp32, int8, int4 here; got 'bf16'"):
        formats.name("bf16", supported=("fp32", "int8", "int4"))
