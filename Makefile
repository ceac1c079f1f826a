# Thin targets: each one step. The environment (.venv) is created on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: env lab test lint unit notebooks clean browser-deps grading-deps gradebook-deps hub-deps colab-overlay \
	lab-settings engine-deps engine

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[course,test,site]'
	touch $(STAMP)

env: $(STAMP)          ## create the environment if missing

# JupyterLab defaults for the course (jupyter-config/): widget callbacks run on the kernel's main thread.
# (JupyterLab 4.6 sends widget messages to a kernel subshell thread; matplotlib drawing there fails at random.)
lab-settings: env      ## install the course's JupyterLab default settings into the environment
	mkdir -p $(VENV)/etc/jupyter/labconfig
	cp jupyter-config/labconfig/default_setting_overrides.json $(VENV)/etc/jupyter/labconfig/

lab: env lab-settings  ## open the course in JupyterLab on 127.0.0.1
	jupyter lab --ip=127.0.0.1 --allow-root --notebook-dir=.

# Browser test: Debian's Chromium, installed once when missing (Playwright drives it; it downloads nothing).
browser-deps:          ## install /usr/bin/chromium via apt when missing
	@test -x /usr/bin/chromium || ! command -v apt-get >/dev/null || { \
	  SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; }

# Grading sandbox: Debian's bubblewrap, installed once when missing (every grading kernel runs inside it).
grading-deps:          ## install /usr/bin/bwrap via apt when missing
	@command -v bwrap >/dev/null || ! command -v apt-get >/dev/null || { \
	  SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq bubblewrap; }

# Parallel grading's gradebook: Debian's PostgreSQL server, installed once when missing (the tests start a private
# one on 127.0.0.1 and stop it; an instructor grades into their own, README "Grading in parallel").
gradebook-deps:        ## install PostgreSQL's server (initdb, pg_ctl) via apt when missing
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null || \
	  ! command -v apt-get >/dev/null || { \
	  SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql; }

# The course on a JupyterHub (deploy/hub/): its proxy, configurable-http-proxy, from npm into the environment
# (.venv/bin), once when missing; Debian's Node.js and npm via apt when npm is missing.
CHP_VERSION := 5.3.0
hub-deps: env          ## install configurable-http-proxy (npm) into .venv when missing
	@test -x $(VENV)/bin/configurable-http-proxy || { \
	  command -v npm >/dev/null || ! command -v apt-get >/dev/null || { \
	    SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nodejs npm; }; \
	  npm install --global --silent --prefix $(VENV) configurable-http-proxy@$(CHP_VERSION); }

# The serving engine (lesson 11): llama.cpp's llama-server built from source with CMake and the C++ compiler,
# once, cached in ~/.cache/hwopt/llama.cpp (hwopt/kernels/llama_build.py; about 4 minutes on 2 cores).
engine-deps:           ## install CMake and g++ via apt when missing
	@{ command -v cmake >/dev/null && command -v c++ >/dev/null; } || ! command -v apt-get >/dev/null || { \
	  SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq cmake g++; }

engine: env engine-deps  ## build llama-server (cached; nothing to do once built)
	$(PY) -m hwopt engine

# Colab compatibility test: Colab's widget and IPython versions (hwopt/course/colab_pip_freeze.txt) in a folder
# prepended to PYTHONPATH.
colab-overlay: env     ## Colab's ipywidgets 7.7.1 / IPython 7.34 stack in .venv-colab-overlay/
	$(PY) -m hwopt.course.colab overlay .venv-colab-overlay

# The tests that time nothing run on TEST_WORKERS processes (pytest-xdist, a notebook or test file each);
# those marked `timing` compare measured times, so they run afterwards, alone.
TEST_WORKERS ?= 2
test: env lab-settings browser-deps grading-deps gradebook-deps hub-deps colab-overlay engine  ## lint, then every test (unit, notebooks, grading, browser, hub, engine)
	ruff check .
	$(PY) -m pytest -n $(TEST_WORKERS) -m "not timing"
	$(PY) -m pytest -m timing

lint: env
	ruff check .

unit: env              ## toolkit unit tests only (fast)
	$(PY) -m pytest tests -m "not slow"

notebooks: env         ## execute every lesson notebook under nbval
	$(PY) -m pytest notebooks

clean:
	rm -rf $(VENV) .venv-colab-overlay .pytest_cache .ruff_cache

.PHONY: bench bench-quick
bench bench-quick: OUT ?= benchmarks/out
bench: env             ## the performance report into $(OUT) (OUT=benchmarks/reference regenerates the reference)
	$(PY) -m benchmarks --out $(OUT) $(ARGS)

bench-quick: env       ## the same report in smoke mode (< 3 minutes)
	$(PY) -m benchmarks --quick --out $(OUT) $(ARGS)

# Graded assignments (nbgrader, configured by nbgrader_config.py): release/ is generated from source/.
.PHONY: release grade-demo
release: env           ## regenerate release/ from source/ (commit the result)
	nbgrader generate_assignment "*" --force

grade-demo: env grading-deps  ## grade the sample submissions end to end (exit 1 unless each gets its score)
	$(PY) -m hwopt.course.grading demo --timeout 10

# The course as a website, and recorded runs of the lessons on one device (hwopt/course/site.py, record.py).
.PHONY: site record
site: env              ## every lesson and assignment executed here, rendered into build/site/html/ (offline)
	$(PY) -m hwopt.course.site --out build/site $(ARGS)

record: DEVICE ?= auto
record: env            ## every lesson run on DEVICE (cpu, cuda, mps): saved in data/recordings/<chip>/
	$(PY) -m hwopt.course.record --device $(DEVICE) $(ARGS)
