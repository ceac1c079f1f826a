"""recordings: headline figures written only while a run is recorded; recorded runs read back and compared."""

import json

import pytest

from hwopt import recordings


def notebook(*sources, kind="code"):
    return {"cells": [{"cell_type": kind, "source": source} for source in sources], "metadata": {}}


def write_recording(folder, chip, lessons, device="cuda", device_name="NVIDIA H200", cells=None):
    """A recorded run of lesson 02_memory_bandwidth (figures of lessons), recorded from cells (sources)."""
    base = folder / chip
    base.mkdir(parents=True)
    data = {"chip": chip, "device": device, "device_name": device_name, "recorded_on": "2026-12-01",
            "lessons": {lesson: {name: {"value": v, "unit": u} for name, (v, u) in rows.items()}
                        for lesson, rows in lessons.items()}}
    (base / recordings.HEADLINE_FILE).write_text(json.dumps(data))
    (base / recordings.CARD_FILE).write_text(json.dumps({"device": device}))
    recorded = notebook(*(cells or ["x = 1"]))
    (base / "02_memory_bandwidth.ipynb").write_text(json.dumps(recorded))
    row = {"path": "notebooks/02_memory_bandwidth.ipynb", "status": "ok",
           "cell_sha256": recordings.cell_sha256(recorded)}
    (base / recordings.RUN_FILE).write_text(json.dumps({"notebooks": [row]}))
    return base


def write_lesson(folder, *sources):
    folder.mkdir(exist_ok=True)
    path = folder / "02_memory_bandwidth.ipynb"
    path.write_text(json.dumps(notebook(*sources)))
    return folder


def test_headline_shows_nothing_and_writes_only_while_recording(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(recordings.HEADLINES_ENV, raising=False)
    assert recordings.headline("memory bandwidth", 42.0, "GB/s") is None
    target = tmp_path / "figures.jsonl"
    monkeypatch.setenv(recordings.HEADLINES_ENV, str(target))
    recordings.headline("memory bandwidth", 40.0, "GB/s")
    recordings.headline("speedup", 3)
    recordings.headline("memory bandwidth", 41.5, "GB/s")  # the last value of a name wins
    assert capsys.readouterr().out == ""
    figures = recordings.read_headlines(target)
    assert figures == {"memory bandwidth": recordings.Figure(41.5, "GB/s"), "speedup": recordings.Figure(3.0)}
    assert str(figures["memory bandwidth"]) == "41.5 GB/s"
    with pytest.raises(ValueError, match="path must be a file of headline figures"):
        recordings.read_headlines(tmp_path / "absent.jsonl")


@pytest.mark.parametrize("kwargs, argument", [
    ({"name": "", "value": 1.0}, "name"), ({"name": "x", "value": float("nan")}, "value"),
    ({"name": "x", "value": "fast"}, "value"), ({"name": "x", "value": 1.0, "unit": 3}, "unit"),
])
def test_headline_rejects_bad_input(kwargs, argument):
    with pytest.raises(ValueError, match=f"^{argument} must be"):
        recordings.headline(**kwargs)


def test_load_and_compare_a_recorded_run(tmp_path):
    lessons = write_lesson(tmp_path / "notebooks", "x = 1")
    tmp_path = tmp_path / "recordings"
    write_recording(tmp_path, "nvidia-h200", {"02_memory_bandwidth": {"memory bandwidth": (4200.0, "GB/s"),
                                                                      "tiny decoder": (900.0, "tokens/s")}})
    assert recordings.available(tmp_path) == ["nvidia-h200"]
    run = recordings.load("nvidia-h200", tmp_path)
    assert run.device == "cuda" and run.label == "NVIDIA H200 (cuda, 2026-12-01)"
    assert run.figures["02_memory_bandwidth"]["memory bandwidth"] == recordings.Figure(4200.0, "GB/s")
    assert run.notebook("02_memory_bandwidth").name == "02_memory_bandwidth.ipynb"
    assert run.notebook("03_batching") is None
    text = recordings.compare("02_memory_bandwidth", {"memory bandwidth": 42.0, "ceiling": 1.0}, tmp_path,
                              lessons_dir=lessons)
    assert text == ("memory bandwidth: yours 42 GB/s; NVIDIA H200 (cuda, 2026-12-01): "
                    "4,200 GB/s = 100x yours")
    assert "No recorded run of 03_batching" in recordings.compare("03_batching", {"x": 1.0}, tmp_path)
    assert "hold none of ['ceiling']" in recordings.compare("02_memory_bandwidth", {"ceiling": 1.0}, tmp_path,
                                                            lessons_dir=lessons)


def test_cell_hashes_follow_type_and_source_only():
    a = recordings.cell_sha256(notebook("x = 1", "print(x)"))
    assert len(a) == 2 and len(set(a)) == 2 and all(len(h) == 64 for h in a)
    split = notebook(["x = ", "1"], "print(x)")  # .ipynb files may store a source as a list of lines
    split["cells"][0]["outputs"] = [{"output_type": "stream", "text": "1"}]
    assert recordings.cell_sha256(split) == a
    assert recordings.cell_sha256(notebook("x = 1", kind="markdown"))[0] != a[0]
    with pytest.raises(ValueError, match="notebook must be an existing .ipynb"):
        recordings.cell_sha256("lesson.txt")
    with pytest.raises(ValueError, match="notebook must hold a list of cells"):
        recordings.cell_sha256({"cells": "x"})


@pytest.mark.parametrize("recorded, current, said", [
    ("abc", "abc", ""),
    ("abc", "aXc", "changed cells 1"),
    ("abc", "abXc", "added cells 2"),
    ("abc", "ac", "1 cell removed"),
    ("abcd", "aXYd", "changed cells 1, 2"),
    ("abcd", "aXd", "changed cells 1; 1 cell removed"),
    ("ab", "aXYZ", "changed cells 1; added cells 2, 3"),
    ("abc", "", "3 cells removed"),
])
def test_changed_cells_names_what_changed_by_the_current_notebooks_indices(recorded, current, said):
    assert recordings.changed_cells(list(recorded), list(current)) == said


def test_a_recording_goes_stale_when_its_lesson_changes_and_compare_leaves_it_out(tmp_path):
    lessons = write_lesson(tmp_path / "notebooks", "x = 1", "bandwidth = 42")
    folder = write_recording(tmp_path / "recordings", "nvidia-h200",
                             {"02_memory_bandwidth": {"memory bandwidth": (4200.0, "GB/s")}},
                             cells=["x = 1", "bandwidth = 42"])
    assert recordings.stale(folder, lessons) == {}
    write_lesson(lessons, "x = 1", "bandwidth = measure()", "print(bandwidth)")
    assert recordings.stale(folder, lessons) == {"02_memory_bandwidth": "changed cells 1; added cells 2"}
    text = recordings.compare("02_memory_bandwidth", {"memory bandwidth": 42.0}, folder.parent,
                              lessons_dir=lessons)
    assert "yours" not in text and text.startswith("NVIDIA H200 (cuda, 2026-12-01): not compared, recorded "
                                                   "from another version of this lesson (changed cells 1")
    assert 'make record DEVICE=cuda ARGS="--out data/recordings/nvidia-h200 ' \
           "notebooks/02_memory_bandwidth.ipynb\" on a machine of that chip (NVIDIA H200" in text
    old_run = {"path": "notebooks/02_memory_bandwidth.ipynb", "status": "ok"}  # from before cell hashes
    (folder / recordings.RUN_FILE).write_text(json.dumps({"notebooks": [old_run]}))

    assert "no cell hashes" in recordings.stale(folder, lessons)["02_memory_bandwidth"]
    (lessons / "02_memory_bandwidth.ipynb").unlink()
    gone = "notebooks/02_memory_bandwidth.ipynb no longer exists"
    assert recordings.stale(folder, lessons) == {"02_memory_bandwidth": gone}
    with pytest.raises(ValueError, match="folder must be a folder of recorded runs"):
        recordings.stale(tmp_path / "absent")


def test_load_and_compare_reject_bad_input(tmp_path):
    write_recording(tmp_path, "nvidia-h200", {})
    with pytest.raises(ValueError, match="chip must be one of the recorded runs \\['nvidia-h200'\\]"):
        recordings.load("tesla-t4", tmp_path)
    with pytest.raises(ValueError, match="folder must hold a recorded run"):
        recordings.load_folder(tmp_path)
    with pytest.raises(ValueError, match="figures must be"):
        recordings.compare("02_memory_bandwidth", [42.0], tmp_path)
    with pytest.raises(ValueError, match="figures\\['bw'\\] must be a finite number"):
        recordings.compare("02_memory_bandwidth", {"bw": float("inf")}, tmp_path)
    assert recordings.available(tmp_path / "none") == []


def test_the_committed_recordings_are_readable_and_hold_each_lessons_figures():
    chips = recordings.available()
    assert chips, "data/recordings/ should hold at least one recorded run (`make record DEVICE=cpu`)"
    lessons = recordings.RECORDINGS_DIR.parents[1] / "notebooks"
    for chip in chips:
        run = recordings.load(chip)
        assert run.card.get("device") == run.device, f"{chip}: machine_card.json should describe its device"
        recorded = [lesson for lesson in run.figures if run.notebook(lesson)]
        assert recorded, f"{chip}: no executed lesson saved"
        for lesson in recorded:
            source = lessons / f"{lesson}.ipynb"
            if source.exists() and "recordings.headline(" in source.read_text(encoding="utf-8"):
                assert run.figures[lesson], f"{chip}: {lesson} reports figures; the recording has none"


@pytest.mark.parametrize("chip", recordings.available())
def test_each_committed_recording_matches_the_lessons_it_recorded(chip):
    run = recordings.load(chip)
    outdated = recordings.stale(run.folder)
    assert not outdated, (
        f"data/recordings/{chip} was recorded from other versions of these lessons: "
        + "; ".join(f"{lesson} ({why})" for lesson, why in outdated.items())
        + f". Its outputs and figures no longer belong to them. Regenerate: "
        f"{recordings.regenerate_command(run, outdated)}")
