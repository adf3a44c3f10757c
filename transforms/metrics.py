"""Stage 5: combine per-trajectory counter tables into run-level metrics."""

from __future__ import annotations

import apache_beam as beam
import pyarrow as pa

from scoring import contract as c
from scoring import metrics as m


class RunMetricsCombineFn(beam.CombineFn):
    """Counter tables -> the metrics.json document.

    The accumulator maps (run_id, agent) to a counter vector, so it stays as
    small as the number of groups however many trajectories pass through.
    """

    def __init__(self, mode: str):
        super().__init__()
        self._mode = c.check_mode(mode)

    def create_accumulator(self):
        return {}

    def add_input(self, accumulator, table: pa.Table):
        # Tables arrive summed per group (transforms.records.counts_table),
        # though a group may repeat across the rows of one table.
        keys = zip(table["run_id"].to_pylist(), table["agent"].to_pylist())
        columns = [table[name].to_pylist() for name in m.COUNTERS]
        for i, key in enumerate(keys):
            m.add_counts(accumulator.setdefault(key, m.zero_counts()), (column[i] for column in columns))
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = {}
        for accumulator in accumulators:
            for key, counts in accumulator.items():
                m.add_counts(merged.setdefault(key, m.zero_counts()), counts)
        return merged

    def extract_output(self, accumulator):
        return m.metrics_document(accumulator, self._mode)


class ComputeMetrics(beam.PTransform):
    """Counter tables -> a single metrics.json document (also for empty input)."""

    def __init__(self, mode: str):
        super().__init__()
        self._mode = c.check_mode(mode)

    def expand(self, counts):
        return counts | "Combine run metrics" >> beam.CombineGlobally(RunMetricsCombineFn(self._mode))
