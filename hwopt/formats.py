"""Number formats, the course's one precision vocabulary: bits, bytes per weight with block scales, the
chip-table column that holds each format's dense peak, and the hardware that computes in it natively.

A block format stores `block` values that share one scale of `scale_bits` bits, so a weight costs
bits + scale_bits / block bits (MXFP4: 4 + 8/32 = 4.25; NVFP4: 4 + 8/16 = 4.5, its per-tensor fp32 scale
is negligible). A float format's values, and a block's scale, are in one of the ENCODINGS (E4M3, E2M1, E8M0,
...), which say the exponent and mantissa bits and what the top exponent means. Adding a format is one entry
in FORMATS.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from hwopt import arguments


@dataclass(frozen=True)
class Encoding:
    """A binary float encoding: sign (if signed), exponent_bits, mantissa_bits, exponent bias 2^(e-1) - 1.

    specials: 'ieee' (the top exponent holds inf and NaN: E5M2, fp16), 'nan' (only the all-ones code is NaN,
    the rest of the top exponent is finite: E4M3FN, E8M0) or 'none' (every code is a number: E2M1)."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    specials: str
    signed: bool = True

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def min_exponent(self) -> int:
        """Exponent of the smallest normal value (1 - bias; -bias without mantissa bits: no subnormals)."""
        return 1 - self.bias if self.mantissa_bits else -self.bias

    @property
    def max_exponent(self) -> int:
        """Exponent of the largest finite value."""
        top = 2**self.exponent_bits - 1 - self.bias
        all_ones_taken = self.specials == "ieee" or (self.specials == "nan" and not self.mantissa_bits)
        return top - 1 if all_ones_taken else top

    @property
    def max_value(self) -> float:
        """Largest finite value (E4M3FN 448, E5M2 57344, E2M1 6, E8M0 2^127)."""
        codes = 2**self.mantissa_bits
        largest = codes - 2 if self.specials == "nan" and self.mantissa_bits else codes - 1  # all-ones is NaN
        return 2.0**self.max_exponent * (1 + largest / codes)

    @property
    def min_subnormal(self) -> float:
        """Smallest positive value (a subnormal where there are mantissa bits)."""
        return 2.0 ** (self.min_exponent - self.mantissa_bits)


_ENCODINGS = (
    Encoding("E11M52", 11, 52, "ieee"),
    Encoding("E8M23", 8, 23, "ieee"),
    Encoding("E5M10", 5, 10, "ieee"),
    Encoding("E8M7", 8, 7, "ieee"),
    Encoding("E4M3", 4, 3, "nan"),  # OCP FP8 E4M3 (torch.float8_e4m3fn): no infinities, max 448
    Encoding("E5M2", 5, 2, "ieee"),
    Encoding("E2M1", 2, 1, "none"),  # OCP FP4: 0, 0.5, 1, 1.5, 2, 3, 4, 6
    Encoding("E8M0", 8, 0, "nan", signed=False),  # OCP MX scale: a power of two, 2^-127 .. 2^127
)
ENCODINGS: dict[str, Encoding] = {e.name: e for e in _ENCODINGS}


@dataclass(frozen=True)
class Format:
    """One number format. `peak_column` names the chips.csv column of its dense peak ('' if none)."""

    name: str
    bits: int  # bits per stored value
    kind: str  # "float" or "int"
    peak_column: str
    native_on: str  # hardware that computes in this format natively (the rest convert or emulate)
    torch_dtype: str | None = None  # attribute of torch, e.g. "float8_e4m3fn" (None: no torch dtype)
    aliases: tuple[str, ...] = ()
    block: int = 0  # values sharing one scale (0: a scale per tensor or per channel, negligible)
    scale_bits: int = 0  # bits of each block's scale
    scale_format: str = ""  # the scale's own format, e.g. "fp32", "E8M0", "E4M3"
    element: str = ""  # a float format's encoding (a key of ENCODINGS, e.g. "E4M3"); "" for integers
    tensor_scale_format: str = ""  # a second scale per tensor above the block scales (NVFP4: "fp32")

    @property
    def encoding(self) -> Encoding | None:
        """The Encoding of a float format's values (None for integers)."""
        return ENCODINGS[self.element] if self.element else None

    @property
    def scale_encoding(self) -> Encoding:
        """The Encoding of the block scales: an ENCODINGS key, or a float format's own (fp32 -> E8M23)."""
        if self.scale_format in ENCODINGS:
            return ENCODINGS[self.scale_format]
        return get(self.scale_format or "fp32", argument="scale_format").encoding

    def with_block(self, block: int) -> Format:
        """This format with `block` values per scale, the scale's format kept (int4_g128 at 32: 4.5 bits)."""
        block = arguments.count("block", block, "dimension")
        if not self.block:
            raise ValueError(f"block: {self.name} has no block scales to regroup; choose a block format "
                             f"({', '.join(f.name for f in FORMATS.values() if f.block)})")
        if block == self.block:
            return self
        return replace(self, name=f"{self.name} regrouped", aliases=(), block=block)

    @property
    def bits_per_weight(self) -> float:
        """Bits per stored weight, its share of the block's scale included."""
        return self.bits + (self.scale_bits / self.block if self.block else 0.0)

    @property
    def bytes_per_weight(self) -> float:
        """Bytes per stored weight, its share of the block's scale included."""
        return self.bits_per_weight / 8

    @property
    def layout(self) -> str:
        """What is stored per value: '32-bit float', '4-bit int + an fp32 scale per 32'."""
        values = f"{self.bits}-bit {self.kind}"
        return f"{values} + an {self.scale_format} scale per {self.block}" if self.block else values

    def describe(self) -> str:
        """For lessons: 'int4_g32 (4-bit int + an fp32 scale per 32: 0.625 B/weight incl. scales)'."""
        scales = " incl. scales" if self.block else ""
        return f"{self.name} ({self.layout}: {self.bytes_per_weight:g} B/weight{scales})"


# Group scales run along the dot product's sum (the input dimension), so no int kernel applies them once after
# it: W4A16 kernels (Marlin, AWQ's, GPTQ's) dequantize the weights to fp16 and multiply in fp16; W8A8/W4A8
# kernels scale each group's partial sum.
_GROUPED = ("stored as int{bits}; computed in fp16 after dequantizing (weight-only kernels), or as int{bits} "
            "with each group's scale applied to its partial sum")

_FORMATS = (
    Format("fp64", 64, "float", "", "every CPU; HPC GPUs (A100, H100, MI300) at full rate, others slowly",
           "float64", ("float64", "double"), element="E11M52"),
    Format("fp32", 32, "float", "fp32_tflops", "every CPU and GPU", "float32",
           ("float32", "float", "single"), element="E8M23"),
    Format("fp16", 16, "float", "fp16_tflops",
           "NVIDIA and AMD GPUs, Apple GPUs, Arm v8.2+ CPUs, Intel AMX-FP16 (Granite Rapids); "
           "other x86 CPUs only convert it (F16C)", "float16", ("float16", "half"), element="E5M10"),
    Format("bf16", 16, "float", "bf16_tflops",
           "NVIDIA Ampere and later (not the T4), AMD MI200 and later, TPUs, Gaudi, Trainium, "
           "x86 AVX-512 BF16 (Zen 4, Cooper Lake) and AMX (Sapphire Rapids)", "bfloat16", ("bfloat16",),
           element="E8M7"),
    Format("fp8_e4m3", 8, "float", "fp8_tflops",
           "NVIDIA Ada, Hopper and Blackwell; AMD MI300 and later; Gaudi 2 and 3; TPU v7; Trainium2 (TPU v5p "
           "and v6e, Inferentia2 and Trainium take it at their bf16 rate)",
           "float8_e4m3fn", ("fp8", "e4m3", "float8_e4m3fn", "float8_e4m3"), element="E4M3"),
    Format("fp8_e5m2", 8, "float", "fp8_tflops", "as fp8_e4m3 (the wider-range, coarser FP8 variant)",
           "float8_e5m2", ("e5m2", "float8_e5m2"), element="E5M2"),
    Format("int8", 8, "int", "int8_tops",
           "x86 VNNI (AVX-512 VNNI, AVX-VNNI) and AMX, Arm dot-product CPUs, NVIDIA Turing and later, "
           "AMD GPUs, NPUs", "int8", ("qint8", "i8")),
    Format("int8_g32", 8, "int", "int8_tops", _GROUPED.format(bits=8),
           None, ("int8-g32",), block=32, scale_bits=32, scale_format="fp32"),
    Format("int8_g128", 8, "int", "int8_tops", _GROUPED.format(bits=8),
           None, ("int8-g128",), block=128, scale_bits=32, scale_format="fp32"),
    Format("int4", 4, "int", "int4_tops",
           "NVIDIA Turing and Ampere tensor cores; elsewhere unpacked to int8 or fp16 to compute",
           None, ("i4",)),
    Format("int4_g32", 4, "int", "int4_tops", _GROUPED.format(bits=4),
           None, ("int4-g32",), block=32, scale_bits=32, scale_format="fp32"),
    Format("int4_g64", 4, "int", "int4_tops", _GROUPED.format(bits=4),
           None, ("int4-g64",), block=64, scale_bits=16, scale_format="fp16"),
    Format("int4_g128", 4, "int", "int4_tops", _GROUPED.format(bits=4) + "; the usual weight-only LLM layout "
           "(AWQ, GPTQ)",
           None, ("int4-g128",), block=128, scale_bits=16, scale_format="fp16"),
    Format("int2", 2, "int", "", "nowhere: unpacked to wider types to compute", None, ("i2",)),
    Format("mxfp4", 4, "float", "mxfp4_tflops", "NVIDIA Blackwell (B200, B300, RTX 50), AMD MI355X",
           None, ("mx-fp4",), block=32, scale_bits=8, scale_format="E8M0", element="E2M1"),
    Format("nvfp4", 4, "float", "nvfp4_tflops", "NVIDIA Blackwell (B200, B300, RTX 50)",
           None, ("nv-fp4",), block=16, scale_bits=8, scale_format="E4M3", element="E2M1",
           tensor_scale_format="fp32"),
)
FORMATS: dict[str, Format] = {f.name: f for f in _FORMATS}
_BY_SPELLING: dict[str, Format] = {s: f for f in _FORMATS for s in (f.name, *f.aliases)}


def get(fmt, argument: str = "precision", supported: Collection[str] | None = None) -> Format:
    """The Format named by a name or alias ('bf16', 'bfloat16'), a torch dtype, or a Format itself; with
    `supported` (canonical names), it must also be one of those.

    ValueError naming `argument` for anything else."""
    if isinstance(fmt, Format):
        found = fmt
    else:
        spelling = None
        if isinstance(fmt, str) or _is_dtype(fmt):
            spelling = str(fmt).strip().lower().removeprefix("torch.")
        if spelling not in _BY_SPELLING:
            raise ValueError(f"{argument} must be one of {', '.join(FORMATS)} (or an alias or torch dtype); "
                             f"got {fmt!r}")
        found = _BY_SPELLING[spelling]
    if supported is not None and found.name not in supported:
        raise ValueError(f"{argument} must be one of {', '.join(supported)} here; got {fmt!r}")
    return found


def name(fmt, argument: str = "precision", supported: Collection[str] | None = None) -> str:
    """The canonical name of a format given by name, alias, torch dtype or Format ('bf16' for torch.bfloat16),
    checked as `get` checks it."""
    return get(fmt, argument, supported).name


def _is_dtype(value) -> bool:
    return type(value).__module__ == "torch" and type(value).__name__ == "dtype"


def torch_dtype(fmt, argument: str = "dtype") -> str:
    """Name of the torch dtype that stores a format ('bf16' -> 'bfloat16'); ValueError naming `argument` for
    a format torch has no dtype for (int4, the block formats)."""
    f = get(fmt, argument)
    if f.torch_dtype is None:
        with_dtype = ", ".join(g.name for g in FORMATS.values() if g.torch_dtype)
        raise ValueError(f"{argument} must be a format with a torch dtype ({with_dtype}); got {fmt!r}")
    return f.torch_dtype


def bytes_per_weight(fmt) -> float:
    """Bytes per stored weight of a format, block scales included (int4_g32: 0.5 + 4/32 = 0.625)."""
    return get(fmt).bytes_per_weight
