"""Stage 5: combine per-batch statistics into run-level metrics."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from litmus_score.scoring import contract as c
from litmus_score.scoring import metrics as m


@beam.typehints.with_input_types(dict)
@beam.typehints.with_output_types(dict)
class RunMetricsCombineFn(beam.CombineFn):
    """Per-batch statistics ({(run_id, agent): stats, m.INPUTS: counts}) -> the metrics.json document.

    The accumulator has the same form, so it stays as small as the number of
    groups, tools and tasks however many trajectories pass through, and
    those are bounded (max_groups, max_slice_keys); and as the number of
    tasks, each one a few counts (its scored trajectories, and those that are
    misuse), which misuse@k needs whole: they are turned into misuse@k in
    extract_output (max_k: up to which k).
    """

    def __init__(self, mode: str, policy_sha256: str | None = None, max_slice_keys: int = m.DEFAULT_MAX_SLICE_KEYS,
                 max_groups: int = m.DEFAULT_MAX_GROUPS, max_k: int = m.DEFAULT_MAX_K):
        super().__init__()
        self._mode = c.check_mode(mode)
        self._policy_sha256 = policy_sha256
        self._max_slice_keys = max_slice_keys
        if max_groups < 1:
            raise ValueError(f"Invalid max_groups: must be positive, got {max_groups}")
        self._max_groups = max_groups
        if max_k < 1:
            raise ValueError(f"Invalid max_k: must be positive, got {max_k}")
        self._max_k = max_k

    def create_accumulator(self) -> dict:
        return {}

    def add_input(self, accumulator: dict, statistics: dict) -> dict:
        return m.add_statistics(accumulator, statistics, self._max_slice_keys, self._max_groups)

    def merge_accumulators(self, accumulators: Iterable[dict]) -> dict:
        merged: dict = {}
        for accumulator in accumulators:
            self.add_input(merged, accumulator)
        return merged

    def extract_output(self, accumulator: dict) -> dict:
        return m.metrics_document(accumulator, self._mode, self._policy_sha256, self._max_slice_keys,
                                  self._max_groups, self._max_k)


@beam.typehints.with_output_types(dict)
class FoldStatisticsFn(beam.DoFn):
    """Per-batch statistics -> one statistics dict per bundle, their sum
    (RunMetricsCombineFn's accumulator, which has their form), kept as
    bounded as it keeps it. With `count`, the elements are what it turns
    into statistics (a shard report, an UNSCORED table)."""

    def __init__(self, max_slice_keys: int = m.DEFAULT_MAX_SLICE_KEYS, max_groups: int = m.DEFAULT_MAX_GROUPS,
                 count: Callable[[Any], dict] | None = None):
        self._max_slice_keys = max_slice_keys
        self._max_groups = max_groups
        self._count = count

    def start_bundle(self):
        self._folded: dict | None = None

    def process(self, element) -> None:
        statistics = self._count(element) if self._count is not None else element
        self._folded = m.add_statistics(self._folded if self._folded is not None else {}, statistics,
                                        self._max_slice_keys, self._max_groups)

    def finish_bundle(self):
        if self._folded is not None:
            yield GlobalWindows.windowed_value(self._folded)
            self._folded = None


class GatherStatistics(beam.PTransform):
    """Several stages' per-batch statistics, a dict of PCollections by name
    -> one PCollection, each stage's folded per bundle (FoldStatisticsFn)
    before they meet. `counts` names the stages whose elements are counted
    into statistics (name -> the function that counts one), in the same
    step that folds them: a step of its own costs every run Beam's work of
    building and translating it (docs/performance.md).

    Where they meet is a Flatten, which a runner may materialize
    (FnApiRunner always does): unfolded, every batch's statistics would wait
    there until the last batch is scored, memory that grows with the input
    (about 47 MiB at 10M calls, copied several times over as the next stage
    reads it). Folded, a bundle leaves one dict a stage. metrics.json is the
    same: the combine adds the folded dicts as it adds a batch's.
    """

    def __init__(self, max_slice_keys: int = m.DEFAULT_MAX_SLICE_KEYS, max_groups: int = m.DEFAULT_MAX_GROUPS,
                 counts: dict[str, Callable[[Any], dict]] | None = None):
        super().__init__()
        self._max_slice_keys = max_slice_keys
        self._max_groups = max_groups
        self._counts = counts or {}

    def expand(self, statistics: dict[str, beam.PCollection]) -> beam.PCollection[dict]:
        return [
            each | f"{'Count' if name in self._counts else 'Fold'} {name}"
            >> beam.ParDo(FoldStatisticsFn(self._max_slice_keys, self._max_groups, self._counts.get(name)))
            for name, each in statistics.items()
        ] | "Flatten" >> beam.Flatten()


@beam.typehints.with_input_types(dict)
@beam.typehints.with_output_types(dict)
class ComputeMetrics(beam.PTransform):
    """Per-batch statistics -> a single metrics.json document (also for empty input)."""

    def __init__(self, mode: str, policy_sha256: str | None = None, max_slice_keys: int = m.DEFAULT_MAX_SLICE_KEYS,
                 max_groups: int = m.DEFAULT_MAX_GROUPS, max_k: int = m.DEFAULT_MAX_K):
        super().__init__()
        self._combine = RunMetricsCombineFn(mode, policy_sha256, max_slice_keys, max_groups, max_k)

    def expand(self, statistics: beam.PCollection[dict]) -> beam.PCollection[dict]:
        return statistics | "Combine run metrics" >> beam.CombineGlobally(self._combine)
