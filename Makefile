# One command each, on a fresh machine: `make demo`, `make test`, `make bench`.
# Each creates ./.venv from the repo's own pyproject.toml the first time.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,bench,dask]'
	touch $@

.PHONY: demo test bench
demo: $(BIN)/.installed
	$(BIN)/litmus-score demo

test: $(BIN)/.installed
	$(BIN)/python -m pytest

bench: $(BIN)/.installed
	$(BIN)/python benchmarks/run.py --calls 1000000 --repeat 5
