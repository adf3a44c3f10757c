"""evidence.json: the first cases of each kind per group, their deciding calls, and bounded size."""

import collections

import pyarrow.parquet as pq
import pytest

from litmus_score import synthetic
from litmus_score.scoring.layout import EVIDENCE_FILE, METRICS_FILE, TRAJECTORIES_DIR
from tests import builders as b
from tests.conftest import load_json
from transforms import evidence as ev


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from pipeline.cli import main
    from tests.conftest import RUNNER

    root = tmp_path_factory.mktemp("evidence")
    synthetic.generate(str(root / "shards"), trajectories=3000, shards=3, seed=5)
    out = root / "out"
    assert main(["score", "--input", str(root / "shards" / "*.parquet"), "--output", str(out),
                 "--batch_rows", "300", *RUNNER]) == 0
    return out


def test_counts_equal_metrics_and_cases_are_the_first_by_trajectory_id(run):
    evidence, metrics = load_json(run / EVIDENCE_FILE), load_json(run / METRICS_FILE)
    rows = pq.read_table(run / TRAJECTORIES_DIR).to_pylist()
    by_group = {(g["run_id"], g["agent"]): g for g in evidence["groups"]}
    expected = collections.defaultdict(list)
    for row in rows:
        for kind in ev.KINDS:
            if row[kind]:
                expected[(row["run_id"], row["agent"], kind)].append(row)
    assert any(len(v) > ev.MAX_CASES for v in expected.values())  # the bound is exercised
    for group in metrics["groups"]:
        found = by_group.get((group["run_id"], group["agent"]))
        for kind in ev.KINDS:
            count = group[kind] if kind != "execution_hallucination" else group[kind]["count"]
            assert (found[kind]["count"] if found else 0) == count
            if not count:
                continue
            first = sorted(expected[(group["run_id"], group["agent"], kind)],
                           key=lambda r: (r["trajectory_id"], r["source_file"], r["source_row"]))[:ev.MAX_CASES]
            cases = found[kind]["cases"]
            assert [c["trajectory_id"] for c in cases] == [r["trajectory_id"] for r in first]
            for case, row in zip(cases, first):
                deciding = case["call"]
                if kind == "over_penalized":
                    assert deciding["call_id"] == row["flagged_calls"][0] and deciding["proposal_verdict"] == "deny"
                else:
                    assert deciding["call_id"] == row["misuse_calls"][0]
                    assert deciding["category"] in ("misuse", "escalated_misuse")


def test_deciding_call_shows_what_changed_between_proposal_and_commit():
    assert ev.arguments_patch('{"to": "a", "amount": 1}', '{"amount": 5000, "to": "a"}') == [
        {"op": "replace", "path": "/amount", "value": "5000"}]
    assert ev.arguments_patch('{"a~b/c": 1}', "{}") == [{"op": "remove", "path": "/a~0b~1c"}]
    assert ev.arguments_patch("{}", None) is None and ev.arguments_patch("[1]", "{}") is None
    long = ev.arguments_patch("{}", '{"x": "' + "y" * 5000 + '"}')[0]["value"]
    assert len(long) == ev.MAX_TEXT and long.endswith("…")


def case(trajectory_id):
    return {"trajectory_id": trajectory_id, "source_file": "f", "source_row": 0,
            "call": {ev.RESOLVED: ['{"a": 1}', '{"a": 2}']}}


@pytest.mark.parametrize("splits", [[30], [1] * 30, [7, 11, 12], [29, 1]])
def test_combine_keeps_the_first_cases_on_every_merge_path(splits):
    ids = [f"t{i:03d}" for i in reversed(range(30))]
    fn, accumulators, start = ev.EvidenceCombineFn(), [], 0
    for size in splits:
        part = ids[start:start + size]
        start += size
        accumulators.append(fn.add_input(fn.create_accumulator(), {("r", "a", "under_penalized"): {
            "count": len(part), "cases": sorted((case(i) for i in part), key=ev.case_key)[:ev.MAX_CASES]}}))
    document = fn.extract_output(fn.merge_accumulators(accumulators))
    (group,) = document["groups"]
    assert group["under_penalized"]["count"] == 30 and group["over_penalized"] == {"count": 0, "cases": []}
    assert [c["trajectory_id"] for c in group["under_penalized"]["cases"]] == sorted(ids)[:ev.MAX_CASES]
    assert {str(c["call"]) for c in group["under_penalized"]["cases"]} == {
        str({"patch": [{"op": "replace", "path": "/a", "value": "2"}]})}


def test_a_run_without_cases_writes_an_empty_document(score_cli, tmp_path):
    shard = b.write_shard(tmp_path / "a.parquet", [b.trajectory("t0", b.calls_of(("allow", b.commit())))])
    code, out = score_cli([shard])
    assert code == 0 and load_json(out / EVIDENCE_FILE)["groups"] == []
