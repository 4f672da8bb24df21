# The two commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ARGS ?=

.PHONY: demo test bench lint typecheck install install-dev postgres-bin browser-bin clean

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
	$(BIN)/ruff check graphkit graphs tests benchmarks

typecheck: install-dev
	$(BIN)/mypy

## The tests start their own throwaway PostgreSQL server from Debian's binaries.
postgres-bin:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  echo "installing Debian's postgresql (server binaries for the tests)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }

## The web inbox's tests drive Debian's Chromium with Playwright (its own download is not used).
browser-bin:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium (the browser the web inbox tests drive)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

## Install the dev extra and run the whole suite: lint, types, tests.
test: install-dev postgres-bin browser-bin lint typecheck
	$(BIN)/python -m pytest

## graphkit against LangChain's HITL middleware and a minimal graph; writes benchmarks/results.json
bench: install-dev postgres-bin
	$(BIN)/python -m benchmarks.bench $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache graphkit-demo.db*
