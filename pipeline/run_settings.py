"""What whoever starts a run may choose: an allow-list of typed run settings.

A deployed litmus-score is started by others: an Airflow DAG run, with the
conf of whoever triggered it; a Dataflow Flex Template, with the parameters
of whoever launched it. Both reach litmus-score through this module (the
DAG's job, pipeline.nightly_job, and the template's, pipeline.template), so
what a run may set is the same list for both. A setting is a date, a place
to read or write, a mode, a bound or a worker count: a value litmus-score
reads, never one that names code. The runner and every other Beam option
are the deployer's: among them are those that name a program, an image, an
endpoint, a package or a file to execute (a job endpoint with a subprocess
harness runs any shell line), so a run that names anything else is refused
before anything runs, in one line naming it (docs/runners.md, "What a run
may choose").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from litmus_score.importers import FORMATS
from litmus_score.scoring.contract import MODES
from pipeline.nightly import night_date
from pipeline.options import UsageError

COMMANDS = ("score", "nightly")
DEPLOYERS_ALONE = ("the runner and Beam's options are set where litmus-score is deployed, never by a run "
                   "(docs/runners.md)")


@dataclass(frozen=True)
class Kind:
    """What a setting's values look like, and the test of one (given as text)."""

    description: str
    accepts: Callable[[str], bool]


def _pattern(description: str, pattern: str) -> Kind:
    return Kind(description, lambda value: re.fullmatch(pattern, value) is not None)


def _one_of(choices) -> Kind:
    return Kind(f"one of {', '.join(choices)}", lambda value: value in choices)


def _is_date(value: str) -> bool:
    try:
        return night_date(value) == value
    except UsageError:
        return False


DATE = Kind("a date written YYYY-MM-DD", _is_date)
# From the root or a URL (gs://, s3://, ...), no control character: read and written, never run.
LOCATION = _pattern("a path from / or a URL such as gs://bucket/folder", r"(/|[a-z][a-z0-9+.-]*://)[^\x00-\x1f\x7f]*")
COUNT = _pattern("a whole number above 0", r"[1-9][0-9]{0,17}")
AMOUNT = _pattern("a number above 0", r"(?!0*(\.0*)?$)[0-9]{1,9}(\.[0-9]{1,9})?")
LINE = Kind("printable text on one line", lambda value: 0 < len(value) <= 1000 and value.isprintable())
NAMES = _pattern("names separated by commas", r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*")


@dataclass(frozen=True)
class Setting:
    kind: Kind
    commands: tuple = COMMANDS


# Each is the flag of the same name of `score` or `nightly` (docs/commands.md).
SETTINGS = {
    # The night, what is read and where the run is written.
    "date": Setting(DATE, ("nightly",)),
    "input": Setting(LOCATION),
    "output": Setting(LOCATION, ("score",)),
    "output_root": Setting(LOCATION, ("nightly",)),
    "baseline": Setting(LOCATION, ("score",)),  # nightly finds its own
    # How calls are adjudicated and nights compared.
    "adjudication": Setting(_one_of(MODES)),
    "policy": Setting(LOCATION),
    "thresholds": Setting(LOCATION),
    # Logs imported in the job.
    "input_format": Setting(_one_of(FORMATS)),
    "principal": Setting(LINE),
    "harness_verdict": Setting(LINE),
    "max_sample_mib": Setting(AMOUNT),
    "identity_attributes": Setting(NAMES),
    # Bounds.
    "batch_rows": Setting(COUNT),
    "max_calls_per_trajectory": Setting(COUNT),
    "max_text_bytes": Setting(COUNT),
    "max_json_depth": Setting(COUNT),
    "max_slice_keys": Setting(COUNT),
    "max_groups": Setting(COUNT),
    "max_k": Setting(COUNT),
    # Worker counts (Beam's, for runners that start workers: Dataflow's).
    "num_workers": Setting(COUNT),
    "max_num_workers": Setting(COUNT),
}


def settings_of(command: str) -> list:
    """The names a run of `command` may set."""
    return [name for name, setting in SETTINGS.items() if command in setting.commands]


def not_a_run_setting(name: str) -> UsageError:
    return UsageError(f"`{name}` is not a run setting: {DEPLOYERS_ALONE}")


def run_flags(command: str, settings: Mapping[str, object]) -> list:
    """`command`'s flags for a run's settings (an unset one, None, left out); UsageError naming the
    first setting that is not one of `command`'s or whose value is not of its kind."""
    if command not in COMMANDS:
        raise UsageError(f"`command` must be one of {', '.join(COMMANDS)}, got {command!r}")
    flags = []
    for name, value in settings.items():
        setting = SETTINGS.get(name)
        if setting is None:
            raise not_a_run_setting(name)
        if command not in setting.commands:
            raise UsageError(f"`{name}` is not a setting of {command}, whose are {', '.join(settings_of(command))}")
        if value is None:
            continue
        # Text or a number, never a bool (JSON's true would pass as "True") nor a structure.
        if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not setting.kind.accepts(str(value)):
            raise UsageError(f"`{name}` must be {setting.kind.description}, got {value!r}")
        flags.append(f"--{name}={value}")
    return flags
