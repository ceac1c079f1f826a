# Thin targets: each one step. The environment (.venv) is created on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: env lab test lint unit notebooks clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[course,test]'
	touch $(STAMP)

env: $(STAMP)          ## create the environment if missing

lab: env               ## open the course in JupyterLab on 127.0.0.1
	jupyter lab --ip=127.0.0.1 --allow-root --notebook-dir=.

test: env              ## lint, then every test (unit, notebooks, grading, browser)
	ruff check .
	$(PY) -m pytest

lint: env
	ruff check .

unit: env              ## toolkit unit tests only (fast)
	$(PY) -m pytest tests -m "not slow"

notebooks: env         ## execute every lesson notebook under nbval
	$(PY) -m pytest notebooks

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
