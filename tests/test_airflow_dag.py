"""The nightly Airflow DAG (deploy/airflow) as shipped: it loads, and `dag.test` runs it for a
fixed logical date: the sensor waits for the night, the Beam operator scores it in the
environment, with the runner and Beam options, the deployer set (never a run's conf, which may
set the run settings alone), verdicts fail at once and alert. The documented deploy, run as
written, leaves Airflow no import error.

Airflow's pins disagree with the project's, so this runs in its own virtualenv
(`make test-airflow`: a fresh AIRFLOW_HOME whose dags folder is deploy/airflow, and
LITMUS_REQUIRE_AIRFLOW=1, under which a missing Airflow fails instead of skipping). The main
test run skips it. Configured as a deployer configures it: litmus-score checked out at the repo's
root with its environment in .venv (as docs/runners.md puts it at /opt/litmus-score), or, for one
night, a pip requirement the operator builds a virtualenv from; the rest by the DAG's params.
"""

import json
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

if os.environ.get("LITMUS_REQUIRE_AIRFLOW") != "1":
    pytest.importorskip("airflow", reason="Airflow runs in its own virtualenv: make test-airflow")

import pendulum
from airflow.dag_processing.dagbag import DagBag
from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.providers.standard.sensors.python import PythonSensor
from airflow.sdk import CronDataIntervalTimetable
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout, ParamValidationError

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "deploy" / "airflow"
# litmus-score where a deployer would have it: a checkout and its environment.
CHECKOUT_PYTHON = REPO / ".venv" / "bin" / "python"
DEPLOY_DOCS = (REPO / "docs" / "runners.md").read_text().split("## Nightly on Airflow", 1)[1]
AGENT = "orca-8b"  # synthetic.AGENTS[3], whose misuse is planted on the second night
# A context's run, triggered with no conf.
NO_CONF = SimpleNamespace(conf={})


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
    check, wait, score = (dag.get_task(name) for name in ("check_run_settings", "wait_for_night", "score_night"))
    assert [t.task_id for t in dag.topological_sort()] == ["check_run_settings", "wait_for_night", "score_night"]
    assert isinstance(check, PythonOperator) and check.on_failure_callback
    assert isinstance(wait, PythonSensor) and isinstance(score, BeamRunPythonPipelineOperator)
    # The sensor frees its slot between pokes, and gives up loudly: no soft fail, an alert.
    assert wait.mode == "reschedule" and wait.poke_interval == 300 and wait.timeout == 4 * 3600
    assert wait.soft_fail is False and wait.on_failure_callback
    assert score.retries == 2 and score.retry_delay == timedelta(minutes=10)
    # The job is litmus-score's own module, run with `python -m` in its environment.
    assert (score.py_options, score.py_file) == (["-m"], "pipeline.nightly_job")
    assert (REPO / "pipeline" / "nightly_job.py").exists()


def deploy_step(number: str) -> str:
    """docs/runners.md's deploy script, from `# N.` to the next step or the script's end."""
    script = DEPLOY_DOCS.split("```sh\n", 1)[1].split("```", 1)[0]
    return f"# {number}. " + re.split(r"\n# \d\. ", script.split(f"# {number}. ", 1)[1], maxsplit=1)[0]


def test_the_documented_airflow_is_the_tested_one():
    pinned = re.findall(r"\S+==\S+", deploy_step("2"))
    tested = [line for line in (DAGS / "requirements-test.txt").read_text().splitlines() if "==" in line]
    assert pinned and sorted(pinned) == sorted(tested)


def test_the_documented_deploy_leaves_no_import_error(tmp_path):
    """docs/runners.md's steps as written, but those that install (this virtualenv has what step 2
    installs) and `airflow dags unpause`, which needs a running Airflow; then Airflow's own check of
    the dags folder, by its interpreter, from which litmus-score cannot be imported (as in a deployment)."""
    dags = tmp_path / "dags"
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "home"), "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    step_2 = [line for line in deploy_step("2").splitlines() if line.startswith("airflow ")]  # db migrate
    step_3 = [line for line in deploy_step("3").replace("/opt/litmus-score", str(REPO)).splitlines()
              if not line.startswith("airflow dags unpause")]
    assert [line.split("#")[0].strip() for line in step_2] == ["airflow db migrate"]
    subprocess.run(["bash", "-euc", "\n".join(step_2 + step_3)], env=env, cwd=tmp_path, check=True,
                   stdout=subprocess.DEVNULL)
    assert (dags / "litmus_nightly.json").exists()

    def airflow(*args):
        done = subprocess.run([sys.executable, "-m", "airflow", *args, "--local", "-o", "json"], env=env,
                              cwd=tmp_path, capture_output=True, text=True, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert airflow("dags", "list-import-errors") == []
    assert [dag["dag_id"] for dag in airflow("dags", "list")] == ["litmus_nightly"]


def test_paths_are_absolute_params_with_the_documented_defaults(dag):
    params = dag.params.dump()
    settings = {**params, "environment": dag.get_task("score_night").environment}
    for name in ("environment", "input", "output_root"):
        assert settings[name].startswith("/"), name
        assert f"`{settings[name]}`" in DEPLOY_DOCS, name  # the docs give the same default
    for name in ("wait_for", "policy", "thresholds", "adjudication", "num_workers", "max_num_workers", "night"):
        assert params[name] is None and f"`{name}`" in DEPLOY_DOCS, name
    for name in ("input", "output_root", "policy", "thresholds", "wait_for"):
        param = dag.params.get_param(name)
        assert param.resolve("gs://bucket/runs/{date}") == "gs://bucket/runs/{date}"
        for refused in ("runs/relative", "/runs/x\n", "gs://b/\x1b[2J"):  # refused when a run is triggered
            with pytest.raises(ParamValidationError):
                param.resolve(refused)


def test_a_site_sets_its_own_defaults_beside_the_dag(tmp_path):
    (tmp_path / "litmus_nightly.py").write_bytes((DAGS / "litmus_nightly.py").read_bytes())
    (tmp_path / "litmus_nightly.json").write_text(json.dumps({
        "input": "gs://bucket/runs/{date}/*.parquet", "output_root": "gs://bucket/scores",
        "wait_for": "gs://bucket/runs/{date}/_DONE", "runner": "DataflowRunner"}))
    site = DagBag(dag_folder=str(tmp_path)).dags["litmus_nightly"]
    params = site.params.dump()
    assert params["input"] == "gs://bucket/runs/{date}/*.parquet" and "runner" not in params
    assert site.get_task("score_night").runner == "DataflowRunner"
    assert site.get_task("score_night").environment == "/opt/litmus-score/.venv/bin/python"  # as shipped
    (tmp_path / "litmus_nightly.json").write_text('{"environment": "/srv/litmus/.venv/bin/python3"}')
    site = DagBag(dag_folder=str(tmp_path)).dags["litmus_nightly"]
    assert site.get_task("score_night").environment == "/srv/litmus/.venv/bin/python3"
    assert "environment" not in site.params  # the deployer's, not a run's
    for setting, refusal in [('{"output": "/data/scores"}', "unknown setting 'output'; the settings are "
                                                             "environment, runner, beam_options, input"),
                             ('{"environment": ""}', "environment must be litmus-score's python"),
                             ('{"beam_options": "--job_endpoint=embed"}', "beam_options must be a JSON object")]:
        (tmp_path / "litmus_nightly.json").write_text(setting)
        errors = DagBag(dag_folder=str(tmp_path)).import_errors
        assert refusal in " ".join(errors.values())


@pytest.mark.parametrize("environment, expected", [
    ("/opt/litmus-score/.venv/bin/python", ("/opt/litmus-score/.venv/bin/python", None)),
    ("/usr/bin/python3.11", ("/usr/bin/python3.11", None)),
    ("litmus-score[gcp]==0.1.0", ("python3", ["litmus-score[gcp]==0.1.0"])),
    ("/opt/litmus-score", ("python3", ["/opt/litmus-score"])),  # a checkout: installed, not run
    ("/wheels/litmus_score-0.1.0-py3-none-any.whl", ("python3", ["/wheels/litmus_score-0.1.0-py3-none-any.whl"])),
])
def test_one_setting_names_the_environment(module_of, environment, expected):
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
        task.execute({"params": {}, "dag_run": NO_CONF})
    assert type(failure.value) is raised  # AirflowFailException: Airflow does not retry it


def test_a_missing_interpreter_fails_loudly_without_retrying(dag, monkeypatch):
    task = dag.get_task("score_night")
    monkeypatch.setattr(task, "environment", "/nowhere/bin/python")
    with pytest.raises(AirflowFailException, match="no python at /nowhere/bin/python"):
        task.execute({"params": {}, "dag_run": NO_CONF})


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


def run_night(dag, harness, logical_date, environment=str(CHECKOUT_PYTHON), runner="FnApiRunner",
              beam_options=None, **params):
    """dag.test with the params in its conf; the environment, the runner and its options, deploy-time
    configuration, set as litmus_nightly.json sets them when the DAG is parsed."""
    conf = {"input": str(harness / "runs" / "{date}" / "*.parquet"), "output_root": str(harness / "scores"),
            "policy": str(REPO / "configs" / "policy.yaml"), **params}
    with pytest.MonkeyPatch.context() as deployed:
        score = dag.get_task("score_night")
        deployed.setattr(score, "environment", environment)
        deployed.setattr(score, "runner", runner)
        deployed.setattr(score, "default_pipeline_options", beam_options or {})
        run = dag.test(logical_date=logical_date, run_conf=conf)
    return run, {ti.task_id: ti for ti in run.get_task_instances()}


def load(path):
    return json.loads(Path(path).read_text())


def test_a_run_scores_the_night_of_its_data_interval(dag, harness):
    # The run scheduled for 2026-12-01 02:30 covers 2026-11-30 02:30 to 2026-12-01 02:30: the night 2026-11-30.
    run, tasks = run_night(dag, harness, pendulum.datetime(2026, 12, 1, 2, 30, tz="UTC"))
    assert run.data_interval_start == pendulum.datetime(2026, 11, 30, 2, 30, tz="UTC")
    assert run.state == "success" and {t: ti.state for t, ti in tasks.items()} == {
        "check_run_settings": "success", "wait_for_night": "success", "score_night": "success"}
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


def shell_line_harness(tmp_path):
    """(the shell line a hostile conf would have the worker run, the mark it leaves, the options that
    run it): Beam's embedded job service with a subprocess harness whose command is the line."""
    mark = tmp_path / "ran"
    line = f"touch {mark}"
    return line, mark, {"job_endpoint": "embed", "environment_type": "beam:env:harness_subprocess_python:v1",
                        "environment_config": line}


def hostile_confs(tmp_path):
    """Confs that ask for a program: the runner and Beam options as last round's params took them, as
    flat settings, and the environment closed last round."""
    line, mark, options = shell_line_harness(tmp_path)
    program = tmp_path / "bin" / "python"  # a program dressed as an interpreter
    program.parent.mkdir()
    program.write_text(f"#!/bin/sh\n{line}\n")
    program.chmod(0o755)
    # Each named by the first of its settings in alphabetical order, whatever order the database keeps.
    return mark, [({"runner": "PortableRunner", "beam_options": options}, "beam_options"),
                  ({"runner": "PortableRunner", **options}, "environment_config"),
                  ({"environment": str(program)}, "environment")]


def test_a_run_that_asks_for_a_program_is_refused_in_one_line_and_runs_nothing(dag, harness, tmp_path, caplog):
    """The probe's hole: a conf whose Beam options run a shell line on the worker. Each such run fails
    on its first try, before the sensor, naming the setting in one line; the mark never appears."""
    mark, confs = hostile_confs(tmp_path)
    for index, (asked, named) in enumerate(confs):
        caplog.clear()
        output_root = tmp_path / f"scores-{index}"
        conf = {"input": str(harness / "runs" / "{date}" / "*.parquet"), "output_root": str(output_root), **asked}
        run = dag.test(logical_date=pendulum.datetime(2026, 12, 1, 2, 30, tz="UTC"), run_conf=conf)
        tasks = {ti.task_id: ti for ti in run.get_task_instances()}
        assert run.state == "failed" and tasks["check_run_settings"].state == "failed", named
        assert tasks["check_run_settings"].try_number == 1
        assert {tasks[name].state for name in ("wait_for_night", "score_night")} == {"upstream_failed"}
        assert not mark.exists() and not output_root.exists(), named
        alerts = [r.getMessage() for r in caplog.records
                  if r.getMessage().startswith("litmus-score nightly 2026-11-30")]
        assert alerts == [f"litmus-score nightly 2026-11-30: not run: `{named}` is not a run setting (a run sets "
                          "input, wait_for, output_root, policy, thresholds, adjudication, num_workers, "
                          "max_num_workers, night): the environment, the runner and Beam's options are set where "
                          "the DAG is deployed, in litmus_nightly.json beside it"], named
        assert "\n" not in alerts[0]


def test_the_scoring_task_run_alone_refuses_too(dag, tmp_path):
    """A scoring task run on its own (cleared, or its check marked done) checks the conf again."""
    mark, confs = hostile_confs(tmp_path)
    task = dag.get_task("score_night")
    for asked, named in confs:
        with pytest.raises(AirflowFailException, match=f"^`{named}` is not a run setting"):
            task.execute({"params": {}, "dag_run": SimpleNamespace(conf=asked)})
    assert not mark.exists()


def test_a_refused_name_is_shown_on_one_line(module_of):
    """The alert is an e-mail's subject too: a name with control characters is escaped, a long one cut."""
    for name, shown in [("job_endpoint\r\nBcc: all@example.com", "job_endpoint\\r\\nBcc: all@example.com"),
                        ("\x1b[2J" + "x" * 200, "\\x1b[2J" + "x" * 96 + "...")]:
        with pytest.raises(AirflowFailException) as refused:
            module_of["refuse_other_settings"](SimpleNamespace(conf={name: 1}))
        assert str(refused.value).startswith(f"`{shown}` is not a run setting")
        assert str(refused.value).isprintable()


def test_the_run_settings_are_litmus_scores_own(dag):
    """What the DAG hands its job is what litmus-score's allow-list takes (pipeline.run_settings,
    shared with the Dataflow template), and every param is either handed on or the DAG's own."""
    from litmus_score.scoring.contract import MODES
    from pipeline.run_settings import settings_of

    handed = dag.get_task("score_night").pipeline_options["run_settings"]
    assert set(handed) <= set(settings_of("nightly"))
    assert dag.params.get_param("adjudication").schema["enum"] == [None, *MODES]
    assert set(dag.params) == set(handed) - {"date"} | {"night", "wait_for"}  # night is date; wait_for the sensor's


def test_the_deployers_runner_and_options_reach_beam_and_a_run_sets_its_settings(dag, harness, tmp_path):
    """The same shell line, as the deployer's configuration, does run (here it goes on to start Beam's
    worker, so the job completes): the mark the refused runs never leave is one a run would leave. The
    run's own settings (adjudication, a worker count) reach litmus-score."""
    line, mark, options = shell_line_harness(tmp_path)
    worker = f"{line} && exec {CHECKOUT_PYTHON} -m apache_beam.runners.worker.sdk_worker_main"
    run, tasks = run_night(dag, harness, pendulum.datetime(2026, 12, 1, 2, 30, tz="UTC"),
                           runner="PortableRunner", beam_options={**options, "environment_config": worker},
                           output_root=str(tmp_path / "scores"), adjudication="strict", num_workers=2)
    assert run.state == "success" and tasks["score_night"].state == "success"
    assert mark.exists()
    metrics = load(tmp_path / "scores" / "date=2026-11-30" / "metrics.json")
    assert metrics["adjudication"] == "strict" and metrics["totals"]["trajectories"]["input"] == 6000


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
    ("no python at /nowhere/bin/python: install litmus-score there",
     "the scoring task failed: no python at /nowhere/bin/python"),
])
def test_the_failure_callback_names_the_verdict_exits(dag, module_of, error, expected):
    context = {"exception": error and RuntimeError(error), "task": dag.get_task("score_night"),
               "params": {"night": None}, "data_interval_start": pendulum.datetime(2026, 11, 30, 2, 30, tz="UTC")}
    message = module_of["failure_message"](context)
    assert message.startswith("litmus-score nightly 2026-11-30: ") and expected in message
