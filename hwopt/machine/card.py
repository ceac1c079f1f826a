"""The machine card: this machine's hardware, measured ceilings, ridge points and the closest chips.

`machine_card(probe=True)` in a notebook cell shows it; `python -m hwopt info [--probe] [--json]` prints it.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass, field

from hwopt import arguments, formats, roofline
from hwopt.machine import bench, hardware, specs
from hwopt.machine import probe as probe_module


def _tokens(text: str) -> set[str]:
    return set(re.split(r"[\s\-_/(),]+", text.lower())) - {""}


def spec_for_device_name(device_name: str, chips=None) -> specs.Chip | None:
    """The table row for a device name such as 'NVIDIA A100-SXM4-80GB' or 'Tesla T4' (None if absent)."""
    arguments.text("device_name", device_name, allow_empty=True)
    if chips is not None:
        arguments.instance("chips", chips, (list, tuple))
        for i, chip in enumerate(chips):
            arguments.instance(f"chips[{i}]", chip, specs.Chip)
    have = _tokens(device_name)
    best, best_score = None, 0
    for chip in specs.load_chips() if chips is None else chips:
        words = _tokens(chip.name.removeprefix(chip.vendor))
        model = words - {"sxm", "pcie", "80gb", "40gb"}  # drivers spell form factor and size their own way
        score = len(model) + len(words & have)  # a matching form factor ('PCIe') breaks a tie
        if model and model <= have and score > best_score:
            best, best_score = chip, score
    return best


def widest_simd(simd) -> str:
    """The widest vector set among a machine's SIMD names: 'AVX-512F', 'AVX2', 'SVE', ... ('' if none)."""
    arguments.instance("simd", simd, (list, tuple, set, frozenset))
    return next((name for name in ("AVX-512F", "AVX2", "AVX", "SVE", "NEON") if name in simd), "")


def _fp32_tflops(chip: specs.Chip) -> float | None:
    """A chip's fp32 matmul peak in TFLOP/s (matrix units where listed), None if the table has none."""
    return chip.peak_flops("fp32") / 1e12 if chip.has_peak_column("fp32") else None


def format_flops(flops: float, unit: str = "FLOP/s") -> str:
    """'130 GFLOP/s', '1.2 TFLOP/s' ... from FLOP/s (unit='OP/s' for integer ops)."""
    flops = arguments.positive("flops", flops, allow_zero=True)
    arguments.text("unit", unit)
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if flops >= scale:
            return f"{flops / scale:.3g} {prefix}{unit}"
    return f"{flops:.3g} {unit}"


@dataclass
class MachineCard:
    """Hardware, optional measured ceilings, ridge points, closest chips; prints as text, dumps as JSON."""

    machine: hardware.MachineInfo
    device: str
    device_spec: specs.Chip | None = None
    bandwidth_gbs: float | None = None
    flops_by_precision: dict[str, float] = field(default_factory=dict)
    closest: list[tuple[specs.Chip, float]] = field(default_factory=list)
    closest_basis: str = ""
    measured_how: str = ""  # when and how the ceilings were measured (probe.Ceilings.provenance)

    @property
    def measured(self) -> bool:
        """True when the ceilings come from a live probe."""
        return self.bandwidth_gbs is not None

    @property
    def slug(self) -> str:
        """A folder name for this device's runs: 'nvidia-h200', 'amd-epyc-avx512-2cpu' (CPU model, widest SIMD
        set, logical cores: two CPUs of one model name but different SIMD sets record apart)."""
        info = self.machine
        if self.device.startswith("cuda") and info.gpus:
            index = int(self.device.split(":")[1]) if ":" in self.device else 0
            name = info.gpus[min(index, len(info.gpus) - 1)].name
        elif self.device == "mps":
            name = f"{info.cpu_model} gpu"
        else:
            simd = widest_simd(info.simd).replace("AVX-512F", "avx512")
            name = f"{info.cpu_model} {simd} {info.logical_cores or ''}cpu"
        return re.sub(r"[^a-z0-9]+", "-", name.lower().replace("(r)", "").replace("(tm)", "")).strip("-")

    def ridge_points(self) -> dict[str, float]:
        """Measured ridge point (FLOP/byte) per precision: measured FLOP/s / measured bandwidth."""
        if not self.measured:
            return {}
        bw = self.bandwidth_gbs
        return {d: roofline.ridge_point(f, bw) for d, f in self.flops_by_precision.items() if f > 0}

    def ceilings(self) -> list[roofline.Ceiling]:
        """Measured roofs per precision for roofline.plot_roofline ([] without a probe)."""
        if not self.measured:
            return []
        return [roofline.Ceiling(f"{self.device} {d} (measured)", f, self.bandwidth_gbs, measured=True)
                for d, f in self.flops_by_precision.items() if f > 0]

    def to_dict(self) -> dict:
        """JSON-ready dict of everything on the card."""
        return {
            "machine": self.machine.to_dict(),
            "simd_meaning": self.machine.simd_meaning(),
            "device": self.device,
            "device_spec": self.device_spec.to_dict() if self.device_spec else None,
            "measured": {"bandwidth_gbs": self.bandwidth_gbs,
                         "flops_by_precision": dict(self.flops_by_precision),
                         "ridge_flop_per_byte": self.ridge_points()} if self.measured else None,
            "closest_chips": [{"name": c.name, "kind": c.kind, "bandwidth_gbs": c.bandwidth_gbs,
                               "fp32_tflops": _fp32_tflops(c), "log10_distance": round(d, 3),
                               "source_url": c.source_url} for c, d in self.closest],
            "closest_basis": self.closest_basis,
        }

    def to_json(self, indent: int | None = 2) -> str:
        """The card as a JSON string."""
        if indent is not None:
            arguments.between("indent", indent, 0, 16, integer=True)
        return json.dumps(self.to_dict(), indent=indent)

    def render(self) -> str:
        """The card as plain text."""
        lines = ["Machine card", "=" * 12, self.machine.summary(), "What the SIMD set means for ML:"]
        lines += [f"  - {s}" for s in self.machine.simd_meaning()]
        lines.append(f"\nDevice: {self.device}")
        if self.device_spec:
            c = self.device_spec
            lines.append(f"  spec sheet ({c.name}): {c.bandwidth_gbs:g} GB/s"
                         + "".join(f", {d} {format_flops(c.peak_flops(d))}" for d in ("fp32", "bf16")
                                   if c.has_peak_column(d)))
        if self.measured:
            lines.append(f"Measured ceilings on {self.device}:")
            spec = self.device_spec
            frac = f"  ({self.bandwidth_gbs / spec.bandwidth_gbs:.0%} of spec)" if spec else ""
            lines.append(f"  memory bandwidth  {self.bandwidth_gbs:8.1f} GB/s{frac}")
            ridges = self.ridge_points()
            for precision, flops in self.flops_by_precision.items():
                frac = ""
                if spec and spec.has_peak_column(precision):
                    frac = f"  ({flops / spec.peak_flops(precision):.0%} of spec)"
                ridge = f"ridge {ridges[precision]:6.2f} FLOP/byte" if precision in ridges else "not measured"
                unit = "OP/s" if precision.startswith("int") else "FLOP/s"
                lines.append(f"  matmul {precision:<10} {format_flops(flops, unit):>14}   {ridge}{frac}")
            lines.append("  Kernels below the ridge point are memory-bound here; above it, compute-bound.")
            if self.measured_how:
                lines.append(textwrap.fill(f"How: {self.measured_how}.", 110, initial_indent="  ",
                                           subsequent_indent="    "))
        else:
            lines.append("Not measured: run with probe=True (CLI: --probe) for bandwidth and matmul FLOP/s.")
        if self.closest:
            lines.append(f"\nClosest chips in hwopt/data/chips.csv ({self.closest_basis}):")
            for chip, dist in self.closest:
                fp32 = f", fp32 {_fp32_tflops(chip):g} TFLOP/s" if chip.has_peak_column("fp32") else ""
                lines.append(f"  {chip.name:<28} {chip.kind:<11} {chip.bandwidth_gbs:7g} GB/s{fp32}"
                             f"   ~{10 ** dist:.3g}x away")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.render())


def _default_probe(device: str, precisions, quick: bool):
    return probe_module.ceilings(device, precisions, quick=quick)


def machine_card(probe: bool = False, device: str = "auto", precisions=None, quick: bool = True,
                 n_closest: int = 3, probe_fn=None, machine=None) -> MachineCard:
    """Build the card; probe=True gives bandwidth and matmul FLOP/s on device (probe.ceilings: measured, or
    reused from this machine's recent record; quick: seconds each).

    precisions: the formats to probe matmuls in (None: the probe's defaults for the device);
    probe_fn(device, precisions, quick) replaces probe.probe (tests); machine replaces hardware.machine().
    """
    probe = arguments.boolean("probe", probe)
    quick = arguments.boolean("quick", quick)
    if precisions is not None:
        if isinstance(precisions, str) or not isinstance(precisions, list | tuple) or not precisions:
            raise ValueError(f"precisions must be None or a non-empty list like ['fp32']; got {precisions!r}")
        precisions = [formats.name(d, f"precisions[{i}]") for i, d in enumerate(precisions)]
    n_closest = arguments.count("n_closest", n_closest, "items", minimum=0)
    if probe_fn is not None:
        arguments.function("probe_fn", probe_fn)
    if machine is not None:
        arguments.instance("machine", machine, hardware.MachineInfo)
    dev = bench.resolve_device(device)
    info = machine or hardware.machine()
    spec = None
    chips = specs.load_chips()
    if dev.startswith("cuda") and info.gpus:
        index = int(dev.split(":")[1]) if ":" in dev else 0
        name = info.gpus[min(index, len(info.gpus) - 1)].name
        spec = spec_for_device_name(name, [c for c in chips if c.kind == "gpu"])
    elif dev == "mps":  # Apple's rows hold the GPU's numbers
        spec = spec_for_device_name(info.cpu_model, [c for c in chips if c.vendor == "Apple"])
    elif dev == "cpu":
        spec = spec_for_device_name(info.cpu_model, [c for c in chips if c.kind == "cpu"])
    card = MachineCard(machine=info, device=dev, device_spec=spec)
    if probe:
        result = (probe_fn or _default_probe)(dev, precisions, quick)
        card.bandwidth_gbs = float(result.bandwidth_gbs)
        card.flops_by_precision = {str(k): float(v) for k, v in result.flops_by_precision.items()}
        card.measured_how = result.provenance() if isinstance(result, probe_module.Ceilings) else ""
    fp32 = card.flops_by_precision.get("fp32")
    if n_closest == 0:
        pass
    elif card.measured:
        card.closest = specs.closest_chips(card.bandwidth_gbs, fp32 or None, n=n_closest, precision="fp32")
        card.closest_basis = "measured bandwidth" + (" and fp32 matmul FLOP/s" if fp32 else "")
    elif spec is not None:
        spec_fp32 = spec.peak_flops("fp32") if spec.has_peak_column("fp32") else None
        card.closest = [(c, d) for c, d in specs.closest_chips(spec.bandwidth_gbs, spec_fp32, n=n_closest + 1)
                        if c.name != spec.name][:n_closest]
        card.closest_basis = f"spec-sheet neighbours of {spec.name}"
    return card
