"""The LMS on both ends: submission times from its download, and grades in files its gradebook imports.

In: LmsSubmissionCollector (zip_collect's collector, nbgrader_config.py) keeps what the LMS's file names say
about time: a `timestamp` group of FileNameCollectorPlugin.named_regexp (Blackboard's
`_attempt_2027-02-01-17-05-00_`, read with `timestamp_format` in `timezone`) becomes nbgrader's timestamp.txt;
a late marker with no time (Canvas's `_LATE_`) is recorded in downloaded/<assignment>/late_markers.csv for the
late-penalty policy (grading.deadlines).

Out: one column per assignment, one row per student of the gradebook, each score with its late penalty taken
(nbgrader's late_submission_penalty) and 0 where nothing was submitted:
- canvas_grades.csv, Canvas's gradebook import format (its Gradebook > Import, documented in Canvas's
  Instructor Guide "How do I import grades in the Gradebook?"; the columns of its own gradebook export):
  Student, ID, SIS User ID, SIS Login ID, Section, then the assignments, and a "Points Possible" row. Canvas
  matches each row by ID (its user id), else SIS User ID or SIS Login ID. These identity columns come from a
  Canvas gradebook export given as roster (matched on ID = the student's lms_user_id, else SIS Login ID or SIS
  User ID = the nbgrader id), else from the gradebook (Student "Last, First", ID = lms_user_id, SIS Login ID =
  the nbgrader id). An assignment column is headed as in the roster when the roster has one of that name
  ("name (12345)" carries Canvas's assignment id); otherwise by the assignment's name, which Canvas imports as
  a new assignment.
- lms_grades.csv, for any LMS: lms_id (the student's lms_user_id, else the nbgrader id), student_id,
  last_name, first_name, email, then the assignments.
"""

from __future__ import annotations

import csv
import os
import re
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from nbgrader.api import Gradebook, MissingEntry
from traitlets import Unicode

from hwopt.course.grading import deadlines
from hwopt.course.grading.plugins import LmsFileNameCollector

__all__ = ["LmsSubmissionCollector", "CANVAS_IDENTITY", "CANVAS_FILE", "GENERIC_FILE", "grade_table",
           "write_canvas", "write_generic", "read_roster", "export"]

CANVAS_IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
POINTS_POSSIBLE = "    Points Possible"  # the first cell of the row, as Canvas's own export writes it
CANVAS_FILE, GENERIC_FILE = "canvas_grades.csv", "lms_grades.csv"


class LmsSubmissionCollector(LmsFileNameCollector):
    """LmsFileNameCollector, keeping the submission times and late markers the LMS's file names carry."""

    late_regexp = Unicode(r"_LATE_", help="A file name matching this was marked late by the LMS (Canvas: "
                          "_LATE_); empty: no marker").tag(config=True)
    timestamp_format = Unicode("", help="strptime format of named_regexp's timestamp group (Blackboard: "
                               "%Y-%m-%d-%H-%M-%S); empty: ISO 8601 / what dateutil reads").tag(config=True)
    timezone = Unicode("UTC", help="Time zone of the LMS's timestamps that name none (an IANA name)").tag(
        config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # zip_collect makes one collector per run: the run's download alone says who was late
        if getattr(self.parent, "coursedir", None) is not None:
            self._markers().unlink(missing_ok=True)

    def _markers(self) -> Path:
        return Path(self.parent._format_collect_path(deadlines.LATE_MARKERS))

    def collect(self, submitted_file: str):
        info = super().collect(submitted_file)
        if not info:
            return info
        if info.get("timestamp") and self.timestamp_format:
            try:
                zone = ZoneInfo(self.timezone)
                moment = datetime.strptime(info["timestamp"], self.timestamp_format).replace(tzinfo=zone)
            except (ValueError, ZoneInfoNotFoundError) as err:
                raise ValueError(f"{submitted_file}: timestamp {info['timestamp']!r} does not match "
                                 f"timestamp_format {self.timestamp_format!r} in {self.timezone!r} ({err})"
                                 ) from None
            info = {**info, "timestamp": moment.isoformat(" ")}
        if self.late_regexp and re.search(self.late_regexp, os.path.basename(submitted_file)):
            self._record_late(info["student_id"], os.path.basename(submitted_file))
        return info

    def _record_late(self, student_id: str, name: str) -> None:
        """Add a row to this zip_collect run's late_markers.csv."""
        path = self._markers()
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        with path.open("a", newline="") as f:
            writer = csv.writer(f)
            if new:
                writer.writerow(["student_id", "file"])
            writer.writerow([student_id, name])


def grade_table(db_url: str, course_id: str, assignments=None) -> tuple[list[dict], list[tuple[str, float]],
                                                                        dict[tuple[str, str], float]]:
    """From the gradebook: its students (id, first_name, last_name, email, lms_user_id), its assignments
    (name, max score), those named in `assignments` first and in that order, and each (student, assignment)'s
    score with the late penalty taken (0 when not submitted)."""
    with Gradebook(db_url, course_id) as gb:
        students = [s.to_dict() for s in sorted(gb.students, key=lambda s: s.id)]
        known = {a.name: float(a.max_score) for a in gb.assignments}
        first = [a for a in (assignments or ()) if a in known]
        names = first + [a for a in known if a not in first]
        scores = {}
        for name in names:
            for student in students:
                try:
                    sub = gb.find_submission(name, student["id"])
                except MissingEntry:
                    scores[student["id"], name] = 0.0
                else:
                    penalty = float(sub.late_submission_penalty or 0.0)
                    scores[student["id"], name] = round(max(0.0, float(sub.score) - penalty), 2)
    return students, [(name, known[name]) for name in names], scores


def read_roster(path: Path) -> list[dict[str, str]]:
    """A Canvas gradebook export (its Points Possible and other non-student rows left out)."""
    with Path(path).open(newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    if not rows or any(column not in rows[0] for column in CANVAS_IDENTITY):
        raise ValueError(f"roster must be a Canvas gradebook export with the columns "
                         f"{', '.join(CANVAS_IDENTITY)}; got {path}")
    return [row for row in rows if row["ID"].strip() and row["Student"].strip() != POINTS_POSSIBLE.strip()]


def _roster_row(student: dict, roster: list[dict]) -> dict | None:
    for row in roster:
        if (student["lms_user_id"] and row["ID"].strip() == student["lms_user_id"]) or student["id"] in (
                row["SIS Login ID"].strip(), row["SIS User ID"].strip()):
            return row
    return None


def _number(value: float) -> str:
    return f"{value:g}"


def write_canvas(path: Path, table, roster: list[dict] | None = None) -> Path:
    """canvas_grades.csv: Canvas's gradebook import (the module's docstring); roster: read_roster's rows."""
    students, assignments, scores = table
    headers = {name: name for name, _ in assignments}
    for column in (roster[0] if roster else {}):
        base = re.sub(r"\s*\(\d+\)$", "", column)
        if base in headers:
            headers[base] = column  # Canvas's own header, with its assignment id
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([*CANVAS_IDENTITY, *headers.values()])
        writer.writerow([POINTS_POSSIBLE, "", "", "", "", *(_number(points) for _, points in assignments)])
        for student in students:
            known = _roster_row(student, roster or [])
            name = ", ".join(p for p in (student["last_name"], student["first_name"]) if p) or student["id"]
            identity = ([known[c] for c in CANVAS_IDENTITY] if known else
                        [name, student["lms_user_id"] or "", "", student["id"], ""])
            writer.writerow([*identity, *(_number(scores[student["id"], a]) for a, _ in assignments)])
    return Path(path)


def write_generic(path: Path, table) -> Path:
    """lms_grades.csv: lms_id, student_id, last_name, first_name, email, one column per assignment."""
    students, assignments, scores = table
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["lms_id", "student_id", "last_name", "first_name", "email",
                         *(a for a, _ in assignments)])
        for s in students:
            identity = [s["lms_user_id"] or s["id"], s["id"], s["last_name"] or "", s["first_name"] or "",
                        s["email"] or ""]
            writer.writerow([*identity, *(_number(scores[s["id"], a]) for a, _ in assignments)])
    return Path(path)


def export(api, folder: Path, roster: Path | None = None, assignments=None) -> tuple[Path, Path]:
    """Both exports of the course folder's gradebook into the folder; roster: a Canvas gradebook export."""
    table = grade_table(api.coursedir.db_url, api.coursedir.course_id, assignments)
    rows = read_roster(roster) if roster else None
    return (write_canvas(Path(folder) / CANVAS_FILE, table, rows),
            write_generic(Path(folder) / GENERIC_FILE, table))
