"""Command line: `python -m hwopt info [--probe] [--json] [--device auto|cpu|cuda|mps]`: the machine card."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `python -m hwopt`."""
    parser = argparse.ArgumentParser(prog="python -m hwopt", description="Hardware Optimization for ML")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="print the machine card: hardware, measured ceilings, closest chips")
    info.add_argument("--probe", action="store_true", help="measure memory bandwidth and matmul FLOP/s")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    info.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N or mps")
    info.add_argument("--dtypes", default=None,
                      help="comma-separated matmul dtypes to probe, e.g. float32,int8 (default: all)")
    info.add_argument("--full", action="store_true", help="longer, steadier probe (default: quick)")
    return parser


def main(argv=None, probe_fn=None) -> int:
    """Run the CLI; returns the exit status (2 with a message on bad input)."""
    from hwopt.machine.card import machine_card

    args = build_parser().parse_args(argv)
    dtypes = None if args.dtypes is None else [d.strip() for d in args.dtypes.split(",") if d.strip()]
    try:
        card = machine_card(probe=args.probe, device=args.device, quick=not args.full, probe_fn=probe_fn,
                            dtypes=dtypes)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(card.to_json() if args.json else card.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
