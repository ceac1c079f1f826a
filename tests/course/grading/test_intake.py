"""The intake: only folders and regular files are graded, copies never follow links, feedback keeps its
pages."""

import os
import stat
import subprocess
from pathlib import Path

import pytest

from hwopt.course.grading import intake


def submission(course: Path) -> Path:
    folder = course / "submitted" / "ada" / "batching"
    folder.mkdir(parents=True)
    (folder / "batching.ipynb").write_text("{}")
    (folder / "data").mkdir()
    (folder / "data" / "x.csv").write_text("1\n")
    return folder


def test_a_folder_of_regular_files_is_graded(tmp_path):
    assert intake.refusal(submission(tmp_path), tmp_path) is None


def test_links_fifos_and_set_id_files_are_refused_with_what_they_are(tmp_path):
    folder = submission(tmp_path)
    (folder / "key.json").symlink_to("/etc/passwd")
    os.mkfifo(folder / "data" / "pipe")
    (folder / "run").write_text("")
    os.chmod(folder / "run", 0o4755)
    assert intake.problems(folder, tmp_path) == ["data/pipe: a FIFO (named pipe)",
                                                 "key.json: a symbolic link (to '/etc/passwd')",
                                                 "run: a set-user-ID or set-group-ID file"]
    assert intake.refusal(folder, tmp_path).startswith("only regular files are graded: data/pipe: a FIFO")


def test_a_linked_folder_above_the_submission_is_refused(tmp_path):
    real = submission(tmp_path / "elsewhere")
    (tmp_path / "submitted" / "bob").mkdir(parents=True)
    (tmp_path / "submitted" / "bob" / "batching").symlink_to(real, target_is_directory=True)
    [found] = intake.problems(tmp_path / "submitted" / "bob" / "batching", tmp_path)
    assert found.startswith("submitted/bob/batching: a symbolic link (to '")  # its target, cut at 100


def test_a_refusal_names_three_entries_then_counts(tmp_path):
    folder = submission(tmp_path)
    for i in range(5):
        (folder / f"link{i}").symlink_to("/etc/hostname")
    assert intake.refusal(folder, tmp_path).endswith("; and 2 more")


def test_read_regular_never_follows_a_link_nor_blocks_on_a_fifo(tmp_path):
    (tmp_path / "real").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    os.mkfifo(tmp_path / "pipe")
    assert intake.read_regular(tmp_path / "real") == b"x"
    for name in ("link", "pipe"):
        with pytest.raises(OSError):
            intake.read_regular(tmp_path / name)


def test_copy_tree_copies_links_as_links_and_drops_set_id_bits(tmp_path):
    src = submission(tmp_path / "src")
    secret = tmp_path / "secret"
    secret.write_text("the instructor's")
    (src / "secret").symlink_to(secret)
    os.chmod(src / "data" / "x.csv", 0o6644)
    intake.copy_tree(src, tmp_path / "dest", ignore=lambda folder, names: [n for n in names if n == "data"])
    dest = tmp_path / "dest"
    assert os.readlink(dest / "secret") == str(secret)  # a link, refused at grading, not the secret's text
    assert (dest / "batching.ipynb").read_text() == "{}" and not (dest / "data").exists()
    intake.copy_tree(src / "data", tmp_path / "data")
    assert not os.stat(tmp_path / "data" / "x.csv").st_mode & (stat.S_ISUID | stat.S_ISGID)


def test_autograde_hook_stops_before_copying(tmp_path):
    folder = submission(tmp_path)
    (folder / "gradebook.db").symlink_to(tmp_path / "gradebook.db")
    with pytest.raises(intake.UnsafeSubmission, match="gradebook.db: a symbolic link"):
        intake.refuse_unsafe("batching", "ada", [str(folder / "batching.ipynb")])
    intake.refuse_unsafe("batching", "ada", [])  # nothing to grade: nothing to refuse


def test_feedback_keeps_only_its_pages(tmp_path):
    graded = tmp_path / "autograded" / "ada" / "batching" / "batching.ipynb"
    feedback = tmp_path / "feedback" / "ada" / "batching"
    feedback.mkdir(parents=True)
    for name in ("batching.html", "timestamp.txt", "notes.txt"):
        (feedback / name).write_text(name)
    (feedback / "data").mkdir()
    (feedback / "key").symlink_to("/etc/passwd")
    intake.feedback_pages_only("batching", "ada", [str(graded)])
    assert sorted(p.name for p in feedback.iterdir()) == ["batching.html", "timestamp.txt"]
    assert subprocess.run(["test", "-e", "/etc/passwd"]).returncode == 0  # the link went, not its target
