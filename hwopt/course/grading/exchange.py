"""nbgrader's exchange, less what a student can forge in it: whose submission it is, when it was made, and
what its files point to.

A student writes their submission into the exchange's inbound folder themselves, so the folder's name
(student+assignment+time), its timestamp.txt and its entries are theirs to choose. nbgrader's collect, run
by the instructor, only warns when a folder is owned by someone other than the student it names, believes the
time it claims, and copies what links point to with the instructor's rights (a link to the instructor's
grader secret arrives in the student's submission, where their notebook reads it while it is graded and
prints it into the feedback). ExchangeCollect collects:
- only folders owned by the student they name (a classmate's forgery is left where it is, with a warning),
  where the student is an account of this machine (a hub); on an exchange that one account writes for all
  (one user's folders, tests), ownership cannot tell students apart and is not checked;
- only regular files and folders owned by that student (links, pipes, devices and other accounts' files, hard
  links to them included, are left out, each named in a warning), read without following any link;
- with the time the submission claims, unless its files were changed later than that plus grace_s: then the
  time of the last change, which the kernel keeps (ctime) and no student can set back;
- with a submission_secret.txt (nbgrader's submit writes one; its feedback is named after it): a folder made
  without it gets a new one, since release_feedback stops for the whole class at the first one missing.
The repository's nbgrader_config.py makes it the exchange's collect.
"""

from __future__ import annotations

import math
import os
import pwd
import secrets
import shutil
import stat
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nbgrader.exchange.default.collect import ExchangeCollect as DefaultExchangeCollect
from traitlets import Float

__all__ = ["copy_own_files", "submission_time", "ExchangeCollect"]


def copy_own_files(src: Path, dest: Path, max_bytes: int) -> tuple[datetime, list[str]]:
    """Copy the regular files and folders under src owned by src's owner into dest, following no link; the
    last change (ctime, UTC) of what was copied, and the entries left out. ValueError past max_bytes."""
    owner = os.lstat(src).st_uid
    latest, left_out, total = os.lstat(src).st_ctime, [], 0
    for folder, dirs, files, folder_fd in os.fwalk(src, follow_symlinks=False):
        rel = Path(folder).relative_to(src)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in list(dirs):
            info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == owner:
                latest = max(latest, info.st_ctime)
            else:
                dirs.remove(name)
                left_out.append(str(rel / name))
        for name in files:
            try:  # O_NOFOLLOW: a link swapped in after the listing is refused, not followed
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder_fd)
            except OSError:
                left_out.append(str(rel / name))
                continue
            with os.fdopen(fd, "rb") as source:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode) or info.st_uid != owner:
                    left_out.append(str(rel / name))
                    continue
                total += info.st_size
                if total > max_bytes:
                    raise ValueError(f"{src}: more than {max_bytes} bytes")
                latest = max(latest, info.st_ctime)
                with (dest / rel / name).open("wb") as copy:
                    shutil.copyfileobj(source, copy)
    return datetime.fromtimestamp(latest, UTC).replace(tzinfo=None), sorted(left_out)


def submission_time(claimed: datetime | None, changed: datetime, grace_s: float) -> datetime:
    """The time a submission counts as made (UTC): the claimed one, unless its files changed more than grace_s
    after it (or it claims none): then the last change."""
    if isinstance(grace_s, bool) or not isinstance(grace_s, int | float) or not (math.isfinite(grace_s)
                                                                                 and grace_s >= 0):
        raise ValueError(f"grace_s must be a finite number of seconds >= 0; got {grace_s!r}")
    if claimed is None or changed > claimed + timedelta(seconds=grace_s):
        return changed
    return claimed


class ExchangeCollect(DefaultExchangeCollect):
    """nbgrader's collect, taking from each student only their own folder, files and time (see the module)."""

    grace_s = Float(300.0, help="Seconds by which a submission's files may change after the time it claims "
                    "(the clocks of the student's server and the exchange's file system may differ)").tag(
                        config=True)

    @staticmethod
    def _is_account(username: str) -> bool:
        try:
            pwd.getpwnam(username)
            return True
        except KeyError:
            return False

    def _owned(self, record) -> bool:
        """The folder is the named student's: owned by their account (True where they have none here)."""
        return not self._is_account(record["username"]) or self._owner(record) == record["username"]

    def _owner(self, record) -> str | None:
        try:
            info = os.lstat(os.path.join(self.inbound_path, record["filename"]))
            return pwd.getpwuid(info.st_uid).pw_name if stat.S_ISDIR(info.st_mode) else None
        except (OSError, KeyError):
            return None

    def _sort_by_timestamp(self, records):
        # init_src takes the first: the student's own folders first, newest first
        return sorted(records, key=lambda r: (self._owned(r), r["timestamp"]), reverse=True)

    def _path_to_record(self, path):
        record = super()._path_to_record(path)
        if not self._owned(record):
            self.log.warning("Not collected: %s names %s but is owned by %s", record["filename"],
                             record["username"], self._owner(record))
        return record

    def init_src(self):
        super().init_src()
        self.src_records = [r for r in self.src_records if self._owned(r)]

    def do_copy(self, src, dest, log=None):
        with tempfile.TemporaryDirectory(prefix="hwopt-collect-") as staging:
            kept = Path(staging) / "submission"
            changed, left_out = copy_own_files(Path(src), kept, 1000 * self.coursedir.max_dir_size)
            for name in left_out:
                self.log.warning("Not collected from %s: %s (a link, or not a regular file of its owner)",
                                 src, name)
            super().do_copy(str(kept), dest, log)
        secret = Path(dest, "submission_secret.txt")
        if not secret.is_file():
            self.log.warning("%s has no submission_secret.txt (nbgrader's submit did not make it): the "
                             "student cannot fetch its feedback", src)
            secret.write_text(secrets.token_hex(64))
        claimed = self.coursedir.get_existing_timestamp(dest)
        counted = submission_time(claimed, changed, self.grace_s)
        if counted != claimed:
            self.log.warning("%s claims to be submitted at %s, but its files were last changed at %s: that "
                             "time counts", src, claimed, counted)
            Path(dest, "timestamp.txt").write_text(f"{counted:%Y-%m-%d %H:%M:%S.%f} UTC")
