"""The Dataflow Flex Template's job: `score` or `nightly` (the `command`
parameter, default score) with the template's parameters, submitted
without waiting.

Dataflow's Flex Template launcher must exit once the job is submitted (a
launcher that waits blocks the launch until it times out), so the job
publishes itself: its last step writes the comparison, report.html, the
manifest and _SUCCESS, and releases the lock (pipeline.job.submit).

Whoever launches the template chooses what it is given: the template's
parameters and the launch's own options, which Dataflow's launcher passes
on as flags alike. So every flag is one of three: a run setting
(pipeline.run_settings, the allow-list the Airflow DAG's job shares); one of
LAUNCH_OPTIONS, where and as whom Dataflow runs the job, none naming
anything to execute; or a deployed option given back with its deployed
value. The runner and every other Beam option are the deployer's, set in
the image (deployed_options); any other flag stops the launch before
anything runs, in one line naming it (docs/runners.md, "What a run may
choose").

With `input_format` the inputs are logs of that format, imported and
scored in the same job (pipeline.imports.score_logs), as `score
--input_format` and `nightly --input_format` do.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from litmus_score import text
from litmus_score.exits import Exit
from pipeline import imports, job, nightly
from pipeline.options import UsageError
from pipeline.publish import PublishError
from pipeline.run_settings import LINE, SETTINGS, not_a_run_setting, run_flags

# The image's own: what its Dockerfile sets, read when the launcher starts.
DEPLOYED_OPTIONS = "LITMUS_BEAM_OPTIONS"  # a JSON object of Beam options, the runner among them
FLEX_TEMPLATE_FILES = {"FLEX_TEMPLATE_PYTHON_SETUP_FILE": "setup_file",
                       "FLEX_TEMPLATE_PYTHON_REQUIREMENTS_FILE": "requirements_file"}
RUNNER = "DataflowRunner"  # a Flex Template's, unless the image names another
# What Dataflow's launcher passes from a launch request besides the parameters: where the job runs and
# as whom; each names no program, image, endpoint, package or file to execute (the worker counts are
# run settings). The image's setup and requirements files come back as deployed options.
LAUNCH_OPTIONS = ("project", "region", "job_name", "temp_location", "staging_location", "template_location",
                  "service_account_email", "labels", "worker_machine_type", "machine_type", "disk_size_gb",
                  "network", "subnetwork", "zone", "worker_region", "worker_zone", "dataflow_kms_key",
                  "autoscaling_algorithm", "use_public_ips", "no_use_public_ips")


def launch_flags(argv) -> list:
    """(name, value) for each flag: `--name=value`, `--name value`, or `--name` alone (value None)."""
    flags, at = [], 0
    while at < len(argv):
        arg = argv[at]
        if not arg.startswith("--") or len(arg) == 2:
            raise UsageError(f"unexpected argument {arg!r}")
        name, equals, value = arg[2:].partition("=")
        if not equals and at + 1 < len(argv) and not argv[at + 1].startswith("--"):
            at, value = at + 1, argv[at + 1]
        flags.append((name, value if equals or value else None))
        at += 1
    return flags


def deployed_options(environ: Mapping[str, str]) -> dict:
    """The Beam options the image sets: RUNNER, Dataflow's FLEX_TEMPLATE_PYTHON_* files, and
    LITMUS_BEAM_OPTIONS (e.g. {"sdk_container_image": "..."}), none of them a run setting."""
    options = {"runner": RUNNER, **{name: environ[variable] for variable, name in FLEX_TEMPLATE_FILES.items()
                                    if environ.get(variable)}}
    try:
        deployed = json.loads(environ.get(DEPLOYED_OPTIONS) or "{}")
    except ValueError as error:
        raise UsageError(f"{DEPLOYED_OPTIONS} is not JSON: {error}") from None
    if not isinstance(deployed, dict):
        raise UsageError(f"{DEPLOYED_OPTIONS} must be a JSON object of Beam options")
    settings = sorted(set(deployed) & set(SETTINGS))
    if settings:
        raise UsageError(f"{DEPLOYED_OPTIONS}: `{settings[0]}` is a run setting, a template parameter, "
                         "not a Beam option")
    return {**options, **deployed}


def beam_flags(options: Mapping[str, object]) -> list:
    """Beam's flags for options: true alone, false and None left out, a list once per item, a dict as JSON."""
    flags = []
    for name, value in options.items():
        if value is True:
            flags.append(f"--{name}")
        elif isinstance(value, list):
            flags.extend(f"--{name}={item}" for item in value)
        elif value is not None and value is not False:
            flags.append(f"--{name}={json.dumps(value) if isinstance(value, dict) else value}")
    return flags


def job_argv(argv, environ: Mapping[str, str]) -> tuple:
    """(the command, its arguments) for the launch's flags: the image's options, the launch options and
    the run's settings; UsageError naming the first flag that is none of those."""
    deployed = deployed_options(environ)
    command, settings, launch = "score", {}, {}
    for name, value in launch_flags(argv):
        if name == "command":
            command = value
        elif name in SETTINGS:
            if value is None:
                raise UsageError(f"`{name}` needs a value (--{name}=VALUE)")
            settings[name] = value
        elif name in LAUNCH_OPTIONS:
            if value is not None and not LINE.accepts(value):
                raise UsageError(f"`{name}` must be {LINE.description}, got {value!r}")
            launch[name] = True if value is None else value
        elif name not in deployed or str(deployed[name]) != value:  # the image's own, given back, goes by
            raise not_a_run_setting(name)
    return command, [*beam_flags(deployed), *beam_flags(launch), *run_flags(command, settings)]


def main(argv, environ: Mapping[str, str] = os.environ) -> Exit:
    try:
        command, rest = job_argv(argv, environ)
        logs = None
        if command == "nightly":
            config, night, baseline, _, args = nightly.plan(rest)
            logs = args if args.input_format else None
        elif any(arg.split("=", 1)[0] == "--input_format" for arg in rest):
            (logs, config, baseline), night = imports.plan(rest), None
        else:
            (config, baseline), night = job.configure(rest), None
    except (UsageError, PublishError) as error:
        text.error(error)
        return Exit.USAGE
    if logs is not None:
        return imports.score_logs(logs, config, baseline, night, submit=True)
    return job.submit(config, baseline, night)
