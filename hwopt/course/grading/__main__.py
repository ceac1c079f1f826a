"""Instructor commands: ``python -m hwopt.course.grading secret`` (once), ``... sandbox`` (a check)."""

import argparse
import sys

from hwopt.course.grading import judge, sandbox


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hwopt.course.grading", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("secret", help=f"create the grading secret (default {judge.DEFAULT_SECRET_FILE}, or "
                                  f"${judge.SECRET_FILE_ENV}) unless one exists")
    sub.add_parser("sandbox", help="say whether the grading sandbox can start on this machine")
    args = parser.parse_args(argv)
    if args.command == "secret":
        try:
            path = judge.create_secret()
        except FileExistsError as err:
            print(err)
            return 0
        print(f"wrote {path} (readable by you only): keep it private and keep it for the whole course")
        return 0
    reason = sandbox.why_unavailable()
    print(reason or "the grading sandbox starts here (bubblewrap)")
    return 1 if reason else 0


if __name__ == "__main__":
    sys.exit(main())
