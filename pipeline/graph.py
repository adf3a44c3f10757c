"""The scoring graph: shards (or logs) in, adjudicated calls, UNSCORED records and metrics out.

    Read shards -> Set aside duplicates -> Check completeness -> Resolve contexts -> Classify -> Compute metrics
         |  \\____ Find duplicates ___/          |                    |                 |
         |                 +------ unscored -----+--------------------+---> Write outputs <-- scored, metrics, manifest
         +---- shard reports (the input accounting) ----------------------------^

Where inputs keep the harness's own verdict, the scored trajectories meet it
on their way to the metrics (transforms.harness).

The inputs are shards (ShardInputs) or agent logs imported in the same job
(LogInputs, `score --input_format`): the logs' trajectories go on to the
same stages as the shards' batches would, no file between, and each log
is an input as a shard is (its report, its identity in the manifest).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import apache_beam as beam
import pyarrow as pa

from litmus_score.scoring import contract as c
from litmus_score.scoring import layout
from litmus_score.scoring import metrics as m
from litmus_score.scoring.trajectory import DEFAULT_BOUNDS, Bounds
from transforms.classify import Classify, unscored_statistics
from transforms.completeness import CheckCompleteness
from transforms.duplicates import FindDuplicates, FindDuplicatesInBatches, SetAsideDuplicates
from transforms.elements import Tag
from transforms.evidence import CollectEvidence
from transforms.harness import CompareWithHarness, HarnessVerdictsOfBatches, ReadHarnessVerdicts
from transforms.imports import REPORTS_TAG, UNMAPPED_TAG, ImportToScore
from transforms.metrics import ComputeMetrics, GatherStatistics
from transforms.read import DEFAULT_BATCH_ROWS, NoVerdictSource, ReadShards, shards_without_verdicts
from transforms.records import failed_batch_to_unscored
from transforms.resolve import ResolveContexts
from transforms.whatif import FLIPS, FlipsCombineFn, ResolveUnderPolicies, new_summary
from transforms.write import WriteOutputs


class ShardInputs(beam.PTransform):
    """Shard patterns -> a dict: the read `batches`, one report per shard
    (Tag.SHARD_REPORTS), the `duplicates` decisions (found in the files,
    read again) and the `harness_verdicts` they keep. The patterns are
    matched when it is built (NoMatchingShards)."""

    def __init__(self, patterns, batch_rows: int = DEFAULT_BATCH_ROWS,
                 max_text_bytes: int = DEFAULT_BOUNDS.max_text_bytes):
        super().__init__()
        self._read = ReadShards(patterns, batch_rows, max_text_bytes)
        self._max_text_bytes = max_text_bytes

    @property
    def shards(self) -> list:
        """The Shards the input patterns matched."""
        return self._read.shards

    def identities(self) -> list:
        return input_identities((shard.path, shard.identity) for shard in self.shards)

    def expand(self, pbegin: beam.pvalue.PBegin) -> dict[str, Any]:
        read = pbegin | "Read shards" >> self._read
        decisions = (
            pbegin
            | "Shards to index" >> beam.Create(self.shards, reshuffle=False)
            | "Spread shards to index" >> beam.Reshuffle()
            | "Find duplicates" >> FindDuplicates(self._max_text_bytes)
        )
        return {"batches": read.batches, Tag.SHARD_REPORTS: read[Tag.SHARD_REPORTS], "duplicates": decisions,
                "harness_verdicts": ReadHarnessVerdicts(self.shards)}


class LogInputs(beam.PTransform):
    """Agent logs imported in the same job (an ImportToScore) -> the dict
    ShardInputs gives, the duplicates and harness verdicts found in the
    imported batches, and the import's own `import_reports` (one per log)
    and `unmapped` entries. Each log is an input as a shard is: one report,
    its rows the trajectories imported from it."""

    def __init__(self, imports: ImportToScore):
        super().__init__()
        self._imports = imports

    def identities(self) -> list:
        return input_identities(self._imports.identities.items())

    def expand(self, pbegin: beam.pvalue.PBegin) -> dict[str, Any]:
        imported = pbegin | "Import logs" >> self._imports
        batches = imported["batches"]
        return {"batches": batches, Tag.SHARD_REPORTS: imported[Tag.SHARD_REPORTS],
                "duplicates": batches | "Find duplicates" >> FindDuplicatesInBatches(),
                "harness_verdicts": batches | "Harness verdicts" >> HarnessVerdictsOfBatches(),
                "import_reports": imported[REPORTS_TAG], "unmapped": imported[UNMAPPED_TAG]}


class ScoreTrajectories(beam.PTransform):
    """Inputs -> dict of PCollections: scored, trajectories, unscored, metrics, evidence, shard_reports.

    `inputs` are shard patterns (read as ShardInputs), or a ShardInputs or
    LogInputs; with LogInputs the dict also holds the import's
    `import_reports` and `unmapped` entries. `scored` and `trajectories`
    hold pa.Tables, `unscored` is a dict of PCollections of pa.Tables by
    where they were set aside (schemas in transforms.schema); `metrics` and
    `evidence` hold the single metrics.json and evidence.json documents.
    `policy` (a litmus_score.scoring.policy.PolicyDocument) decides where no
    verdict was recorded; `bounds` says when a trajectory is too_large,
    `max_slice_keys` how many names a slice of metrics.json keeps,
    `max_groups` how many (run_id, agent) groups, `max_k` up to which k misuse@k goes.
    """

    def __init__(self, inputs, mode: str = c.COMMIT, batch_rows: int = DEFAULT_BATCH_ROWS, policy=None,
                 bounds: Bounds = DEFAULT_BOUNDS, max_slice_keys: int = m.DEFAULT_MAX_SLICE_KEYS,
                 max_groups: int = m.DEFAULT_MAX_GROUPS, max_k: int = m.DEFAULT_MAX_K):
        super().__init__()
        if not isinstance(inputs, (ShardInputs, LogInputs)):
            inputs = ShardInputs(inputs, batch_rows, bounds.max_text_bytes)
        self.inputs: ShardInputs | LogInputs = inputs
        self._mode = mode  # checked by the stages that use it
        self._policy = policy
        self._bounds = bounds
        if max_slice_keys < 1:
            raise ValueError(f"Invalid max_slice_keys: must be positive, got {max_slice_keys}")
        self._max_slice_keys = max_slice_keys
        self._max_groups = max_groups
        self._max_k = max_k

    @property
    def shards(self) -> list:
        """The Shards the input patterns matched (shard inputs only)."""
        assert isinstance(self.inputs, ShardInputs), "logs are no shards"
        return self.inputs.shards

    def expand(self, pbegin: beam.pvalue.PBegin) -> dict[str, Any]:
        read, distinct, checked = _read_and_check(pbegin, self.inputs, self._bounds)
        resolved = checked.complete | "Context resolution" >> ResolveContexts(self._mode, self._policy)
        classified = resolved.resolved | "Classification" >> Classify(self._mode)
        failed = _failed_rows(checked, resolved)
        # Kept apart, not flattened: a runner may materialize a Flatten, and
        # the UNSCORED records carry whole input rows.
        unscored = {layout.DUPLICATE: distinct[Tag.UNSCORED], layout.INCOMPLETE: checked[Tag.UNSCORED],
                    layout.UNRESOLVED: resolved[Tag.UNSCORED], layout.FAILED: failed}
        reports = read[Tag.SHARD_REPORTS]
        counted, counts = _counted(reports, unscored)
        statistics = {
            "calls": classified[Tag.STATS],
            "validity": resolved[Tag.VALIDITY],
            "duplicates": distinct[Tag.STATS],
            "harness verdicts": classified[Tag.TRAJECTORIES]
            | "Harness verdicts" >> CompareWithHarness(read["harness_verdicts"]),
            **counted,
        } | "Gather statistics" >> GatherStatistics(self._max_slice_keys, self._max_groups, counts)
        policy_sha256 = self._policy.sha256 if self._policy is not None else None
        imported = {key: read[key] for key in ("import_reports", "unmapped") if key in read}
        return {
            "scored": classified.scored,
            "trajectories": classified[Tag.TRAJECTORIES],
            "evidence": classified[Tag.EVIDENCE] | "Evidence" >> CollectEvidence(),
            "unscored": unscored,
            "metrics": statistics | "Metrics" >> ComputeMetrics(self._mode, policy_sha256, self._max_slice_keys,
                                                                  self._max_groups, self._max_k),
            "shard_reports": reports,
            **imported,
        }


def _read_and_check(pbegin: beam.pvalue.PBegin, inputs, bounds: Bounds) -> tuple:
    """The stages no policy changes: (the inputs' outputs, the duplicates' and completeness')."""
    read = pbegin | "Inputs" >> inputs
    distinct = read["batches"] | "Duplicates" >> SetAsideDuplicates(read["duplicates"])
    # The expected failures leave through the `unscored` tags; the
    # exception handling is only the safety net for bugs.
    checked = distinct.batches | "Completeness" >> CheckCompleteness(bounds)
    return read, distinct, checked


def _counted(reports: beam.PCollection, unscored: dict) -> tuple[dict, dict]:
    """The shard reports and each kind of UNSCORED tables by name, for
    GatherStatistics, and how it counts each into statistics."""
    named = {"inputs": reports, **{f"{name} unscored": records for name, records in unscored.items()}}
    return named, {name: m.input_statistics if name == "inputs" else unscored_statistics for name in named}


def _failed_rows(checked, resolved) -> beam.PCollection:
    """The rows of the batches that raised (the safety net's dead letters) as UNSCORED tables."""
    return (
        (checked[Tag.FAILED], resolved[Tag.FAILED])
        | "Gather failed batches" >> beam.Flatten()
        | "Keep failed rows as unscored" >> beam.Map(failed_batch_to_unscored).with_output_types(pa.Table)
    )


class _ByPolicy(beam.PartitionFn):
    """(policy index, value) -> the index's partition."""

    def partition_for(self, element, num_partitions, *args, **kwargs) -> int:
        return element[0]


class ScoreUnderPolicies(beam.PTransform):
    """Input patterns -> {"metrics": one metrics.json document per policy,
    "flips": one (candidate index, flips) per candidate, "shard_reports"}.

    One read of the corpus; each policy's metrics.json is the document
    ScoreTrajectories computes under that policy alone (`policies`:
    PolicyDocuments, the base first, the candidates after it;
    transforms.whatif says what flips)."""

    def __init__(self, inputs, policies: list, mode: str = c.COMMIT, batch_rows: int = DEFAULT_BATCH_ROWS,
                 bounds: Bounds = DEFAULT_BOUNDS, max_slice_keys: int = m.DEFAULT_MAX_SLICE_KEYS,
                 max_groups: int = m.DEFAULT_MAX_GROUPS, max_k: int = m.DEFAULT_MAX_K):
        super().__init__()
        self.inputs = ShardInputs(inputs, batch_rows, bounds.max_text_bytes)
        self._resolve = ResolveUnderPolicies(mode, policies)
        self._mode, self._bounds = mode, bounds
        self._max_slice_keys, self._max_groups = max_slice_keys, max_groups
        self._metrics = [ComputeMetrics(mode, policy.sha256, max_slice_keys, max_groups, max_k)
                         for policy in policies]

    @property
    def shards(self) -> list:
        """The Shards the input patterns matched."""
        return self.inputs.shards

    def expand(self, pbegin: beam.pvalue.PBegin) -> dict[str, Any]:
        read, distinct, checked = _read_and_check(pbegin, self.inputs, self._bounds)
        resolved = checked.complete | "Context resolution under each policy" >> self._resolve
        n = len(self._metrics)
        # What every policy's metrics share: the inputs, and the rows set aside before any policy judged them.
        shared_unscored = {layout.DUPLICATE: distinct[Tag.UNSCORED], layout.INCOMPLETE: checked[Tag.UNSCORED],
                           layout.FAILED: _failed_rows(checked, resolved)}
        counted, counts = _counted(read[Tag.SHARD_REPORTS], shared_unscored)
        shared = {"duplicates": distinct[Tag.STATS], **counted} | "Gather shared statistics" >> GatherStatistics(
            self._max_slice_keys, self._max_groups, counts)
        by_policy = {
            name: resolved[tag] | f"Split {name} by policy" >> beam.Partition(_ByPolicy(), n)
            for name, tag in (("resolved", "resolved"), ("validity", Tag.VALIDITY), ("unscored", Tag.UNSCORED))
        }
        metrics = []
        for i, compute in enumerate(self._metrics):
            label = f"Policy {i}"

            def unkeyed(name: str, i=i, label=label) -> beam.PCollection:
                return by_policy[name][i] | f"{label}: its {name}" >> beam.Map(lambda keyed: keyed[1])

            classified = unkeyed("resolved") | f"{label}: classification" >> Classify(self._mode, with_calls=False)
            statistics = {
                "shared": shared,
                "calls": classified[Tag.STATS],
                "validity": unkeyed("validity"),
                "unresolved unscored": unkeyed("unscored"),
                "harness verdicts": classified[Tag.TRAJECTORIES]
                | f"{label}: harness verdicts" >> CompareWithHarness(read["harness_verdicts"]),
            } | f"{label}: gather statistics" >> GatherStatistics(self._max_slice_keys, self._max_groups, counts={
                "unresolved unscored": unscored_statistics})
            metrics.append(statistics | f"{label}: metrics" >> compute
                           | f"{label}: key metrics" >> beam.Map(lambda document, i=i: (i, document)))
        # Every candidate has a summary, flips or not (a combine emits nothing for a key it never saw).
        no_flips = pbegin | "No flips yet" >> beam.Create([(i, new_summary()) for i in range(1, n)])
        flips = ((resolved[FLIPS], no_flips) | "Gather flips" >> beam.Flatten()
                 | "Flips per candidate" >> beam.CombinePerKey(FlipsCombineFn()))
        return {"metrics": metrics | "Gather metrics" >> beam.Flatten(), "flips": flips,
                "shard_reports": read[Tag.SHARD_REPORTS]}


class LogImport(NamedTuple):
    """The import half of a job that scores logs: the import's transform
    (matched logs and options) and its manifest's header, which the run's
    manifest holds as its `import` beside the logs' reports."""

    transform: ImportToScore
    header: dict


def input_identities(identities) -> list:
    """Each input file, (path, FileIdentity or None), as the manifest records
    it: path, size, modification time and the sha256 of its Parquet footer
    (null when it had none)."""
    return [{"file": path, **({"size": identity.size, "mtime_ns": identity.mtime_ns,
                               "footer_sha256": identity.footer_sha256} if identity else
                              {"size": None, "mtime_ns": None, "footer_sha256": None})}
            for path, identity in identities]


class Planned(NamedTuple):
    """What a built job reads: its shards (None when it imports logs) and
    the inputs' total size in bytes (None when one's size is unknown)."""

    shards: int | None
    input_bytes: int | None


def input_bytes(identities: list) -> int | None:
    """The total size of the inputs input_identities lists, None if one's is unknown."""
    sizes = [identity["size"] for identity in identities]
    return None if None in sizes else sum(sizes)


def check_verdict_source(shards, policy, accept_no_verdict: bool = False) -> None:
    """NoVerdictSource when no policy is given and some shard records no
    verdict (an import of agent logs): every call of theirs would be
    no_verdict, which `accept_no_verdict` asks for."""
    if policy is None and not accept_no_verdict:
        paths = shards_without_verdicts(shards)
        if paths:
            raise NoVerdictSource(paths)


def build(pipeline: beam.Pipeline, config, manifest_header: dict, finish=None,
          logs: LogImport | None = None) -> Planned:
    """Adds the whole job (score, then write everything) to `pipeline` for a
    pipeline.options.RunConfig; returns what it reads (no shards when it
    imports `logs` instead: config.inputs are those logs). `finish`,
    a picklable callable, runs once as the job's last step, after
    metrics.json and the manifest are written (pipeline.job.PublishStep:
    the job publishes itself)."""
    inputs = config.inputs if logs is None else LogInputs(logs.transform)
    score = ScoreTrajectories(inputs, config.mode, config.batch_rows, config.policy,
                              config.bounds, config.max_slice_keys, config.max_groups, config.max_k)
    if logs is None:
        check_verdict_source(score.shards, config.policy, config.accept_no_verdict)
    elif config.policy is None and not config.accept_no_verdict:
        raise NoVerdictSource(logs.transform.files)  # no log records a verdict
    # What a later run re-scoring this one's inputs checks they still are (pipeline.rescore).
    identities = score.inputs.identities()
    manifest_header = {**manifest_header, "input_identities": identities}
    outputs = pipeline | "Score trajectories" >> score
    written = outputs | "Write outputs" >> WriteOutputs(config.output, manifest_header,
                                                        logs.header if logs is not None else None)
    if finish is not None:
        written | "Publish the run" >> beam.Map(finish)
    return Planned(len(score.shards) if logs is None else None, input_bytes(identities))
