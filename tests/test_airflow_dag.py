"""The nightly Airflow DAG (deploy/airflow): it loads, and runs `litmus-score nightly` as intended.

Airflow's pins disagree with the project's, so this runs in its own virtualenv
(`make test-airflow`, which sets LITMUS_REQUIRE_AIRFLOW=1: there, a missing
Airflow fails instead of skipping). The main test run skips it.
"""

import os
import subprocess
from pathlib import Path

import pytest

if os.environ.get("LITMUS_REQUIRE_AIRFLOW") != "1":
    pytest.importorskip("airflow", reason="Airflow runs in its own virtualenv: make test-airflow")

from airflow.dag_processing.dagbag import DagBag  # noqa: E402
from airflow.providers.apache.beam.hooks.beam import BeamHook  # noqa: E402
from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "deploy" / "airflow"
# The project's own python (its virtualenv), where the task's job runs.
LITMUS_PYTHON = os.environ.get("LITMUS_PYTHON")


@pytest.fixture(scope="module")
def bag():
    return DagBag(dag_folder=str(DAGS))


@pytest.fixture(scope="module")
def dag(bag):
    return bag.dags["litmus_nightly"]  # get_dag would ask the metadata database


def render(dag, field, ds="2026-11-30", **params):
    task = dag.get_task("score_night")
    context = {"ds": ds, "params": {**{k: v for k, v in dag.params.dump().items()}, **params}}
    return task.render_template(getattr(task, field), context, jinja_env=dag.get_template_env())


def test_the_folder_loads_without_import_errors(bag):
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == ["litmus_nightly"]


def test_schedule_and_task(dag):
    assert dag.schedule == "30 2 * * *" and dag.catchup is False and dag.max_active_runs == 1
    assert [task.task_id for task in dag.tasks] == ["score_night"]
    task = dag.get_task("score_night")
    assert isinstance(task, BeamRunPythonPipelineOperator)
    assert Path(task.py_file) == DAGS / "litmus_nightly_job.py" and Path(task.py_file).exists()
    assert task.retries == 0


def test_the_night_is_scored_with_the_logical_date_and_the_policy_on_direct_runner_by_default(dag):
    assert render(dag, "runner") == "DirectRunner"
    assert render(dag, "pipeline_options") == {
        "date": "2026-11-30",
        "input": "runs/{date}/*.parquet",
        "output-root": "scores/",
        "policy": "configs/policy.yaml",
    }
    assert render(dag, "default_pipeline_options") == {}


def test_dataflow_by_configuration(dag):
    dataflow = {"project": "p", "region": "europe-west1", "temp_location": "gs://b/tmp"}
    assert render(dag, "runner", runner="DataflowRunner") == "DataflowRunner"
    assert render(dag, "default_pipeline_options", beam_options=dataflow) == dataflow


def test_the_job_file_hands_the_flags_to_litmus_score_nightly():
    source = (DAGS / "litmus_nightly_job.py").read_text()
    assert 'main(["nightly", *sys.argv[1:]])' in source


@pytest.mark.parametrize("error, expected", [
    ("Apache Beam process failed with return code 3", "ALERT: an agent's misuse rate regressed"),
    ("Apache Beam process failed with return code 4", "not scored in full"),
    ("Apache Beam process failed with return code 1", "the scoring job failed (exit code 1)"),
    (None, "the scoring job failed (exit code None)"),
])
def test_the_failure_callback_names_exit_codes_3_and_4(dag, error, expected):
    callbacks = dag.get_task("score_night").on_failure_callback
    (alert,) = callbacks if isinstance(callbacks, list) else [callbacks]
    assert alert.__name__ == "alert"
    failure_message = alert.__globals__["failure_message"]  # the DAG file's module, as the DagBag loaded it
    message = failure_message({"exception": error and RuntimeError(error), "ds": "2026-11-30"})
    assert message.startswith("litmus-score nightly 2026-11-30: ") and expected in message


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """runs/DATE/*.parquet for two nights; the second has a planted rise in one agent's misuse."""
    if not LITMUS_PYTHON:
        if os.environ.get("LITMUS_REQUIRE_AIRFLOW") == "1":
            pytest.fail("LITMUS_PYTHON must name the project's python (make test-airflow sets it)")
        pytest.skip("LITMUS_PYTHON is not set")
    root = tmp_path_factory.mktemp("harness")
    agent = subprocess.check_output([LITMUS_PYTHON, "-c", "from testing import synthetic; print(synthetic.AGENTS[3])"],
                                    text=True).strip()
    for date, seed, planted in [("2026-11-30", 21, []), ("2026-12-01", 22, ["--plant-misuse", f"{agent}=2.0"])]:
        subprocess.run([LITMUS_PYTHON, "-m", "pipeline", "generate", "--output", str(root / "runs" / date),
                        "--trajectories", "6000", "--shards", "2", "--seed", str(seed), *planted], check=True)
    return root


def run_task(dag, ds, root):
    """The task's job as its operator starts it: the rendered options, the labels its execute()
    adds, through the Beam hook (which raises on a non-zero exit)."""
    params = {"input": str(root / "runs" / "{date}" / "*.parquet"), "output_root": str(root / "scores"),
              "policy": str(REPO / "configs" / "policy.yaml"), "runner": "FnApiRunner"}
    options = {**render(dag, "default_pipeline_options", ds, **params), **render(dag, "pipeline_options", ds, **params),
               "labels": {"airflow-version": "v3-3-2"}}
    BeamHook(runner=render(dag, "runner", ds, **params)).start_python_pipeline(
        variables=options, py_file=dag.get_task("score_night").py_file, py_options=[], py_interpreter=LITMUS_PYTHON)


def test_the_task_scores_a_night_and_a_regression_raises_the_alert(dag, harness):
    callbacks = dag.get_task("score_night").on_failure_callback
    (alert,) = callbacks if isinstance(callbacks, list) else [callbacks]
    run_task(dag, "2026-11-30", harness)  # the first night: no baseline, exit 0
    assert (harness / "scores" / "date=2026-11-30" / "metrics.json").exists()
    with pytest.raises(Exception) as failure:  # the hook's AirflowException: exit 3
        run_task(dag, "2026-12-01", harness)
    message = alert.__globals__["failure_message"]({"exception": failure.value, "ds": "2026-12-01"})
    assert "ALERT" in message and "(exit code 3)" in message
    assert (harness / "scores" / "date=2026-12-01" / "comparison.json").exists()
