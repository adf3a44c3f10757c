"""The Dataflow Flex Template's job: `score` or `nightly` (the `command`
parameter, default score) with the template's parameters, submitted
without waiting.

Dataflow's Flex Template launcher must exit once the job is submitted (a
launcher that waits blocks the launch until it times out), so the job
publishes itself: its last step writes the comparison, report.html, the
manifest and _SUCCESS, and releases the lock (pipeline.job.submit). Every
option Dataflow's launcher adds (--runner, --project, --setup_file, ...)
goes to Beam unchanged.

It scores shards only: logs (`--input_format`) need an import job that
finishes before the scoring job's globs are matched, which a launcher that
submits one job and exits cannot run; import them first (`litmus-score
import`, any runner) and give the template the shards.
"""

from __future__ import annotations

from litmus_score import text
from litmus_score.exits import Exit

COMMANDS = ("score", "nightly")


def main(argv) -> Exit:
    from pipeline import job, nightly
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
        if any(arg.split("=", 1)[0] in ("--input_format", "--input-format") for arg in rest):
            raise UsageError("the Flex Template scores shards, not logs: import the logs first (litmus-score "
                             "import FORMAT LOGS --output gs://...) and give it their trajectories/*.parquet")
        if command == "nightly":
            config, night, baseline, _, _ = nightly.plan(rest)
        else:
            (config, baseline), night = job.configure(rest), None
    except (UsageError, PublishError) as error:
        text.error(error)
        return Exit.USAGE
    return job.submit(config, baseline, night)
