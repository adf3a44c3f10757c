# One command each, on a fresh machine: `make demo`, `make test`, `make bench`.
# Each creates ./.venv from the repo's own pyproject.toml the first time.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

# The Airflow DAG's test, in a virtualenv of its own: Airflow's pins disagree with ours.
AIRFLOW_VENV := .venv-airflow
$(AIRFLOW_VENV)/bin/.installed: deploy/airflow/requirements-test.txt
	$(PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(AIRFLOW_VENV)/bin/python -m pip install --quiet -r deploy/airflow/requirements-test.txt
	touch $@

.PHONY: demo test test-airflow bench
demo: $(BIN)/.installed
	$(BIN)/litmus-score demo

test: $(BIN)/.installed
	$(BIN)/python -m pytest

# A fresh AIRFLOW_HOME, no examples; LITMUS_REQUIRE_AIRFLOW=1 turns a skip into a failure.
# The task's job runs on the project's own python (LITMUS_PYTHON), as on an Airflow worker.
test-airflow: $(AIRFLOW_VENV)/bin/.installed $(BIN)/.installed
	home=$$(mktemp -d) && AIRFLOW_HOME=$$home AIRFLOW__CORE__LOAD_EXAMPLES=False LITMUS_REQUIRE_AIRFLOW=1 \
	  LITMUS_PYTHON=$(CURDIR)/$(BIN)/python \
	  $(AIRFLOW_VENV)/bin/python -m pytest -p no:cacheprovider tests/test_airflow_dag.py; \
	  status=$$?; rm -rf $$home; exit $$status

bench: $(BIN)/.installed
	$(BIN)/python benchmarks/run.py --calls 1000000 --repeat 5
