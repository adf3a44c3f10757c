"""`python -m pipeline.nightly_job --run_settings=JSON FLAGS` is `litmus-score nightly` for one DAG run.

The Airflow DAG (deploy/airflow) runs it with the Beam operator, which puts its
flags right after the module it runs (`python -m MODULE --runner=R ...`) and
has no place for a subcommand. Being part of litmus-score, it runs in
litmus-score's environment: nothing but the DAG goes into Airflow's dags folder,
whose interpreter has no litmus-score to import (docs/runners.md, "Nightly on Airflow").

Its arguments come in two parts. FLAGS are the deployer's (the runner and Beam's
options from litmus_nightly.json, and the operator's own) and go to Beam as they
are. `--run_settings` is the one part a DAG run chose, a JSON object, and becomes
flags only as pipeline.run_settings allows: anything else stops the job before it
starts, in one line naming the setting.
"""

from __future__ import annotations

import json
import sys

from litmus_score import text
from litmus_score.exits import Exit
from pipeline.options import UsageError

RUN_SETTINGS = "--run_settings="


def nightly_argv(argv) -> list:
    """`nightly`'s arguments: the deployer's flags as they are, then the run's settings as flags;
    UsageError when the settings are not a JSON object of run settings."""
    from pipeline.run_settings import run_flags

    deployed = [arg for arg in argv if not arg.startswith(RUN_SETTINGS)]
    given = [arg.removeprefix(RUN_SETTINGS) for arg in argv if arg.startswith(RUN_SETTINGS)]
    if len(given) > 1:
        raise UsageError("--run_settings is given more than once")
    try:
        settings = json.loads(given[0]) if given else {}
    except ValueError as error:
        raise UsageError(f"--run_settings is not JSON: {error}") from None
    if not isinstance(settings, dict):
        raise UsageError(f"--run_settings must be a JSON object of run settings, got {given[0]!r}")
    return ["nightly", *deployed, *run_flags("nightly", settings)]


def main(argv) -> None:
    try:
        command = nightly_argv(argv)
    except UsageError as error:
        text.error(error)
        sys.exit(Exit.USAGE)
    from pipeline.cli import entry_point

    entry_point(command)


if __name__ == "__main__":
    main(sys.argv[1:])
