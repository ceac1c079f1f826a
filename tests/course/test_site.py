"""course.site: the website builds offline from executed notebooks, and in Chromium its pages show them.

The build executes one lesson and one student version live (LIVE); every other page shows the recorded run
in data/recordings/ of the same cells (the page says so), which keeps this test near a minute and a half
on two cores. `make site` executes every notebook.
"""

from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from hwopt import recordings
from hwopt.course import colab, site

ROOT = colab.ROOT
CHROMIUM = Path("/usr/bin/chromium")
LIVE = ("notebooks/03_batching.ipynb", "release/batching/batching.ipynb")  # fast; plots and sliders


def test_course_pages_are_every_lesson_then_every_student_version():
    pages = site.course_pages()
    lessons = {p.relative_to(ROOT) for p in ROOT.glob("notebooks/[0-9][0-9]_*.ipynb")}
    releases = {p.relative_to(ROOT) for p in ROOT.glob("release/*/*.ipynb")}
    assert {p.source for p in pages if p.kind == "lesson"} == lessons
    assert {p.source for p in pages if p.kind == "assignment"} == releases
    kinds = [p.kind for p in pages]
    assert kinds == sorted(kinds, key=lambda k: k != "lesson")
    assert len({p.name for p in pages}) == len(pages), "two notebooks would share one page"


def test_figures_table_sets_this_build_beside_each_recorded_chip(tmp_path):
    run = recordings.Recording("nvidia-h200", tmp_path, "cuda", "NVIDIA H200", "2026-12-01",
                               {"03_batching": {"batching speedup": recordings.Figure(40.0, "x")}})
    build = {"batching speedup": recordings.Figure(8.0, "x"),
             "throughput ceiling": recordings.Figure(1e4, "items/s")}
    table = site.figures_table("03_batching", build, [run])
    assert table.splitlines()[0] == "| Headline figure | This build | NVIDIA H200 |"
    assert "| batching speedup | 8 x | 40 x |" in table
    assert "| throughput ceiling | 10,000 items/s | - |" in table
    assert site.figures_table("01_chips", {}, [run]) == ""


def test_broken_links_names_each_local_link_without_a_target(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "page.html").write_text(
        '<a href="../index.html#top">ok</a><img src="missing.png"><a href="https://example.org/x">web</a>'
        '<a href="#here">anchor</a><script src="../_static/s.js"></script>')
    (tmp_path / "index.html").write_text('<a href="a/page.html?x=1">ok</a>')
    assert site.broken_links(tmp_path) == [("a/page.html", "missing.png"), ("a/page.html", "../_static/s.js")]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    pytest.importorskip("myst_nb", reason="the site group installs Sphinx and myst-nb: run `make env`")
    out = tmp_path_factory.mktemp("site")
    index, runs, broken = site.build(out, device="cpu", only=[ROOT / p for p in LIVE], progress=None)
    return {"index": index, "runs": runs, "broken": broken, "html": index.parent}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_site_builds_with_every_internal_link_resolving(built):
    assert sorted(run.path for run in built["runs"]) == sorted(LIVE)
    lesson_runs = [run for run in built["runs"] if run.path.startswith("notebooks/")]
    assert all(run.ok for run in lesson_runs), [run.failure_report() for run in lesson_runs]
    assert built["broken"] == []
    for page in site.course_pages():
        html = built["html"] / f"{page.name}.html"
        assert html.exists(), f"no page for {page.source}"
        if page.source.as_posix() not in LIVE:  # each page says where its outputs come from
            text = html.read_text(encoding="utf-8")
            assert "from the recorded run on" in text or "Not executed in this build" in text, page.source
    for chip in recordings.available():
        assert (built["html"] / "recordings" / chip / "index.html").exists()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium: run `make browser-deps`")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM),
                                              args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        yield page
    finally:
        context.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_index_links_every_lesson_and_assignment(built, page):
    page.goto(built["index"].as_uri())
    hrefs = page.locator("article a, nav a").evaluate_all("links => links.map(a => a.href)")
    for course_page in site.course_pages():
        target = (built["html"] / f"{course_page.name}.html").as_uri()
        assert target in hrefs, f"the index does not link {course_page.source}"
    assert "Machine card of the machine that built this site" in page.inner_text("article")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_lesson_page_shows_its_plots_its_sliders_default_state_and_no_error(built, page):
    page.goto((built["html"] / "lessons" / "03_batching.html").as_uri())
    article = page.locator("article")
    assert "executed on" in article.inner_text() and "while this site was built" in article.inner_text()
    plots = article.locator(".cell_output img")
    assert plots.count() >= 2, "the lesson's plots should be images on its page"
    assert all(plots.nth(i).evaluate("img => img.naturalWidth") > 0 for i in range(plots.count()))
    assert article.locator(".output.traceback, .output.error").count() == 0
    assert "Traceback (most recent call last)" not in article.inner_text()
    assert "the slider runs in Jupyter or Colab" in article.inner_text()
    badge = article.locator("a[href^='https://colab.research.google.com/github/']")
    assert badge.first.get_attribute("href") == colab.colab_url(LIVE[0])
    download = article.locator("a.download").first.get_attribute("href")
    assert download.endswith("03_batching.ipynb")
    assert (built["html"] / "lessons" / download).resolve().exists()
    for chip in recordings.available():
        if recordings.load(chip).notebook("03_batching"):
            link = article.locator(f"a[href*='recordings/{chip}/03_batching']")
            assert link.count() == 1, f"the page should link what this lesson printed on {chip}"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_search_finds_the_lessons(built, page):
    page.goto((built["html"] / "search.html").as_uri() + "?q=roofline")
    page.wait_for_selector("#search-results li", timeout=30_000)
    found = page.locator("#search-results li a").evaluate_all("links => links.map(a => a.href)")
    assert any("/lessons/" in href for href in found), found
