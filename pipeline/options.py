"""Options of the scoring job, and their validation before any data moves."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipeline.publish import PublishError, read_run
from litmus_score.scoring import contract as c
from litmus_score.scoring.layout import OTHER
from litmus_score.scoring.metrics import DEFAULT_MAX_GROUPS, DEFAULT_MAX_SLICE_KEYS
from litmus_score.scoring.trajectory import DEFAULT_BOUNDS, MAX_JSON_DEPTH_LIMIT, Bounds
from transforms.read import DEFAULT_BATCH_ROWS

if TYPE_CHECKING:
    from litmus_score.scoring.compare import Thresholds
    from litmus_score.scoring.policy import PolicyDocument


# Most of a batch's time is spent in Arrow and Parquet kernels, which release
# the GIL, so DirectRunner's worker threads use the cores (1.5x on 2 cores);
# past a few threads the GIL-bound rest dominates and only memory grows.
MAX_LOCAL_WORKERS = 4
_WORKER_FLAGS = ("--direct_num_workers", "--direct_running_mode")
# Runners of ours by short name (Beam's own names resolve as Beam resolves them).
RUNNERS = {"dask": "pipeline.dask_runner.DaskRunner"}


def with_our_runners(argv: list) -> list:
    """argv with `--runner dask` (or DaskRunner) naming our runner, before Beam parses it."""
    def ours(name: str) -> str:
        return RUNNERS.get(name.lower().removesuffix("runner"), name)

    argv = [f"--runner={ours(a.partition('=')[2])}" if a.startswith("--runner=") else a for a in argv]
    return [ours(a) if i and argv[i - 1] == "--runner" else a for i, a in enumerate(argv)]


def with_local_parallelism(argv: list) -> list:
    """argv, plus threaded DirectRunner workers (one per core, at most
    MAX_LOCAL_WORKERS) when the job runs on DirectRunner and the user chose
    neither the number of workers nor their mode."""
    runner = PipelineOptions(argv).view_as(StandardOptions).runner
    on_direct = runner is None or runner.lower().removesuffix("runner") == "direct"
    chosen = any(arg.split("=")[0] in _WORKER_FLAGS for arg in argv)
    workers = min(os.cpu_count() or 1, MAX_LOCAL_WORKERS)
    if not on_direct or chosen or workers < 2:
        return list(argv)
    return [*argv, f"--direct_num_workers={workers}", "--direct_running_mode=multi_threading"]


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
        parser.add_argument("--output", help="Folder for this run's outputs: new or empty (or see --replace).")
        parser.add_argument(
            "--replace", action="store_true",
            help="Replace an earlier attempt (complete or not) in --output, and break its lock if its process "
                 "is dead on this host.",
        )
        parser.add_argument(
            "--adjudication", default=c.COMMIT,
            help=f"Adjudication mode: {', '.join(c.MODES)} (default {c.COMMIT}).",
        )
        parser.add_argument(
            "--batch_rows", type=int, default=DEFAULT_BATCH_ROWS,
            help=f"Trajectories per Arrow batch, at least (default {DEFAULT_BATCH_ROWS}): each row group "
                 "is cut into equal batches under twice this size.",
        )
        parser.add_argument(
            "--policy", default=None,
            help="Policy YAML: decides where a context recorded no verdict, and checks those recorded.",
        )
        parser.add_argument(
            "--accept_no_verdict", action="store_true",
            help="Score without --policy shards that record no verdict (imported logs): their calls are "
                 "unscored no_verdict. Without it, such a run stops (exit 2).",
        )
        parser.add_argument(
            "--baseline", default=None,
            help="An earlier run's output folder: write comparison.json; exit 3 on a regression.",
        )
        parser.add_argument(
            "--thresholds", default=None,
            help="Regression thresholds YAML for --baseline (default: configs/thresholds.yaml's values).",
        )
        # Bounds: beyond any of them a trajectory is unscored too_large.
        parser.add_argument("--max_calls_per_trajectory", type=int, default=DEFAULT_BOUNDS.max_calls_per_trajectory,
                            help=f"Calls per trajectory, at most (default {DEFAULT_BOUNDS.max_calls_per_trajectory:,}).")
        parser.add_argument("--max_text_bytes", type=int, default=DEFAULT_BOUNDS.max_text_bytes,
                            help=f"UTF-8 bytes in any one string, at most (default {DEFAULT_BOUNDS.max_text_bytes:,}).")
        parser.add_argument("--max_json_depth", type=int, default=DEFAULT_BOUNDS.max_json_depth,
                            help=f"Nesting of arguments and resolved arguments, at most (default "
                                 f"{DEFAULT_BOUNDS.max_json_depth}, limit {MAX_JSON_DEPTH_LIMIT}).")
        parser.add_argument("--max_slice_keys", type=int, default=DEFAULT_MAX_SLICE_KEYS,
                            help=f"Names per slice of metrics.json (tools, task categories, tasks), at most; "
                                 f"the rest are summed under {OTHER} (default {DEFAULT_MAX_SLICE_KEYS}).")
        parser.add_argument("--max_groups", type=int, default=DEFAULT_MAX_GROUPS,
                            help=f"(run_id, agent) groups of metrics.json, at most; the rest are summed into "
                                 f"one group whose run_id and agent are {OTHER} (default {DEFAULT_MAX_GROUPS:,}).")


@dataclass(frozen=True)
class ScoreConfig:
    inputs: tuple
    output: str
    adjudication: str
    batch_rows: int
    policy_file: Optional[str] = None
    policy: Optional[PolicyDocument] = None
    baseline: Optional[str] = None
    thresholds: Optional[Thresholds] = None  # None: litmus_score.scoring.compare.DEFAULT_THRESHOLDS
    bounds: Bounds = DEFAULT_BOUNDS
    max_slice_keys: int = DEFAULT_MAX_SLICE_KEYS
    replace: bool = False
    accept_no_verdict: bool = False
    max_groups: int = DEFAULT_MAX_GROUPS

    def as_dict(self) -> dict:
        return {
            "inputs": list(self.inputs),
            "output": self.output,
            "adjudication": self.adjudication,
            "batch_rows": self.batch_rows,
            "policy": self.policy_file,
            "accept_no_verdict": self.accept_no_verdict,
            "baseline": self.baseline,
            "max_calls_per_trajectory": self.bounds.max_calls_per_trajectory,
            "max_text_bytes": self.bounds.max_text_bytes,
            "max_json_depth": self.bounds.max_json_depth,
            "max_slice_keys": self.max_slice_keys,
            "max_groups": self.max_groups,
        }


def load_baseline_metrics(folder: str, mode: str) -> dict:
    """A complete earlier run's metrics.json, checked to be comparable; UsageError if not."""
    try:
        metrics, _ = read_run(folder)
    except PublishError as error:
        raise UsageError(f"baseline: {error}") from None
    if not isinstance(metrics, dict) or metrics.get("adjudication") != mode:
        found = metrics.get("adjudication") if isinstance(metrics, dict) else None
        raise UsageError(f"baseline {folder!r} was scored with adjudication {found!r}, this run with {mode!r}")
    return metrics


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
    if score.max_slice_keys < 1:
        raise UsageError(f"--max_slice_keys must be positive, got {score.max_slice_keys}")
    if score.max_groups < 1:
        raise UsageError(f"--max_groups must be positive, got {score.max_groups}")
    try:
        bounds = Bounds(score.max_calls_per_trajectory, score.max_text_bytes, score.max_json_depth)
    except ValueError as error:
        raise UsageError(f"--{error}") from None
    output = score.output.rstrip("/") or "/"
    # pydantic and PyYAML load only when a policy or thresholds file is given.
    policy = thresholds = None
    try:
        if score.policy:
            from litmus_score.scoring.policy import load_policy

            policy = load_policy(score.policy)
        if score.thresholds:
            from litmus_score.scoring.compare import load_thresholds

            thresholds = load_thresholds(score.thresholds)
    except OSError as error:
        raise UsageError(f"cannot read {error.filename}: {error.strerror}") from None
    except ValueError as error:  # PolicyError, ThresholdsError: one line naming file and field
        raise UsageError(str(error)) from None
    if score.baseline:
        load_baseline_metrics(score.baseline, mode)
    return ScoreConfig(tuple(score.inputs), output, mode, score.batch_rows, score.policy, policy,
                       score.baseline, thresholds, bounds, score.max_slice_keys, score.replace,
                       score.accept_no_verdict, score.max_groups)
