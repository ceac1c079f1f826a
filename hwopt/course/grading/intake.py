"""The intake of submissions: only regular files are graded, and nothing that copies a submission follows a
link.

A submission folder (COURSE/submitted/<student>/<assignment>) is graded only when it, the folders above it
in the course folder and everything in it are folders or regular files, as os.lstat sees them: a symbolic
link (to the instructor's notebook, the quiz's answer key, the secret, the gradebook, /proc/self/environ...),
a FIFO, a socket or a device is refused for that student, with the reason; so is a set-user-ID or
set-group-ID file (an archive can carry those bits). nbgrader copies a submission with shutil, which follows
links, so:
- `python -m hwopt.course.grading grade` refuses such a submission before nbgrader sees it (refusal);
- nbgrader's own `autograde` stops at it before copying anything (refuse_unsafe, its pre-convert hook);
- the exchange's collect copies without following links (copy_tree): a link in the inbound folder arrives as a
  link, refused at grading, never as a copy of what it points to;
- a feedback folder keeps only the pages generated for it (feedback_pages_only, a post-convert hook).
Notebooks are read with read_regular: without following a link, a regular file or an error.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

SHOWN_PROBLEMS = 3  # a refusal names this many entries, then counts the rest
# besides the pages: nbgrader's release_feedback reads both (and names the feedback after the secret)
KEPT_IN_FEEDBACK = ("timestamp.txt", "submission_secret.txt")


class UnsafeSubmission(BaseException):
    """A submission holds something that is not a regular file: nbgrader's autograde must stop before it
    copies.

    A BaseException because nbgrader logs and ignores the Exceptions of its hooks.
    """


def kind(mode: int) -> str | None:
    """What is wrong with an entry of this lstat mode (a phrase), or None for a folder or a plain regular
    file."""
    if stat.S_ISDIR(mode):
        return None
    if stat.S_ISREG(mode):
        return "a set-user-ID or set-group-ID file" if mode & (stat.S_ISUID | stat.S_ISGID) else None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _described(path: Path, shown: str) -> str:
    what = kind(os.lstat(path).st_mode) or "a file where a folder belongs"
    if what == "a symbolic link":
        what += f" (to {ascii(os.readlink(path))[:100]})"  # ascii: a target's newlines never reach a log line
    return f"{shown}: {what}"


def problems(folder: str | Path, root: str | Path | None = None) -> list[str]:
    """Each entry of folder (and each folder from root down to it) that is not a folder or a regular file,
    as 'relative/path: what it is'; [] when the folder may be graded (or does not exist)."""
    folder = Path(folder)
    root = Path(root) if root is not None else folder.parent
    for depth in range(1, len(folder.relative_to(root).parts) + 1):  # the folder itself and those above it
        step = root.joinpath(*folder.relative_to(root).parts[:depth])
        if not os.path.lexists(step):
            return []
        if not stat.S_ISDIR(os.lstat(step).st_mode):
            return [_described(step, str(step.relative_to(root)))]
    found = []

    def walk(here: Path):
        with os.scandir(here) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                path = Path(entry.path)
                if kind(entry.stat(follow_symlinks=False).st_mode):
                    found.append(_described(path, str(path.relative_to(folder))))
                elif entry.is_dir(follow_symlinks=False):
                    walk(path)

    walk(folder)
    return found


def refusal(folder: str | Path, root: str | Path | None = None) -> str | None:
    """Why a submission folder is refused ('only regular files are graded: ...'), or None if it may be
    graded."""
    found = problems(folder, root)
    if not found:
        return None
    more = f"; and {len(found) - SHOWN_PROBLEMS} more" if len(found) > SHOWN_PROBLEMS else ""
    return f"only regular files are graded: {'; '.join(found[:SHOWN_PROBLEMS])}{more}"


def read_regular(path: str | Path) -> bytes:
    """The bytes of a regular file, opened without following a link (OSError for a link, FIFO, device...)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return f.read()


def copy_tree(src: str | Path, dest: str | Path, ignore: Callable | None = None, log=None,
              group_shared: bool = False) -> None:
    """Copy a folder without following links: folders and regular files copied (modes without set-ID bits),
    symbolic links made again as links, FIFOs as FIFOs; sockets and devices are left out (with a log line).

    ignore: shutil.copytree's ignore function (folder, names) -> names left out; group_shared: folders
    ug+rwx and setgid, files ug+rw (nbgrader's groupshared course folders).
    """
    src, dest = Path(src), Path(dest)
    mode = os.lstat(src).st_mode
    if stat.S_ISLNK(mode):
        os.symlink(os.readlink(src), dest)
    elif stat.S_ISFIFO(mode):
        os.mkfifo(dest)
    elif stat.S_ISREG(mode):
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     (mode & 0o777) | (0o660 if group_shared else 0))
        with os.fdopen(fd, "wb") as out:
            out.write(read_regular(src))
    elif stat.S_ISDIR(mode):
        os.mkdir(dest)
        os.chmod(dest, (mode & 0o777) | (0o2770 if group_shared else 0))
        names = sorted(os.listdir(src))
        left_out = set(ignore(str(src), names)) if ignore else set()
        for name in names:
            if name not in left_out:
                copy_tree(src / name, dest / name, ignore, log, group_shared)
    elif log is not None:
        log.error("Not copied: %s is %s", ascii(str(src)), kind(mode))


def refuse_unsafe(assignment=None, student=None, notebooks=()) -> None:
    """nbgrader's pre-convert hook of autograde: stop (UnsafeSubmission) before a submission holding anything
    but folders and regular files is copied; notebooks are its notebooks' paths."""
    folders = {Path(notebook).parent for notebook in notebooks}
    for folder in sorted(folders):
        why = refusal(folder, folder.parents[2])  # COURSE/submitted/<student>/<assignment>
        if why:
            raise UnsafeSubmission(f"{folder}: {why}. Not graded: `python -m hwopt.course.grading grade` "
                                   "records it with this reason and grades the other students.")


def feedback_pages_only(assignment=None, student=None, notebooks=(), feedback_directory: str = "feedback"
                        ) -> None:
    """nbgrader's post-convert hook of generate_feedback: the feedback folder of each notebook
    (autograded/<student>/<assignment>/<notebook>.ipynb -> feedback/<student>/<assignment>/) keeps only the
    generated pages."""
    for notebook in notebooks:
        graded = Path(notebook)
        folder = graded.parents[3] / feedback_directory / graded.parent.parent.name / graded.parent.name
        if not folder.is_dir():
            continue
        pages = {Path(n).with_suffix(".html").name for n in notebooks} | set(KEPT_IN_FEEDBACK)
        for entry in os.scandir(folder):
            if entry.name in pages and entry.is_file(follow_symlinks=False):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)  # it never follows a link
            else:
                os.unlink(entry.path)
