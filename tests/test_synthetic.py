"""The synthetic shard generator, judged by the pure reference scorer."""

import collections
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from litmus_score import synthetic
from litmus_score.scoring import contract as c
from litmus_score.scoring import metrics
from litmus_score.scoring.trajectory import score_trajectory
from transforms.schema import TRAJECTORY


def _table(paths) -> pa.Table:
    return pa.concat_tables(pq.read_table(path) for path in paths)


def _totals(rows, mode: str) -> dict:
    """metrics.json totals of the rows, computed by the pure scorer without a policy."""
    groups = {}
    for row in rows:
        metrics.add_trajectory(groups, row, score_trajectory(row, mode))
    return metrics.metrics_document(groups, mode)["totals"]


@pytest.fixture(scope="module")
def mixed_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("mixed") / "shards"
    return _table(synthetic.generate(str(out), trajectories=3000, shards=3, seed=11)).to_pylist()


def test_same_seed_gives_same_bytes(tmp_path):
    first = synthetic.generate(str(tmp_path / "a"), trajectories=500, shards=2, seed=3)
    second = synthetic.generate(str(tmp_path / "b"), trajectories=500, shards=2, seed=3)
    assert [Path(p).name for p in first] == [Path(p).name for p in second]
    assert [Path(p).read_bytes() for p in first] == [Path(p).read_bytes() for p in second]
    assert _table(first).equals(_table(second))


def test_different_seed_gives_different_data(tmp_path):
    first = synthetic.generate(str(tmp_path / "a"), trajectories=500, shards=2, seed=3)
    second = synthetic.generate(str(tmp_path / "b"), trajectories=500, shards=2, seed=4)
    assert not _table(first).equals(_table(second))


def test_rows_spread_over_named_shards_with_the_contract_schema(tmp_path):
    paths = synthetic.generate(str(tmp_path / "out"), trajectories=1001, shards=4, seed=1)
    assert paths == sorted(paths)
    assert [Path(p).name for p in paths] == [f"part-{i:05d}-of-00004.parquet" for i in range(4)]
    for path in paths:
        assert pq.read_schema(path).equals(TRAJECTORY)
    table = _table(paths)
    assert table.num_rows == 1001
    ids = [i for i in table.column("trajectory_id").to_pylist() if i is not None]
    assert len(ids) == len(set(ids))


def test_fewer_trajectories_than_shards_leaves_valid_empty_shards(tmp_path):
    paths = synthetic.generate(str(tmp_path / "out"), trajectories=2, shards=3)
    tables = [pq.read_table(path) for path in paths]
    assert [t.num_rows for t in tables] == [0, 1, 1]
    assert all(t.schema.equals(TRAJECTORY) for t in tables)


# A careless harness's defects are planted; a hostile one's (bytes that are not
# UTF-8, texts past the bounds, conflicting copies of a trajectory) are
# tests/test_hostile_inputs.py's, one test each.
HOSTILE_REASONS = {c.INVALID_TEXT, c.TOO_LARGE, c.DUPLICATE_TRAJECTORY}


@pytest.mark.slow
def test_every_category_and_reason_occurs(mixed_rows):
    scores = {mode: [score_trajectory(row, mode) for row in mixed_rows] for mode in (c.COMMIT, c.STRICT)}
    categories = {call.category for score in scores[c.COMMIT] for call in score.calls}
    assert categories == set(c.CATEGORIES[c.COMMIT])
    for mode in (c.COMMIT, c.STRICT):
        reasons = {reason for score in scores[mode] for reason in score.reasons}
        assert reasons == set(metrics.MODE_REASONS[mode]) - HOSTILE_REASONS
    # Unscored in commit mode at a small, realistic rate.
    unscored = sum(not score.scored for score in scores[c.COMMIT])
    assert 0.01 * len(mixed_rows) < unscored < 0.08 * len(mixed_rows)
    totals = _totals(mixed_rows, c.COMMIT)
    assert totals["over_penalized"] > 0 and totals["under_penalized"] > 0
    assert totals["execution_hallucination"]["count"] > 0


def test_calls_per_trajectory(mixed_rows):
    counts = [len(row["calls"] or ()) for row in mixed_rows]
    assert min(counts) == 0 and max(counts) <= synthetic.MAX_CALLS
    assert 6 <= sum(counts) / len(counts) <= 7


def test_commit_arguments_same_bytes_reformatted_or_resolved_differently(mixed_rows):
    forms = collections.Counter()
    for row in mixed_rows:
        for call in row["calls"] or ():
            proposal, commit = call["proposal"], call["commit"]
            if proposal is None or commit is None:
                continue
            proposed, committed = proposal["resolved_arguments"], commit["resolved_arguments"]
            if proposed == committed:
                forms["same bytes"] += 1
            elif json.loads(proposed) == json.loads(committed):
                forms["reformatted"] += 1
            else:
                forms["resolved differently"] += 1
    assert set(forms) == {"same bytes", "reformatted", "resolved differently"}


@pytest.mark.parametrize("seed", [0, 5])
def test_reference_profile_reproduces_the_spec_observation(tmp_path, seed):
    paths = synthetic.generate(str(tmp_path / "out"), trajectories=1200, shards=3, seed=seed,
                               profile="reference-1200")
    rows = _table(paths).to_pylist()
    totals = _totals(rows, c.COMMIT)
    assert totals["trajectories"]["input"] == 1200
    assert totals["over_penalized"] == 37
    assert totals["under_penalized"] == 9
    assert 0 < totals["trajectories"]["unscored"] < 0.08 * 1200
    assert all(count > 0 for count in totals["calls"]["by_category"].values())


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"trajectories": -1}, "trajectories must be an integer >= 0"),
        ({"shards": 0}, "shards must be an integer >= 1"),
        ({"shards": 2.5}, "shards must be an integer >= 1"),
        ({"seed": -1}, "seed must be an integer >= 0"),
        ({"profile": "nightly"}, "unknown profile 'nightly'"),
        ({"profile": "reference-1200", "trajectories": 1000}, "exactly 1200 trajectories"),
    ],
)
def test_invalid_arguments_are_rejected_before_writing(tmp_path, arguments, message):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=message):
        synthetic.generate(str(out), **arguments)
    assert not out.exists()


def test_refuses_a_directory_that_already_holds_shards(tmp_path):
    out = tmp_path / "nested" / "out"
    synthetic.generate(str(out), trajectories=10, shards=1)
    with pytest.raises(FileExistsError):
        synthetic.generate(str(out), trajectories=10, shards=1)


@pytest.mark.slow
def test_planted_misuse_raises_that_agents_rate(tmp_path):
    agent = synthetic.AGENTS[0]
    rate = lambda table, name: (  # noqa: E731
        sum(score_trajectory(row).misuse for row in table.to_pylist() if row["agent"] == name)
        / sum(row["agent"] == name for row in table.to_pylist()))
    base = _table(synthetic.generate(str(tmp_path / "base"), trajectories=4000, shards=2, seed=5))
    planted = _table(synthetic.generate(str(tmp_path / "planted"), trajectories=4000, shards=2, seed=5,
                                        misuse_factor={agent: 3.0}))
    assert rate(planted, agent) > 1.8 * rate(base, agent)
    other = synthetic.AGENTS[1]
    assert rate(planted, other) == pytest.approx(rate(base, other), abs=0.05)


def test_unknown_planted_agent_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown agent 'nobody'"):
        synthetic.generate(str(tmp_path / "x"), misuse_factor={"nobody": 2.0})
