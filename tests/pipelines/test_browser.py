"""Students use the course in a real browser: JupyterLab in Chromium renders the sliders, and they work.

A JupyterLab server on 127.0.0.1 (free port, known token) serves a copy of the notebooks; Playwright drives
Debian's Chromium (`make test` installs it with apt; without apt the test is skipped, saying how to enable it,
except in CI, where it fails). Screenshots go to artifacts/browser/.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import nbformat
import pytest

from hwopt.course import colab

ROOT = colab.ROOT
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "artifacts" / "browser"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-quic"]
# The lesson whose slider the test moves (a fast one first) and the assignment whose visible tests it passes.
LESSON = "notebooks/03_batching.ipynb"  # a lesson with a slider
ASSIGNMENT = "release/batching"  # an assignment with visible tests
# JupyterLab settings for a quiet, deterministic page: every cell in the DOM, no news or update pop-ups.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                       "checkForUpdates": False},
}
RUN_TIMEOUT_S = 150

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
HOW_TO_ENABLE = (f"the browser test needs Chromium at {CHROMIUM}: `make browser-deps` installs it where "
                 "apt-get is (Debian, Ubuntu, WSL); elsewhere install Chromium there, then test again")


def in_ci(environ=os.environ) -> bool:
    """True on a CI runner (CI=true, as GitHub Actions and the course's .ci/run set it)."""
    return environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_chromium(path=CHROMIUM, environ=os.environ) -> None:
    """Skip where Chromium is missing, saying how to get it; in CI, fail instead."""
    if Path(path).exists():
        return
    if in_ci(environ):
        pytest.fail(f"{HOW_TO_ENABLE} (CI must run it)")
    pytest.skip(HOW_TO_ENABLE)


@pytest.fixture(scope="module")
def chromium():
    require_chromium()
    return CHROMIUM


def test_without_chromium_the_browser_test_skips_saying_how_to_enable_it_but_fails_in_ci(tmp_path):
    missing = tmp_path / "chromium"
    with pytest.raises(pytest.skip.Exception, match="make browser-deps"):
        require_chromium(missing, {})
    with pytest.raises(pytest.fail.Exception, match="CI must run it"):
        require_chromium(missing, {"CI": "true"})
    assert require_chromium(Path(sys.executable), {"CI": "true"}) is None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def api(base, token, path, method="GET"):
    headers = {"Authorization": f"token {token}"}
    request = urllib.request.Request(f"{base}{path}", method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return json.loads(body) if body else None


def start_lab(root: Path, log_path: Path):
    """JupyterLab serving root on 127.0.0.1:<free port>; returns (process, base url, token)."""
    settings, port, token = root / ".lab-settings", free_port(), uuid.uuid4().hex
    for name, values in LAB_SETTINGS.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(settings),
           "JUPYTERLAB_WORKSPACES_DIR": str(root / ".ws"), "JUPYTER_RUNTIME_DIR": str(root / ".runtime")}
    env.pop("MPLBACKEND", None)  # the tests' off-screen backend would turn the kernels' plots into text
    # The course's JupyterLab defaults, as `make lab` installs them (also when pytest runs without make).
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(ROOT / "jupyter-config"),
                                                               os.environ.get("JUPYTER_CONFIG_PATH")]))
    command = [str(Path(sys.executable).parent / "jupyter-lab"), "--no-browser", "--allow-root",
               "--ip=127.0.0.1", f"--port={port}", "--port-retries=0", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
               "--ServerApp.disable_check_xsrf=False"]
    log = log_path.open("w")
    process = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited early:\n{log_path.read_text()[-3000:]}")
        try:
            api(base, token, "/api/status")
            return process, base, token
        except OSError:
            time.sleep(0.5)
    stop_lab(process, base, token)
    raise RuntimeError(f"JupyterLab did not answer within 90 s:\n{log_path.read_text()[-3000:]}")


def stop_lab(process, base, token):
    """Shut down the kernels it started, then the server (its process group), waiting for both."""
    try:
        for kernel in api(base, token, "/api/kernels") or []:
            api(base, token, f"/api/kernels/{kernel['id']}", method="DELETE")
    except OSError:
        pass
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def lab(chromium, tmp_path_factory):
    """JupyterLab over a throw-away copy of the student-facing folders; the repository stays as is."""
    root = tmp_path_factory.mktemp("lab")
    for folder in ("notebooks", "release", "data"):
        if (ROOT / folder).is_dir():
            shutil.copytree(ROOT / folder, root / folder)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    process, base, token = start_lab(root, ARTIFACTS / "jupyterlab.log")
    try:
        yield {"base": base, "token": token, "root": root}
    finally:
        stop_lab(process, base, token)


@pytest.fixture(scope="module")
def browser(chromium):
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser, request):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    try:
        yield page
    finally:
        page.screenshot(path=str(ARTIFACTS / f"{request.node.name}-last.png"), full_page=True)
        context.close()


# --- JupyterLab, driven through its own command registry and DOM -------------------------------------------

def open_notebook(page, lab, rel):
    page.goto(f"{lab['base']}/lab/tree/{rel}?reset&token={lab['token']}")  # reset: no restored tabs
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell", timeout=90_000)
    # The notebook is open once its panel is the current widget and the kernel is idle.
    page.wait_for_function(
        """(path) => {
            const w = window.jupyterapp.shell.currentWidget;
            return w && w.context && w.context.path === path && w.sessionContext &&
                   w.sessionContext.session && w.sessionContext.session.kernel &&
                   w.sessionContext.kernelDisplayStatus === 'idle';
        }""", arg=rel, timeout=90_000)
    panel_id = page.evaluate("() => window.jupyterapp.shell.currentWidget.id")
    return page.locator(f"[id='{panel_id}']")


def run_all_and_wait(page, restart=False, timeout_s=RUN_TIMEOUT_S):
    """Run every cell (JupyterLab's Run All, after a kernel restart if asked); wait until it has finished."""
    page.evaluate(
        """(restart) => {
            const app = window.jupyterapp, w = app.shell.currentWidget;
            window.__runAll = 'running';
            (restart ? w.sessionContext.restartKernel() : Promise.resolve())
                .then(() => app.commands.execute('notebook:run-all-cells'))
                .then(() => { window.__runAll = 'done'; }, (e) => { window.__runAll = 'failed: ' + e; });
        }""", restart)  # not awaited here: the wait below has a deadline
    page.wait_for_function("() => window.__runAll !== 'running'", timeout=timeout_s * 1000, polling=500)
    state = page.evaluate("() => window.__runAll")
    assert state == "done", f"JupyterLab could not run the notebook: {state}"


def code_outputs(page):
    """Per code cell: execution count and its outputs (type, text) from the notebook model."""
    return page.evaluate(
        """() => window.jupyterapp.shell.currentWidget.content.widgets
            .filter(c => c.model.type === 'code')
            .map(c => ({count: c.model.executionCount,
                        grade_id: (c.model.getMetadata('nbgrader') || {}).grade_id,
                        outputs: c.model.outputs.toJSON().map(o => ({type: o.output_type,
                            text: (o.text || (o.data && o.data['text/plain'])
                                   || (o.ename && o.ename + ': ' + o.evalue) || '') + ''}))}))""")


def widget_outputs(panel):
    """What the widgets' Output areas in the notebook show now: printed text and plot images (their src)."""
    return panel.locator(".widget-output").evaluate_all(
        "nodes => nodes.map(n => n.innerText + [...n.querySelectorAll('img')].map(i => i.src).join())")


def kernel_idle(page):
    return page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.kernelDisplayStatus"
                         " === 'idle'")


def settled_widget_outputs(panel, before, timeout_s=60, quiet_s=1.0):
    """Widget outputs once they differ from before, the kernel is idle and nothing changed for quiet_s."""
    deadline, last, last_change = time.monotonic() + timeout_s, before, time.monotonic()
    while time.monotonic() < deadline:
        now = widget_outputs(panel)
        if now != last:
            last, last_change = now, time.monotonic()
        elif now != before and time.monotonic() - last_change >= quiet_s and kernel_idle(panel.page):
            break
        panel.page.wait_for_timeout(250)
    return last


def errors_in(outputs):
    return [o for cell in outputs for o in cell["outputs"] if o["type"] == "error"]


# --- the tests ---------------------------------------------------------------------------------------------

def test_widget_messages_go_to_the_kernels_main_thread(lab):
    """JupyterLab 4.6 sends widget messages to a kernel subshell thread, where matplotlib fails at random."""
    plugin = "@jupyterlab/apputils-extension:kernels-settings"
    settings = api(lab["base"], lab["token"], f"/lab/api/settings/{plugin}")
    default = settings["schema"]["properties"]["commsOverSubshells"]["default"]
    assert settings["settings"].get("commsOverSubshells", default) == "disabled"


def test_a_lesson_slider_moved_in_chromium_changes_its_output(lab, page):
    panel = open_notebook(page, lab, LESSON)
    run_all_and_wait(page)
    outputs = code_outputs(page)
    assert not errors_in(outputs), f"{LESSON} raised in the browser: {errors_in(outputs)}"
    slider = panel.locator(".widget-slider").first
    slider.wait_for(state="visible", timeout=60_000)
    slider.scroll_into_view_if_needed()
    cell = slider.locator("xpath=ancestor::div[contains(concat(' ', @class, ' '), ' jp-Cell ')][1]")
    cell.screenshot(path=str(ARTIFACTS / "lesson-slider-before.png"))
    readout = slider.locator(".widget-readout")
    before_value, before = readout.inner_text(), widget_outputs(panel)
    slider.locator(".noUi-handle, .ui-slider-handle").first.focus()  # ipywidgets 8 / 7 slider handles
    page.keyboard.press("ArrowRight")
    after = settled_widget_outputs(panel, before)
    cell.screenshot(path=str(ARTIFACTS / "lesson-slider-after.png"))
    assert readout.inner_text() != before_value, "the slider's value did not move with the keyboard"
    assert after != before, "moving the slider did not change the output it drives"
    assert not any("Traceback" in text for text in after), f"the slider's callback raised: {after}"
    had_plot, has_plot = ("data:image" in "".join(before)), ("data:image" in "".join(after))
    assert has_plot or not had_plot, "the plot the slider drives disappeared after the move"


def solutions_by_grade_id(source_notebook: Path) -> dict[str, str]:
    """Solution cells of an nbgrader source notebook, markers removed, by grade_id."""
    solutions = {}
    for cell in nbformat.read(source_notebook, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution"):
            lines = [line for line in cell.source.splitlines() if line.strip() not in
                     ("### BEGIN SOLUTION", "### END SOLUTION")]
            solutions[meta["grade_id"]] = "\n".join(lines)
    return solutions


def type_into_cell(panel, index, text):
    """Replace the text of the notebook's cell at index as a student would: click, select all, paste."""
    cell = panel.locator(".jp-Cell").nth(index)
    cell.scroll_into_view_if_needed()
    cell.locator(".cm-content").click()
    panel.page.keyboard.press("Control+a")
    panel.page.keyboard.insert_text(text)


def test_an_assignment_filled_in_chromium_passes_its_visible_tests(lab, page):
    folder = ASSIGNMENT
    notebook = sorted((ROOT / folder).glob("*.ipynb"))[0]
    rel = notebook.relative_to(ROOT).as_posix()
    solutions = solutions_by_grade_id(ROOT / "source" / Path(folder).name / notebook.name)
    assert solutions, f"source/{Path(folder).name}/{notebook.name} should have solution cells"
    panel = open_notebook(page, lab, rel)
    run_all_and_wait(page)
    blank = code_outputs(page)
    assert errors_in(blank), "the blank release should fail its visible tests"
    ids = [cell["grade_id"] for cell in blank]
    code_cells = page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.content.widgets.map(c => c.model.type)")
    code_index = [i for i, kind in enumerate(code_cells) if kind == "code"]
    for position, grade_id in enumerate(ids):
        if grade_id in solutions:
            type_into_cell(panel, code_index[position], solutions[grade_id])
    run_all_and_wait(page, restart=True)
    page.screenshot(path=str(ARTIFACTS / "assignment-filled.png"), full_page=True)
    filled = code_outputs(page)
    assert not errors_in(filled), f"visible tests failed with the source solutions: {errors_in(filled)}"
    assert all(cell["count"] for cell in filled), "every cell should have run"
