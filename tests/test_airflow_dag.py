"""The nightly Airflow DAG (deploy/airflow) as shipped: it loads, and `dag.test` runs it for a
fixed logical date: the sensor waits for the night, the Beam operator scores it in the
environment the DAG's `environment` param names, verdicts fail at once and alert.

Airflow's pins disagree with the project's, so this runs in its own virtualenv
(`make test-airflow`: a fresh AIRFLOW_HOME whose dags folder is deploy/airflow, and
LITMUS_REQUIRE_AIRFLOW=1, under which a missing Airflow fails instead of skipping). The main
test run skips it. Configured as a deployer configures it, by the DAG's params: litmus-score
checked out at the repo's root with its environment in .venv (as docs/runners.md puts it at
/opt/litmus-score), or, for one night, a pip requirement the operator builds a virtualenv from.
"""

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

if os.environ.get("LITMUS_REQUIRE_AIRFLOW") != "1":
    pytest.importorskip("airflow", reason="Airflow runs in its own virtualenv: make test-airflow")

import pendulum
from airflow.dag_processing.dagbag import DagBag
from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.providers.standard.sensors.python import PythonSensor
from airflow.sdk import CronDataIntervalTimetable
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout, ParamValidationError

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "deploy" / "airflow"
# litmus-score where a deployer would have it: a checkout and its environment.
CHECKOUT_PYTHON = REPO / ".venv" / "bin" / "python"
AGENT = "orca-8b"  # synthetic.AGENTS[3], whose misuse is planted on the second night


@pytest.fixture(scope="module")
def bag():
    return DagBag(dag_folder=str(DAGS))


@pytest.fixture(scope="module")
def dag(bag):
    return bag.dags["litmus_nightly"]  # get_dag would ask the metadata database


@pytest.fixture(scope="module")
def module_of(dag):
    """The DAG file's globals, as the DagBag loaded it."""
    return dag.get_task("score_night").on_failure_callback[0].__globals__


def test_the_folder_loads_without_import_errors(bag):
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == ["litmus_nightly"]


def test_schedule_tasks_and_their_bounds(dag):
    # A data-interval timetable: the run at 02:30 covers the day before, the night it scores.
    assert isinstance(dag.timetable, CronDataIntervalTimetable)
    assert (dag.timetable.expression, str(dag.timetable.timezone)) == ("30 2 * * *", "UTC")
    assert dag.catchup is False and dag.max_active_runs == 1
    wait, score = dag.get_task("wait_for_night"), dag.get_task("score_night")
    assert [t.task_id for t in dag.topological_sort()] == ["wait_for_night", "score_night"]
    assert isinstance(wait, PythonSensor) and isinstance(score, BeamRunPythonPipelineOperator)
    # The sensor frees its slot between pokes, and gives up loudly: no soft fail, an alert.
    assert wait.mode == "reschedule" and wait.poke_interval == 300 and wait.timeout == 4 * 3600
    assert wait.soft_fail is False and wait.on_failure_callback
    assert score.retries == 2 and score.retry_delay == timedelta(minutes=10)
    assert Path(score.py_file) == DAGS / "litmus_nightly_job.py" and Path(score.py_file).exists()


def test_paths_are_absolute_params_with_the_documented_defaults(dag):
    params = dag.params.dump()
    section = (REPO / "docs" / "runners.md").read_text().split("## Nightly on Airflow", 1)[1]
    for name in ("environment", "input", "output_root"):
        assert params[name].startswith("/"), name
        assert f"`{params[name]}`" in section, name  # the docs give the same default
    for name in ("wait_for", "policy", "thresholds", "night"):
        assert params[name] is None and f"`{name}`" in section, name
    for name in ("input", "output_root", "policy", "thresholds", "wait_for"):
        param = dag.params.get_param(name)
        assert param.resolve("gs://bucket/runs/{date}") == "gs://bucket/runs/{date}"
        with pytest.raises(ParamValidationError):  # a relative path is refused when a run is triggered
            param.resolve("runs/relative")


def test_a_site_sets_its_own_defaults_beside_the_dag(tmp_path):
    for name in ("litmus_nightly.py", "litmus_nightly_job.py"):
        (tmp_path / name).write_bytes((DAGS / name).read_bytes())
    (tmp_path / "litmus_nightly.json").write_text(json.dumps({
        "input": "gs://bucket/runs/{date}/*.parquet", "output_root": "gs://bucket/scores",
        "wait_for": "gs://bucket/runs/{date}/_DONE", "runner": "DataflowRunner"}))
    params = DagBag(dag_folder=str(tmp_path)).dags["litmus_nightly"].params.dump()
    assert params["input"] == "gs://bucket/runs/{date}/*.parquet" and params["runner"] == "DataflowRunner"
    assert params["environment"] == "/opt/litmus-score/.venv/bin/python"  # the rest as shipped
    (tmp_path / "litmus_nightly.json").write_text('{"output": "/data/scores"}')
    errors = DagBag(dag_folder=str(tmp_path)).import_errors
    assert "unknown param 'output'; the params are environment, input" in " ".join(errors.values())


@pytest.mark.parametrize("environment, expected", [
    ("/opt/litmus-score/.venv/bin/python", ("/opt/litmus-score/.venv/bin/python", None)),
    ("/usr/bin/python3.11", ("/usr/bin/python3.11", None)),
    ("litmus-score[gcp]==0.1.0", ("python3", ["litmus-score[gcp]==0.1.0"])),
    ("/opt/litmus-score", ("python3", ["/opt/litmus-score"])),  # a checkout: installed, not run
    ("/wheels/litmus_score-0.1.0-py3-none-any.whl", ("python3", ["/wheels/litmus_score-0.1.0-py3-none-any.whl"])),
])
def test_one_param_names_the_environment(module_of, environment, expected):
    assert module_of["job_environment"](environment) == expected


@pytest.mark.parametrize("code, raised", [(3, AirflowFailException), (4, AirflowFailException),
                                          (5, AirflowFailException),
                                          (1, AirflowException), (2, AirflowException)])
def test_verdict_exits_fail_at_once_and_other_failures_retry(dag, monkeypatch, code, raised):
    def failing(self, context):
        raise AirflowException(f"Apache Beam process failed with return code {code}")

    monkeypatch.setattr(BeamRunPythonPipelineOperator, "execute", failing)
    task = dag.get_task("score_night")
    monkeypatch.setattr(task, "environment", sys.executable)
    with pytest.raises(AirflowException) as failure:
        task.execute({})
    assert type(failure.value) is raised  # AirflowFailException: Airflow does not retry it


def test_a_missing_interpreter_fails_loudly_without_retrying(dag, monkeypatch):
    task = dag.get_task("score_night")
    monkeypatch.setattr(task, "environment", "/nowhere/bin/python")
    with pytest.raises(AirflowFailException, match="no python at /nowhere/bin/python"):
        task.execute({})


# ---------------------------------------------------------------- dag.test, as a scheduler runs it


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """The metadata database, and runs/DATE/*.parquet for two nights; the second has a planted rise."""
    if os.environ.get("LITMUS_REQUIRE_AIRFLOW") == "1" and not os.environ.get("AIRFLOW__CORE__DAGS_FOLDER"):
        pytest.fail("make test-airflow sets AIRFLOW__CORE__DAGS_FOLDER to deploy/airflow")
    if not CHECKOUT_PYTHON.exists():
        pytest.fail(f"{CHECKOUT_PYTHON} is missing: make .venv/bin/.installed")
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    root = tmp_path_factory.mktemp("harness")
    for date, seed, planted in [("2026-11-30", 21, []), ("2026-12-01", 22, ["--plant_misuse", f"{AGENT}=2.0"])]:
        subprocess.run([str(CHECKOUT_PYTHON), "-m", "pipeline", "generate", "--output", str(root / "runs" / date),
                        "--trajectories", "6000", "--shards", "2", "--seed", str(seed), *planted],
                       check=True, capture_output=True)
    return root


def run_night(dag, harness, logical_date, **params):
    conf = {"environment": str(CHECKOUT_PYTHON), "input": str(harness / "runs" / "{date}" / "*.parquet"),
            "output_root": str(harness / "scores"), "policy": str(REPO / "configs" / "policy.yaml"),
            "runner": "FnApiRunner", **params}
    run = dag.test(logical_date=logical_date, run_conf=conf)
    return run, {ti.task_id: ti for ti in run.get_task_instances()}


def load(path):
    return json.loads(Path(path).read_text())


def test_a_run_scores_the_night_of_its_data_interval(dag, harness):
    # The run scheduled for 2026-12-01 02:30 covers 2026-11-30 02:30 to 2026-12-01 02:30: the night 2026-11-30.
    run, tasks = run_night(dag, harness, pendulum.datetime(2026, 12, 1, 2, 30, tz="UTC"))
    assert run.data_interval_start == pendulum.datetime(2026, 11, 30, 2, 30, tz="UTC")
    assert run.state == "success" and {t: ti.state for t, ti in tasks.items()} == {
        "wait_for_night": "success", "score_night": "success"}
    night = harness / "scores" / "date=2026-11-30"
    manifest = load(night / "manifest.json")
    assert manifest["night"] == {"date": "2026-11-30", "inputs": [str(harness / "runs" / "2026-11-30" / "*.parquet")]}
    assert manifest["input_rows"] == 6000 and (night / "_SUCCESS").exists()
    assert manifest["policy_sha256"] == load(night / "metrics.json")["policy_sha256"] is not None
    assert sorted(p.name for p in (harness / "scores").iterdir()) == ["date=2026-11-30", "trend.html", "trend.json"]


def test_a_regression_fails_at_once_and_alerts_in_a_virtualenv_built_from_requirements(dag, harness, caplog):
    """The next night, with litmus-score installed from the checkout into a virtualenv the
    operator builds: exit 3 fails the task on its first try, though it has retries left."""
    first = harness / "scores" / "date=2026-11-30"
    if not (first / "_SUCCESS").exists():
        pytest.skip("needs the night test_a_run_scores_the_night_of_its_data_interval scored")
    run, tasks = run_night(dag, harness, pendulum.datetime(2026, 12, 2, 2, 30, tz="UTC"), environment=str(REPO))
    score = tasks["score_night"]
    assert run.state == "failed" and score.state == "failed" and score.try_number == 1 and score.max_tries == 2
    comparison = load(harness / "scores" / "date=2026-12-01" / "comparison.json")
    assert comparison["regressions"] == [AGENT] and comparison["baseline"]["night"] == "2026-11-30"
    alerts = [r.getMessage() for r in caplog.records if r.getMessage().startswith("litmus-score nightly 2026-12-01")]
    assert alerts == ["litmus-score nightly 2026-12-01: ALERT: an agent's misuse rate regressed against the "
                      "baseline (exit code 3)"]


def test_a_night_that_never_arrives_fails_the_sensor_loudly(dag, harness, caplog, monkeypatch):
    sensor = dag.get_task("wait_for_night")
    monkeypatch.setattr(sensor, "timeout", 2.0)  # the shipped 4 hours, shortened
    monkeypatch.setattr(sensor, "poke_interval", 0.5)
    run, tasks = run_night(dag, harness, pendulum.datetime(2026, 12, 5, 2, 30, tz="UTC"))
    assert run.state == "failed" and tasks["wait_for_night"].state == "failed"
    assert tasks["score_night"].state == "upstream_failed"
    assert not (harness / "scores" / "date=2026-12-04").exists()
    pattern = harness / "runs" / "2026-12-04" / "*.parquet"
    assert (f"litmus-score nightly 2026-12-04: the night's data did not arrive within 0:00:02 "
            f"(nothing matches {pattern})") in [r.getMessage() for r in caplog.records]


def test_the_sensor_says_whether_the_night_is_late_or_could_not_be_looked_for(dag, module_of):
    context = {"task": dag.get_task("wait_for_night"), "params": {"night": "2026-12-04", "wait_for": None,
                                                                  "input": "gs://b/runs/{date}/*.parquet"}}
    late = module_of["failure_message"]({**context, "exception": AirflowSensorTimeout("timed out")})
    assert late == ("litmus-score nightly 2026-12-04: the night's data did not arrive within 4:00:00 "
                    "(nothing matches gs://b/runs/2026-12-04/*.parquet)")
    broken = module_of["failure_message"]({**context, "exception": PermissionError("403 on gs://b")})
    assert broken == ("litmus-score nightly 2026-12-04: could not look for gs://b/runs/2026-12-04/*.parquet: "
                      "403 on gs://b")


@pytest.mark.parametrize("error, expected", [
    ("Apache Beam process failed with return code 3", "ALERT: an agent's misuse rate regressed"),
    ("Apache Beam process failed with return code 4", "not scored in full"),
    ("Apache Beam process failed with return code 5", "no regression verdict: the baseline night was scored under"),
    ("Apache Beam process failed with return code 1", "the scoring job failed (exit code 1)"),
    (None, "the scoring job failed (exit code None)"),
])
def test_the_failure_callback_names_the_verdict_exits(dag, module_of, error, expected):
    context = {"exception": error and RuntimeError(error), "task": dag.get_task("score_night"),
               "params": {"night": None}, "data_interval_start": pendulum.datetime(2026, 11, 30, 2, 30, tz="UTC")}
    message = module_of["failure_message"](context)
    assert message.startswith("litmus-score nightly 2026-11-30: ") and expected in message
