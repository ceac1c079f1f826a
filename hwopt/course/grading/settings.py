"""Every environment variable of grading, each declared once with its default, unit and meaning.

The modules that read a setting take its name from here (`settings.TIMEOUT_S.name`), and the README's table
of them is generated from here (`python -m hwopt.course.grading settings --readme`; a test checks it).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

__all__ = ["Setting", "SETTINGS", "KERNEL_SETTINGS", "PREFIX", "flag", "positive_number",
           "positive_whole_number", "markdown_table", "synced_readme"]

PREFIX = "HWOPT_GRADER_"  # every setting's name starts with it


@dataclass(frozen=True)
class Setting:
    """One environment variable of grading: its name, its default (as text; '' for none), unit and meaning."""

    name: str
    default: str
    unit: str
    help: str
    kernel: bool = False  # read inside each grading kernel (the sandbox passes it in); else by the grader

    def text(self, environ=os.environ) -> str:
        """The setting's value as set (surrounding spaces removed), else its default."""
        return environ.get(self.name, "").strip() or self.default


SECRET = Setting(
    "HWOPT_GRADER_SECRET", "", "text",
    "the instructor secret that seeds every student's hidden cases; unset: read from the secret file")
SECRET_FILE = Setting(
    "HWOPT_GRADER_SECRET_FILE", "~/.config/hwopt/grader-secret", "path",
    "the file holding the instructor secret (`python -m hwopt.course.grading secret` makes it)")
TIMEOUT_S = Setting(
    "HWOPT_GRADER_TIMEOUT_S", "60", "seconds",
    "how long one cell may run before it is interrupted (a cell that ignores the interrupt: its kernel "
    "restarted)")
MEMORY_GB = Setting(
    "HWOPT_GRADER_MEMORY_GB", "4", "GiB", "address space of each grading kernel process", kernel=True)
CPU_S = Setting(
    "HWOPT_GRADER_CPU_S", "600", "CPU seconds", "CPU time of each grading kernel process", kernel=True)
MAX_PROCESSES = Setting(
    "HWOPT_GRADER_MAX_PROCESSES", "256", "processes",
    "processes and threads of a grading kernel's user (a fork bomb stops there)", kernel=True)
THREADS = Setting(
    "HWOPT_GRADER_THREADS", "1", "threads",
    "threads of torch, numpy and MKL in each grading kernel, however the class is graded", kernel=True)
NOTEBOOK_TIMEOUT_S = Setting(
    "HWOPT_GRADER_NOTEBOOK_TIMEOUT_S", "300", "seconds",
    "how long one notebook may take in all (cells, restarts and re-runs): the cells not reached by then are "
    "not run, their parts score 0 and the report says so")
SCRATCH_MB = Setting(
    "HWOPT_GRADER_SCRATCH_MB", "256", "MiB",
    "writable space of each grading kernel, in memory: its folder's private copy and /tmp together (also the "
    "largest file it may write)", kernel=True)
UNSANDBOXED = Setting(
    "HWOPT_GRADER_UNSANDBOXED", "0", "flag (1, true, yes)",
    "grade without the sandbox where none can start (student code then runs with your rights); the report "
    "flags every notebook graded so")
DB_URL = Setting(
    "HWOPT_GRADER_DB_URL", "", "SQLAlchemy URL",
    "the gradebook; unset: SQLite in the course folder's gradebook.db (one writer at a time: parallel "
    "grading needs a server, postgresql://user@host/db)")

SETTINGS = (SECRET, SECRET_FILE, TIMEOUT_S, NOTEBOOK_TIMEOUT_S, MEMORY_GB, CPU_S, MAX_PROCESSES, SCRATCH_MB,
            THREADS, UNSANDBOXED, DB_URL)
KERNEL_SETTINGS = tuple(s for s in SETTINGS if s.kernel)


def flag(setting: Setting, environ=os.environ) -> bool:
    """True when a flag setting is 1, true or yes (any case)."""
    return setting.text(environ).lower() in ("1", "true", "yes")


def positive_number(setting: Setting, environ=os.environ) -> float:
    """A setting that must be a positive finite number (ValueError naming it otherwise)."""
    text = setting.text(environ)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{setting.name} must be a positive finite number; got {text!r}")
    return value


def positive_whole_number(setting: Setting, what: str, environ=os.environ) -> int:
    """A setting that must be a positive whole number of `what` (ValueError naming it otherwise)."""
    text = setting.text(environ)
    if not (text.isascii() and text.isdigit() and int(text) > 0):  # not "²", which int() refuses
        raise ValueError(f"{setting.name} must be a positive whole number of {what}; got {text!r}")
    return int(text)


README_START, README_END = "<!-- grader-settings:start -->", "<!-- grader-settings:end -->"


def markdown_table() -> str:
    """The settings as the README's table: variable, default, unit, who reads it, meaning."""
    lines = ["| variable | default | unit | read by | meaning |", "| --- | --- | --- | --- | --- |"]
    for s in SETTINGS:
        lines.append(f"| `{s.name}` | {f'`{s.default}`' if s.default else 'unset'} | {s.unit} | "
                     f"{'each grading kernel' if s.kernel else 'the grader'} | {s.help} |")
    return "\n".join(lines)


def synced_readme(text: str) -> str:
    """README text with the part between the settings markers replaced by markdown_table()."""
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"README: expected the markers {README_START} and {README_END}, in that order")
    return text[: start + len(README_START)] + "\n" + markdown_table() + "\n" + text[end:]

