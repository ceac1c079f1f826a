"""formats: the one precision vocabulary: spellings, bytes per weight with block scales, torch dtypes."""

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
    ("mxfp4", 4.25), ("nvfp4", 4.5),
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
