"""The vectorized stages agree with the reference rules on random trajectories.

Hypothesis draws adversarial trajectories; each is judged one at a time by
litmus_score.scoring.trajectory and, as Arrow batches, by the pipeline's stages. Categories
of every scored call, the verdicts of every scored trajectory (trajectories/),
reasons of every unscored trajectory and the whole metrics document must be
equal, with the compiled JSON routines (transforms._native) and with their
pure-Python twin.
"""

import json
import tempfile
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from litmus_score.scoring import contract as c
from litmus_score.scoring import metrics as m
from litmus_score.scoring.policy import load_policy
from litmus_score.scoring.trajectory import DEFAULT_BOUNDS, check_completeness, decoded, score_trajectory
from pipeline.graph import ScoreTrajectories
from tests import builders as b
from tests.json_texts import IDS, IMPLEMENTATIONS, examples
from tests.strategies import SMALL_BOUNDS, trajectory_lists
from transforms import jsontext
from transforms.classify import ClassifyFn, unscored_statistics
from transforms.completeness import CheckCompletenessFn, completeness_reasons
from transforms.conform import conform_batch
from transforms.metrics import RunMetricsCombineFn
from transforms.resolve import ResolveContextsFn

# Property tests through a pipeline: make test runs them, make check does not.
pytestmark = pytest.mark.slow

MODES = st.sampled_from(c.MODES)
# Whole trajectories through a pipeline: slower and larger than Hypothesis expects by default.
SLOW_DATA = [HealthCheck.too_slow, HealthCheck.data_too_large]
BOUNDS = st.sampled_from([DEFAULT_BOUNDS, SMALL_BOUNDS])
POLICY = load_policy(Path(__file__).resolve().parents[1] / "configs" / "policy.yaml")
implementations = pytest.mark.parametrize("compiled", IMPLEMENTATIONS, ids=IDS)


def trajectory_verdicts(row, score):
    """A scored trajectory's row of trajectories/, by the reference: its flags and deciding calls."""
    misuse, legacy = score.misuse, score.legacy_misuse
    hallucination = misuse and row["verbal_stance"] == c.REFUSED
    ids = [call["call_id"] for call in row["calls"]]
    return (row["run_id"], row["agent"], misuse, legacy, legacy and not misuse, misuse and not legacy, hallucination,
            [i for i, s in zip(ids, score.calls) if s.category in c.MISUSE_CATEGORIES],
            [i for i, s in zip(ids, score.calls) if s.proposal_verdict == c.DENY],
            [m.misuse_decided_by(s) for s in score.calls if s.category in c.MISUSE_CATEGORIES])


def reference(rows, mode, policy=None, bounds=DEFAULT_BOUNDS):
    """(scored calls, unscored reasons, metrics document, scored trajectories) by the reference rules."""
    calls, unscored, groups, trajectories = set(), {}, {}, {}
    for row in b.python_rows(b.table(rows)):
        score = score_trajectory(row, mode, policy, bounds)
        # Records and groups show text that is not UTF-8 decoded, with U+FFFD.
        m.add_trajectory(groups, decoded(row), score)
        if score.scored:
            trajectories[row["trajectory_id"]] = trajectory_verdicts(row, score)
            calls |= {(row["trajectory_id"], call["call_id"], s.category, s.proposal_verdict, s.commit_verdict,
                       s.realized, s.proposal_verdict_source, s.commit_verdict_source, s.policy_disagreement,
                       s.proposal_decided_by, s.commit_decided_by, s.proposal_policy_ruling,
                       s.proposal_policy_decided_by, s.commit_policy_ruling, s.commit_policy_decided_by)
                      for call, s in zip(row["calls"], score.calls)}
        else:
            unscored[row["trajectory_id"]] = score.reasons
    return calls, unscored, m.metrics_document(groups, mode, policy.sha256 if policy else None), trajectories


def split(outputs):
    main, tagged = [], {}
    for out in outputs:
        if isinstance(out, beam.pvalue.TaggedOutput):
            tagged.setdefault(out.tag, []).append(out.value)
        else:
            main.append(out)
    return main, tagged


def vectorized(rows, mode, batch_rows, policy=None, bounds=DEFAULT_BOUNDS):
    """The same four results from the stages' DoFns, batch by batch."""
    scored_tables, unscored_tables, statistics, trajectory_tables = [], [], [], []
    for raw in b.table(rows).to_batches(max_chunksize=batch_rows):
        batch, _ = conform_batch(raw, "memory", 0, bounds.max_text_bytes)
        complete, tagged = split(CheckCompletenessFn(bounds).process(batch))
        unscored_tables += tagged.get("unscored", [])
        for good in complete:
            resolved, tagged = split(ResolveContextsFn(mode, policy).process(good))
            unscored_tables += tagged.get("unscored", [])
            statistics += tagged.get("validity", [])
            for item in resolved:
                scored, tagged = split(ClassifyFn(mode).process(item))
                scored_tables += scored
                statistics += tagged.get("stats", [])
                trajectory_tables += tagged.get("trajectories", [])
    calls = {
        (r["trajectory_id"], r["call_id"], r["category"], r["proposal_verdict"], r["commit_verdict"], r["realized"],
         r["proposal_verdict_source"], r["commit_verdict_source"], r["policy_disagreement"],
         r["proposal_decided_by"], r["commit_decided_by"], r["proposal_policy_ruling"],
         r["proposal_policy_decided_by"], r["commit_policy_ruling"], r["commit_policy_decided_by"])
        for t in scored_tables for r in t.to_pylist()
    }
    unscored = {r["trajectory_id"]: r["reasons"] for t in unscored_tables for r in t.to_pylist()}
    fn = RunMetricsCombineFn(mode, policy.sha256 if policy else None)
    acc = fn.create_accumulator()
    for stats in statistics + [unscored_statistics(t) for t in unscored_tables]:
        acc = fn.add_input(acc, stats)
    fields = ("run_id", "agent", "misuse", "legacy_misuse", "over_penalized", "under_penalized",
              "execution_hallucination", "misuse_calls", "flagged_calls", "misuse_decided_by")
    trajectories = {r["trajectory_id"]: tuple(r[f] for f in fields) for t in trajectory_tables for r in t.to_pylist()}
    assert len(trajectories) == sum(t.num_rows for t in trajectory_tables)  # one row per scored trajectory
    return calls, unscored, fn.extract_output(acc), trajectories


@implementations
@settings(max_examples=examples(200), deadline=None, suppress_health_check=SLOW_DATA)
@given(rows=trajectory_lists(), mode=MODES, batch_rows=st.integers(1, 16), policy=st.sampled_from([None, POLICY]),
       bounds=BOUNDS)
def test_stages_agree_with_reference(compiled, rows, mode, batch_rows, policy, bounds):
    with jsontext.implementation(compiled):
        assert vectorized(rows, mode, batch_rows, policy, bounds) == reference(rows, mode, policy, bounds)


@implementations
@settings(max_examples=examples(200), deadline=None, suppress_health_check=SLOW_DATA)
@given(rows=trajectory_lists(), bounds=BOUNDS)
def test_completeness_reasons_equal_reference(compiled, rows, bounds):
    raw = b.table(rows)
    for batch_raw in raw.to_batches():
        batch, _ = conform_batch(batch_raw, "memory", 0, bounds.max_text_bytes)
        with jsontext.implementation(compiled):
            reasons, _, _ = completeness_reasons(batch, bounds)
        for i, row in enumerate(b.python_rows(pa.Table.from_batches([batch_raw]))):
            assert [reason for reason, mask in reasons.items() if mask[i]] == check_completeness(row, bounds)[0]


@implementations
@settings(max_examples=examples(8), deadline=None, suppress_health_check=SLOW_DATA)
@given(rows=trajectory_lists(max_size=25), mode=MODES)
def test_pipeline_metrics_equal_reference(compiled, rows, mode):
    with tempfile.TemporaryDirectory() as folder, jsontext.implementation(compiled):
        b.write_shard(Path(folder) / "a.parquet", rows[::2], row_group_size=3)
        b.write_shard(Path(folder) / "b.parquet", rows[1::2])
        with TestPipeline(runner="FnApiRunner") as p:
            outputs = p | ScoreTrajectories([str(Path(folder) / "*.parquet")], mode, batch_rows=4)
            # Two files with the same bytes (both empty, say) are one file, read once.
            if (Path(folder) / "a.parquet").read_bytes() == (Path(folder) / "b.parquet").read_bytes():
                rows, files = rows[::2], 1
            else:
                files = 2
            # The reference knows rows, not files: the input accounting is checked on its own.
            expected = dict(reference(rows, mode)[2], inputs={
                "files": files, "unreadable_files": 0, "rows_declared": len(rows), "rows_read": len(rows)})
            assert_that(
                outputs["metrics"] | beam.Map(lambda doc: json.dumps(doc, sort_keys=True)),
                equal_to([json.dumps(expected, sort_keys=True)]),
            )


@implementations
@settings(max_examples=examples(50), deadline=None, suppress_health_check=SLOW_DATA)
@given(rows=trajectory_lists(), policy=st.sampled_from([None, POLICY]))
def test_validity_block_is_the_same_in_every_mode(compiled, rows, policy):
    with jsontext.implementation(compiled):
        documents = [vectorized(rows, mode, 8, policy)[2] for mode in c.MODES]
    blocks = [[(g["run_id"], g["agent"], g["validity"]) for g in d["groups"]] + [d["totals"]["validity"]]
              for d in documents]
    assert blocks[0] == blocks[1] == blocks[2]
