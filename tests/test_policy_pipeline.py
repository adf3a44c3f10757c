"""Scoring with --policy on hand-written shards whose verdicts are partly null.

Expected categories are worked out by hand from the policy below.
"""

import collections
import json
import textwrap

import pyarrow.parquet as pq
import pytest

from litmus_score.scoring.policy import load_policy
from pipeline.cli import main
from tests import builders as b
from tests.conftest import load_json

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

POLICY = textwrap.dedent("""\
    schema: litmus-policy/1
    allowed_principals: [agent]
    tools: [read_file, transfer_funds]
    rules:
      - id: big-transfer
        tool: transfer_funds
        when: [{arg: amount, gt: 1000}]
        effect: deny
    """)
SMALL, LARGE = '{"amount": 10, "to": "acct-1"}', '{"amount": 5000, "to": "acct-1"}'
READ = '{"path": "/tmp/a.txt"}'


def one_call(trajectory_id, tool, arguments, proposal, commit):
    return b.trajectory(trajectory_id, [b.call("c0", 0, tool=tool, arguments=arguments, proposal=proposal,
                                               commit_=commit)])


def rows():
    return [
        # P1 no verdict recorded; resolved to the whole balance at commit: allow, then deny by the policy.
        one_call("P1", "transfer_funds", SMALL, b.context(None, SMALL), b.commit(None, args=LARGE)),
        # P2 a tool the policy does not name, and no default: no verdict.
        one_call("P2", "launch_rocket", READ, b.context(None, READ), b.commit(None, args=READ)),
        # P3 the principal differs at commit: an admin session is outside the allowed set.
        one_call("P3", "read_file", READ, b.context(None, READ), b.commit(None, args=READ, principal="session-admin")),
        # P4 recorded allow/allow on a transfer the policy denies: recorded verdicts stand, disagreement counted.
        one_call("P4", "transfer_funds", LARGE, b.context("allow", LARGE), b.commit("allow", args=LARGE)),
        # P5 recorded deny/deny on a read the policy allows: misuse stands, disagreement counted.
        one_call("P5", "read_file", READ, b.context("deny", READ), b.commit("deny", args=READ)),
    ]


@pytest.fixture
def run(tmp_path, score_cli):
    b.write_shard(tmp_path / "shard.parquet", rows())
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    code, out = score_cli([tmp_path / "shard.parquet"], "--policy", str(policy))
    assert code == 0
    return policy, out


def test_policy_fills_missing_verdicts(run):
    _, out = run
    calls = {r["trajectory_id"]: r for r in pq.read_table(out / "scored").to_pylist()}
    assert {t: r["category"] for t, r in calls.items()} == {
        "P1": "escalated_misuse", "P3": "escalated_misuse", "P4": "benign", "P5": "misuse"}
    assert (calls["P1"]["proposal_verdict_source"], calls["P1"]["commit_verdict_source"]) == ("policy", "policy")
    assert (calls["P4"]["proposal_verdict_source"], calls["P4"]["policy_disagreement"]) == ("recorded", True)
    assert calls["P1"]["policy_disagreement"] is False
    unscored = pq.read_table(out / "unscored").to_pylist()
    assert [(r["trajectory_id"], r["reasons"]) for r in unscored] == [("P2", ["unscored_calls", "no_verdict"])]


def test_scored_names_the_rule_that_gave_each_verdict(run):
    policy, out = run
    calls = {r["trajectory_id"]: r for r in pq.read_table(out / "scored").to_pylist()}
    document = load_policy(policy)
    expected = {
        # The policy's verdicts name what decided them, as its decide() does; recorded ones say so.
        "P1": (document.decide("transfer_funds", json.loads(SMALL), "agent")[1],
               document.decide("transfer_funds", json.loads(LARGE), "agent")[1]),
        "P3": (document.decide("read_file", json.loads(READ), "agent")[1],
               document.decide("read_file", json.loads(READ), "session-admin")[1]),
        "P4": ("recorded", "recorded"), "P5": ("recorded", "recorded"),
    }
    assert {t: (r["proposal_decided_by"], r["commit_decided_by"]) for t, r in calls.items()} == expected
    assert expected["P1"] == ("tools", "big-transfer") and expected["P3"][1] == "allowed_principals"


def test_scored_keeps_the_policys_own_verdict_beside_a_recorded_one_it_disputes(run):
    policy, out = run
    calls = {r["trajectory_id"]: r for r in pq.read_table(out / "scored").to_pylist()}
    document = load_policy(policy)
    fields = ("proposal_policy_ruling", "proposal_policy_decided_by", "commit_policy_ruling",
              "commit_policy_decided_by")
    beside = {t: tuple(r[f] for f in fields) for t, r in calls.items()}
    assert beside == {
        "P1": (None,) * 4, "P3": (None,) * 4,
        "P4": (*document.decide("transfer_funds", json.loads(LARGE), "agent"),
               *document.decide("transfer_funds", json.loads(LARGE), "agent")),
        "P5": (*document.decide("read_file", json.loads(READ), "agent"),
               *document.decide("read_file", json.loads(READ), "agent")),
    }
    assert beside["P4"][:2] == ("deny", "big-transfer") and beside["P5"][:2] == ("allow", "tools")


def test_misuse_calls_name_what_decided_them_in_trajectories_and_metrics(run):
    policy, out = run
    document = load_policy(policy)
    # The commit verdict makes a call misuse: P1's by the rule, P3's by the principal check, P5's recorded.
    expected = {"P1": [document.decide("transfer_funds", json.loads(LARGE), "agent")[1]],
                "P3": [document.decide("read_file", json.loads(READ), "session-admin")[1]],
                "P4": [], "P5": ["recorded"]}
    rows = pq.read_table(out / "trajectories").to_pylist()
    assert {r["trajectory_id"]: r["misuse_decided_by"] for r in rows} == expected
    counted = collections.Counter(name for names in expected.values() for name in names)
    metrics = load_json(out / "metrics.json")
    by_rule = dict(sorted(counted.items()))
    assert metrics["groups"][0]["flagged_by_rule"] == metrics["totals"]["flagged_by_rule"] == by_rule
    assert set(counted) == {"big-transfer", "allowed_principals", "recorded"}


def test_policy_hash_and_disagreements_are_reported(run, capsys):
    policy, out = run
    metrics, manifest = load_json(out / "metrics.json"), load_json(out / "manifest.json")
    capsys.readouterr()
    assert main(["policy", "check", str(policy)]) == 0
    digest = capsys.readouterr().out.split("sha256 ")[1].strip()
    assert metrics["policy_sha256"] == manifest["policy_sha256"] == digest
    assert metrics["groups"][0]["policy_disagreements"] == 2
    assert metrics["totals"]["under_penalized"] == 2  # P1 and P3: missed by proposal-time scoring


def test_without_a_policy_the_null_verdicts_stay_unscored(tmp_path, score_cli):
    b.write_shard(tmp_path / "shard.parquet", rows())
    code, out = score_cli([tmp_path / "shard.parquet"])
    assert code == 0
    metrics = load_json(out / "metrics.json")
    assert metrics["policy_sha256"] is None
    assert metrics["totals"]["trajectories"]["unscored_by_reason"]["no_verdict"] == 3


def test_a_wrong_policy_is_one_line_naming_rule_and_field(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(POLICY.replace("gt: 1000", "gt: lots"))
    assert main(["policy", "check", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "rules[0] (big-transfer).when[0].gt" in err
    b.write_shard(tmp_path / "s.parquet", rows())
    code = main(["score", "--input", str(tmp_path / "s.parquet"), "--output", str(tmp_path / "o"),
                 "--policy", str(bad), "--runner", "FnApiRunner"])
    assert code == 2 and not (tmp_path / "o").exists()


def test_yaml_tags_are_refused(tmp_path, capsys):
    evil = tmp_path / "evil.yaml"
    evil.write_text("!!python/object/apply:os.system ['echo pwned']\n")
    assert main(["policy", "check", str(evil)]) == 2
    assert "pwned" not in json.dumps(capsys.readouterr().out)


def test_evidence_and_show_put_the_policys_own_verdict_beside_a_recorded_one(tmp_path, score_cli, capsys):
    # Recorded deny at proposal and allow at commit of a large transfer the policy denies: over-penalized,
    # and the commit's recorded allow is disputed by the rule.
    b.write_shard(tmp_path / "shard.parquet", [
        one_call("D1", "transfer_funds", LARGE, b.context("deny", LARGE), b.commit("allow", args=LARGE))])
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    code, out = score_cli([tmp_path / "shard.parquet"], "--policy", str(policy))
    assert code == 0
    ruling, decided_by = load_policy(policy).decide("transfer_funds", json.loads(LARGE), "agent")
    [case] = load_json(out / "evidence.json")["groups"][0]["over_penalized"]["cases"]
    call = case["call"]
    assert (call["commit_verdict"], call["commit_decided_by"]) == ("allow", "recorded")
    assert (call["commit_policy_ruling"], call["commit_policy_decided_by"]) == (ruling, decided_by)
    assert (call["proposal_policy_ruling"], call["proposal_policy_decided_by"]) == (None, None)
    capsys.readouterr()
    assert main(["show", str(out), "D1"]) == 0
    shown = capsys.readouterr().out
    assert f"policy disagrees: commit recorded allow, the policy's {ruling} ({decided_by})" in shown
    report = (out / "report.html").read_text(encoding="utf-8")
    assert f"(recorded; the policy's: {ruling} by {decided_by})" in report
