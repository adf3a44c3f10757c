"""The policy travels with the run: each run stores the validated policy and
the file's text; `compare`, `nightly` and `trend` say how two runs' policies
differ rule by rule; a policy (and thresholds) may be read from any path
Beam can read, hashed as a local file is."""

import hashlib
import json
import textwrap

import pytest
from apache_beam.io.filesystems import FileSystems

from litmus_score.exits import Exit
from litmus_score.scoring.policy import load_policy, policy_diff
from pipeline.cli import main
from tests import memfs
from tests.conftest import RUNNER, load_json
from tests.test_policy_drift import night

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

BEFORE = textwrap.dedent("""\
    schema: litmus-policy/1   # a comment: not part of the validated policy
    allowed_principals: [agent]
    tools: [transfer_funds]
    rules:
      - id: large-transfer
        tool: transfer_funds
        when: [{arg: amount, gt: 1000}]
        effect: deny
      - id: retired-rule
        tool: wire_abroad
        effect: deny
    """)
# large-transfer's bound changed, retired-rule removed, new-payee added, a tool named that carries markup.
AFTER = textwrap.dedent("""\
    schema: litmus-policy/1
    allowed_principals: [agent]
    tools: [transfer_funds, "<script>alert(1)</script>"]
    rules:
      - id: large-transfer
        tool: transfer_funds
        when: [{arg: amount, gt: 100}]
        effect: deny
      - id: new-payee
        tool: transfer_funds
        when: [{arg: to, glob: 'new-*'}]
        effect: deny
    """)


@pytest.fixture
def policies(tmp_path):
    paths = {}
    for name, text in (("before", BEFORE), ("after", AFTER)):
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(text)
    return paths


def stored(folder) -> dict:
    return json.loads((folder / "policy.json").read_text())


def test_a_run_stores_its_validated_policy_and_the_files_text(tmp_path, policies):
    night(tmp_path / "shards", recorded_denies=5, large_undecided=5, total=60)
    output = tmp_path / "run"
    assert main(["score", "--input", str(tmp_path / "shards" / "*.parquet"), "--output", str(output),
                 "--policy", str(policies["before"]), *RUNNER]) == Exit.OK
    metrics, manifest = load_json(output / "metrics.json"), load_json(output / "manifest.json")
    listed = {entry["path"]: entry["sha256"] for entry in manifest["outputs"]}
    # Was: only the path and the sha256; the policy edited in place lost its old text.
    assert (output / "policy.yaml").read_text() == BEFORE
    data = (output / "policy.json").read_bytes()
    assert hashlib.sha256(data).hexdigest() == metrics["policy_sha256"] == load_policy(policies["before"]).sha256
    assert listed["policy.json"] == metrics["policy_sha256"]
    assert listed["policy.yaml"] == hashlib.sha256(BEFORE.encode()).hexdigest()
    assert load_policy(policies["before"]).model_dump(mode="json", by_alias=True) == json.loads(data)


def test_nightly_compare_and_trend_show_the_policy_change_rule_by_rule(tmp_path, policies, capsys):
    runs, root = tmp_path / "runs", tmp_path / "scores"
    for day in ("2026-11-30", "2026-12-01"):
        night(runs / day, recorded_denies=10, large_undecided=20)
    for day, policy in (("2026-11-30", "before"), ("2026-12-01", "after")):
        main(["nightly", "--date", day, "--input", str(runs / "{date}" / "*.parquet"), "--output_root", str(root),
              "--policy", str(policies[policy]), *RUNNER])
    old, new = root / "date=2026-11-30", root / "date=2026-12-01"
    expected = policy_diff(stored(new), stored(old))
    diff = load_json(new / "comparison.json")["policy_diff"]
    assert diff == expected
    assert [rule["id"] for rule in diff["rules_added"]] == ["new-payee"]
    assert [rule["id"] for rule in diff["rules_removed"]] == ["retired-rule"]
    assert [(change["id"], change["fields"]) for change in diff["rules_changed"]] == [("large-transfer", ["when"])]
    assert [setting["setting"] for setting in diff["settings_changed"]] == ["tools"]
    printed = capsys.readouterr().out
    assert "rules added: new-payee" in printed and "rules removed: retired-rule" in printed
    assert "rule changed: large-transfer (when)" in printed

    for page in (new / "report.html", root / "trend.html"):
        html = page.read_text()
        assert "rule added: <span class=\"mono\">new-payee" in html
        assert "rule removed: <span class=\"mono\">retired-rule" in html
        assert "rule changed: <span class=\"mono\">large-transfer</span> (when)" in html
        assert "<script>" not in html
    assert load_json(root / "trend.json")["nights"][1]["policy_diff"] == expected

    # compare of the same two runs, into a folder of its own: the same diff.
    assert main(["compare", str(new), str(old), "--output", str(tmp_path / "cmp")]) == Exit.WITHHELD
    assert load_json(tmp_path / "cmp" / "comparison.json")["policy_diff"] == expected
    assert "rules added: new-payee" in capsys.readouterr().out


def test_a_run_without_a_policy_against_one_with_lists_every_rule(tmp_path, policies):
    night(tmp_path / "shards", recorded_denies=5, large_undecided=0, total=60)
    shards = str(tmp_path / "shards" / "*.parquet")
    assert main(["score", "--input", shards, "--output", str(tmp_path / "plain"), *RUNNER]) == Exit.OK
    assert not (tmp_path / "plain" / "policy.json").exists()
    main(["score", "--input", shards, "--output", str(tmp_path / "with"), "--policy", str(policies["before"]),
          "--baseline", str(tmp_path / "plain"), *RUNNER])
    diff = load_json(tmp_path / "with" / "comparison.json")["policy_diff"]
    assert [rule["id"] for rule in diff["rules_added"]] == ["large-transfer", "retired-rule"]
    assert diff["rules_removed"] == diff["rules_changed"] == []


def test_a_policy_and_thresholds_from_an_object_store_are_hashed_as_local_files(tmp_path, policies):
    night(tmp_path / "shards", recorded_denies=5, large_undecided=5, total=60)
    remote = f"{memfs.SCHEME}://bucket/config"
    for name in ("after.yaml", "thresholds.yaml"):
        local = policies["after"] if name == "after.yaml" else "configs/thresholds.yaml"
        with FileSystems.create(f"{remote}/{name}") as handle:
            handle.write(open(local, "rb").read())
    output = tmp_path / "run"
    # Was: exit 2, "cannot read memtest://bucket/config/after.yaml: No such file or directory".
    assert main(["score", "--input", str(tmp_path / "shards" / "*.parquet"), "--output", str(output),
                 "--policy", f"{remote}/after.yaml", "--thresholds", f"{remote}/thresholds.yaml",
                 *RUNNER]) == Exit.OK
    assert load_json(output / "metrics.json")["policy_sha256"] == load_policy(policies["after"]).sha256
    assert (output / "policy.yaml").read_text() == AFTER


def test_a_policy_missing_from_an_object_store_is_one_line_naming_it(tmp_path, capsys):
    night(tmp_path / "shards", recorded_denies=5, large_undecided=5, total=60)
    missing = f"{memfs.SCHEME}://bucket/config/missing.yaml"
    assert main(["score", "--input", str(tmp_path / "shards" / "*.parquet"), "--output", str(tmp_path / "run"),
                 "--policy", missing, *RUNNER]) == Exit.USAGE
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"litmus-score: cannot read {missing}: no object {missing}"
    assert not (tmp_path / "run").exists()


def nightly_with(runs, root, date, policy):
    return main(["nightly", "--date", date, "--input", str(runs / "{date}" / "*.parquet"), "--output_root",
                 str(root), "--policy", str(policy), *RUNNER])


def first_of_two_nights(tmp_path, policies, root_name="scores") -> tuple:
    """(runs, root): two nights' shards, the first scored under the policy `before`; the second night's
    misuse rises under the policy `after`, which adds a deny rule."""
    runs, root = tmp_path / "runs", tmp_path / root_name
    night(runs / "2026-11-30", recorded_denies=10, large_undecided=20)
    night(runs / "2026-12-01", recorded_denies=60, large_undecided=20)
    assert nightly_with(runs, root, "2026-11-30", policies["before"]) == Exit.OK
    return runs, root


def agent_counts(metrics) -> tuple:
    (group,) = metrics["groups"]
    return group["trajectories"]["scored"], group["misuse"]["count"]


def test_a_policy_edit_between_nights_gets_a_verdict_from_the_rescored_baseline(tmp_path, policies, capsys):
    runs, root = first_of_two_nights(tmp_path, policies)
    capsys.readouterr()
    # Was: exit 5, no verdict on the night of a policy edit.
    assert nightly_with(runs, root, "2026-12-01", policies["after"]) == Exit.REGRESSION
    printed = capsys.readouterr().out
    folder = root / "date=2026-12-01"
    comparison = load_json(folder / "comparison.json")
    # The expectation: the baseline's inputs scored by hand under tonight's policy.
    by_hand = tmp_path / "by-hand"
    assert main(["score", "--input", str(runs / "2026-11-30" / "*.parquet"), "--output", str(by_hand),
                 "--policy", str(policies["after"]), *RUNNER]) == Exit.OK
    (agent,) = comparison["agents"]
    scored, misuse = agent_counts(load_json(by_hand / "metrics.json"))
    assert (agent["old"]["scored"], agent["old"]["misuse"]) == (scored, misuse)
    assert agent["verdict"] == "regression" and comparison["withheld"] is False and comparison["rules_changed"] == []
    old_sha = load_json(root / "date=2026-11-30" / "metrics.json")["policy_sha256"]
    rescored = comparison["baseline"]["rescored"]
    assert rescored["rules"]["policy_sha256"] == load_json(folder / "metrics.json")["policy_sha256"]
    assert rescored["scored_under"]["policy_sha256"] == old_sha
    assert [rule["id"] for rule in comparison["policy_diff"]["rules_added"]] == ["new-payee"]
    assert "re-scored under this run's rules" in printed
    assert "Re-scored baseline" in (folder / "report.html").read_text()
    assert "re-scored under this night" in (root / "trend.html").read_text()
    assert load_json(root / "trend.json")["nights"][1]["baseline_rescored"] is True


def test_a_rescore_under_an_output_root_named_with_glob_characters_cleans_up_after_itself(tmp_path, policies):
    # The re-score's scratch folder sits in tonight's folder: deleted as a path, never matched as a pattern.
    runs, root = first_of_two_nights(tmp_path, policies, root_name="scores[1]")
    assert nightly_with(runs, root, "2026-12-01", policies["after"]) == Exit.REGRESSION
    folder = root / "date=2026-12-01"
    assert load_json(folder / "comparison.json")["baseline"]["rescored"] is not None
    assert not [path.name for path in folder.iterdir() if path.name.startswith(".")]


def test_a_moved_baseline_input_withholds_the_verdict_with_a_line_naming_it(tmp_path, policies, capsys):
    runs, root = first_of_two_nights(tmp_path, policies)
    moved = runs / "2026-11-30" / "shard.parquet"
    moved.rename(runs / "elsewhere.parquet")
    capsys.readouterr()
    assert nightly_with(runs, root, "2026-12-01", policies["after"]) == Exit.WITHHELD
    errors = [line for line in capsys.readouterr().err.splitlines() if "baseline input" in line]
    assert len(errors) == 1 and str(moved) in errors[0] and "cannot be read now" in errors[0]
    folder = root / "date=2026-12-01"
    assert (folder / "_SUCCESS").exists() and not [p for p in folder.iterdir() if p.name.startswith(".")]
    comparison = load_json(folder / "comparison.json")
    assert comparison["withheld"] is True and comparison["baseline"]["rescored"] is None


def test_a_changed_baseline_input_withholds_the_verdict(tmp_path, policies, capsys):
    runs, root = first_of_two_nights(tmp_path, policies)
    changed = runs / "2026-11-30" / "shard.parquet"
    changed.unlink()
    night(runs / "rewritten", recorded_denies=40, large_undecided=0)
    (runs / "rewritten" / "shard.parquet").rename(changed)
    capsys.readouterr()
    assert nightly_with(runs, root, "2026-12-01", policies["after"]) == Exit.WITHHELD
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "baseline input" in line]
    assert f"baseline input {changed} changed since the baseline read it" in line
