"""Nightly litmus-score: wait for the night's shards, score them against the last complete night.

The night a run scores is the start date of its data interval. The schedule
is a data-interval timetable (cron 30 2 * * *, UTC): the run that starts at
2026-12-02 02:30 covers 2026-12-01 02:30 to 2026-12-02 02:30 and scores the
night 2026-12-01, the harness's folder that filled up during it. (Under
Airflow 3 a plain cron string would make each run's logical date its own
day; the data interval makes it the night before.) The `night` param,
YYYY-MM-DD, scores another night by hand.

Three tasks:
  check_run_settings
                   refuses, at once and unretried, a run whose conf names
                   anything but a run setting (the params below): see
                   "What a run may choose".
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

What a run may choose. A run's conf may set the params (RUN_SETTINGS: the
night, where to read and write, the policy, thresholds and adjudication
mode, worker counts), all typed, and nothing else. The job gets them as one
JSON object, which litmus-score checks against the allow-list the Dataflow
template shares (pipeline.run_settings). What names code is the deployer's
alone (DEPLOYED), set in litmus_nightly.json beside this file, read when the
DAG is parsed: `environment`, the program the worker runs; `runner`
(DirectRunner unless set); `beam_options`, the runner's options, e.g. for
Dataflow {"project": "P", "region": "R", "temp_location": "gs://B/tmp",
"setup_file": "/opt/litmus-score/pyproject.toml"}. Beam's options name
programs, images, endpoints and packages: a run that could set them could
run any shell line on the worker.

Paths are absolute (local, or gs:// and the like where Beam reads them);
the defaults follow docs/runners.md ("Nightly on Airflow"): litmus-score in
/opt/litmus-score/.venv, the harness writing /data/litmus/runs/DATE/, the
nights under /data/litmus/scores/. litmus_nightly.json may also set the
params' defaults, so the DAG is deployed as shipped.

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
from airflow.providers.standard.operators.python import PythonOperator
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
# A path from the root, or a URL (gs://, s3://, ...), with no control character anywhere.
ABSOLUTE = r"^(?![\s\S]*[\x00-\x1f\x7f])(/|[a-z][a-z0-9+.-]*://)"
# The deployer's settings as shipped: they name what runs, so no run may set them.
DEPLOYED = {
    "environment": "/opt/litmus-score/.venv/bin/python",
    "runner": "DirectRunner",
    "beam_options": {},
}
# The run settings (the params) and their defaults as shipped: all a run's conf may set.
RUN_SETTINGS = {
    "input": "/data/litmus/runs/{date}/*.parquet",
    "wait_for": None,
    "output_root": "/data/litmus/scores",
    "policy": None,
    "thresholds": None,
    "adjudication": None,
    "num_workers": None,
    "max_num_workers": None,
    "night": None,
}
# litmus_nightly.json beside this file may set any of these.
SHIPPED_DEFAULTS = {**DEPLOYED, **RUN_SETTINGS}


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
        what = "not run" if context["task"].task_id == "check_run_settings" else "the scoring task failed"
        return f"litmus-score nightly {night}: {what}: {context['exception']}"
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


def refuse_other_settings(dag_run) -> None:
    """Fails the task at once, unretried, naming the first setting (alphabetically) in the run's conf that
    is not a run setting: whoever triggers a run chooses no program (docs/runners.md, "What a run may
    choose")."""
    for name in sorted(dag_run.conf or {}):
        if name not in RUN_SETTINGS:
            # The name is the triggering user's: escaped and cut, so the alert (an e-mail's subject) stays one line.
            shown = name[:100].encode("unicode_escape").decode("ascii") + ("..." if len(name) > 100 else "")
            raise AirflowFailException(
                f"`{shown}` is not a run setting (a run sets {', '.join(RUN_SETTINGS)}): the environment, the "
                "runner and Beam's options are set where the DAG is deployed, in litmus_nightly.json beside it")


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
    """The Beam provider's operator, run in the deployed `environment` with the deployed runner and Beam
    options (fixed when the DAG is parsed, never from a run's params); litmus-score's verdict exits
    (3, 4, 5) fail the task without a retry."""

    # The deployed runner and options are used as they are: a template in them could read a run's params.
    template_fields = tuple(field for field in BeamRunPythonPipelineOperator.template_fields
                            if field not in ("runner", "default_pipeline_options"))

    def __init__(self, *, environment: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.environment = environment

    def execute(self, context):
        refuse_other_settings(context["dag_run"])  # again: this task may be run on its own
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
    if not isinstance(settings["runner"], str) or not settings["runner"]:
        raise ValueError(f"{path}: runner must name a Beam runner, not {settings['runner']!r}")
    if not isinstance(settings["beam_options"], dict):
        raise ValueError(f"{path}: beam_options must be a JSON object of Beam options, "
                         f"not {settings['beam_options']!r}")
    return settings


DEFAULTS = site_defaults(Path(__file__).with_name("litmus_nightly.json"))

with DAG(
    dag_id="litmus_nightly",
    description="Score last night's agent trajectories; alert on a misuse regression",
    schedule=CronDataIntervalTimetable("30 2 * * *", timezone="UTC"),  # after the night's shards have landed
    start_date=pendulum.datetime(2026, 12, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # a night's baseline is the night before: in order
    # Native rendering: a run setting keeps its type (a count an int), an unset one is None (omitted).
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
        "adjudication": Param(DEFAULTS["adjudication"], type=["null", "string"],
                              enum=[None, "commit", "strict", "proposal"],
                              description="Adjudication mode; unset: commit"),
        "num_workers": Param(DEFAULTS["num_workers"], type=["null", "integer"], minimum=1,
                             description="Workers to start with, where the runner starts workers (Dataflow)"),
        "max_num_workers": Param(DEFAULTS["max_num_workers"], type=["null", "integer"], minimum=1,
                                 description="Workers at most, where the runner starts workers (Dataflow)"),
        "night": Param(DEFAULTS["night"], type=["null", "string"], pattern=r"^\d{4}-\d{2}-\d{2}$",
                       description="Score this night (YYYY-MM-DD) instead of the data interval's start"),
    },
    tags=["litmus-score"],
) as dag:
    check = PythonOperator(
        task_id="check_run_settings",
        python_callable=refuse_other_settings,
        on_failure_callback=alert,
    )
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
        runner=DEFAULTS["runner"],
        default_pipeline_options=DEFAULTS["beam_options"],
        # The run's settings, one JSON object that litmus-score checks against its allow-list.
        pipeline_options={"run_settings": {
            "date": NIGHT,
            **{name: f"{{{{ params.{name} }}}}" for name in RUN_SETTINGS if name not in ("night", "wait_for")},
        }},
        retries=RETRIES,
        retry_delay=RETRY_DELAY,
        on_failure_callback=alert,
    )
    check >> wait >> score
