"""Statistics folded per bundle before they meet (GatherStatistics) make the metrics of the batches themselves."""

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from litmus_score.scoring import contract as c
from litmus_score.scoring import metrics as m
from tests.conftest import RUNNER
from tests.test_metrics_combinefn import agent_batch, tool_batch
from transforms.metrics import FoldStatisticsFn, GatherStatistics, RunMetricsCombineFn

MAX_SLICE_KEYS, MAX_GROUPS = 5, 7


# Shard reports, as the read stage leaves them: what GatherStatistics counts into statistics itself.
REPORTS = [{"file": f"s{i}.parquet", "error": "corrupt" if i == 2 else None, "rows_declared": 3 + i, "rows_read": i}
           for i in range(5)]


def stages():
    """Per-batch statistics of three stages: more tools and groups than the bounds keep, spread unevenly."""
    tools = [f"tool-{i:03d}" for i in range(40)]
    return [
        [tool_batch(tools[i::9]) for i in range(9)],
        [agent_batch(range(i, 60, 4)) for i in range(4)],
        [m.input_statistics(report) for report in REPORTS],
    ]


def one_by_one(fn, batches) -> dict:
    """The metrics of the batches added one at a time, no pipeline."""
    accumulator = fn.create_accumulator()
    for statistics in batches:
        accumulator = fn.add_input(accumulator, statistics)
    return fn.extract_output(accumulator)


def test_the_metrics_of_folded_statistics_are_those_of_every_batch():
    fn = RunMetricsCombineFn(c.COMMIT, max_slice_keys=MAX_SLICE_KEYS, max_groups=MAX_GROUPS)
    expected = one_by_one(fn, [statistics for stage in stages() for statistics in stage])
    assert len(expected["groups"]) == MAX_GROUPS + 1  # the bounds fold: the test covers folding
    with TestPipeline(argv=RUNNER) as pipeline:
        tools, agents, _ = stages()
        gathered = {"tools": pipeline | "Tools" >> beam.Create(tools),
                    "agents": pipeline | "Agents" >> beam.Create(agents),
                    "inputs": pipeline | "Reports" >> beam.Create(REPORTS)}
        metrics = (gathered | GatherStatistics(MAX_SLICE_KEYS, MAX_GROUPS, counts={"inputs": m.input_statistics})
                   | beam.CombineGlobally(fn))
        assert_that(metrics, equal_to([expected]))


@pytest.mark.parametrize("stage", range(3))
def test_a_bundle_leaves_one_sum_of_its_statistics(stage):
    batches = stages()[stage]
    fold = FoldStatisticsFn(MAX_SLICE_KEYS, MAX_GROUPS)
    fold.start_bundle()
    for statistics in batches:
        fold.process(statistics)
    (folded,) = list(fold.finish_bundle())
    expected = {}
    for statistics in batches:
        m.add_statistics(expected, statistics, MAX_SLICE_KEYS, MAX_GROUPS)
    assert folded.value == expected
    # The next bundle starts from nothing; an empty one leaves nothing.
    fold.start_bundle()
    assert list(fold.finish_bundle()) == []


def test_a_bundle_counts_what_it_folds():
    """With `count`, the elements are shard reports: their sum is that of their statistics."""
    fold = FoldStatisticsFn(MAX_SLICE_KEYS, MAX_GROUPS, count=m.input_statistics)
    fold.start_bundle()
    for report in REPORTS:
        fold.process(report)
    (folded,) = list(fold.finish_bundle())
    assert folded.value == {m.INPUTS: {"files": 5, "unreadable_files": 1, "rows_declared": 25, "rows_read": 10}}
