"""Deadlines: due dates, submission times, extensions, and the late-penalty policy autograde applies.

- The due date of an assignment is the gradebook's (`nbgrader db assignment add NAME --duedate="2027-02-01
  17:00 UTC"`, or the formgrader's Manage Assignments page).
- A submission's time is nbgrader's timestamp.txt: written by `collect` from the exchange, and by
  `zip_collect` when the LMS's file names carry a time. An LMS that only marks a submission late (Canvas's
  `_LATE_`) leaves a record in downloaded/<assignment>/late_markers.csv (grading.lms), read here.
- Extensions: extensions.csv in the course folder (student_id,assignment,days), written by
  `python -m hwopt.course.grading extend STUDENT ASSIGNMENT DAYS`; autograde copies each into the gradebook's
  submission (nbgrader's own extension field), so the formgrader shows the same due date.
- The policy (nbgrader_config.py, `LatePenalty`): a percentage of the score per started day late, and zero
  after a number of days; both off is no penalty. A submission the LMS marked late with no time is charged as
  one started day late (the least a late submission is), unless the student has an extension (then nothing:
  it may have been inside it).

AssignDeadlinePenalties (autograde) stores each penalty in the gradebook, where nbgrader's exports, the
formgrader and the feedback page read it; ExplainLateness (generate_feedback) puts the reason at the top of
the feedback; `reported` gives grades_report.csv its columns.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from nbformat.v4 import new_markdown_cell
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.coursedir import CourseDirectory
from nbgrader.plugins import LateSubmissionPlugin
from nbgrader.preprocessors import AssignLatePenalties, NbGraderPreprocessor
from traitlets import Float

__all__ = ["Policy", "Lateness", "assess", "LatePenalty", "EXTENSIONS", "LATE_MARKERS", "read_extensions",
           "write_extension", "late_marked", "AssignDeadlinePenalties", "ExplainLateness", "reported"]

DAY_S = 86_400
EXTENSIONS = "extensions.csv"  # in the course folder: student_id,assignment,days
EXTENSION_COLUMNS = ("student_id", "assignment", "days")
LATE_MARKERS = "late_markers.csv"  # in downloaded/<assignment>/: student_id,file (grading.lms writes it)
TIME_FORMAT = "%Y-%m-%d %H:%M UTC"


@dataclass(frozen=True)
class Policy:
    """A late-penalty policy: percent_per_day of the score per started day late (0: none), and zero points
    when more than zero_after_days late (None: never)."""

    percent_per_day: float = 0.0
    zero_after_days: float | None = None

    def __post_init__(self):
        pct = self.percent_per_day
        if isinstance(pct, bool) or not isinstance(pct, int | float) or not 0 <= pct <= 100:
            raise ValueError(f"percent_per_day must be a number from 0 to 100; got {pct!r}")
        days = self.zero_after_days
        if days is not None and (isinstance(days, bool) or not isinstance(days, int | float)
                                 or not math.isfinite(days) or days < 0):
            raise ValueError(f"zero_after_days must be None or a finite number of days >= 0; got {days!r}")

    def describe(self) -> str:
        """The policy in words."""
        pct = self.percent_per_day
        parts = [f"{pct:g}% of the score per started day late"] if pct else []
        if self.zero_after_days is not None:
            parts.append(f"0 points when more than {self.zero_after_days:g} days late")
        return "; ".join(parts) or "no late penalty"

    def fraction(self, days_started: int, seconds_late: float) -> float:
        """The share of the score taken from a submission seconds_late late (days_started started days)."""
        if self.zero_after_days is not None and seconds_late > self.zero_after_days * DAY_S:
            return 1.0
        return min(1.0, self.percent_per_day * days_started / 100)


@dataclass(frozen=True)
class Lateness:
    """How late a submission was and what share of its score the policy takes; why, in words."""

    late: bool
    fraction: float
    why: str


def _when(moment: datetime) -> str:
    return moment.strftime(TIME_FORMAT)


def _duration(seconds: float) -> str:
    days, rest = divmod(int(seconds), DAY_S)
    hours, rest = divmod(rest, 3600)
    text = " ".join(f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (rest // 60, "min")) if n)
    return text or "less than a minute"


def assess(policy: Policy, due: datetime | None, submitted: datetime | None,
           extension: timedelta | None = None, lms_late: bool = False) -> Lateness:
    """The lateness of a submission at `submitted` (UTC, None: unknown) against `due` (UTC) plus `extension`;
    lms_late: the LMS marked it late without a time."""
    if due is None:
        return Lateness(False, 0.0, "this assignment has no due date")
    deadline = due + (extension or timedelta(0))
    granted = f" (your extension of {_duration(extension.total_seconds())} included)" if extension else ""
    if submitted is None:
        if not lms_late:
            return Lateness(False, 0.0, "no submission time was recorded: no late penalty")
        if extension:
            return Lateness(False, 0.0, f"the LMS marked it late but recorded no time, and you have an "
                                        f"extension to {_when(deadline)}: no late penalty")
        share = policy.fraction(1, 1)
        return Lateness(True, share, f"the LMS marked it late after the due date {_when(deadline)} but "
                                     f"recorded no time: charged as 1 started day late ({policy.describe()})")
    seconds = (submitted - deadline).total_seconds()
    if seconds <= 0:
        return Lateness(False, 0.0, f"submitted {_when(submitted)}, before the due date {_when(deadline)}"
                                    f"{granted}")
    days = math.ceil(seconds / DAY_S)
    return Lateness(True, policy.fraction(days, seconds),
                    f"submitted {_when(submitted)}, {_duration(seconds)} after the due date {_when(deadline)}"
                    f"{granted}: {days} started day{'s' * (days > 1)} late ({policy.describe()})")


class LatePenalty(LateSubmissionPlugin):
    """The course's late-penalty policy (nbgrader_config.py sets it): a percentage of the score per started
    day late, and zero after a number of days."""

    percent_per_day = Float(0.0, help="Percent of the score taken per started day late (0: none)").tag(
        config=True)
    zero_after_days = Float(None, allow_none=True, help="Zero points when more than this many days late "
                            "(None: never)").tag(config=True)

    def policy(self) -> Policy:
        return Policy(self.percent_per_day, self.zero_after_days)

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float) -> float:
        """nbgrader's plug-in interface: the points taken from score, total_seconds_late late."""
        late = total_seconds_late > 0
        days_started = math.ceil(total_seconds_late / DAY_S)
        return score * self.policy().fraction(days_started, total_seconds_late) * late


# ---- extensions and late markers: files in the course folder --------------------------------------------

def read_extensions(path: Path) -> dict[tuple[str, str], timedelta]:
    """extensions.csv: (student_id, assignment) -> extension; no file: none (ValueError naming a bad row)."""
    path = Path(path)
    if not path.exists():
        return {}
    found = {}
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != EXTENSION_COLUMNS:
            raise ValueError(f"{path}: expected the columns {','.join(EXTENSION_COLUMNS)}; "
                             f"got {reader.fieldnames}")
        for line, row in enumerate(reader, start=2):
            try:
                days = float(row["days"])
            except (TypeError, ValueError):
                days = math.nan
            if not (math.isfinite(days) and days >= 0 and row["student_id"] and row["assignment"]):
                raise ValueError(f"{path} line {line}: expected a student id, an assignment and a number of "
                                 f"days >= 0; got {row}")
            found[row["student_id"], row["assignment"]] = timedelta(days=days)
    return found


def write_extension(path: Path, student_id: str, assignment: str, days: float) -> Path:
    """Give student_id `days` more days for assignment in extensions.csv (0 removes the extension)."""
    if isinstance(days, bool) or not isinstance(days, int | float) or not math.isfinite(days) or days < 0:
        raise ValueError(f"days must be a finite number of days >= 0; got {days!r}")
    for name, value in (("student_id", student_id), ("assignment", assignment)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{name} must be a non-empty string; got {value!r}")
    rows = {key: d.total_seconds() / DAY_S for key, d in read_extensions(path).items()}
    rows.pop((student_id, assignment), None)
    if days > 0:
        rows[student_id, assignment] = days
    with Path(path).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(EXTENSION_COLUMNS)
        writer.writerows([*key, f"{value:g}"] for key, value in sorted(rows.items()))
    return Path(path)


def late_marked(root: Path, assignment: str) -> set[str]:
    """The students whose LMS download marked assignment late (downloaded/<assignment>/late_markers.csv)."""
    path = Path(root) / "downloaded" / assignment / LATE_MARKERS
    if not path.exists():
        return set()
    with path.open(newline="") as f:
        return {row["student_id"] for row in csv.DictReader(f)}


def _lateness(config, gb: Gradebook, assignment: str, student: str) -> tuple[Lateness, timedelta | None]:
    """The lateness of a submission in the gradebook under the configured policy, and its extension."""
    root = Path(CourseDirectory(config=config).root)
    extension = read_extensions(root / EXTENSIONS).get((student, assignment))
    submission = gb.find_submission(assignment, student)
    policy = LatePenalty(config=config).policy()
    return assess(policy, submission.assignment.duedate, submission.timestamp, extension,
                  student in late_marked(root, assignment)), extension


class AssignDeadlinePenalties(AssignLatePenalties):
    """autograde: each notebook's late penalty under the policy, the student's extension recorded with it."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            lateness, extension = _lateness(self.config, gb, info["assignment"], info["student"])
            submission = gb.find_submission(info["assignment"], info["student"])
            submission.extension = extension
            notebook = gb.find_submission_notebook(info["notebook"], info["assignment"], info["student"])
            penalty = round(notebook.score * lateness.fraction, 2)
            notebook.late_submission_penalty = (self._check_late_penalty(notebook, penalty) if penalty
                                                else None)
            if lateness.late:
                self.log.warning("Late submission: %s", lateness.why)
            gb.db.commit()
        return nb, resources


class ExplainLateness(NbGraderPreprocessor):
    """generate_feedback: a first cell that says when the notebook was submitted against its due date, and
    what was taken for lateness and why."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            try:
                lateness, _ = _lateness(self.config, gb, info["assignment"], info["student"])
                notebook = gb.find_submission_notebook(info["notebook"], info["assignment"], info["student"])
            except MissingEntry:
                return nb, resources
            penalty = notebook.late_submission_penalty or 0.0
        taken = (f" **Late penalty: {penalty:g} points** ({lateness.fraction:.0%} of your score)." if penalty
                 else " No late penalty.")
        nb.cells.insert(0, new_markdown_cell(f"**Submission time.** {lateness.why[0].upper()}"
                                             f"{lateness.why[1:]}.{taken}"))
        return nb, resources


def reported(api, assignment: str, student: str) -> tuple[float, str, str, str | None]:
    """For grades_report.csv: (late penalty in points, submitted at, due at with the extension, a note when
    points were taken), from the gradebook after autograde."""
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        submission = gb.find_submission(assignment, student)
        penalty = float(submission.late_submission_penalty or 0.0)
        lateness, _ = _lateness(api.config, gb, assignment, student)
        submitted = _when(submission.timestamp) if submission.timestamp else ""
        due = _when(submission.duedate) if submission.duedate else ""
    return penalty, submitted, due, (f"late penalty {penalty:g}: {lateness.why}" if penalty else None)
