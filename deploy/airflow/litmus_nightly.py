"""Nightly litmus-score: score the night's shards against the last complete night.

One task, the Apache Beam provider's BeamRunPythonPipelineOperator, runs
`litmus-score nightly` (through litmus_nightly_job.py beside this file) for
the run's logical date: it scores `input` (its `{date}` filled in) into
OUTPUT_ROOT/date=D/, with the latest earlier complete night as the baseline
and `policy` deciding where no verdict was recorded.

Configured by the DAG's params (defaults below; override them per run, or
for every run in the DAG's defaults): `runner` is DirectRunner unless set,
and `beam_options` carries the runner's options, e.g. for Dataflow
{"project": "P", "region": "R", "temp_location": "gs://B/tmp",
"setup_file": "/opt/litmus-score/pyproject.toml"}.

Exit codes become task outcomes: 0 succeeds; any other fails the task, and
the failure callback names what happened: 3 is the misuse-regression alert,
4 a night that could not be scored in full (the manifest names the shards).
The alert goes to the log and, if the Airflow Variable `litmus_alert_to`
holds addresses, by e-mail through the SMTP connection.
"""

from __future__ import annotations

import re
from pathlib import Path

import pendulum
from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.sdk import DAG, Param

JOB_FILE = str(Path(__file__).with_name("litmus_nightly_job.py"))
# litmus-score's exit codes (pipeline/cli.py).
EXIT_REGRESSION, EXIT_INCOMPLETE_INPUT = 3, 4
OUTCOMES = {
    EXIT_REGRESSION: "ALERT: an agent's misuse rate regressed against the baseline",
    EXIT_INCOMPLETE_INPUT: "the night was not scored in full (unreadable shards or pipeline_error rows)",
}


def exit_code(exception) -> int | None:
    """litmus-score's exit code from the Beam hook's failure ("... failed with return code N")."""
    found = re.search(r"return code (-?\d+)", str(exception or ""))
    return int(found.group(1)) if found else None


def failure_message(context) -> str:
    code = exit_code(context.get("exception"))
    outcome = OUTCOMES.get(code, "the scoring job failed")
    return f"litmus-score nightly {context['ds']}: {outcome} (exit code {code})"


def alert(context) -> None:
    """on_failure_callback: says which failure it was, in the log and by e-mail if configured."""
    from airflow.sdk import Variable

    message = failure_message(context)
    context["ti"].log.error(message)
    recipients = Variable.get("litmus_alert_to", default=None)
    if recipients:
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier

        SmtpNotifier(from_email=None, to=recipients, subject=message, html_content=message).notify(context)


with DAG(
    dag_id="litmus_nightly",
    description="Score last night's agent trajectories; alert on a misuse regression",
    schedule="30 2 * * *",  # after the night's shards have landed
    start_date=pendulum.datetime(2026, 12, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # a night's baseline is the night before: in order
    # Native rendering: `beam_options` stays a dict, an unset option None (omitted).
    render_template_as_native_obj=True,
    params={
        "input": Param("runs/{date}/*.parquet", type="string", description="The night's shards; {date} is filled in"),
        "output_root": Param("scores/", type="string", description="Each night goes to OUTPUT_ROOT/date=D/"),
        "policy": Param("configs/policy.yaml", type="string", description="Policy YAML"),
        "runner": Param("DirectRunner", type="string", description="Beam runner: DirectRunner, DataflowRunner, ..."),
        "beam_options": Param({}, type="object", description="The runner's options, e.g. project, region"),
    },
    tags=["litmus-score"],
) as dag:
    BeamRunPythonPipelineOperator(
        task_id="score_night",
        py_file=JOB_FILE,
        runner="{{ params.runner }}",
        default_pipeline_options="{{ params.beam_options }}",
        pipeline_options={
            "date": "{{ ds }}",
            "input": "{{ params.input }}",
            "output-root": "{{ params.output_root }}",
            "policy": "{{ params.policy }}",
        },
        # Exits 3 and 4 are verdicts, not flakes: a retry would score the
        # night again to the same end and hold back the alert.
        retries=0,
        on_failure_callback=alert,
    )
