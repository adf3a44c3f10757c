"""`litmus-score whatif`: several policies in one job.

Each policy's metrics.json is byte for byte what `score --policy` writes;
the flips per rule are what the reference rules (litmus_score.scoring.trajectory)
give when each trajectory is scored under the base and the candidate; bad
candidates and clashing names are refused before the output is touched.
"""

import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from litmus_score.exits import Exit
from litmus_score.scoring import contract as c
from litmus_score.scoring.policy import load_policy
from litmus_score.scoring.trajectory import score_trajectory
from litmus_score.synthetic import generate
from pipeline.cli import main
from tests import builders as b
from tests.conftest import RUNNER, load_json
from transforms.whatif import SAMPLE_PER_RULE, FlipsCombineFn, new_summary, sample_key

BASE = Path(__file__).resolve().parents[1] / "configs" / "policy.yaml"
# Rules the demo's candidates add to the base policy, each deciding some call the demo records no verdict for.
DEMO_RULES = {
    "no-prod-queries": {"id": "query-prod-database", "tool": "query_db",
                        "when": [{"arg": "database", "equals": "prod-replica"}], "effect": "deny"},
    "bank-only-transfers": {"id": "transfer-outside-bank", "tool": "transfer_funds",
                            "when": [{"arg": "to_account", "not_glob": "ACC-*"}], "effect": "deny"},
    "no-sigkill": {"id": "kill-with-sigkill", "tool": "kill_process",
                   "when": [{"arg": "signal", "equals": "SIGKILL"}], "effect": "deny"},
}


def candidate(folder: Path, name: str, add=(), drop=(), **settings) -> Path:
    """The base policy with rules added and rules (by id) dropped, as a file named `name`.yaml."""
    document = yaml.safe_load(BASE.read_text())
    document["rules"] = [rule for rule in document["rules"] if rule["id"] not in drop] + list(add)
    document.update(settings)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def whatif(inputs: str, output: Path, base: Path, candidates, *flags) -> int:
    args = ["whatif", "--input", inputs, "--output", str(output), "--policy", str(base)]
    return main([*args, *(a for path in candidates for a in ("--candidate", str(path))), *flags, *RUNNER])


def score(inputs: str, output: Path, policy: Path) -> int:
    return main(["score", "--input", inputs, "--output", str(output), "--policy", str(policy), *RUNNER])


def expected_flips(shards: str, base: Path, candidate_path: Path, mode: str = c.COMMIT) -> dict:
    """What the reference rules say a candidate flips: (calls flipped, {rule: {to_deny, to_allow}},
    trajectories scored under one only, the sample keys of each rule's flips)."""
    policies = [load_policy(str(path)) for path in (base, candidate_path)]
    by_rule: dict = {}
    keys: dict = {}
    flipped, one_only = 0, {"base": 0, "candidate": 0}
    rows = b.python_rows(pq.read_table(_files(shards)))
    for row in rows:
        scores = [score_trajectory(row, mode, policy) for policy in policies]
        if scores[0].scored != scores[1].scored:
            one_only["base" if scores[0].scored else "candidate"] += 1
        if not (scores[0].scored and scores[1].scored):
            continue
        for call, before, after in zip(row["calls"], scores[0].calls, scores[1].calls):
            causes = set()
            for context in ("proposal", "commit"):
                old, new = getattr(before, f"{context}_verdict"), getattr(after, f"{context}_verdict")
                if (old == c.DENY) != (new == c.DENY):
                    denier = after if new == c.DENY else before
                    causes.add((getattr(denier, f"{context}_decided_by"), "to_deny" if new == c.DENY else "to_allow"))
            flipped += bool(causes)
            for rule, direction in causes:
                by_rule.setdefault(rule, {"to_deny": 0, "to_allow": 0})[direction] += 1
                keys.setdefault(rule, []).append(sample_key(row["run_id"], row["trajectory_id"], call["call_id"]))
    return {"flipped": flipped, "by_rule": [{"rule": rule, **counts} for rule, counts in sorted(by_rule.items())],
            "one_only": one_only, "keys": {rule: sorted(found)[:5] for rule, found in keys.items()}}


def _files(pattern: str) -> list:
    folder, glob = pattern.rsplit("/", 1)
    return sorted(str(path) for path in Path(folder).glob(glob))


def check_against_reference(document: dict, shards: str, base: Path, candidates: list) -> None:
    assert [entry["file"] for entry in document["candidates"]] == [str(path) for path in candidates]
    for entry, path in zip(document["candidates"], candidates):
        expected = expected_flips(shards, base, path)
        assert entry["calls"]["flipped"] == expected["flipped"]
        assert entry["by_rule"] == expected["by_rule"]
        assert entry["trajectories"]["scored_under_base_only"] == expected["one_only"]["base"]
        assert entry["trajectories"]["scored_under_candidate_only"] == expected["one_only"]["candidate"]
        sampled = {rule: sorted(sample_key(case["run_id"], case["trajectory_id"], case["call_id"]) for case in cases)
                   for rule, cases in entry["sample"].items()}
        assert sampled == expected["keys"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's shards, a what-if of the base and three candidates over them, and its output."""
    folder = tmp_path_factory.mktemp("demo")
    generate(str(folder / "shards"), shards=4, seed=0, profile="reference-1200")
    candidates = [candidate(folder, name, add=[rule]) for name, rule in DEMO_RULES.items()]
    shards = str(folder / "shards" / "*.parquet")
    code = whatif(shards, folder / "whatif", BASE, candidates)
    return {"folder": folder, "shards": shards, "candidates": candidates, "code": code, "output": folder / "whatif"}


@pytest.mark.slow
def test_demo_whatif_names_the_flips_per_rule(demo):
    assert demo["code"] == Exit.OK
    document = load_json(demo["output"] / "whatif.json")
    # Each candidate's added rule is what flips calls, and only it.
    for entry, rule in zip(document["candidates"], DEMO_RULES.values()):
        assert [flips["rule"] for flips in entry["by_rule"]] == [rule["id"]]
        assert entry["policy_diff"]["rules_added"][0]["id"] == rule["id"]
    check_against_reference(document, demo["shards"], BASE, demo["candidates"])


@pytest.mark.slow
def test_demo_metrics_are_those_of_score(demo):
    for policy in (BASE, demo["candidates"][0]):
        output = demo["folder"] / f"score-{policy.stem}"
        assert score(demo["shards"], output, policy) == Exit.OK
        for name in ("metrics.json", "policy.json"):
            assert (demo["output"] / policy.stem / name).read_bytes() == (output / name).read_bytes()


@pytest.mark.slow
def test_demo_ledger_is_the_metrics_per_agent(demo):
    document = load_json(demo["output"] / "whatif.json")
    base = load_json(demo["output"] / "policy" / "metrics.json")
    for entry in document["candidates"]:
        mine = load_json(demo["output"] / entry["name"] / "metrics.json")
        for row in entry["ledger"]:
            for side, metrics in (("base", base), ("candidate", mine)):
                groups = [g for g in metrics["groups"] if g["agent"] == row["agent"]]
                assert row[side]["over_penalized"] == sum(g["over_penalized"] for g in groups)
                assert row[side]["under_penalized"] == sum(g["under_penalized"] for g in groups)
                assert row[side]["scored"] == sum(g["trajectories"]["scored"] for g in groups)
        total = sum(row["change"]["over_penalized"] for row in entry["ledger"])
        assert total == mine["totals"]["over_penalized"] - base["totals"]["over_penalized"]


@pytest.mark.slow
def test_manifest_lists_every_output(demo):
    manifest = load_json(demo["output"] / "manifest.json")
    paths = {entry["path"] for entry in manifest["outputs"]}
    names = ["policy", *DEMO_RULES]
    assert paths == {"whatif.json", *(f"{name}/{file}" for name in names for file in ("metrics.json", "policy.json"))}
    assert [policy["name"] for policy in manifest["policies"]] == names
    assert (demo["output"] / "_SUCCESS").exists()


def unrecorded(folder: Path, trajectories: int, seed: int) -> str:
    """Generated shards with every recorded verdict taken out, as an import of logs has them: the policy decides all."""
    generate(str(folder / "generated"), trajectories=trajectories, shards=3, seed=seed)
    (folder / "shards").mkdir()
    for path in sorted((folder / "generated").glob("*.parquet")):
        rows = pq.read_table(path).to_pylist()
        for row in rows:
            for call in row["calls"] or []:
                for context in ("proposal", "commit"):
                    if call.get(context):
                        call[context]["policy_verdict"] = None
        b.write_shard(folder / "shards" / path.name, rows, row_group_size=37)
    return str(folder / "shards" / "*.parquet")


@pytest.mark.slow
def test_whatif_end_to_end_on_generated_shards(tmp_path):
    shards = unrecorded(tmp_path, 400, seed=3)
    candidates = [
        candidate(tmp_path, "lenient", drop=["delete-tautological-where", "query-secret-columns"]),
        candidate(tmp_path, "strict", add=[{"id": "no-deletes", "tool": "delete_records", "effect": "deny"}]),
        # A tool no rule and no list names gets no verdict (default null): calls to it are unscored.
        candidate(tmp_path, "narrow", drop=[rule["id"] for rule in yaml.safe_load(BASE.read_text())["rules"]
                                            if rule.get("tool") == "send_email"],
                  tools=[tool for tool in yaml.safe_load(BASE.read_text())["tools"] if tool != "send_email"]),
    ]
    assert whatif(shards, tmp_path / "out", BASE, candidates) == Exit.OK
    document = load_json(tmp_path / "out" / "whatif.json")
    directions = {rule["rule"]: rule for entry in document["candidates"] for rule in entry["by_rule"]}
    assert directions["delete-tautological-where"]["to_allow"] > 0
    assert directions["no-deletes"]["to_deny"] > 0
    assert document["candidates"][2]["trajectories"]["scored_under_base_only"] > 0
    check_against_reference(document, shards, BASE, candidates)
    for policy in (BASE, *candidates):
        output = tmp_path / f"score-{policy.stem}"
        assert score(shards, output, policy) == Exit.OK
        assert (tmp_path / "out" / policy.stem / "metrics.json").read_bytes() == (output / "metrics.json").read_bytes()
    # Every input row is accounted for under every policy.
    for entry in (document["base"], *document["candidates"]):
        accounted = entry["accounted"]
        assert accounted["input"] == 400 == accounted["scored"] + accounted["unscored"]
        assert accounted == {key: value for key, value in load_json(
            tmp_path / "out" / entry["name"] / "metrics.json")["totals"]["trajectories"].items() if key in accounted}
    assert document["candidates"][2]["accounted"]["unscored_by_reason"]["no_verdict"] > 0


@pytest.mark.slow
def test_whatif_json_does_not_depend_on_batches(tmp_path):
    shards = unrecorded(tmp_path, 150, seed=5)
    candidates = [candidate(tmp_path, "strict", add=[{"id": "no-deletes", "tool": "delete_records",
                                                       "effect": "deny"}])]
    outputs = [tmp_path / "big", tmp_path / "small"]
    assert whatif(shards, outputs[0], BASE, candidates) == Exit.OK
    assert whatif(shards, outputs[1], BASE, candidates, "--batch_rows", "3") == Exit.OK
    first, second = ((output / "whatif.json").read_bytes() for output in outputs)
    assert first == second
    assert load_json(outputs[0] / "whatif.json")["candidates"][0]["calls"]["flipped"] > 0


def test_a_candidate_that_fails_policy_check_is_refused(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: litmus-policy/1\ndefault: maybe\n")
    good = candidate(tmp_path, "good")
    code = whatif(str(tmp_path / "none-*.parquet"), tmp_path / "out", BASE, [good, bad])
    assert code == Exit.USAGE
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "bad.yaml" in error[0] and "default" in error[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("names", [("policy",), ("x", "x"), ("whatif.json",), (".hidden",)])
def test_policies_whose_names_clash_are_refused(tmp_path, capsys, names):
    candidates = []
    for i, name in enumerate(names):
        (tmp_path / str(i)).mkdir()
        candidates.append(candidate(tmp_path / str(i), name))
    code = whatif(str(tmp_path / "none-*.parquet"), tmp_path / "out", BASE, candidates)
    assert code == Exit.USAGE
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and names[-1] in error[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags", [("--baseline", "somewhere"), ("--accept_no_verdict",)])
def test_flags_of_score_a_whatif_does_not_take_are_refused(tmp_path, capsys, flags):
    code = whatif(str(tmp_path / "none-*.parquet"), tmp_path / "out", BASE, [candidate(tmp_path, "c")], *flags)
    assert code == Exit.USAGE
    assert flags[0] in capsys.readouterr().err


def summaries(seed: int, n: int) -> list:
    """`n` flip summaries of made-up calls, each flipped by one of two rules."""
    chooser = random.Random(seed)
    made = []
    for i in range(n):
        summary = new_summary()
        summary["calls"] = {"compared": 10, "flipped": 3}
        for j in range(3):
            rule = chooser.choice(["r1", "r2"])
            summary["by_rule"].setdefault(rule, {"to_deny": 0, "to_allow": 0})["to_deny"] += 1
            key = sample_key("run", f"t{i}", f"c{j}")
            summary["sample"].setdefault(rule, []).append((key, {"trajectory_id": f"t{i}", "call_id": f"c{j}"}))
        made.append(summary)
    return made


def test_flips_combine_the_same_on_every_merge_path():
    fn = FlipsCombineFn()
    parts = summaries(7, 9)
    one_by_one = fn.create_accumulator()
    for part in parts:
        one_by_one = fn.add_input(one_by_one, part)
    # Three accumulators merged, the last added to after its merge.
    thirds = []
    for chunk in (parts[:3], parts[3:6], parts[6:8]):
        accumulator = fn.create_accumulator()
        for part in chunk:
            accumulator = fn.add_input(accumulator, part)
        thirds.append(accumulator)
    merged = fn.add_input(fn.merge_accumulators(reversed(thirds)), parts[8])
    assert fn.extract_output(merged) == fn.extract_output(one_by_one)
    output = fn.extract_output(one_by_one)
    assert output["calls"] == {"compared": 90, "flipped": 27}
    assert sum(rule["to_deny"] for rule in output["by_rule"]) == 27
    every = {rule: sorted(key for part in parts for key, _ in part["sample"].get(rule, [])) for rule in ("r1", "r2")}
    for rule, cases in output["sample"].items():
        kept = [sample_key("run", case["trajectory_id"], case["call_id"]) for case in cases]
        assert kept == every[rule][:SAMPLE_PER_RULE]


@pytest.mark.slow
def test_a_batch_that_raises_is_kept_as_unscored_under_every_policy(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr("transforms.whatif.resolve_calls_under", broken)
    rows = [b.trajectory(f"t{i}", b.calls_of(("allow", b.commit()))) for i in range(3)]
    rows[1]["episode_outcome"] = "truncated"
    b.write_shard(tmp_path / "x.parquet", rows)
    code = whatif(str(tmp_path / "x.parquet"), tmp_path / "out", BASE, [candidate(tmp_path, "c")])
    assert code == Exit.INCOMPLETE_INPUT
    for name in ("policy", "c"):
        reasons = load_json(tmp_path / "out" / name / "metrics.json")["totals"]["trajectories"]["unscored_by_reason"]
        assert (reasons["pipeline_error"], reasons["truncated"]) == (2, 1)
