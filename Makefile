# The two commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ARGS ?=

.PHONY: demo test lint typecheck install install-dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .

install-dev: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'

## Install and run the offline deploy-approval demo (SQLite file ./graphkit-demo.db).
## Unattended: make demo ARGS=--yes
demo: install
	$(BIN)/graphkit demo $(ARGS)

lint: install-dev
	$(BIN)/ruff check graphkit graphs tests

typecheck: install-dev
	$(BIN)/mypy

## Install the dev extra and run the whole suite: lint, types, tests.
test: install-dev lint typecheck
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache graphkit-demo.db*
