"""Instructor commands: `python -m hwopt.course.grading grade|demo|secret|sandbox|settings|extend|lms|rubric`.

    python -m hwopt.course.grading secret     # once per course: the secret that seeds the hidden cases
    python -m hwopt.course.grading sandbox    # whether the grading sandbox starts on this machine
    python -m hwopt.course.grading grade      # a real class: submitted/ -> grades_report.csv, grades.csv
    python -m hwopt.course.grading demo       # the sample submissions, graded in artifacts/grading-demo/
    python -m hwopt.course.grading settings   # the environment variables of grading (--readme: into README)
    python -m hwopt.course.grading extend ada batching 2   # ada gets 2 more days for batching (0: none)
    python -m hwopt.course.grading lms --roster canvas_export.csv   # canvas_grades.csv and lms_grades.csv
    python -m hwopt.course.grading rubric roofline   # the written questions, model answers and rubrics
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hwopt.course.grading import course, deadlines, demo, grade, judge, lms, notebooks, sandbox, settings


def _secret(args) -> int:
    try:
        path = judge.create_secret()
    except FileExistsError as err:
        print(err)
        return 0
    print(f"wrote {path} (readable by you only): keep it private and keep it for the whole course")
    return 0


def _sandbox(args) -> int:
    reason = sandbox.why_unavailable()
    print(reason or "the grading sandbox starts here (bubblewrap)")
    return 1 if reason else 0


def _grade(args) -> int:
    rows = grade.grade_class(args.course.resolve(), assignments=args.assignments, timeout_s=args.timeout,
                             force=not args.no_force, workers=args.workers, db_url=args.db_url,
                             scheduler=args.scheduler)
    return 0 if all(r.status in grade.FINE for r in rows) else 1


def _demo(args) -> int:
    figures = demo.demo(args.course.resolve(), args.students, args.timeout, workers=args.workers,
                        db_url=args.db_url, targets_only=args.targets_only,
                        assignments=args.assignments or course.ASSIGNMENTS)
    return 1 if figures["unexpected"] else 0


def _settings(args) -> int:
    if not args.readme:
        print(settings.markdown_table())
        return 0
    readme = course.ROOT / "README.md"
    text = readme.read_text()
    synced = settings.synced_readme(text)
    if synced != text:
        readme.write_text(synced)
        print(f"updated the settings table in {readme}")
    return 0


def _extend(args) -> int:
    path = deadlines.write_extension(args.course / deadlines.EXTENSIONS, args.student, args.assignment,
                                     args.days)
    print(f"{args.student} has {args.days:g} more days for {args.assignment} ({path}); grade again to "
          "apply it")
    return 0


def _lms(args) -> int:
    api = course.make_api(args.course.resolve(), db_url=args.db_url)
    for path in lms.export(api, args.course.resolve(), args.roster, assignments=course.ASSIGNMENTS):
        print(f"wrote {path}")
    return 0


def _rubric(args) -> int:
    written = notebooks.written_answers(course.load_notebook("source", args.assignment))
    if not written:
        print(f"{args.assignment} has no written answers")
    for i, answer in enumerate(written, 1):
        print(f"{'=' * 100}\nWritten answer {i} of {len(written)} in {args.assignment}: cell "
              f"{answer['grade_id']}, {answer['points']:g} points\n{'=' * 100}\n{answer['question']}\n\n"
              f"{'-' * 100}\n{answer['answer']}\n")
    return 0


def parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per instructor task."""
    top = argparse.ArgumentParser(prog="python -m hwopt.course.grading",
                                  description=__doc__.splitlines()[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command", required=True)
    where = f"default {settings.SECRET_FILE.default}, or ${settings.SECRET_FILE.name}"
    secret = sub.add_parser("secret", help=f"create the grading secret ({where}) unless one exists")
    secret.set_defaults(run=_secret)
    sub.add_parser("sandbox", help="say whether the grading sandbox can start on this machine").set_defaults(
        run=_sandbox)
    g = sub.add_parser("grade", help="grade COURSE/submitted (a real class); exit 1 when any submission "
                                     "could not be graded")
    g.add_argument("--course", type=Path, default=course.ROOT,
                   help="the course folder (default: the repository)")
    g.add_argument("--no-force", action="store_true", help="skip submissions already autograded")
    g.add_argument("--assignments", nargs="+", choices=course.ASSIGNMENTS, default=course.ASSIGNMENTS,
                   metavar="NAME", help="grade only these assignments (default: every one)")
    g.add_argument("--scheduler", default=None, help="an existing Dask cluster's address (tcp://host:8786)")
    g.set_defaults(run=_grade)
    d = sub.add_parser("demo", help="grade the sample submissions in a scratch course folder; exit 1 when a "
                                    "sample's score is not the expected one")
    d.add_argument("--course", type=Path, default=demo.DEMO_COURSE, help="the scratch course folder "
                   "(emptied first; default artifacts/grading-demo/)")
    d.add_argument("--students", type=int, default=None, help="class size (cycles through the samples)")
    d.add_argument("--assignments", nargs="+", default=None, choices=course.ASSIGNMENTS, metavar="NAME",
                   help="grade only these assignments (default: every one)")
    d.add_argument("--targets-only", action="store_true",
                   help="each sample submits only the assignments it is about (samples.TARGETS)")
    d.set_defaults(run=_demo)
    for p in (g, d):
        p.add_argument("--timeout", type=int, default=None,
                       help=f"seconds per cell (default: ${settings.TIMEOUT_S.name}, else "
                            f"{settings.TIMEOUT_S.default})")
        p.add_argument("--workers", type=int, default=None,
                       help="grading processes (default: one per core with a gradebook server, else 1)")
        p.add_argument("--db-url", default=None, help=f"the gradebook's SQLAlchemy URL (default: "
                       f"${settings.DB_URL.name}, else SQLite in the course folder; parallel workers need "
                       f"postgresql://)")
    e = sub.add_parser("extend", help="give a student more days for an assignment (extensions.csv; the "
                                      "late-penalty policy counts from the due date plus these days)")
    e.add_argument("student")
    e.add_argument("assignment", choices=course.ASSIGNMENTS, metavar="ASSIGNMENT")
    e.add_argument("days", type=float, help="days added to the due date (0 removes the extension)")
    e.set_defaults(run=_extend)
    m = sub.add_parser("lms", help="export the gradebook's scores (late penalties taken) for the LMS: "
                                   "canvas_grades.csv (Canvas's gradebook import) and lms_grades.csv")
    m.add_argument("--roster", type=Path, default=None, help="a Canvas gradebook export: its student columns "
                   "and assignment headers are reused")
    m.add_argument("--db-url", default=None, help="the gradebook's SQLAlchemy URL (default as for grade)")
    m.set_defaults(run=_lms)
    for p in (e, m):
        p.add_argument("--course", type=Path, default=course.ROOT, help="the course folder (default: the "
                       "repository)")
    r = sub.add_parser("rubric", help="print an assignment's written questions, each with its model "
                                      "answer and rubric (from source/), for the people who grade them")
    r.add_argument("assignment", choices=course.ASSIGNMENTS, metavar="ASSIGNMENT")
    r.set_defaults(run=_rubric)
    s = sub.add_parser("settings", help="print the environment variables of grading with their defaults")
    s.add_argument("--readme", action="store_true", help="write the table into README.md instead")
    s.set_defaults(run=_settings)
    return top


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
