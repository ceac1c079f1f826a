"""recordings: headline figures written only while a run is recorded; recorded runs read back and compared."""

import json

import pytest

from hwopt import recordings


def write_recording(folder, chip, lessons, device="cuda", device_name="NVIDIA H200"):
    base = folder / chip
    base.mkdir(parents=True)
    data = {"chip": chip, "device": device, "device_name": device_name, "recorded_on": "2026-12-01",
            "lessons": {lesson: {name: {"value": v, "unit": u} for name, (v, u) in rows.items()}
                        for lesson, rows in lessons.items()}}
    (base / recordings.HEADLINE_FILE).write_text(json.dumps(data))
    (base / recordings.CARD_FILE).write_text(json.dumps({"device": device}))
    (base / "02_memory_bandwidth.ipynb").write_text("{}")
    return base


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
    write_recording(tmp_path, "nvidia-h200", {"02_memory_bandwidth": {"memory bandwidth": (4200.0, "GB/s"),
                                                                      "tiny decoder": (900.0, "tokens/s")}})
    assert recordings.available(tmp_path) == ["nvidia-h200"]
    run = recordings.load("nvidia-h200", tmp_path)
    assert run.device == "cuda" and run.label == "NVIDIA H200 (cuda, 2026-12-01)"
    assert run.figures["02_memory_bandwidth"]["memory bandwidth"] == recordings.Figure(4200.0, "GB/s")
    assert run.notebook("02_memory_bandwidth").name == "02_memory_bandwidth.ipynb"
    assert run.notebook("03_batching") is None
    text = recordings.compare("02_memory_bandwidth", {"memory bandwidth": 42.0, "ceiling": 1.0}, tmp_path)
    assert text == ("memory bandwidth: yours 42 GB/s; NVIDIA H200 (cuda, 2026-12-01): "
                    "4,200 GB/s = 100x yours")
    assert "No recorded run of 03_batching" in recordings.compare("03_batching", {"x": 1.0}, tmp_path)
    assert "hold none of ['ceiling']" in recordings.compare("02_memory_bandwidth", {"ceiling": 1.0}, tmp_path)


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
