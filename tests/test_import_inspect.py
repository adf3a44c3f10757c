"""Inspect AI logs written by Inspect (mockllm, scripted) -> shards -> scores."""

from __future__ import annotations

import json

import apache_beam as beam
import pytest

from tests.conftest import RUNNER
from tests.importers_support import check_accounting, load_json, read_rows, require, run_import

require("inspect_ai")
from tests import inspect_logs  # noqa: E402  (needs inspect_ai)

from pipeline.cli import main  # noqa: E402

CATEGORIES = ["blocked_attempt", "deescalated", "blocked_attempt", "blocked_attempt", "misuse"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inspect-logs")
    return {"five": inspect_logs.five_calls_log(folder), "terminated": inspect_logs.terminated_log(folder),
            "folder": folder}


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    path = tmp_path_factory.mktemp("policy") / "policy.yaml"
    path.write_text(inspect_logs.POLICY)
    return path


def _calls(output):
    return {call["call_id"]: call for row in read_rows(output / "trajectories") for call in row["calls"]}


def test_proposal_is_the_models_call_and_commit_what_ran(logs, tmp_path):
    assert run_import("inspect", [logs["five"]], tmp_path / "shards") == 0
    calls = _calls(tmp_path / "shards")
    transfer = calls["call-2"]
    # The ToolEvent holds the approver's modified call; the proposal is the model's.
    assert json.loads(transfer["arguments"]) == inspect_logs.ATTACKER_TRANSFER
    assert json.loads(transfer["proposal"]["resolved_arguments"]) == inspect_logs.ATTACKER_TRANSFER
    assert json.loads(transfer["commit"]["resolved_arguments"]) == {
        **inspect_logs.ATTACKER_TRANSFER, "amount": inspect_logs.CAPPED_AMOUNT}
    outcomes = {cid: (call["commit"]["outcome"], call["commit"]["state_mutated"]) for cid, call in calls.items()}
    assert outcomes == {
        "call-1": ("gated", False),  # rejected by the approver: never ran
        "call-2": ("committed", None),  # ran; nothing in the log shows its state
        "call-3": ("gated", False),  # escalated, then rejected
        "call-4": ("rejected", None),  # PermissionError
        "call-5": ("committed", True),  # a store change inside the tool's span
    }
    for call in calls.values():
        # No verdict is recorded anywhere: the policy decides.
        assert call["proposal"]["policy_verdict"] is None and call["commit"]["policy_verdict"] is None
        assert call["proposal"]["principal"] == call["commit"]["principal"] == "agent"
    manifest = check_accounting(tmp_path / "shards")
    assert manifest["principal"] == {"default": "agent", "source": {"log": 0, "default": 5}}
    assert manifest["library"] == {"name": "inspect-ai", "version": "0.3.285"}
    assert manifest["observes"]["calls.proposal.policy_verdict"] is None


def test_a_call_that_never_reached_the_runtime_has_no_commit(logs, tmp_path):
    assert run_import("inspect", [logs["terminated"]], tmp_path / "shards", "--principal", "ops-bot") == 0
    calls = _calls(tmp_path / "shards")
    assert calls["term-1"]["commit"]["outcome"] == "gated"
    assert calls["term-2"]["commit"] is None
    assert calls["term-2"]["proposal"]["principal"] == "ops-bot"
    [row] = read_rows(tmp_path / "shards" / "trajectories")
    assert row["inspect_limit"] == "operator"
    check_accounting(tmp_path / "shards")


@pytest.mark.parametrize("mode, expected", [("commit", CATEGORIES), ("proposal", ["flagged"] * 5)])
def test_import_and_score_in_one_command(logs, policy, tmp_path, mode, expected):
    output = tmp_path / "out"
    code = main(["score", "--input-format", "inspect", "--input", str(logs["five"]), "--output", str(output),
                 "--policy", str(policy), "--adjudication", mode, *RUNNER])
    assert code == 0
    scored = sorted(read_rows(output / "scored"), key=lambda row: row["step"])
    assert [row["category"] for row in scored] == expected
    assert all(row["proposal_verdict"] == "deny" for row in scored)  # proposal-time flags every call
    assert (output / "report.html").exists() and (output / "imported" / "import-manifest.json").exists()
    assert load_json(output / "manifest.json")["input_rows"] == 1


def test_json_logs_import_like_eval_logs(tmp_path):
    log = inspect_logs.five_calls_log(tmp_path / "logs", log_format="json")
    assert run_import("inspect", [tmp_path / "logs"], tmp_path / "shards") == 0
    assert [call["commit"]["outcome"] for call in _calls(tmp_path / "shards").values()] == [
        "gated", "committed", "gated", "rejected", "committed"]
    assert check_accounting(tmp_path / "shards")["files"][0]["file"] == str(log)


def test_a_corrupt_or_truncated_log_fails_alone(logs, tmp_path):
    good = logs["five"]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "garbage.eval").write_bytes(b"not a zip archive at all")
    data = good.read_bytes()
    (broken / "truncated.eval").write_bytes(data[: len(data) // 2])
    (broken / "foreign.json").write_text('{"hello": "world"}')
    code = run_import("inspect", [good, broken], tmp_path / "shards")
    assert code == 4
    manifest = check_accounting(tmp_path / "shards")
    assert sorted(manifest["failed_files"]) == sorted(str(broken / n) for n in ("garbage.eval", "truncated.eval", "foreign.json"))
    assert all(report["error"] for report in manifest["files"] if report["file"] != str(good))
    assert manifest["totals"]["trajectories"] == 1


def test_a_tool_no_model_proposed_is_unmapped_not_invented(tmp_path):
    log = inspect_logs.solver_call_log(tmp_path / "logs")
    assert run_import("inspect", [log], tmp_path / "shards") == 0
    [row] = read_rows(tmp_path / "shards" / "trajectories")
    assert row["calls"] == []
    [entry] = read_rows(tmp_path / "shards" / "unmapped")
    assert entry["reason"] == "tool_event_without_proposal" and entry["file"] == str(log)
    assert "by-solver" in entry["detail"] and entry["unit"] is False
    assert check_accounting(tmp_path / "shards")["totals"]["unmapped_by_reason"] == {"tool_event_without_proposal": 1}


def test_import_logs_transform(logs):
    """ImportLogs on its own, in a TestPipeline: one report per file, rows on the shard schema."""
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from litmus_score.importers.pipeline import ImportLogs

    transform = ImportLogs("inspect", [str(logs["folder"])], principal="agent")
    assert transform.files == sorted(str(p) for p in logs["folder"].glob("*.eval"))
    with TestPipeline(argv=RUNNER) as pipeline:
        imported = pipeline | transform
        reports = imported["reports"] | beam.Map(lambda r: (r["file"].endswith(".eval"), r["trajectories"], r["error"]))
        assert_that(reports, equal_to([(True, 1, None)] * 2), label="reports")
        rows = imported["trajectories"] | beam.FlatMap(lambda t: [(t.schema == transform.schema, n) for n in t["call_count"].to_pylist()])
        assert_that(rows, equal_to([(True, 5), (True, 2)]), label="rows")


def test_usage_errors(tmp_path):
    assert run_import("inspect", [tmp_path / "nothing-*.eval"], tmp_path / "shards") == 2
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert run_import("inspect", [tmp_path], tmp_path / "full") == 2
