"""The Dataflow Flex Template's job: `score` or `nightly` (the `command`
parameter, default score) with the template's parameters, submitted
without waiting.

Dataflow's Flex Template launcher must exit once the job is submitted (a
launcher that waits blocks the launch until it times out), so the job
publishes itself: its last step writes the comparison, report.html, the
manifest and _SUCCESS, and releases the lock (pipeline.job.submit). Every
option Dataflow's launcher adds (--runner, --project, --setup_file, ...)
goes to Beam unchanged.

With `input_format` the inputs are logs of that format, imported and
scored in the same job (pipeline.imports.score_logs), as `score
--input_format` and `nightly --input_format` do.
"""

from __future__ import annotations

from litmus_score import text
from litmus_score.exits import Exit

COMMANDS = ("score", "nightly")


def main(argv) -> Exit:
    from pipeline import imports, job, nightly
    from pipeline.options import UsageError
    from pipeline.publish import PublishError

    command = "score"
    rest = []
    for arg in argv:
        if arg.startswith("--command="):
            command = arg.partition("=")[2]
        else:
            rest.append(arg)
    try:
        if command not in COMMANDS:
            raise UsageError(f"--command must be one of {', '.join(COMMANDS)}, got {command!r}")
        logs = None
        if command == "nightly":
            config, night, baseline, _, args = nightly.plan(rest)
            logs = args if args.input_format else None
        elif any(arg.split("=", 1)[0] in ("--input_format", "--input-format") for arg in rest):
            (logs, config, baseline), night = imports.plan(rest), None
        else:
            (config, baseline), night = job.configure(rest), None
    except (UsageError, PublishError) as error:
        text.error(error)
        return Exit.USAGE
    if logs is not None:
        return imports.score_logs(logs, config, baseline, night, submit=True)
    return job.submit(config, baseline, night)
