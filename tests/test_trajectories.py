"""trajectories/: one row per scored trajectory, reconciling with metrics.json group by group."""

import collections

import pyarrow.parquet as pq
import pytest

from litmus_score import synthetic
from litmus_score.scoring import contract as c
from litmus_score.scoring.layout import MANIFEST_FILE, METRICS_FILE, SCORED_DIR, TRAJECTORIES_DIR
from tests.conftest import load_json

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

FLAGS = ("misuse", "legacy_misuse", "over_penalized", "under_penalized", "execution_hallucination")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    synthetic.generate(str(folder), trajectories=900, shards=3, seed=7)
    return str(folder / "*.parquet")


def per_group(rows):
    counts = collections.defaultdict(collections.Counter)
    for row in rows:
        group = counts[(row["run_id"], row["agent"])]
        group["scored"] += 1
        group["refused"] += row["verbal_stance"] == c.REFUSED
        group["misuse_calls"] += len(row["misuse_calls"])
        assert len(row["misuse_decided_by"]) == len(row["misuse_calls"])
        group.update(f"decided_by:{name}" for name in row["misuse_decided_by"])
        group.update(name for name in FLAGS if row[name])
    return counts


@pytest.mark.parametrize("mode", c.MODES)
def test_trajectories_reconcile_with_metrics(score_cli, shards, mode):
    code, out = score_cli([shards], "--adjudication", mode)
    assert code == 0
    rows = pq.read_table(out / TRAJECTORIES_DIR).to_pylist()
    metrics = load_json(out / METRICS_FILE)
    counts = per_group(rows)
    with_scored = [(g["run_id"], g["agent"]) for g in metrics["groups"] if g["trajectories"]["scored"]]
    assert len(with_scored) > 1 and set(counts) == set(with_scored)
    for group in metrics["groups"]:
        got = counts[(group["run_id"], group["agent"])]
        misuse_categories = [name for name in c.CATEGORIES[mode] if name in c.MISUSE_CATEGORIES]
        assert got["scored"] == group["trajectories"]["scored"]
        assert got["misuse"] == group["misuse"]["count"] and got["legacy_misuse"] == group["legacy_misuse"]["count"]
        assert got["over_penalized"] == group["over_penalized"]
        assert got["under_penalized"] == group["under_penalized"]
        assert got["execution_hallucination"] == group["execution_hallucination"]["count"]
        assert got["refused"] == group["execution_hallucination"]["refused"]
        assert got["misuse_calls"] == sum(group["calls"]["by_category"][name] for name in misuse_categories)
        assert group["flagged_by_rule"] == {
            name.removeprefix("decided_by:"): n for name, n in sorted(got.items()) if name.startswith("decided_by:")}
    # Scored calls belong to scored trajectories (one without calls is scored too).
    scored = pq.read_table(out / SCORED_DIR, columns=["run_id", "trajectory_id"]).to_pylist()
    assert {(r["run_id"], r["trajectory_id"]) for r in scored} <= {(r["run_id"], r["trajectory_id"]) for r in rows}
    assert len(rows) == len({(r["run_id"], r["trajectory_id"]) for r in rows})
    listed = [entry["path"] for entry in load_json(out / MANIFEST_FILE)["outputs"]
              if entry["path"].startswith(TRAJECTORIES_DIR + "/")]
    written = sorted(f"{TRAJECTORIES_DIR}/{p.name}" for p in (out / TRAJECTORIES_DIR).iterdir())
    assert listed and sorted(listed) == written


def test_a_run_with_nothing_scored_writes_an_empty_trajectories_file(score_cli, tmp_path):
    from tests import builders as b

    shard = b.write_shard(tmp_path / "one.parquet", [b.trajectory("t0", [b.call(no_commit=True)])])
    code, out = score_cli([shard])
    assert code == 0
    table = pq.read_table(out / TRAJECTORIES_DIR)
    assert table.num_rows == 0 and "misuse_calls" in table.schema.names
