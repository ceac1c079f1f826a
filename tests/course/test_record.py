"""course.record: notebooks run headless on a chosen device, saved with figures and card; failures located."""

import asyncio
import json
import re
import time
from queue import Empty

import nbformat
import pytest

from hwopt import recordings
from hwopt.course import record


def write_notebook(path, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, path)
    return path


def widget_notebook():
    """An executed notebook as nbclient saves it: a slider box whose Output widget captured a plot."""
    view = {"model_id": "box", "version_major": 2, "version_minor": 0}
    plot = {"output_type": "display_data", "data": {"image/png": "iVBOR", "text/plain": "<Figure>"},
            "metadata": {}}
    state = {"box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_row", "IPY_MODEL_out"]}},
             "row": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_slider"]}},
             "slider": {"model_name": "FloatSliderModel", "state": {}},
             "out": {"model_name": "OutputModel", "state": {"outputs": [
                 {"output_type": "stream", "name": "stdout", "text": "budget 10 ms\n"}, plot]}},
             "bar": {"model_name": "HBoxModel", "state": {"children": []}}}
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {record.WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}
    cell = nbformat.v4.new_code_cell("explorer()")
    cell.outputs = [nbformat.v4.new_output("execute_result", data={record.WIDGET_VIEW: view,
                                                                   "text/plain": "VBox(...)"},
                                           execution_count=1)]
    bar = nbformat.v4.new_code_cell("progress()")
    bar.outputs = [nbformat.v4.new_output("display_data", data={record.WIDGET_VIEW: {"model_id": "bar"}}),
                   nbformat.v4.new_output("stream", name="stdout", text="done\n")]
    nb.cells = [cell, bar]
    return nb


def test_static_widgets_show_the_default_settings_output_and_say_where_the_slider_runs():
    nb = widget_notebook()
    static = record.static_widgets(nb)
    outputs = static.cells[0].outputs
    assert [o.output_type for o in outputs] == ["stream", "display_data", "display_data"]
    assert outputs[1]["data"]["image/png"] == "iVBOR"
    assert "slider runs in Jupyter or Colab" in outputs[2]["data"]["text/markdown"]
    assert [o.output_type for o in static.cells[1].outputs] == ["stream"]  # a progress bar: dropped
    assert "widgets" not in static.metadata and "widgets" in nb.metadata  # the original is untouched
    nbformat.validate(static)


def test_without_checkout_path_prints_paths_relative_to_the_repository():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    printed = f"trace at {record.ROOT}/a/b.json\n"
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
    nb.cells = [cell]
    assert record.without_checkout_path(nb).cells[0].outputs[0]["text"] == "trace at a/b.json\n"


def test_run_notebook_reports_the_failing_cell_and_its_traceback(tmp_path):
    path = write_notebook(
        tmp_path / "lesson.ipynb",
        "from hwopt import recordings\nfrom hwopt.machine import bench\n"
        "assert bench.resolve_device('auto') == 'cpu'\nrecordings.headline('speedup', 2.5, 'x')",
        "print('fine')",
        "def broken():\n    raise RuntimeError('CUDA path broke')\nbroken()",
        "print('never runs')")
    run = record.run_notebook(path, device="cpu", cell_timeout_s=60)
    assert run.status == "error" and run.cell == 2 and not run.ok
    assert "RuntimeError" in run.error and "CUDA path broke" in run.error and "\x1b[" not in run.error
    assert run.figures == {"speedup": recordings.Figure(2.5, "x")}  # reported before the failure
    report = run.failure_report()
    assert "error in cell 2" in report and "| def broken():" in report
    assert run.to_dict()["cell_sha256"] == recordings.cell_sha256(path) and len(run.cell_sha256) == 4


def test_run_notebook_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="path must be an existing .ipynb"):
        record.run_notebook(tmp_path / "missing.ipynb")
    path = write_notebook(tmp_path / "a.ipynb", "1")
    with pytest.raises(ValueError, match="cell_timeout_s must be"):
        record.run_notebook(path, cell_timeout_s=0)
    with pytest.raises(ValueError, match="device must be one of"):
        record.run_notebook(path, device="tpu")


def test_record_saves_notebooks_figures_card_and_run_and_main_exits_1_on_a_failure(tmp_path, capsys):
    ok = write_notebook(tmp_path / "01_ok.ipynb", "from hwopt import recordings\n"
                        "recordings.headline('memory bandwidth', 40.0, 'GB/s')\nprint('measured')")
    bad = write_notebook(tmp_path / "02_bad.ipynb", "1 / 0")
    out = tmp_path / "rec"
    status = record.main([str(ok), str(bad), "--device", "cpu", "--out", str(out), "--no-probe"])
    text = capsys.readouterr().out
    assert status == 1 and "1 of 2 notebooks ran" in text and "FAILED" in text and "ZeroDivisionError" in text
    run = recordings.load_folder(out)
    assert run.device == "cpu"
    assert run.figures["01_ok"] == {"memory bandwidth": recordings.Figure(40.0, "GB/s")}
    assert json.loads((out / recordings.CARD_FILE).read_text())["device"] == "cpu"
    executed = nbformat.read(out / "01_ok.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["text"] == "measured\n"
    rows = json.loads((out / recordings.RUN_FILE).read_text())["notebooks"]
    assert [(r["status"], r["cell"]) for r in rows] == [("ok", None), ("error", 0)]
    record.record([ok], out, device="cpu", probe=False, progress=None)  # a second run keeps the other rows
    assert len(json.loads((out / recordings.RUN_FILE).read_text())["notebooks"]) == 2
    assert record.main(["--device", "gpu", "--out", str(out)]) == 2


def test_check_lists_each_stale_recording_with_the_command_that_regenerates_it(tmp_path, capsys):
    lessons = tmp_path / "notebooks"
    lessons.mkdir()
    lesson = write_notebook(lessons / "01_ok.ipynb", "print('measured')")
    out = tmp_path / "recordings" / "some-cpu"
    record.record([lesson], out, device="cpu", probe=False, progress=None)
    assert record.check(out.parent, lessons) == []
    write_notebook(lesson, "print('measured again')", "print('more')")
    problems = record.check(out.parent, lessons)
    assert len(problems) == 1 and problems[0].startswith("data/recordings/some-cpu is stale: 01_ok (")
    assert "changed cells 0; added cells 1" in problems[0]
    assert 'make record DEVICE=cpu ARGS="--out data/recordings/some-cpu notebooks/01_ok.ipynb"' in problems[0]
    assert re.search(r"the last run of these took \d+ s there\), then commit data/recordings/some-cpu/",
                     problems[0]), problems[0]
    assert record.main(["--check", "--out", str(out.parent)]) == 1  # the course has no lesson 01_ok
    assert "01_ok (notebooks/01_ok.ipynb no longer exists)" in capsys.readouterr().out


def test_a_reply_wait_looks_again_each_slice_and_still_times_out():
    calls = []

    async def get_msg(timeout=None):  # a channel whose reply is there from the third look on
        calls.append(timeout)
        await asyncio.sleep(min(timeout, 0.01))
        if len(calls) < 3:
            raise Empty
        return {"reply": len(calls)}

    wait = record.polled_in_slices(get_msg, slice_s=0.05)
    assert asyncio.run(wait(timeout=None)) == {"reply": 3} and calls == [0.05] * 3  # no timeout: slices

    async def never(timeout=None):
        await asyncio.sleep(timeout)
        raise Empty

    start = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(record.polled_in_slices(never, slice_s=0.05)(timeout=0.2))
    assert 0.19 <= time.monotonic() - start < 1.0  # the cell timeout still ends the wait
    for bad in (float("nan"), float("inf"), -0.5, 0, "0.5"):
        with pytest.raises(ValueError, match="slice_s"):
            record.polled_in_slices(never, slice_s=bad)
    with pytest.raises(ValueError, match="get_msg"):
        record.polled_in_slices("not a function")
