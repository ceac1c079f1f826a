"""course.grading.exchange: what collect takes from a student's folder in the exchange, and which time counts
(the whole collect, forgeries included, runs on a real hub: tests/pipelines/test_jupyterhub_round_trip.py)."""

import os
from datetime import UTC, datetime, timedelta

import pytest

from hwopt.course.grading.exchange import copy_own_files, submission_time
from tests.support import skip_outside_ci

OTHER_UID = 65534  # another account's files (nobody)


def test_only_the_owners_regular_files_are_copied_and_no_link_is_followed(tmp_path):
    secret = tmp_path / "instructor" / "grader-secret"
    secret.parent.mkdir()
    secret.write_text("not for students")
    src = tmp_path / "inbound" / "ada+batching+2027-02-01 17:00:00.000000 UTC+x"
    (src / "data").mkdir(parents=True)
    (src / "batching.ipynb").write_text("{}")
    (src / "data" / "table.csv").write_text("a,b\n")
    (src / "notes.txt").symlink_to(secret)
    (src / "linked_folder").symlink_to(secret.parent)
    os.mkfifo(src / "pipe")
    before = datetime.now(UTC).replace(tzinfo=None) - timedelta(seconds=2)
    changed, left_out = copy_own_files(src, tmp_path / "copy", max_bytes=10_000)
    copied = sorted(str(p.relative_to(tmp_path / "copy")) for p in (tmp_path / "copy").rglob("*"))
    assert copied == ["batching.ipynb", "data", "data/table.csv"]
    assert left_out == ["linked_folder", "notes.txt", "pipe"]
    after = datetime.now(UTC).replace(tzinfo=None) + timedelta(seconds=2)
    assert before <= changed <= after  # the kernel's change time, in UTC


def test_another_accounts_files_and_hard_links_to_them_are_left_out(tmp_path):
    if os.geteuid() != 0:
        skip_outside_ci("giving a file to another account needs root")
    src = tmp_path / "submission"
    src.mkdir()
    (src / "batching.ipynb").write_text("{}")
    theirs = tmp_path / "theirs.txt"
    theirs.write_text("someone else's")
    os.chown(theirs, OTHER_UID, OTHER_UID)
    os.link(theirs, src / "hard_link.txt")
    (src / "planted").mkdir()
    os.chown(src / "planted", OTHER_UID, OTHER_UID)
    _, left_out = copy_own_files(src, tmp_path / "copy", max_bytes=10_000)
    assert left_out == ["hard_link.txt", "planted"]
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == ["batching.ipynb"]


def test_a_submission_bigger_than_the_limit_is_refused(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "big.bin").write_bytes(b"x" * 2000)
    with pytest.raises(ValueError, match="more than 1000 bytes"):
        copy_own_files(tmp_path / "src", tmp_path / "copy", max_bytes=1000)


CLAIMED = datetime(2027, 2, 1, 16, 59)


@pytest.mark.parametrize("changed, counted", [
    (CLAIMED + timedelta(seconds=3), CLAIMED),  # the copy after the claim: the claim counts
    (CLAIMED + timedelta(seconds=300), CLAIMED),  # within the grace
    (CLAIMED + timedelta(seconds=301), CLAIMED + timedelta(seconds=301)),  # changed later: that counts
    (CLAIMED - timedelta(days=1), CLAIMED),  # a claim later than the files: later is worse for the student
])
def test_the_claimed_time_counts_unless_the_files_changed_after_it(changed, counted):
    assert submission_time(CLAIMED, changed, grace_s=300) == counted


def test_no_claimed_time_counts_the_last_change():
    now = datetime.now(UTC).replace(tzinfo=None)
    assert submission_time(None, now, 300) == now


@pytest.mark.parametrize("grace_s", [-1, float("nan"), float("inf"), "300", True])
def test_a_bad_grace_is_refused_naming_it(grace_s):
    with pytest.raises(ValueError, match="grace_s"):
        submission_time(CLAIMED, CLAIMED, grace_s)
