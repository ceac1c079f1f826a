"""The course as a website: every lesson and released assignment, executed here, rendered by Sphinx + myst-nb.

`python -m hwopt.course.site [--out build/site] [--device auto] [--only NOTEBOOK ...]`:
1. executes (hwopt.course.record) every lesson, notebooks/NN_*.ipynb, and every student version,
   release/<a>/<a>.ipynb, into <out>/executed/; a notebook whose cells did not change since it last ran
   there is not run again. With --only, just those run; every other page shows the recorded run in
   data/recordings/ of the same cells where one exists, else the notebook unexecuted, and says which;
2. stages the pages in <out>/src/: each with a header (Colab badge, download link, where its outputs come
   from, the lesson's headline figures beside each recorded chip's, the build machine's card), and one page
   per recorded chip with what each lesson printed there;
3. runs Sphinx (configuration in site/conf.py) into <out>/html/ and checks that every internal link resolves.
Exit 1 when a lesson failed or a link is broken.
"""

from __future__ import annotations

import argparse
import datetime
import html
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat

from hwopt import recordings
from hwopt.course import colab, record
from hwopt.machine import bench, card

ROOT = colab.ROOT
CONF_DIR = ROOT / "site"
DEFAULT_OUT = ROOT / "build" / "site"
CLEAN_DIR = "_notebooks"  # under src/: the committed notebooks (no outputs), offered for download


@dataclass(frozen=True)
class Page:
    """A notebook of the course and where its page goes: lessons/<stem> or assignments/<stem>."""

    source: Path  # relative to the repository
    kind: str  # "lesson" | "assignment"
    title: str

    @property
    def name(self) -> str:
        return f"{'lessons' if self.kind == 'lesson' else 'assignments'}/{self.source.stem}"


def course_pages(root: Path = ROOT) -> list[Page]:
    """Every lesson (notebooks/NN_*.ipynb) then every released assignment, in course order."""
    return [Page(nb.path, nb.kind, nb.title) for nb in colab.student_notebooks(root)
            if nb.kind == "assignment" or re.match(r"\d+_", nb.path.name)]


def _rows(folder: Path) -> dict[str, dict]:
    path = folder / recordings.RUN_FILE
    rows = json.loads(path.read_text(encoding="utf-8")).get("notebooks", []) if path.exists() else []
    return {row["path"]: row for row in rows}


def _current(folder: Path, page: Page, root: Path, *, need_ok: bool) -> bool:
    """True when folder holds a run of page's notebook with the notebook's present cells."""
    row = _rows(folder).get(page.source.as_posix())
    if row is None or not (folder / page.source.name).exists() or (need_ok and row["status"] != "ok"):
        return False
    return row.get("cell_sha256") == recordings.cell_sha256(root / page.source)


def execute(pages: list[Page], executed: Path, *, device: str = "auto", only=None, root: Path = ROOT,
            progress=print) -> list[record.NotebookRun]:
    """Run the pages' notebooks into executed/ (those in only, else all), skipping those already current."""
    wanted = [p for p in pages if only is None or p.source.as_posix() in only]
    runs, machine = [], None
    for kind, allow_errors in (("lesson", False), ("assignment", True)):  # a release's blanks raise
        todo = [p for p in wanted
                if p.kind == kind and not _current(executed, p, root, need_ok=not allow_errors)]
        if todo:
            machine = machine or card.machine_card(probe=True, device=bench.resolve_device(device))
            _, done = record.record([root / p.source for p in todo], executed, device=machine.device,
                                    allow_errors=allow_errors, machine=machine, progress=progress)
            runs += done
    return runs


def _card_text(folder: Path) -> str:
    path = folder / recordings.CARD_FILE
    if not path.exists():
        return ""
    card = json.loads(path.read_text(encoding="utf-8"))
    machine, measured = card.get("machine", {}), card.get("measured") or {}
    gpus = ", ".join(g["name"] for g in machine.get("gpus", [])) or "no CUDA GPU"
    lines = [f"CPU      {machine.get('cpu_model', '?')} ({machine.get('arch', '?')}), "
             f"{machine.get('logical_cores', '?')} logical cores, {machine.get('ram_gb') or 0:.1f} GiB RAM",
             f"SIMD     {', '.join(machine.get('simd', [])) or 'none detected'}",
             f"GPU      {gpus}", f"Device   {card.get('device', '?')}",
             f"Runtime  torch {machine.get('torch_version')}, onnxruntime {machine.get('ort_version')}"]
    if measured:
        flops = measured["flops_by_precision"].items()
        lines.append(f"Measured memory bandwidth {measured['bandwidth_gbs']:.1f} GB/s; matmul "
                     + ", ".join(f"{d} {f / 1e9:,.0f} G(FL)OP/s" for d, f in flops))
    return "\n".join(lines)


def _details(summary: str, text: str) -> str:
    return f"<details><summary>{html.escape(summary)}</summary>\n<pre>{html.escape(text)}</pre>\n</details>"


def figures_table(stem: str, build: dict, runs: list[recordings.Recording]) -> str:
    """A markdown table: each headline figure of lesson stem in this build and in each recorded run."""
    runs = [r for r in runs if r.figures.get(stem)]
    names = list(dict.fromkeys([*build, *(n for r in runs for n in r.figures[stem])]))
    if not names:
        return ""
    head = ["Headline figure", "This build", *(r.device_name for r in runs)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        cells = [str(build[name]) if name in build else "-"]
        cells += [str(r.figures[stem][name]) if name in r.figures[stem] else "-" for r in runs]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _badge(page_source: Path, depth: int) -> str:
    download = "../" * depth + f"{CLEAN_DIR}/{page_source.as_posix()}"
    return (f"[![Open In Colab]({colab.COLAB_BADGE_SVG})]({colab.colab_url(page_source)}) · "
            f"{{download}}`Download the notebook <{download}>` (no outputs; runs in Jupyter, Colab or "
            "`make lab`)")


def _first_heading(nb) -> tuple[int, str] | None:
    """(cell index, heading line) of the notebook's first markdown heading."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return i, line
    return None


def _titled(nb, header: str):
    """nb with header placed right under its title (its first '# ' heading), which stays the page title."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    for cell in nb.cells:
        if colab.SETUP_TAG in cell.metadata.get("tags", []):
            cell.metadata["tags"] = [*cell.metadata["tags"], "hide-cell"]
    found = _first_heading(nb)
    cell = nbformat.v4.new_markdown_cell(header)
    cell.id = "site-header"
    if found is None:
        nb.cells.insert(0, cell)
        return nb
    index, line = found
    rest = nb.cells[index].source.replace(line, "", 1).strip()
    nb.cells[index].source = line
    nb.cells.insert(index + 1, cell)
    if rest:
        extra = nbformat.v4.new_markdown_cell(rest)
        extra.id = "site-title-rest"
        nb.cells.insert(index + 2, extra)
    return nb


def stage(pages: list[Page], executed: Path, src: Path, *, root: Path = ROOT,
          recordings_dir: Path = recordings.RECORDINGS_DIR) -> dict[str, str]:
    """Write every page into src/ (Sphinx's sources); returns page name -> where its outputs come from."""
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    build_card = _card_text(executed)
    build = recordings.load_folder(executed) if (executed / recordings.HEADLINE_FILE).exists() else None
    recorded = [recordings.load(chip, recordings_dir) for chip in recordings.available(recordings_dir)]
    built = build.label if build else "not recorded"
    card_block = _details(f"Machine card of the machine that built this site ({built})", build_card or built)
    origins = {}
    for page in pages:
        clean = nbformat.read(root / page.source, as_version=4)
        (src / CLEAN_DIR / page.source.parent).mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / page.source, src / CLEAN_DIR / page.source)
        stem = page.source.stem
        if _current(executed, page, root, need_ok=page.kind == "lesson"):
            nb, origin = nbformat.read(executed / page.source.name, as_version=4), (
                f"*Outputs: executed on {build.label} while this site was built (card below).*")
        else:
            match = next((r for r in recorded if page.kind == "lesson" and _current(r.folder, page, root,
                                                                                    need_ok=True)), None)
            if match is not None:
                nb = nbformat.read(match.folder / page.source.name, as_version=4)
                origin = f"*Outputs: from the recorded run on {match.label}; this build did not execute it.*"
            else:
                nb, origin = clean, "*Not executed in this build: run it in Jupyter or Colab.*"
        parts = [_badge(page.source, 1), "", origin]
        if page.kind == "assignment":
            parts += ["", "*The released student version, run as released: the cells you complete raise "
                      "`NotImplementedError`, and the tests after them fail, until you write them.*"]
        others = [r for r in recorded if r.notebook(stem)]
        if others:
            links = ", ".join(f"{{doc}}`{r.device_name} <../recordings/{r.chip}/{stem}>`" for r in others)
            parts += ["", f"**What this lesson printed on:** {links}"]
        table = figures_table(stem, build.figures.get(stem, {}) if build else {}, recorded) \
            if page.kind == "lesson" else ""
        parts += ["", table] if table else []
        parts += ["", card_block]
        (src / page.name).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(_titled(nb, "\n".join(parts)), src / f"{page.name}.ipynb")
        origins[page.name] = origin
    for run in recorded:
        _stage_recording(run, pages, src, root, card_block)
    _write_index(pages, recorded, src, build, build_card)
    return origins


def _stage_recording(run: recordings.Recording, pages: list[Page], src: Path, root: Path, card_block: str):
    folder = src / "recordings" / run.chip
    folder.mkdir(parents=True)
    lessons = [p for p in pages if p.kind == "lesson" and run.notebook(p.source.stem)]
    for page in lessons:
        stem = page.source.stem
        same = _current(run.folder, page, root, need_ok=False)
        note = "" if same else " It ran an earlier version of this lesson's cells."
        row = _rows(run.folder).get(page.source.as_posix(), {})
        if row.get("status", "ok") != "ok":
            note += f" It stopped at cell {row.get('cell')} ({row['status']}): the traceback is below."
        header = "\n".join([
            f"**What this lesson printed on {run.label}.**{note} "
            f"The run of this site's build machine: {{doc}}`{page.title} <../../{page.name}>`.", "",
            _badge(page.source, 2), "",
            _details(f"Machine card of {run.device_name}", _card_text(run.folder)), "", card_block])
        nb = nbformat.read(run.notebook(stem), as_version=4)
        nbformat.write(_titled(nb, header), folder / f"{stem}.ipynb")
    rows = [f"| {{doc}}`{p.title} <{p.source.stem}>` | "
            + "; ".join(f"{name} {fig}" for name, fig in run.figures.get(p.source.stem, {}).items()) + " |"
            for p in lessons]
    toc = "\n".join(p.source.stem for p in lessons)
    (folder / "index.md").write_text("\n".join([
        f"# Recorded on {run.device_name}", "",
        f"Every lesson as it ran on {run.label} (`make record`), to read beside your own run.", "",
        "| Lesson | Headline figures |", "|---|---|", *rows, "",
        _details(f"Machine card of {run.device_name}", _card_text(run.folder)), "",
        "```{toctree}", ":hidden:", "", toc, "```", ""]), encoding="utf-8")


def _write_index(pages, recorded, src: Path, build, build_card: str):
    def toctree(caption, names):
        if not names:
            return []
        return ["```{toctree}", f":caption: {caption}", ":maxdepth: 1", "", *names, "```", ""]

    lessons = [p.name for p in pages if p.kind == "lesson"]
    tasks = [p.name for p in pages if p.kind == "assignment"]
    built = build.label if build else "this machine"
    lines = [
        "# Hardware Optimization for ML", "",
        "Lessons with live experiments and graded assignments on what makes ML fast on real hardware. Every "
        f"page shows what its notebook printed when this site was built, on {built}; "
        "each has a Colab badge and a download link to run it yourself.", "",
        *toctree("Lessons", lessons), *toctree("Graded assignments (student versions)", tasks),
        *toctree("Recorded runs (make record)", [f"recordings/{r.chip}/index" for r in recorded]),
        _details("Machine card of the machine that built this site", build_card or "not recorded"), ""]
    if not recorded:
        lines += ["No recorded run yet: `make record DEVICE=cuda` on a GPU machine adds one.", ""]
    (src / "index.md").write_text("\n".join(lines), encoding="utf-8")


def sphinx_build(src: Path, out: Path) -> None:
    """Render src/ into out/ with site/conf.py (ValueError with Sphinx's output when it fails)."""
    if out.exists():
        shutil.rmtree(out)
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-c", str(CONF_DIR), str(src), str(out)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"sphinx-build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key in ("href", "src") and value:
                self.links.append(value)


def broken_links(html_dir: Path | str) -> list[tuple[str, str]]:
    """(page, link) for every link in the site's pages to a local file that does not exist."""
    html_dir = Path(html_dir)
    broken = []
    for page in sorted(p for p in html_dir.rglob("*.html") if not p.is_relative_to(html_dir / "_static")):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        for link in parser.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or not parts.path:
                continue
            target = (page.parent / unquote(parts.path)).resolve()
            if not target.exists():
                broken.append((page.relative_to(html_dir).as_posix(), link))
    return broken


def build(out: Path | str = DEFAULT_OUT, *, device: str = "auto", only=None, root: Path = ROOT,
          progress=print) -> tuple[Path, list[record.NotebookRun], list[tuple[str, str]]]:
    """Execute, stage and render the site into out/html; returns (index.html, the runs, the broken links)."""
    out = Path(out)
    only = None if only is None else {Path(p).resolve().relative_to(root).as_posix() for p in only}
    pages = course_pages(root)
    if only is not None:
        unknown = only - {p.source.as_posix() for p in pages}
        if unknown:
            raise ValueError(f"only must name lessons or released assignments; got {sorted(unknown)}")
    runs = execute(pages, out / "executed", device=device, only=only, root=root, progress=progress)
    stage(pages, out / "executed", out / "src", root=root)
    sphinx_build(out / "src", out / "html")
    return out / "html" / "index.html", runs, broken_links(out / "html")


def main(argv=None) -> int:
    """The command line: 0 when the site is built, every lesson ran and every link resolves; else 1."""
    parser = argparse.ArgumentParser(prog="python -m hwopt.course.site", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="build folder (default build/site)")
    parser.add_argument("--device", default="auto", help="device the lessons run on (default auto)")
    parser.add_argument("--only", nargs="+", default=None, help="execute just these notebooks")
    args = parser.parse_args(argv)
    started = datetime.datetime.now()
    try:
        index, runs, broken = build(args.out, device=args.device, only=args.only)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    failed = [run for run in runs if not run.ok and run.path.startswith("notebooks/")]
    for run in failed:
        print("\nFAILED " + run.failure_report())
    for page, link in broken:
        print(f"broken link in {page}: {link}")
    seconds = (datetime.datetime.now() - started).total_seconds()
    print(f"site: {index} ({len(runs)} notebooks executed, {seconds:.0f} s)")
    return 1 if failed or broken else 0


if __name__ == "__main__":
    sys.exit(main())
