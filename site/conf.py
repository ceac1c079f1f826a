"""Sphinx configuration of the course's website (`make site`; the pages are staged by hwopt.course.site).

The notebooks arrive executed (myst-nb renders their outputs and executes nothing); the book theme and the
search index are built from installed packages only: nothing is fetched at build time.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the toolkit of this checkout

from hwopt.course import colab  # noqa: E402

project = "Hardware Optimization for ML"
author = "The course's authors"
extensions = ["myst_nb"]
nb_execution_mode = "off"  # executed by hwopt.course.record before the build
nb_output_stderr = "show"
myst_enable_extensions = ["html_image"]
exclude_patterns = ["_build", "_notebooks", "**.ipynb_checkpoints"]
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type", "misc.highlighting_failure"]
html_theme = "sphinx_book_theme"
html_title = project
html_theme_options = {
    "repository_url": colab.REPO_URL,
    "use_repository_button": True,
    "show_toc_level": 2,
    "home_page_in_toc": True,
}
html_show_sourcelink = False
html_copy_source = False
