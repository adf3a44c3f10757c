"""Options of the scoring job, and their validation before any data moves."""

from __future__ import annotations

from dataclasses import dataclass

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from scoring import contract as c
from transforms.read import DEFAULT_BATCH_ROWS, NoMatchingShards, match_shards


class UsageError(ValueError):
    """A bad invocation; its message is the one line the user sees."""


class ScoreOptions(PipelineOptions):
    """litmus-score's own flags; every other flag goes to Beam unchanged."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--input", dest="inputs", action="append", default=None,
            help="Parquet shard path or glob (local, gs://, ...); repeat for several.",
        )
        parser.add_argument("--output", help="Folder for this run's outputs; must be new or empty.")
        parser.add_argument(
            "--adjudication", default=c.COMMIT,
            help=f"Adjudication mode: {', '.join(c.MODES)} (default {c.COMMIT}).",
        )
        parser.add_argument(
            "--batch_rows", type=int, default=DEFAULT_BATCH_ROWS,
            help=f"Trajectories per Arrow batch (default {DEFAULT_BATCH_ROWS}).",
        )


@dataclass(frozen=True)
class ScoreConfig:
    inputs: tuple
    output: str
    adjudication: str
    batch_rows: int

    def as_dict(self) -> dict:
        return {"inputs": list(self.inputs), "output": self.output,
                "adjudication": self.adjudication, "batch_rows": self.batch_rows}


def _holds_results(folder: str) -> bool:
    if not FileSystems.exists(folder):
        return False
    return bool(FileSystems.match([FileSystems.join(folder, "*")])[0].metadata_list)


def validate(options: PipelineOptions) -> ScoreConfig:
    """The checked configuration, or a UsageError naming what is wrong."""
    score = options.view_as(ScoreOptions)
    if not score.inputs:
        raise UsageError("--input is required (a Parquet path or glob; repeat for several)")
    if not score.output:
        raise UsageError("--output is required (a new or empty folder)")
    try:
        mode = c.check_mode(score.adjudication)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if score.batch_rows < 1:
        raise UsageError(f"--batch_rows must be positive, got {score.batch_rows}")
    try:
        match_shards(score.inputs)
    except NoMatchingShards as error:
        raise UsageError(str(error)) from None
    output = score.output.rstrip("/") or "/"
    if _holds_results(output):
        raise UsageError(f"output folder {output!r} is not empty (it may hold another run's results); choose a new one")
    return ScoreConfig(tuple(score.inputs), output, mode, score.batch_rows)
