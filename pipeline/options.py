"""Options of the scoring job, and their validation before any data moves."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from apache_beam.io.filesystem import BeamIOError, CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from litmus_score.scoring import contract as c
from litmus_score.scoring.layout import OTHER
from litmus_score.scoring.metrics import DEFAULT_MAX_GROUPS, DEFAULT_MAX_K, DEFAULT_MAX_SLICE_KEYS
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
# Under this much input a local run keeps one in-memory worker: two worker
# threads start a gRPC server and a worker each, and translate every stage
# for both, which costs a small run more than a second core saves
# (docs/performance.md, "One in-memory worker for a small input").
SMALL_INPUT_BYTES = 16 * 2**20
# Where worker threads run (pipeline.threaded_runner says why not on FnApiRunner's own).
THREADED_RUNNER = "pipeline.threaded_runner.ThreadedRunner"
# Runners of ours by short name (Beam's own names resolve as Beam resolves them).
RUNNERS = {"dask": "pipeline.dask_runner.DaskRunner"}


def with_our_runners(argv: list) -> list:
    """argv with `--runner dask` (or DaskRunner) naming our runner, before Beam parses it."""
    def ours(name: str) -> str:
        return RUNNERS.get(name.lower().removesuffix("runner"), name)

    argv = [f"--runner={ours(a.partition('=')[2])}" if a.startswith("--runner=") else a for a in argv]
    return [ours(a) if i and argv[i - 1] == "--runner" else a for i, a in enumerate(argv)]


class JobOptions(PipelineOptions):
    """A job's PipelineOptions, each view made once. Beam asks for a view
    hundreds of times while it builds, checks and runs a job (each
    `view_as` a new argparse parser over the flags): about an eighth of the
    CPU of scoring the demo's 1,200 trajectories (docs/performance.md). Views
    read and write the one shared dict of values, so one view per class
    sees what any other sets. Adds no flags."""

    def view_as(self, cls):
        views = self.__dict__.setdefault("_views", {})
        if cls not in views:
            views[cls] = super().view_as(cls)
        return views[cls]

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_views", None)  # made again where the options are unpickled
        return state


def with_local_parallelism(argv: list) -> list:
    """argv, with a local run's worker threads, ours or the user's, on
    THREADED_RUNNER. When the job runs on DirectRunner and the user chose
    neither the number of workers nor their mode, it goes on THREADED_RUNNER
    with Beam's one in-memory worker, for fit_local_workers to choose once
    the input's size is known."""
    runner = PipelineOptions(argv).view_as(StandardOptions).runner
    local = "direct" if runner is None else runner.lower().removesuffix("runner")
    chosen = any(arg.split("=")[0] in _WORKER_FLAGS for arg in argv)
    threads = PipelineOptions(argv).view_as(DirectOptions).direct_running_mode == "multi_threading"
    if (local == "direct" and not chosen and _cores() >= 2) or (local in ("direct", "fnapi") and threads):
        argv = [*argv, f"--runner={THREADED_RUNNER}"]
    return list(argv)


def _cores() -> int:
    return min(os.cpu_count() or 1, MAX_LOCAL_WORKERS)


def fit_local_workers(options: PipelineOptions, input_bytes: int | None) -> None:
    """Chooses the workers of a local run whose workers were left to it
    (with_local_parallelism): a thread per core, at most MAX_LOCAL_WORKERS,
    unless the input is known to be under SMALL_INPUT_BYTES: then the one
    in-memory worker it has, since the threads would cost more to start
    than they save."""
    direct = options.view_as(DirectOptions)
    if options.view_as(StandardOptions).runner != THREADED_RUNNER or direct.direct_running_mode != "in_memory":
        return  # not on our runner, or the user chose
    if input_bytes is None or input_bytes >= SMALL_INPUT_BYTES:
        direct.direct_num_workers, direct.direct_running_mode = _cores(), "multi_threading"


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
        calls = DEFAULT_BOUNDS.max_calls_per_trajectory
        parser.add_argument("--max_calls_per_trajectory", type=int, default=calls,
                            help=f"Calls per trajectory, at most (default {calls:,}).")
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
        parser.add_argument("--max_k", type=int, default=DEFAULT_MAX_K,
                            help=f"misuse@k in metrics.json goes from k = 1 up to the most scored attempts of any "
                                 f"task, at most this (default {DEFAULT_MAX_K}).")


@dataclass(frozen=True, eq=False)
class RunConfig:
    """A scoring run's validated options, built once (validate) and passed down.

    `beam` is the options object the Beam pipeline is made with (every flag
    that is not litmus-score's goes there unchanged); `baseline` names an
    earlier run's folder, read when the run starts (pipeline.job)."""

    inputs: tuple
    output: str
    mode: str
    beam: PipelineOptions
    batch_rows: int = DEFAULT_BATCH_ROWS
    policy_file: str | None = None
    policy: PolicyDocument | None = None
    policy_text: str | None = None  # the policy file's text as read: the run stores it beside policy.json
    baseline: str | None = None
    thresholds: Thresholds | None = None  # None: litmus_score.scoring.compare.DEFAULT_THRESHOLDS
    bounds: Bounds = DEFAULT_BOUNDS
    max_slice_keys: int = DEFAULT_MAX_SLICE_KEYS
    replace: bool = False
    accept_no_verdict: bool = False
    max_groups: int = DEFAULT_MAX_GROUPS
    max_k: int = DEFAULT_MAX_K

    @property
    def policy_sha256(self) -> str | None:
        return self.policy.sha256 if self.policy is not None else None

    def as_dict(self) -> dict:
        """The options as the manifest records them."""
        return {
            "inputs": list(self.inputs),
            "output": self.output,
            "adjudication": self.mode,
            "batch_rows": self.batch_rows,
            "policy": self.policy_file,
            "accept_no_verdict": self.accept_no_verdict,
            "baseline": self.baseline,
            "max_calls_per_trajectory": self.bounds.max_calls_per_trajectory,
            "max_text_bytes": self.bounds.max_text_bytes,
            "max_json_depth": self.bounds.max_json_depth,
            "max_slice_keys": self.max_slice_keys,
            "max_groups": self.max_groups,
            "max_k": self.max_k,
        }


def read_config(path: str, error: type[ValueError], max_bytes: int) -> bytes:
    """At most `max_bytes` + 1 bytes of a configuration file: a local regular
    file, or an object on any filesystem Beam can read (gs://, s3://)."""
    from litmus_score.scoring.configfile import read_regular

    if "://" not in path:
        return read_regular(path, error, max_bytes)
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            return handle.read(max_bytes + 1)
    except ValueError as unknown:  # Beam knows no filesystem for the scheme
        raise error(f"{path}: {unknown}") from None
    except BeamIOError as failed:  # no strerror; the message ends with a dict of the details
        raise OSError(failed.errno, str(failed).split(" with exceptions ", 1)[0]) from None
    except OSError as failed:
        raise OSError(failed.errno, failed.strerror or str(failed)) from None


def _config_file(path: str, load):
    """load(path), with I/O and validation faults as one UsageError line naming the file."""
    try:
        return load(path)
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    except ValueError as error:  # PolicyError, ThresholdsError: one line naming file and field
        raise UsageError(str(error)) from None


def load_policy_source(path: str) -> tuple:
    """(the validated policy in `path`, the file's text), from any path Beam
    can read; UsageError naming the file (and the field) if it cannot be used.
    Every command that takes a policy loads it here."""
    # pydantic and PyYAML load only when a policy or thresholds file is given.
    from litmus_score.scoring.policy import load_policy_source as load

    return _config_file(path, lambda source: load(source, read_config))


def load_policy_file(path: str) -> PolicyDocument:
    """The validated policy in `path` (load_policy_source, without its text)."""
    return load_policy_source(path)[0]


def load_thresholds_file(path: str) -> Thresholds:
    """The validated thresholds in `path`, from any path Beam can read;
    UsageError naming the file (and the field) if they cannot be used."""
    from litmus_score.scoring.compare import load_thresholds

    return _config_file(path, lambda source: load_thresholds(source, read_config))


def folder_name(path: str) -> str:
    """An output or run folder as given, without trailing slashes ('/' stays '/')."""
    return path.rstrip("/") or "/"


def _resolved(folder: str) -> str:
    if "://" in folder:  # an object store: names are what they say
        return folder.rstrip("/")
    return os.path.realpath(folder)


def refuse_nested(output: str, other: str, role: str) -> None:
    """UsageError when `output` is the folder `other` (a run read as `role`),
    or holds it, or is inside it: writing the output would touch that run."""
    mine, theirs = _resolved(output), _resolved(other)
    if mine == theirs or mine.startswith(theirs + "/") or theirs.startswith(mine + "/"):
        relation = "is" if mine == theirs else "is inside" if mine.startswith(theirs + "/") else "holds"
        raise UsageError(f"--output {output!r} {relation} the {role} {other!r}: a run never writes into "
                         "a run it reads; choose another --output")


def validate(options: PipelineOptions) -> RunConfig:
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
    if score.max_k < 1:
        raise UsageError(f"--max_k must be positive, got {score.max_k}")
    try:
        bounds = Bounds(score.max_calls_per_trajectory, score.max_text_bytes, score.max_json_depth)
    except ValueError as error:
        raise UsageError(f"--{error}") from None
    output = folder_name(score.output)
    if score.baseline:
        refuse_nested(output, score.baseline, "baseline")
    policy, policy_text = load_policy_source(score.policy) if score.policy else (None, None)
    return RunConfig(
        inputs=tuple(score.inputs), output=output, mode=mode, beam=options,
        batch_rows=score.batch_rows, policy_file=score.policy, policy=policy, policy_text=policy_text,
        baseline=folder_name(score.baseline) if score.baseline else None,
        thresholds=load_thresholds_file(score.thresholds) if score.thresholds else None,
        bounds=bounds, max_slice_keys=score.max_slice_keys, replace=score.replace,
        accept_no_verdict=score.accept_no_verdict, max_groups=score.max_groups, max_k=score.max_k)
