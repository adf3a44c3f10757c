"""Nightly litmus-score: wait for the night's shards, score them against the last complete night.

The night a run scores is the start date of its data interval. The schedule
is a data-interval timetable (cron 30 2 * * *, UTC): the run that starts at
2026-12-02 02:30 covers 2026-12-01 02:30 to 2026-12-02 02:30 and scores the
night 2026-12-01, the harness's folder that filled up during it. (Under
Airflow 3 a plain cron string would make each run's logical date its own
day; the data interval makes it the night before.) The `night` param,
YYYY-MM-DD, scores another night by hand.

Two tasks:
  wait_for_night   a sensor: the night is there when `wait_for` (the
                   harness's completion marker, a path or glob with {date})
                   matches a file, or, with `wait_for` unset, when `input`
                   matches a shard. It checks every 5 minutes, frees its
                   worker slot in between, and fails loudly after 4 hours.
  score_night      `litmus-score nightly` for the night (`python -m
                   pipeline.nightly_job`, part of litmus-score, so nothing
                   beside this file needs litmus-score to parse), with the
                   Apache Beam provider's operator, in litmus-score's
                   environment: the python of an environment that has it
                   (an absolute path ending in /python, /python3 or
                   /python3.N), or a pip requirement (`litmus-score[gcp]==0.1.0`,
                   a wheel, a checkout's folder) for a virtualenv the operator
                   builds for each run. Not the worker's own python: Airflow's
                   pins and litmus-score's disagree.

The environment names the program the worker runs, so it is deploy-time
configuration (`environment` in litmus_nightly.json beside this file, read
when the DAG is parsed), never a run param: a run triggered with an
`environment` in its conf fails at once, having run nothing.

Paths are absolute (local, or gs:// and the like where Beam reads them);
the defaults follow docs/runners.md ("Nightly on Airflow"): litmus-score in
/opt/litmus-score/.venv, the harness writing /data/litmus/runs/DATE/, the
nights under /data/litmus/scores/. `runner` is DirectRunner unless set;
`beam_options` carries the runner's options, e.g. for Dataflow
{"project": "P", "region": "R", "temp_location": "gs://B/tmp",
"setup_file": "/opt/litmus-score/pyproject.toml"}. Other defaults for every
run go into litmus_nightly.json beside this file (a JSON object of settings:
`environment` and the params' defaults), so the DAG is deployed as shipped; a
run triggered by hand may set any param too.

Outcomes. A transient failure of the scoring job (exit 1, 2, a lost worker)
is retried twice, 10 minutes apart. Exits 3, 4 and 5 are verdicts and fail at
once, never retried: 3 is the misuse-regression alert, 4 a night that could
not be scored in full (the manifest names the shards), 5 a night whose
baseline was scored under other rules, so no verdict was given (the night
after it compares like with like again). Every final failure
goes through the failure callback, which says which one it was, in the log
and, if the Airflow Variable `litmus_alert_to` holds addresses, by e-mail
through the SMTP connection.
"""

from __future__ import annotations

import json
import logging
import os
import re
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.providers.standard.sensors.python import PythonSensor
from airflow.sdk import DAG, CronDataIntervalTimetable, Param
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout

# Run as `python -m`, from litmus-score's own environment: no job file in the dags folder.
JOB_MODULE = "pipeline.nightly_job"
# litmus-score's verdict exits (litmus_score/exits.py; the DAG runs where litmus-score
# need not be installed, so they are spelled here, and tests/test_exits.py holds them equal).
EXIT_REGRESSION, EXIT_INCOMPLETE_INPUT, EXIT_WITHHELD = 3, 4, 5
VERDICTS = {
    EXIT_REGRESSION: "ALERT: an agent's misuse rate regressed against the baseline",
    EXIT_INCOMPLETE_INPUT: "the night was not scored in full (unreadable shards or pipeline_error rows)",
    EXIT_WITHHELD: "no regression verdict: the baseline night was scored under other rules "
                   "(policy, adjudication mode or spec version; comparison.json names both)",
}
WAIT_EVERY, WAIT_AT_MOST = timedelta(minutes=5), timedelta(hours=4)
RETRIES, RETRY_DELAY = 2, timedelta(minutes=10)
# The night a run scores: the `night` param, else the start date of the run's data interval.
NIGHT = "{{ params.night or data_interval_start | ds }}"
# An interpreter, not a requirement: an absolute path whose last part is python, python3 or python3.N.
INTERPRETER = re.compile(r"/(.+/)?python(3(\.\d+)?)?")
ABSOLUTE = r"^(/|[a-z][a-z0-9+.-]*://)"  # a path from the root, or a URL (gs://, s3://, ...)
# The settings as shipped; litmus_nightly.json beside this file may set others. All but
# `environment` are params, which a run may set; the environment is the deployer's alone.
SHIPPED_DEFAULTS = {
    "environment": "/opt/litmus-score/.venv/bin/python",
    "input": "/data/litmus/runs/{date}/*.parquet",
    "wait_for": None,
    "output_root": "/data/litmus/scores",
    "policy": None,
    "thresholds": None,
    "night": None,
    "runner": "DirectRunner",
    "beam_options": {},
}


def exit_code(exception) -> int | None:
    """litmus-score's exit code from the Beam hook's failure ("... failed with return code N")."""
    found = re.search(r"return code (-?\d+)", str(exception or ""))
    return int(found.group(1)) if found else None


def failure_message(context) -> str:
    params = context["params"]
    night = params.get("night") or context["data_interval_start"].strftime("%Y-%m-%d")
    if context["task"].task_id == "wait_for_night":
        pattern = (params.get("wait_for") or params["input"]).replace("{date}", night)
        if not isinstance(context.get("exception"), AirflowSensorTimeout):
            return f"litmus-score nightly {night}: could not look for {pattern}: {context.get('exception')}"
        waited = timedelta(seconds=context["task"].timeout)
        return (f"litmus-score nightly {night}: the night's data did not arrive within {waited} "
                f"(nothing matches {pattern})")
    code = exit_code(context.get("exception"))
    if code is None and context.get("exception"):  # no exit of litmus-score's (refused, timed out): say what
        return f"litmus-score nightly {night}: the scoring task failed: {context['exception']}"
    return f"litmus-score nightly {night}: {VERDICTS.get(code, 'the scoring job failed')} (exit code {code})"


def alert(context) -> None:
    """on_failure_callback: says which failure it was, in the log and by e-mail if configured."""
    from airflow.sdk import Variable

    message = failure_message(context)
    logging.getLogger("airflow.task").error(message)  # Airflow 3's task instance has no .log
    recipients = Variable.get("litmus_alert_to", default=None)
    if recipients:
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier

        SmtpNotifier(from_email=None, to=recipients, subject=message, html_content=message).notify(context)


def night_has_arrived(pattern: str, night: str) -> bool:
    """True once `pattern` ({date} filled in) matches a file, on any filesystem Beam reads."""
    from apache_beam.io.filesystems import FileSystems

    found = FileSystems.match([pattern.replace("{date}", night)])[0].metadata_list
    return bool(found)


def job_environment(environment: str) -> tuple:
    """(py_interpreter, py_requirements) for the operator: an interpreter as it is, or a requirement
    installed into a virtualenv of the worker's python3 for the run."""
    if INTERPRETER.fullmatch(environment):
        return environment, None
    return "python3", [environment]


class LitmusScoreOperator(BeamRunPythonPipelineOperator):
    """The Beam provider's operator, run in the deployed `environment` (fixed when the DAG is parsed,
    never templated); litmus-score's verdict exits (3, 4, 5) fail the task without a retry."""

    def __init__(self, *, environment: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.environment = environment

    def execute(self, context):
        if "environment" in context["params"]:  # a run's conf joins its params: refused, not ignored
            raise AirflowFailException("`environment` is not a run param: litmus-score's environment is set "
                                       "when the DAG is deployed (litmus_nightly.json beside it, docs/runners.md)")
        self.py_interpreter, self.py_requirements = job_environment(self.environment)
        if self.py_requirements is None and not os.access(self.py_interpreter, os.X_OK):
            raise AirflowFailException(f"no python at {self.py_interpreter}: install litmus-score there "
                                       "(docs/runners.md) or name its environment in litmus_nightly.json")
        try:
            return super().execute(context)
        except AirflowException as error:
            if exit_code(error) in VERDICTS:
                raise AirflowFailException(str(error)) from error
            raise


def site_defaults(path: Path) -> dict:
    """SHIPPED_DEFAULTS, with the site's own from `path` (a JSON object of settings) where that file exists."""
    if not path.exists():
        return dict(SHIPPED_DEFAULTS)
    site = json.loads(path.read_text(encoding="utf-8"))
    unknown = sorted(set(site) - set(SHIPPED_DEFAULTS)) if isinstance(site, dict) else ["(not a JSON object)"]
    if unknown:
        raise ValueError(f"{path}: unknown setting {unknown[0]!r}; the settings are {', '.join(SHIPPED_DEFAULTS)}")
    settings = {**SHIPPED_DEFAULTS, **site}
    if not isinstance(settings["environment"], str) or not settings["environment"]:
        raise ValueError(f"{path}: environment must be litmus-score's python or a pip requirement, "
                         f"not {settings['environment']!r}")
    return settings


DEFAULTS = site_defaults(Path(__file__).with_name("litmus_nightly.json"))

with DAG(
    dag_id="litmus_nightly",
    description="Score last night's agent trajectories; alert on a misuse regression",
    schedule=CronDataIntervalTimetable("30 2 * * *", timezone="UTC"),  # after the night's shards have landed
    start_date=pendulum.datetime(2026, 12, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # a night's baseline is the night before: in order
    # Native rendering: `beam_options` stays a dict, an unset option None (omitted).
    render_template_as_native_obj=True,
    params={
        "input": Param(DEFAULTS["input"], type="string", pattern=ABSOLUTE,
                       description="The night's shards, a path or glob; {date} is filled in"),
        "wait_for": Param(DEFAULTS["wait_for"], type=["null", "string"], pattern=ABSOLUTE,
                          description="The harness's completion marker ({date} filled in) to wait for; "
                                      "unset: wait until `input` matches a shard"),
        "output_root": Param(DEFAULTS["output_root"], type="string", pattern=ABSOLUTE,
                             description="Each night goes to OUTPUT_ROOT/date=D/; trend.html beside them"),
        "policy": Param(DEFAULTS["policy"], type=["null", "string"], pattern=ABSOLUTE,
                        description="Policy YAML, deciding where the harness recorded no verdict; "
                                    "unset: verdicts as recorded"),
        "thresholds": Param(DEFAULTS["thresholds"], type=["null", "string"], pattern=ABSOLUTE,
                            description="Regression thresholds YAML; unset: litmus-score's defaults"),
        "night": Param(DEFAULTS["night"], type=["null", "string"], pattern=r"^\d{4}-\d{2}-\d{2}$",
                       description="Score this night (YYYY-MM-DD) instead of the data interval's start"),
        "runner": Param(DEFAULTS["runner"], type="string",
                        description="Beam runner: DirectRunner, DataflowRunner, ..."),
        "beam_options": Param(DEFAULTS["beam_options"], type="object",
                              description="The runner's options, e.g. project, region"),
    },
    tags=["litmus-score"],
) as dag:
    wait = PythonSensor(
        task_id="wait_for_night",
        python_callable=night_has_arrived,
        op_kwargs={"pattern": "{{ params.wait_for or params.input }}", "night": NIGHT},
        mode="reschedule",
        poke_interval=WAIT_EVERY,
        timeout=WAIT_AT_MOST,
        on_failure_callback=alert,
    )
    score = LitmusScoreOperator(
        task_id="score_night",
        environment=DEFAULTS["environment"],
        py_file=JOB_MODULE,
        py_options=["-m"],
        runner="{{ params.runner }}",
        default_pipeline_options="{{ params.beam_options }}",
        pipeline_options={
            "date": NIGHT,
            "input": "{{ params.input }}",
            "output_root": "{{ params.output_root }}",
            "policy": "{{ params.policy }}",
            "thresholds": "{{ params.thresholds }}",
        },
        retries=RETRIES,
        retry_delay=RETRY_DELAY,
        on_failure_callback=alert,
    )
    wait >> score
