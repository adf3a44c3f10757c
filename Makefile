# One command each, on a fresh machine: `make demo`, `make test`, `make check`, `make bench`.
# Each creates ./.venv from the repo's own pyproject.toml the first time.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

# setup.py and the C source: the editable install compiles transforms._native in place.
$(BIN)/.installed: pyproject.toml setup.py transforms/_native.c
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

.PHONY: demo test check lint test-twin test-airflow bench
demo: $(BIN)/.installed
	$(BIN)/litmus-score demo

# Every test, on every core.
test: $(BIN)/.installed
	$(BIN)/python -m pytest -n auto

# The rule set and the types, as pyproject.toml states them.
lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/mypy

# The loop while you work, under two minutes: lint, types, and the tests that start no
# engine or browser and run no whole command end to end.
check: lint
	$(BIN)/python -m pytest -n auto -q -m "not engine and not browser and not slow"

# The JSON, policy and conformance tests again with only the pure-Python twin of transforms._native
# (docs/testing.md); the stage agreement tests already run both implementations in make test.
TWIN_TESTS := tests/test_policy_compiled.py tests/test_jsontext.py tests/test_validity.py tests/test_conformance.py
test-twin: $(BIN)/.installed
	LITMUS_NATIVE=0 $(BIN)/python -m pytest -n auto -p no:cacheprovider $(TWIN_TESTS)

# A fresh AIRFLOW_HOME whose dags folder is deploy/airflow, no examples; LITMUS_REQUIRE_AIRFLOW=1
# turns a skip into a failure. The DAG runs as shipped, configured as a deployer would: litmus-score's
# environment is this checkout's .venv (as a deployer's is /opt/litmus-score/.venv).
test-airflow: $(AIRFLOW_VENV)/bin/.installed $(BIN)/.installed
	home=$$(mktemp -d) && AIRFLOW_HOME=$$home AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/deploy/airflow \
	  AIRFLOW__CORE__LOAD_EXAMPLES=False LITMUS_REQUIRE_AIRFLOW=1 \
	  $(AIRFLOW_VENV)/bin/python -m pytest -p no:cacheprovider tests/test_airflow_dag.py; \
	  status=$$?; rm -rf $$home; exit $$status

# Start-up, 1M and 10M calls, with and without the policy, each against the DuckDB query in the same round
# (about 25 minutes; the workloads are generated once into bench-work/, 3 GB).
bench: $(BIN)/.installed
	$(BIN)/python benchmarks/run.py --startup --calls 1000000,10000000 --without-policy-too --repeat 3 \
	  --workdir bench-work
