"""transforms.harness: the harness's own verdict joined with our scored trajectories, in a TestPipeline."""

from __future__ import annotations

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.conftest import RUNNER
from transforms import schema as s
from transforms.elements import Shard
from transforms.harness import CompareWithHarness, ReadHarnessVerdicts


def _trajectory(path: str, row: int, misuse: bool, legacy: bool, agent: str = "a") -> dict:
    return {"run_id": "r", "agent": agent, "trajectory_id": f"{path}#{row}", "misuse": misuse, "legacy_misuse": legacy,
            "over_penalized": legacy and not misuse, "under_penalized": misuse and not legacy,
            "execution_hallucination": False, "misuse_calls": [], "flagged_calls": [], "source_file": path,
            "source_row": row}


def test_each_scored_trajectory_meets_its_own_rows_harness_verdict(tmp_path):
    with_verdicts, without = str(tmp_path / "imported.parquet"), str(tmp_path / "native.parquet")
    pq.write_table(pa.table({s.HARNESS_VERDICT: ["h", "h", None, "h", "h"],
                             s.HARNESS_MISUSE: [True, False, True, True, None]}), with_verdicts)
    pq.write_table(pa.table({"run_id": ["r"]}), without)
    trajectories = pa.Table.from_pylist([
        _trajectory(with_verdicts, 0, True, True),  # both say misuse
        _trajectory(with_verdicts, 1, False, True),  # only proposal-time scoring does
        _trajectory(with_verdicts, 2, True, True),  # no harness verdict name: not compared
        _trajectory(with_verdicts, 3, False, False),  # only the harness does
        _trajectory(with_verdicts, 4, True, True),  # no harness verdict
        _trajectory(without, 0, True, True),  # a shard without the columns
        _trajectory(with_verdicts, 1, False, False, agent="b"),  # another group, the same row (a copy)
    ], schema=s.TRAJECTORIES)
    expected = {
        ("r", "a"): {"harness": {"h": {"trajectories": 3, "harness_misuse": 2,
                                       "misuse": {"both": 1, "harness_only": 1, "ours_only": 0},
                                       "legacy_misuse": {"both": 1, "harness_only": 1, "ours_only": 1}}}},
        ("r", "b"): {"harness": {"h": {"trajectories": 1, "harness_misuse": 0,
                                       "misuse": {"both": 0, "harness_only": 0, "ours_only": 0},
                                       "legacy_misuse": {"both": 0, "harness_only": 0, "ours_only": 0}}}},
    }
    shards = [Shard(with_verdicts), Shard(without), Shard(str(tmp_path / "gone.parquet"), error="cannot be opened")]
    with TestPipeline(argv=RUNNER) as pipeline:
        statistics = (pipeline | beam.Create([trajectories.slice(0, 4), trajectories.slice(4)])
                      | CompareWithHarness(ReadHarnessVerdicts(shards)))
        merged = statistics | beam.CombineGlobally(lambda parts: _merged(parts))
        assert_that(merged, equal_to([expected]))


def _merged(parts) -> dict:
    from litmus_score.scoring import metrics as m

    total = {}
    for part in parts:
        for key, stats in part.items():
            m.merge(total.setdefault(key, {}), stats)
    return total
