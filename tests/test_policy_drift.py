"""Policy drift: a regression verdict compares like with like.

The same trajectories scored on two nights under two policies (the second
adds a deny rule) must not read as a regression, and the reverse edit must
not hide a real rise: the night is compared with the baseline's inputs
scored again under its policy. `compare`, which scores nothing, withholds
the verdict, both policy hashes named on the terminal, in comparison.json
and in the report.
"""

import textwrap

import pyarrow.parquet as pq
import pytest

from litmus_score.exits import Exit
from pipeline.cli import main
from pipeline.options import load_policy_file
from tests import builders as b
from tests.conftest import RUNNER, load_json

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

ALLOW_TRANSFERS = textwrap.dedent("""\
    schema: litmus-policy/1
    allowed_principals: [agent]
    tools: [transfer_funds]
    """)
DENY_LARGE = ALLOW_TRANSFERS + textwrap.dedent("""\
    rules:
      - id: large-transfer
        tool: transfer_funds
        when: [{arg: amount, gt: 1000}]
        effect: deny
    """)
LARGE = '{"amount": 5000, "to": "acct-1"}'
SMALL = '{"amount": 10, "to": "acct-1"}'


def transfer(trajectory_id, arguments, verdict=None):
    """One committed transfer; verdict None: the harness recorded none, the policy decides."""
    return b.trajectory(trajectory_id, [b.call("c0", 0, tool="transfer_funds", arguments=arguments,
                                               proposal=b.context(verdict, arguments),
                                               commit_=b.commit(verdict, args=arguments))], agent="agent-a")


def night(folder, recorded_denies, large_undecided, total=300):
    """`recorded_denies` transfers the harness denied (misuse under any policy), `large_undecided` large
    ones without a verdict (misuse only under DENY_LARGE), the rest small ones without a verdict."""
    rows = [transfer(f"d{i}", SMALL, "deny") for i in range(recorded_denies)]
    rows += [transfer(f"l{i}", LARGE) for i in range(large_undecided)]
    rows += [transfer(f"s{i}", SMALL) for i in range(total - len(rows))]
    folder.mkdir(parents=True)
    b.write_shard(folder / "shard.parquet", rows)


@pytest.fixture
def policies(tmp_path):
    paths = {"allow": tmp_path / "allow.yaml", "deny": tmp_path / "deny.yaml"}
    paths["allow"].write_text(ALLOW_TRANSFERS)
    paths["deny"].write_text(DENY_LARGE)
    return {name: (path, load_policy_file(str(path)).sha256) for name, path in paths.items()}


def nightly(runs, root, date, policy):
    return main(["nightly", "--date", date, "--input", str(runs / "{date}" / "*.parquet"), "--output_root",
                 str(root), "--policy", str(policy), *RUNNER])


def assert_withheld_everywhere(folder, new_sha, old_sha, printed):
    """Each place the verdict would be names both hashes."""
    comparison = load_json(folder / "comparison.json")
    assert comparison["rules_changed"] == [{"rule": "policy_sha256", "new": new_sha, "old": old_sha}]
    assert comparison["regressions"] == [] and comparison["agents"] == [] and comparison["exit_code"] == 5
    assert comparison["withheld"] is True and comparison["baseline"]["policy_sha256"] == old_sha
    report = (folder / "report.html").read_text()
    assert "No verdict" in report and new_sha in report and old_sha in report
    assert "no verdict" in printed and f"policy_sha256 differs: new {new_sha!r}, old {old_sha!r}" in printed


@pytest.mark.parametrize("last_night, tonight, policies_in_order, verdict", [
    # The same trajectories; under the new rule 90 of 300 are misuse (0 before): a "rise" no agent made.
    ((0, 90), (0, 90), ("allow", "deny"), Exit.OK),
    # 130/300 under the rule, then 90/300 without it: the rate fell while the harness denied three times as many.
    ((30, 100), (90, 100), ("deny", "allow"), Exit.REGRESSION),
], ids=["a deny rule added is no regression", "a deny rule dropped cannot hide a real rise"])
def test_a_policy_change_between_two_nights_is_judged_on_the_rescored_baseline(tmp_path, policies, capsys, last_night,
                                                                              tonight, policies_in_order, verdict):
    runs = tmp_path / "runs"
    night(runs / "2026-11-30", *last_night)
    night(runs / "2026-12-01", *tonight)
    root = tmp_path / "scores"
    (old, old_sha), (new, new_sha) = (policies[name] for name in policies_in_order)
    assert nightly(runs, root, "2026-11-30", old) == Exit.OK
    # Was: exit 3 (a false rise) for the first, exit 0 (a rise hidden) for the second; then exit 5 for both.
    assert nightly(runs, root, "2026-12-01", new) == verdict
    folder = root / "date=2026-12-01"
    metrics, manifest = load_json(folder / "metrics.json"), load_json(folder / "manifest.json")
    assert metrics["totals"]["misuse"]["count"] == 90
    assert manifest["input_rows"] == metrics["totals"]["trajectories"]["input"] == 300
    comparison = load_json(folder / "comparison.json")
    assert comparison["withheld"] is False and comparison["rules_changed"] == []
    assert comparison["baseline"]["rescored"]["scored_under"]["policy_sha256"] == old_sha
    assert comparison["baseline"]["policy_sha256"] == new_sha == metrics["policy_sha256"]
    # The baseline's trajectories under tonight's policy: recorded denies, and the large ones if tonight denies them.
    expected_old_misuse = last_night[0] + (last_night[1] if new_sha == policies["deny"][1] else 0)
    assert comparison["agents"][0]["old"]["misuse"] == expected_old_misuse


def test_compare_of_two_runs_under_different_policies_withholds_the_verdict(tmp_path, policies, capsys):
    night(tmp_path / "shards", recorded_denies=0, large_undecided=90)
    shards = str(tmp_path / "shards" / "*.parquet")
    (allow, allow_sha), (deny, deny_sha) = policies["allow"], policies["deny"]
    for name, policy in (("old", allow), ("new", deny)):
        assert main(["score", "--input", shards, "--output", str(tmp_path / name), "--policy", str(policy),
                     *RUNNER]) == Exit.OK
    capsys.readouterr()
    # compare reads two published runs and scores nothing: it withholds across a change of rules.
    assert main(["compare", str(tmp_path / "new"), str(tmp_path / "old"), "--output",
                 str(tmp_path / "cmp")]) == Exit.WITHHELD
    assert_withheld_everywhere(tmp_path / "cmp", deny_sha, allow_sha, capsys.readouterr().out)


def test_the_same_policy_on_both_nights_gets_its_verdict(tmp_path, policies, capsys):
    runs = tmp_path / "runs"
    night(runs / "2026-11-30", recorded_denies=30, large_undecided=100)
    night(runs / "2026-12-01", recorded_denies=90, large_undecided=100)
    root = tmp_path / "scores"
    deny, deny_sha = policies["deny"]
    assert nightly(runs, root, "2026-11-30", deny) == Exit.OK
    assert nightly(runs, root, "2026-12-01", deny) == Exit.REGRESSION
    comparison = load_json(root / "date=2026-12-01" / "comparison.json")
    assert comparison["withheld"] is False and comparison["rules_changed"] == []
    assert comparison["regressions"] == ["agent-a"] and comparison["baseline"]["policy_sha256"] == deny_sha


def test_a_baseline_scored_in_another_mode_is_rescored_in_this_runs(tmp_path, capsys):
    night(tmp_path / "shards", recorded_denies=30, large_undecided=0)
    commit, strict = tmp_path / "commit", tmp_path / "strict"
    shards = str(tmp_path / "shards" / "*.parquet")
    assert main(["score", "--input", shards, "--output", str(commit), *RUNNER]) == Exit.OK
    # Was: exit 5 with no verdict; the same inputs re-scored in strict mode are the baseline now.
    assert main(["score", "--input", shards, "--output", str(strict), "--adjudication", "strict",
                 "--baseline", str(commit), *RUNNER]) == Exit.OK
    comparison = load_json(strict / "comparison.json")
    assert comparison["rules_changed"] == [] and comparison["baseline"]["adjudication"] == "strict"
    assert comparison["baseline"]["rescored"]["scored_under"]["adjudication"] == "commit"
    assert (strict / "_SUCCESS").exists() and "re-scored under this run's rules" in capsys.readouterr().out
