"""nbgrader configuration of the course: run every nbgrader command from the repository root.

Folders: source/ (instructor notebooks: solutions + the checks in hidden regions), release/ (generated,
committed), submitted/, autograded/, feedback/ and gradebook.db (working files, git-ignored). Grading runs
each notebook in a sandboxed, limited kernel (autograder/kernels/hwopt-grader, hwopt.course.grading.sandbox)
with a per-cell timeout and a wall-clock cap per notebook; the points of every grade cell are decided by the
judge in the grading process, on cases drawn from the instructor secret and the student id
(hwopt.course.grading.judge). Only folders and regular files are graded (a submission holding a link, FIFO or
device is refused before anything copies it: hwopt.course.grading.intake). Cells a student deleted or edited
are restored; feedback has no hidden tests, no student HTML or JavaScript, no output produced after hidden
cases reached the kernel, and no file but its pages. The environment variables of grading (the
secret, the cell timeout, the kernels' limits, the gradebook's URL...) are declared, with their defaults, in
hwopt.course.grading.settings (`python -m hwopt.course.grading settings` lists them).
"""

import functools
import os

from hwopt.course.grading import intake, settings

HERE = os.path.dirname(os.path.abspath(__file__))
# The grading kernelspec lives in the repository: make Jupyter find it (before any kernel is looked up).
os.environ["JUPYTER_PATH"] = os.pathsep.join(
    p for p in (os.path.join(HERE, "autograder"), os.environ.get("JUPYTER_PATH", "")) if p)

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "hwopt"
c.CourseDirectory.root = HERE
c.CourseDirectory.db_url = settings.DB_URL.text() or "sqlite:///" + os.path.join(HERE, "gradebook.db")
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
FEEDBACK = "feedback"
c.CourseDirectory.feedback_directory = FEEDBACK
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".DS_Store"]

# Release: students get no hidden tests and no solutions; checksums let autograde detect edited locked cells.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Autograde: a sandboxed, limited kernel with a timeout per cell; the judge scores every grade cell.
c.Execute.kernel_name = "hwopt-grader"
c.Execute.timeout = settings.positive_whole_number(settings.TIMEOUT_S, "seconds")
c.Execute.interrupt_on_timeout = True
c.Execute.startup_timeout = 120
# The whole notebook (kernel starts, cells, restarts, re-runs) within the NOTEBOOK_TIMEOUT_S setting: the
# cells not reached by then are not run, their parts score 0, and grades_report.csv says so.
c.JudgedExecute.notebook_timeout = settings.positive_whole_number(settings.NOTEBOOK_TIMEOUT_S, "seconds")
# Once the last cell has run, the kernel is killed, not asked to stop: its sandbox and copy are thrown away
# anyway, and a graceful stop waits for the kernel (and a student's atexit hooks) with no core working.
c.Execute.shutdown_kernel = "immediate"
c.Autograde.pre_convert_hook = intake.refuse_unsafe  # a link, FIFO or device: stop before nbgrader copies it
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "hwopt.course.grading.plugins.RestoreCellMetadata",  # metadata lost (copied cells, Colab) or edited flags
    "nbgrader.preprocessors.OverwriteCells",  # edited locked cells get their source back (checksums)
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.OverwriteCells.add_missing_cells = True  # deleted test cells come back
c.Autograde.autograde_preprocessors = [
    "hwopt.course.grading.plugins.JudgedExecute",  # sandboxed kernel; points from the judge; output capped
    "hwopt.course.grading.outputs.SanitizeStudentHTML",  # no student script in the notebook formgrader shows
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "hwopt.course.grading.deadlines.AssignDeadlinePenalties",  # the policy below, extensions.csv included
    "nbgrader.preprocessors.CheckCellMetadata",
]
# Late penalties (hwopt.course.grading.deadlines): a submission's time comes from the exchange or the LMS's
# file names, its due date from the gradebook (`nbgrader db assignment add NAME --duedate="2027-02-01 17:00
# UTC"` or the formgrader), plus the student's extension (extensions.csv: `python -m hwopt.course.grading
# extend STUDENT ASSIGNMENT DAYS`). Policy: percent_per_day of the score per started day late (0: none), and
# 0 points when more than zero_after_days late (None: never). No penalty at all: 0 and None.
c.AssignLatePenalties.plugin_class = "hwopt.course.grading.deadlines.LatePenalty"
c.LatePenalty.percent_per_day = 10
c.LatePenalty.zero_after_days = 7
# Feedback: no hidden regions (grade cells show the judge's verdict, which names no hidden value), no output
# of the student's from after hidden cases reached the kernel, no student script; only the pages go back.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "hwopt.course.grading.deadlines.ExplainLateness",  # when it was submitted, and why points were taken
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "nbgrader.preprocessors.ClearHiddenTests",
    "hwopt.course.grading.outputs.WithholdOutputAfterCases",
    "hwopt.course.grading.outputs.SanitizeStudentHTML",
]
c.GenerateFeedback.post_convert_hook = functools.partial(intake.feedback_pages_only,
                                                         feedback_directory=FEEDBACK)
c.GenerateFeedback.exporter_class = "hwopt.course.grading.plugins.FeedbackExporter"  # templates compiled once

# zip_collect: an LMS zip in downloaded/<assignment>/archive/. File names like Canvas's
# "<student>_<numbers>_<file>.ipynb" or "<student>_LATE_<numbers>_<file>.ipynb"; the file part may be
# "Copy of batching (1).ipynb" (Colab downloads): LmsFileNameCollector maps it to the released notebook.
# LmsSubmissionCollector records Canvas's LATE marker (and a `timestamp` group's time, with
# LmsSubmissionCollector.timestamp_format and .timezone) for the late-penalty policy.
c.ZipCollectApp.collector_plugin = "hwopt.course.grading.lms.LmsSubmissionCollector"
c.FileNameCollectorPlugin.named_regexp = (
    r".*/(?P<student_id>[A-Za-z0-9.-]+)_(?:LATE_)?(?:\d+_)*(?P<file_id>[^/]+)$")

# The exchange's collect (JupyterHub): only what each student made, when they made it (a classmate's folder
# in their name, a time they wrote themselves and what a link points to are left out; grading.exchange).
c.ExchangeFactory.collect = "hwopt.course.grading.exchange.ExchangeCollect"
