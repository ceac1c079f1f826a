"""Recorded runs: every lesson executed headless on one device, saved with its headline figures and card.

`python -m hwopt.course.record --device cpu [--out DIR] [NOTEBOOK ...]` runs each lesson (default: every
notebooks/NN_*.ipynb) in a fresh kernel whose `bench.resolve_device("auto")` answers the chosen device, and
saves under DIR (default data/recordings/<chip>/, the machine card's slug): the executed notebook (each
slider's output area shown as the static output of its default setting), headline.json (the figures the
lesson reported with `recordings.headline`), machine_card.json and run.json (status and seconds per
notebook, with the SHA-256 of each cell it ran). A failing cell is reported with its index and traceback, and
the command exits 1: run on a GPU machine with --device cuda, it is the check that every lesson's CUDA path
works. The site build and the performance report execute notebooks through `run_notebook` too.
`python -m hwopt.course.record --check` lists the committed recordings whose lessons changed since they were
recorded (recordings.stale), with the command that regenerates each, and exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty

import nbformat

from hwopt import arguments, recordings
from hwopt.course import colab
from hwopt.machine import bench, card

ROOT = colab.ROOT
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
STATIC_NOTE = ("*A static view of the default setting: the slider runs in Jupyter or Colab "
               "(open this notebook there to move it).*")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass
class NotebookRun:
    """A notebook executed headless: status ('ok', 'error', 'timeout'), seconds, the failing cell, figures."""

    path: str
    status: str
    seconds: float
    notebook: object = None
    cell: int | None = None  # index of the failing cell in the notebook
    error: str = ""  # its traceback (plain text)
    figures: dict = field(default_factory=dict)
    cell_sha256: list = field(default_factory=list)  # of each cell, as recordings.cell_sha256

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def failure_report(self) -> str:
        """Where and why the run failed, with the failing cell's first lines and traceback."""
        if self.ok:
            return f"{self.path}: ok"
        cells = self.notebook.cells if self.notebook is not None else []
        source = cells[self.cell].source if self.cell is not None and self.cell < len(cells) else ""
        head = "\n".join("    | " + line for line in source.splitlines()[:6])
        where = f"cell {self.cell}" if self.cell is not None else "before the first cell"
        return f"{self.path}: {self.status} in {where}\n{head}\n{self.error}".rstrip()

    def to_dict(self) -> dict:
        """run.json's row: plain values."""
        return {"path": self.path, "status": self.status, "seconds": round(self.seconds, 2),
                "cell": self.cell, "error": self.error[-4000:], "cell_sha256": list(self.cell_sha256)}


def _relative(path: Path) -> str:
    full = Path(path).resolve()
    return full.relative_to(ROOT).as_posix() if full.is_relative_to(ROOT) else str(path)


def _failing_cell(nb, timed_out: bool) -> tuple[int | None, str]:
    """(index, traceback) of the cell that raised (or, timed out, the last one that started)."""
    started = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.get("execution_count")]
    for i in reversed(started):
        errors = [o for o in nb.cells[i].outputs if o.output_type == "error"]
        if errors and not timed_out:
            text = "\n".join(errors[-1].get("traceback", [])) or f"{errors[-1].ename}: {errors[-1].evalue}"
            return i, _ANSI.sub("", text)
    return (started[-1] if started else None), ""


REPLY_POLL_S = 0.5  # how often a waiting notebook client looks again for a cell's reply


def polled_in_slices(get_msg, slice_s: float = REPLY_POLL_S):
    """An async channel's get_msg(timeout) that waits in slices of slice_s seconds, looking again each time.

    nbclient waits for a cell's reply with one get_msg for the whole cell timeout; after a cell that made
    ipywidgets (an interactive_output), that wait sometimes does not wake when the reply arrives, and the
    notebook sits idle until the timeout (nbclient issue 312). Looking again every slice finds the reply.
    """
    arguments.function("get_msg", get_msg)
    slice_s = arguments.positive("slice_s", slice_s)

    async def get_msg_in_slices(timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            try:
                return await get_msg(timeout=slice_s if left is None else max(0.0, min(slice_s, left)))
            except Empty:
                if left is not None and left <= slice_s:
                    raise

    return get_msg_in_slices


def run_notebook(path: Path | str, *, device: str | None = None, cell_timeout_s: int = 300,
                 allow_errors: bool = False, headlines: bool = True) -> NotebookRun:
    """Execute a notebook headless (nbclient, fresh kernel in its folder, cell_timeout_s per cell).

    device: what the lessons' 'auto' device means ($HWOPT_DEVICE; None: the machine's own choice).
    allow_errors: run every cell even after one raises (a released assignment's blanks raise).
    headlines: collect the figures the notebook reports with recordings.headline.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError


    class Client(NotebookClient):
        async def async_start_new_kernel_client(self):
            kc = await super().async_start_new_kernel_client()
            kc.shell_channel.get_msg = polled_in_slices(kc.shell_channel.get_msg)
            return kc

    path = Path(path)
    if path.suffix != ".ipynb" or not path.is_file():
        raise ValueError(f"path must be an existing .ipynb notebook; got {str(path)!r}")
    arguments.between("cell_timeout_s", cell_timeout_s, 1, arguments.LIMITS["seconds"], integer=True)
    allow_errors = arguments.boolean("allow_errors", allow_errors)
    if device is not None:
        device = bench.resolve_device(device)
    nb = nbformat.read(path, as_version=4)
    fingerprint = recordings.cell_sha256(nb)
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)  # an inherited text-only backend would turn the plots into text
    if device is not None:
        env[bench.DEVICE_ENV] = device
    with tempfile.TemporaryDirectory(prefix="hwopt-run-") as tmp:
        figures_file = Path(tmp) / "headlines.jsonl"
        if headlines:
            env[recordings.HEADLINES_ENV] = str(figures_file)
        else:
            env.pop(recordings.HEADLINES_ENV, None)
        client = Client(nb, timeout=cell_timeout_s, kernel_name="python3", allow_errors=allow_errors,
                        resources={"metadata": {"path": str(path.resolve().parent)}})
        start, status = time.perf_counter(), "ok"
        try:
            client.execute(env=env)
        except CellTimeoutError:
            status = "timeout"
        except (CellExecutionError, DeadKernelError):
            status = "error"
        seconds = time.perf_counter() - start
        figures = recordings.read_headlines(figures_file) if figures_file.exists() else {}
    run = NotebookRun(_relative(path), status, seconds, nb, figures=figures, cell_sha256=fingerprint)
    if status != "ok":
        run.cell, run.error = _failing_cell(nb, status == "timeout")
        if status == "timeout":
            run.error = f"the cell ran past {cell_timeout_s} s"
    return run


def _models(nb) -> dict:
    return nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})


def _captured_outputs(model_id: str, models: dict, seen: set) -> list:
    """Outputs captured by the Output widgets inside widget model_id (its children, recursively)."""
    if model_id in seen or model_id not in models:
        return []
    seen.add(model_id)
    model = models[model_id]
    if model.get("model_name") == "OutputModel":
        return list(model.get("state", {}).get("outputs", []))
    found = []
    for child in model.get("state", {}).get("children", []):
        found += _captured_outputs(str(child).removeprefix("IPY_MODEL_"), models, seen)
    return found


def static_widgets(nb):
    """A copy of an executed notebook whose widgets are replaced by their output areas' captured outputs.

    A slider box becomes the output of its default setting and a note that the slider runs in Jupyter or
    Colab; a widget without an output area (a progress bar) is dropped; the widget state is removed.
    """
    nb = copy.deepcopy(nb)
    models = _models(nb)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        outputs = []
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW) if out.get("output_type") in (
                "display_data", "execute_result") else None
            if view is None:
                outputs.append(out)
                continue
            captured = _captured_outputs(view.get("model_id", ""), models, set())
            for captured_output in captured:
                shown = nbformat.from_dict(copy.deepcopy(captured_output))
                if shown.get("output_type") == "execute_result":  # shown by the widget, not the cell
                    shown["output_type"] = "display_data"
                    shown.pop("execution_count", None)
                outputs.append(shown)
            if captured:
                outputs.append(nbformat.v4.new_output("display_data", data={
                    "text/markdown": STATIC_NOTE, "text/plain": STATIC_NOTE.strip("*")}))
        cell.outputs = outputs
    nb.metadata.pop("widgets", None)
    return nb


def without_checkout_path(nb, root: Path = ROOT):
    """nb with the checkout's absolute path dropped from text outputs (paths printed relative to it)."""
    prefix = str(root.resolve()) + "/"
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if isinstance(out.get("text"), str):
                out["text"] = out["text"].replace(prefix, "")
            for mime in ("text/plain", "text/html", "text/markdown"):
                if isinstance(out.get("data", {}).get(mime), str):
                    out["data"][mime] = out["data"][mime].replace(prefix, "")
    return nb


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def device_name(machine) -> str:
    """The device a machine card describes, in words: the GPU's name on CUDA, else the CPU's model, cores
    and widest SIMD set ('AMD EPYC, 2 cores, AVX-512F': one model name covers CPUs of different SIMD sets)."""
    info = machine.machine
    if machine.device.startswith("cuda") and info.gpus:
        index = int(machine.device.split(":")[1]) if ":" in machine.device else 0
        return info.gpus[min(index, len(info.gpus) - 1)].name
    if machine.device == "mps":
        return f"{info.cpu_model} GPU"
    cores = f"{info.logical_cores} cores" if info.logical_cores else ""
    parts = [info.cpu_model, cores, card.widest_simd(info.simd)]
    return ", ".join(part for part in parts if part)


def record(paths, out: Path | str | None = None, *, device: str = "auto", cell_timeout_s: int = 300,
           probe: bool = True, allow_errors: bool = False, machine=None,
           progress=print) -> tuple[Path, list[NotebookRun]]:
    """Execute each notebook on device and save the run under out (default data/recordings/<chip>/).

    probe: measure the machine card's ceilings (seconds); machine: a card already made for device.
    Figures and run rows of notebooks recorded there before (and not run now) are kept.
    Returns (the folder, the runs).
    """
    chosen = bench.resolve_device(arguments.text("device", device))
    if machine is None:
        machine = card.machine_card(probe=arguments.boolean("probe", probe), device=chosen, n_closest=3)
    else:
        arguments.instance("machine", machine, card.MachineCard)
        if machine.device != chosen:
            raise ValueError(f"machine must be the card of device {chosen!r}; got one of {machine.device!r}")
    folder = Path(out) if out is not None else recordings.RECORDINGS_DIR / machine.slug
    folder.mkdir(parents=True, exist_ok=True)
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("paths must name at least one notebook")
    runs = []
    for path in paths:
        if progress:
            progress(f"running {_relative(path)} on {chosen} ...")
        run = run_notebook(path, device=chosen, cell_timeout_s=cell_timeout_s, allow_errors=allow_errors)
        nbformat.write(without_checkout_path(static_widgets(run.notebook)), folder / path.name)
        runs.append(run)
        if progress:
            failure = "" if run.ok else "\n" + run.failure_report()
            progress(f"  {run.status} in {run.seconds:.1f} s{failure}")
    headline = _read_json(folder / recordings.HEADLINE_FILE)
    lessons = headline.get("lessons", {})
    for run in runs:
        lessons[Path(run.path).stem] = {k: {"value": float(f"{f.value:.4g}"), "unit": f.unit}
                                        for k, f in run.figures.items()}
    today = datetime.date.today().isoformat()
    headline = {"chip": machine.slug, "device": chosen, "device_name": device_name(machine),
                "recorded_on": today, "lessons": dict(sorted(lessons.items()))}
    (folder / recordings.HEADLINE_FILE).write_text(json.dumps(headline, indent=1) + "\n", encoding="utf-8")
    (folder / recordings.CARD_FILE).write_text(machine.to_json() + "\n", encoding="utf-8")
    rows = {row["path"]: row for row in _read_json(folder / recordings.RUN_FILE).get("notebooks", [])}
    rows.update({run.path: run.to_dict() for run in runs})
    (folder / recordings.RUN_FILE).write_text(json.dumps(
        {"device": chosen, "recorded_on": today, "notebooks": sorted(rows.values(), key=lambda r: r["path"])},
        indent=1) + "\n", encoding="utf-8")
    return folder, runs


def lesson_notebooks(root: Path = ROOT) -> list[Path]:
    """Every lesson, notebooks/NN_*.ipynb, sorted (absolute paths)."""
    return [root / p for p in colab.lesson_paths(root) if re.match(r"\d+_", p.name)]


def check(folder: Path | str = recordings.RECORDINGS_DIR, lessons_dir: Path | str = recordings.LESSONS_DIR
          ) -> list[str]:
    """One line per chip recorded under folder whose lessons (in lessons_dir) changed since it was recorded:
    which, why, and the command that regenerates them."""
    lines = []
    for chip in recordings.available(folder):
        run = recordings.load(chip, folder)
        if outdated := recordings.stale(run.folder, lessons_dir):
            whys = "; ".join(f"{lesson} ({why})" for lesson, why in outdated.items())
            lines.append(f"data/recordings/{chip} is stale: {whys}. Regenerate: "
                         f"{recordings.regenerate_command(run, outdated)}")
    return lines


def main(argv=None) -> int:
    """The command line; exit 0 when every notebook ran, 1 when one failed (each reported), 2 on bad input."""
    parser = argparse.ArgumentParser(prog="python -m hwopt.course.record", description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", help="notebooks to run (default: every lesson)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N, mps or auto (default)")
    parser.add_argument("--out", default=None, help="folder (default: data/recordings/<chip>/)")
    parser.add_argument("--cell-timeout", type=int, default=300, help="seconds per cell (default 300)")
    parser.add_argument("--no-probe", action="store_true", help="a machine card without measured ceilings")
    parser.add_argument("--check", action="store_true",
                        help="run nothing: list the recordings whose lessons changed since (exit 1 if any)")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(args.out or recordings.RECORDINGS_DIR)
        print("\n".join(problems) or "every recording matches its lessons")
        return 1 if problems else 0
    try:
        paths = [Path(p) for p in args.notebooks] or lesson_notebooks()
        folder, runs = record(paths, args.out, device=args.device, cell_timeout_s=args.cell_timeout,
                              probe=not args.no_probe)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    failed = [run for run in runs if not run.ok]
    print(f"\n{len(runs) - len(failed)} of {len(runs)} notebooks ran; recording in {_relative(folder)}")
    for run in failed:
        print("\nFAILED " + run.failure_report())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
