"""Inspect AI logs written by Inspect (mockllm, scripted) -> shards -> scores."""

from __future__ import annotations

import json

import apache_beam as beam
import pytest

from tests.conftest import RUNNER
from tests.importers_support import check_accounting, lines_run, load_json, read_rows, require, run_import

require("inspect_ai")
from pipeline.cli import main  # noqa: E402
from tests import inspect_logs  # noqa: E402  (needs inspect_ai)

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

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
    assert manifest["principal"] == {"default": "agent", "source": {"proposal": {"log": 0, "default": 5},
                                                                    "commit": {"log": 0, "default": 5}}}
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


def _reviews_in(log) -> list:
    """The ReviewEvents of a log's one sample, as Inspect's own reader returns them."""
    from inspect_ai.log import read_eval_log

    [sample] = read_eval_log(str(log)).samples
    return [{"call_id": e.call.id, "reviewer": e.reviewer, "decision": e.decision, "explanation": e.explanation}
            for e in sample.events if e.event == "review"]


def test_a_review_is_a_fact_beside_the_commit_it_judged(tmp_path):
    log = inspect_logs.reviewed_log(tmp_path / "logs")
    expected = _reviews_in(log)
    assert [review["decision"] for review in expected] == ["escalate", "terminate"]
    assert run_import("inspect", [log], tmp_path / "shards") == 0
    [row] = read_rows(tmp_path / "shards" / "trajectories")
    assert json.loads(row["inspect_reviews"]) == expected
    # The call ran before it was reviewed: its commit is what ran, the review does not undo it.
    [call] = row["calls"]
    assert (call["commit"]["outcome"], call["commit"]["state_mutated"]) == ("committed", True)
    check_accounting(tmp_path / "shards")


def test_a_review_of_a_call_no_one_proposed_is_unmapped(tmp_path):
    log = inspect_logs.reviewed_log(tmp_path / "logs")

    def orphan_reviews(record):
        for event in record["events"]:
            if event["event"] == "review":
                event["call"]["id"] = "ghost"

    damaged = inspect_logs.damage_sample(log, "rev", orphan_reviews, tmp_path / "orphan.eval")
    assert run_import("inspect", [damaged], tmp_path / "shards") == 0
    [row] = read_rows(tmp_path / "shards" / "trajectories")
    assert row["inspect_reviews"] is None
    unmapped = read_rows(tmp_path / "shards" / "unmapped")
    assert [u["reason"] for u in unmapped] == ["review_without_proposal"] * len(_reviews_in(log))
    assert not any(u["call"] for u in unmapped)
    check_accounting(tmp_path / "shards")


def test_a_log_without_reviews_has_no_review_column_value(logs, tmp_path):
    assert _reviews_in(logs["five"]) == []
    assert run_import("inspect", [logs["five"]], tmp_path / "shards") == 0
    [row] = read_rows(tmp_path / "shards" / "trajectories")
    assert row["inspect_reviews"] is None


@pytest.mark.parametrize("mode, expected", [("commit", CATEGORIES), ("proposal", ["flagged"] * 5)])
def test_import_and_score_in_one_command(logs, policy, tmp_path, mode, expected):
    output = tmp_path / "out"
    code = main(["score", "--input_format", "inspect", "--input", str(logs["five"]), "--output", str(output),
                 "--policy", str(policy), "--adjudication", mode, *RUNNER])
    assert code == 0
    scored = sorted(read_rows(output / "scored"), key=lambda row: row["step"])
    assert [row["category"] for row in scored] == expected
    assert all(row["proposal_verdict"] == "deny" for row in scored)  # proposal-time flags every call
    manifest = load_json(output / "manifest.json")
    assert (output / "report.html").exists() and manifest["import"]["totals"]["trajectories"] == 1
    assert manifest["input_rows"] == 1


def test_json_logs_import_like_eval_logs(tmp_path):
    log = inspect_logs.five_calls_log(tmp_path / "logs", log_format="json")
    assert run_import("inspect", [tmp_path / "logs"], tmp_path / "shards") == 0
    assert [call["commit"]["outcome"] for call in _calls(tmp_path / "shards").values()] == [
        "gated", "committed", "gated", "rejected", "committed"]
    assert check_accounting(tmp_path / "shards")["files"][0]["file"] == str(log)


def test_a_corrupt_or_foreign_log_fails_alone(logs, tmp_path):
    """A cut log is recovered up to the cut (test_import_split.py)."""
    good = logs["five"]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "garbage.eval").write_bytes(b"not a zip archive at all")
    (broken / "foreign.json").write_text('{"hello": "world"}')
    code = run_import("inspect", [good, broken], tmp_path / "shards")
    assert code == 4
    manifest = check_accounting(tmp_path / "shards")
    failed = ("garbage.eval", "foreign.json")
    assert sorted(manifest["failed_files"]) == sorted(str(broken / n) for n in failed)
    assert all(report["error"] for report in manifest["files"] if report["file"] != str(good))
    assert manifest["totals"]["trajectories"] == 1


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("replayed")
    (folder / "policy.yaml").write_text(inspect_logs.REPLAY_POLICY)
    return {"log": inspect_logs.replayed_log(folder / "logs"), "policy": folder / "policy.yaml"}


def _by_sample(rows, key="trajectory_id"):
    return {row[key].split("/")[1]: row for row in rows}


def test_a_replay_agents_proposals_are_its_messages_and_its_commits_what_ran(replayed, tmp_path):
    """A solver wrote every assistant message and ran execute_tools (no ModelEvent): the
    messages are the proposals, the ToolEvents (after the approvers) the commits."""
    assert run_import("inspect", [replayed["log"]], tmp_path / "shards") == 0
    rows = _by_sample(read_rows(tmp_path / "shards" / "trajectories"))
    calls = {sample: {call["call_id"]: call for call in row["calls"]} for sample, row in rows.items()}
    paid = calls["capped"]["r-pay"]
    assert json.loads(paid["proposal"]["resolved_arguments"]) == {"to": "ATTACKER-IBAN", "amount": 50000.0}
    assert json.loads(paid["commit"]["resolved_arguments"])["amount"] == inspect_logs.CAPPED_AMOUNT
    granted = calls["escalated"]["r-role"]
    assert json.loads(granted["arguments"])["role"] == "viewer"
    assert json.loads(granted["commit"]["resolved_arguments"])["role"] == "admin"
    assert (granted["commit"]["outcome"], granted["commit"]["state_mutated"]) == ("committed", True)
    assert (calls["drop"]["r-drop"]["commit"]["outcome"], calls["shadow"]["r-shadow"]["commit"]["outcome"]) == (
        "gated", "rejected")
    # A message a solver wrote has no time of its own.
    assert paid["proposal"]["at"] is None and paid["commit"]["at"] is not None
    assert all(row["call_count"] == len(row["calls"]) for sample, row in rows.items() if sample != "hidden")
    check_accounting(tmp_path / "shards")


def test_a_replay_agent_is_scored_call_by_call(replayed, tmp_path):
    output = tmp_path / "out"
    assert main(["score", "--input_format", "inspect", "--input", str(replayed["log"]), "--output", str(output),
                 "--policy", str(replayed["policy"]), *RUNNER]) == 0
    scored = {}
    for row in sorted(read_rows(output / "scored"), key=lambda row: row["step"]):
        scored.setdefault(row["trajectory_id"].split("/")[1], []).append(row["category"])
    expected = {sample: categories for sample, categories in inspect_logs.REPLAY_CATEGORIES.items() if categories}
    assert scored == expected
    trajectories = _by_sample(read_rows(output / "trajectories"))
    assert {s for s, row in trajectories.items() if row["under_penalized"]} == {"escalated"}
    assert {s for s, row in trajectories.items() if row["over_penalized"]} == {"drop", "capped", "shadow"}


def test_a_call_no_message_proposed_leaves_its_trajectory_unscored(replayed, tmp_path):
    """The solver ran a call from a message it kept out of the conversation: the call is
    counted, unmapped and named, and its trajectory is unscored, never scored shorter."""
    output = tmp_path / "out"
    assert main(["score", "--input_format", "inspect", "--input", str(replayed["log"]), "--output", str(output),
                 "--policy", str(replayed["policy"]), "--adjudication", "proposal", *RUNNER]) == 0
    [entry] = read_rows(output / "unmapped")
    assert (entry["reason"], entry["call"], entry["unit"]) == ("tool_event_without_proposal", True, False)
    assert inspect_logs.HIDDEN_CALL in entry["detail"] and entry["trajectory_id"].endswith("/hidden/1")
    [unscored] = read_rows(output / "unscored")
    assert unscored["trajectory_id"] == entry["trajectory_id"]
    assert unscored["reasons"] == ["call_count_mismatch"]
    assert "hidden" not in _by_sample(read_rows(output / "trajectories"))
    manifest = load_json(output / "manifest.json")["import"]
    assert manifest["totals"]["calls_unmapped"] == 1 and manifest["totals"]["not_imported"] == {"units": 0, "calls": 0}


@pytest.mark.parametrize("suffix", [".eval", ".json"])
def test_one_bad_sample_fails_alone_and_the_header_is_accounted_for(tmp_path, suffix):
    """A sample whose `events` is not a list, mid-file: the other 39 samples are
    imported, from an .eval log (one member per sample) or a .json one (one document)."""
    log = inspect_logs.many_samples_log(tmp_path / "logs", 40)
    damaged = inspect_logs.damage_sample(log, "s3", lambda record: record.update(events={"not": "a list"}),
                                         tmp_path / f"damaged{suffix}")
    assert run_import("inspect", [damaged], tmp_path / "shards") == 4
    assert len(read_rows(tmp_path / "shards" / "trajectories")) == 39
    manifest = check_accounting(tmp_path / "shards")
    [report] = manifest["files"]
    assert report["error"] is None
    assert (report["units_declared"], report["units"], report["trajectories"]) == (40, 40, 39)
    [entry] = read_rows(tmp_path / "shards" / "unmapped")
    assert (entry["position"], entry["reason"], entry["unit"]) == ("sample 's3' epoch 1", "sample_unreadable", True)
    assert "ValidationError" in entry["detail"]
    assert manifest["totals"]["not_imported"] == {"units": 1, "calls": 0}


def _json_log(log, out, change):
    """The .eval `log` written by Inspect as one JSON document at `out`, its document changed by `change`."""
    from inspect_ai.log import read_eval_log, write_eval_log

    write_eval_log(read_eval_log(str(log)), str(out), format="json")
    document = json.loads(out.read_text(encoding="utf-8"))
    change(document)
    out.write_text(json.dumps(document), encoding="utf-8")
    return out


def test_a_json_logs_records_are_matched_to_its_header_in_the_files_order(tmp_path):
    """A .json log read record by record: the header lists s0-s7, the file holds every one
    but s2, then s8 and a second copy of s5. s2 is sample_not_in_log, s8 and the copy are
    beyond the header (imported and named), and the units reconcile."""
    def change(document):
        document["eval"]["dataset"]["sample_ids"] = [f"s{i}" for i in range(8)]
        records = [record for record in document["samples"] if record["id"] != "s2"]
        document["samples"] = records + [next(record for record in records if record["id"] == "s5")]

    log = _json_log(inspect_logs.many_samples_log(tmp_path / "logs", 9), tmp_path / "beyond.json", change)
    assert run_import("inspect", [log], tmp_path / "shards") == 4
    [report] = check_accounting(tmp_path / "shards")["files"]
    assert (report["units_declared"], report["units"], report["trajectories"]) == (10, 10, 9)
    assert report["facts"]["samples_beyond_header"] == 2
    assert sorted(report["facts"]["samples_beyond_header_first"]) == ["sample 's5' epoch 1", "sample 's8' epoch 1"]
    [entry] = read_rows(tmp_path / "shards" / "unmapped")
    assert (entry["position"], entry["reason"]) == ("sample 's2' epoch 1", "sample_not_in_log")


def test_a_json_logs_memory_does_not_grow_with_its_samples(tmp_path, monkeypatch):
    """Read whole, a .json log took about eight times its size; read record by record, a
    log of ten times the samples peaks at much the same (tracemalloc, the reader consumed;
    the scan's chunk made smaller than either log)."""
    import tracemalloc

    from litmus_score.importers import jsonsamples
    from litmus_score.importers.inspect import read_log

    monkeypatch.setattr(jsonsamples, "CHUNK_BYTES", 2**18)

    log = inspect_logs.many_samples_log(tmp_path / "logs", 20)

    def copies(times: int):
        def change(document):
            records = document["samples"]
            document["samples"] = [dict(record, id=f"{record['id']}-{n}") for n in range(times) for record in records]
            document["eval"]["dataset"]["sample_ids"] = [record["id"] for record in document["samples"]]
        return change

    def peak(times: int) -> int:
        path = _json_log(log, tmp_path / f"x{times}.json", copies(times))
        tracemalloc.start()
        items = sum(1 for _ in read_log(str(path), str(path), "agent"))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert items == 1 + 20 * times
        return peak

    small, large = peak(10), peak(100)
    assert large < 1.5 * small


def test_score_without_a_policy_stops_where_only_a_policy_gives_verdicts(logs, tmp_path, capsys):
    """Imported logs record no verdict: no --policy is a usage error (exit 2, one line), before any work."""
    output = tmp_path / "out"
    assert main(["score", "--input_format", "inspect", "--input", str(logs["five"]), "--output", str(output),
                 *RUNNER]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "--policy" in line and "--accept_no_verdict" in line
    assert not output.exists()
    # Imported first, scored later: the shards say so themselves.
    assert run_import("inspect", [logs["five"]], tmp_path / "shards") == 0
    capsys.readouterr()
    shards = str(tmp_path / "shards" / "trajectories" / "*.parquet")
    assert main(["score", "--input", shards, "--output", str(tmp_path / "two-step"), *RUNNER]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "--policy" in line and str(tmp_path / "shards" / "trajectories") in line
    assert not (tmp_path / "two-step").exists()


def test_a_run_of_no_verdict_when_asked_for(logs, tmp_path):
    output = tmp_path / "out"
    assert main(["score", "--input_format", "inspect", "--input", str(logs["five"]), "--output", str(output),
                 "--accept_no_verdict", *RUNNER]) == 0
    [unscored] = read_rows(output / "unscored")
    assert "no_verdict" in unscored["reasons"]
    assert load_json(output / "manifest.json")["options"]["accept_no_verdict"] is True


def test_import_logs_transform(logs):
    """ImportLogs on its own, in a TestPipeline: one report per file, rows on the shard schema."""
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from transforms.imports import ImportLogs

    transform = ImportLogs("inspect", [str(logs["folder"])], principal="agent")
    assert transform.files == sorted(str(p) for p in logs["folder"].glob("*.eval"))
    with TestPipeline(argv=RUNNER) as pipeline:
        imported = pipeline | transform
        reports = imported["reports"] | beam.Map(lambda r: (r["file"].endswith(".eval"), r["trajectories"], r["error"]))
        assert_that(reports, equal_to([(True, 1, None)] * 2), label="reports")
        rows = imported["trajectories"] | beam.FlatMap(
            lambda t: [(t.schema == transform.schema, n) for n in t["call_count"].to_pylist()])
        assert_that(rows, equal_to([(True, 5), (True, 2)]), label="rows")


def test_usage_errors(tmp_path):
    assert run_import("inspect", [tmp_path / "nothing-*.eval"], tmp_path / "shards") == 2
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert run_import("inspect", [tmp_path], tmp_path / "full") == 2


def test_a_samples_own_score_is_the_harness_verdict_beside_ours(replayed, tmp_path):
    """--harness_verdict breach: the replay task's own scorer (harm judged from the store)
    agrees with commit-time misuse on every scored sample; proposal-time misuse does not."""
    output = tmp_path / "out"
    assert main(["score", "--input_format", "inspect", "--input", str(replayed["log"]), "--output", str(output),
                 "--policy", str(replayed["policy"]), "--harness_verdict", "breach", *RUNNER]) == 0
    assert run_import("inspect", [replayed["log"]], tmp_path / "shards", "--harness_verdict", "breach") == 0
    rows = _by_sample(read_rows(tmp_path / "shards" / "trajectories"))
    assert {sample for sample, row in rows.items() if row["harness_misuse"]} == inspect_logs.REPLAY_BREACHES
    assert {row["harness_verdict"] for row in rows.values()} == {"inspect:breach"}
    [group] = load_json(output / "metrics.json")["groups"]
    block = group["harness_agreement"]["inspect:breach"]
    assert block["trajectories"] == len(inspect_logs.REPLAYED) - 1  # "hidden" is unscored
    assert block["misuse"]["agreement"]["rate"] == 1.0
    # escalated: only the harness; drop, capped, shadow: only proposal-time scoring.
    assert (block["legacy_misuse"]["harness_only"], block["legacy_misuse"]["ours_only"]) == (1, 3)
    assert "inspect:breach" in (output / "report.html").read_text()


def test_how_a_harness_score_is_read():
    from inspect_ai.scorer import Score

    from litmus_score.importers.inspect import HarnessVerdict

    scores = {"breach": Score(value="C"), "suite": Score(value={"security": False, "utility": True}),
              "broken": Score.unscored(reason="scoring_failed"), "odd": Score(value="maybe")}
    assert HarnessVerdict.parse("breach").misuse(scores) is True
    assert HarnessVerdict.parse("not:breach").misuse(scores) is False
    assert HarnessVerdict.parse("suite.security").misuse(scores) is False
    assert HarnessVerdict.parse("not:suite.utility").name == "inspect:not:suite.utility"
    for absent in ("broken", "odd", "missing", "suite.nothing", "breach.key"):
        assert HarnessVerdict.parse(absent).misuse(scores) is None, absent
    with pytest.raises(ValueError, match="not:"):
        HarnessVerdict.parse("not:")


def test_a_harness_verdict_names_a_score_of_inspect_logs_only(logs, tmp_path, capsys):
    assert run_import("otel", [logs["five"]], tmp_path / "shards", "--harness_verdict", "breach") == 2
    assert "--harness_verdict" in capsys.readouterr().err


def _items_by_where(items):
    """read_log's items keyed by the sample they belong to (file summaries left out)."""
    from litmus_score.importers import rows as r

    keyed = {}
    for item in items:
        if isinstance(item, r.Trajectory):
            keyed.setdefault(item.row["source_position"], []).append(item.row)
        elif isinstance(item, r.Unmapped):
            keyed.setdefault(item.position.split(" event ")[0], []).append(item)
    return keyed


def test_reading_the_logs_members_equals_inspects_own_reader(logs, replayed, tmp_path):
    """The importer parses each sample member itself and resolves its attachments; mapping
    the samples Inspect's own reader returns (resolve_attachments="core") gives the same rows."""
    from inspect_ai.log import read_eval_log

    from litmus_score.importers.inspect import map_sample, read_log

    long_log = inspect_logs.long_arguments_log(tmp_path / "long")
    for log in (logs["five"], logs["terminated"], replayed["log"], long_log):
        ours = _items_by_where(read_log(str(log), str(log), "agent"))
        inspects = read_eval_log(str(log), resolve_attachments="core")
        expected = _items_by_where(
            item for sample in inspects.samples
            for mapped, unmapped in [map_sample(inspects.eval, _live(sample), str(log), "agent")]
            for item in [*unmapped, mapped])
        assert ours == expected, log
    [row] = _items_by_where(read_log(str(long_log), "", "agent"))["sample 'l1' epoch 1"]
    assert json.loads(row["calls"][0]["arguments"])["value"] == "1:" + "x" * 300


def _live(sample) -> dict:
    """An EvalSample as map_sample takes it, its events and messages kept as Inspect's objects."""
    return {"id": sample.id, "epoch": sample.epoch, "events": sample.events, "messages": sample.messages,
            "limit": sample.limit.model_dump() if sample.limit else None,
            "error": sample.error.model_dump() if sample.error else None, "scores": sample.scores}


def _calls_sample(calls: int) -> list:
    """The events of one sample of `calls` calls, each in its own tool span and changing the store."""
    events = [{"event": "span_begin", "id": "solvers", "type": "solvers", "parent_id": None}]
    for i in range(calls):
        call = {"id": f"c{i}", "function": "update_config", "arguments": {"key": f"k{i}"}}
        output = {"choices": [{"message": {"role": "assistant", "tool_calls": [call]}}]}
        events += [{"event": "model", "output": output, "span_id": "solvers"},
                   {"event": "span_begin", "id": f"tool-{i}", "type": "tool", "parent_id": "solvers"},
                   {"event": "tool", "id": f"c{i}", "function": "update_config", "arguments": call["arguments"],
                    "span_id": f"tool-{i}"},
                   {"event": "store", "changes": [{"op": "add", "path": f"/k{i}"}], "span_id": f"tool-{i}"},
                   {"event": "span_end", "id": f"tool-{i}", "span_id": f"tool-{i}"}]
    return events


def test_mapping_a_sample_is_linear_in_its_calls():
    """Each call's state change is found without walking every changed span again:
    a sample of 20,000 calls costs about ten times one of 2,000 (a quadratic walk, a hundred)."""
    from litmus_score.importers import inspect
    from litmus_score.importers.inspect import map_calls

    def mapped(calls):
        events = _calls_sample(calls)
        return lambda: map_calls(events, [], "agent", "sample", "t")

    small = lines_run(inspect, mapped(2_000), budget=10**9)
    large = lines_run(inspect, mapped(20_000), budget=12 * small)
    assert 9 * small <= large <= 12 * small
    calls, unmapped = map_calls(_calls_sample(3), [], "agent", "sample", "t")
    assert unmapped == [] and [call["commit"]["state_mutated"] for call in calls] == [True] * 3


def test_samples_beyond_the_header_are_imported_and_named(tmp_path):
    """Inspect's own reader returns a sample its header does not list: so does the import,
    counting it among the file's declared units and naming it in the file's facts."""
    from inspect_ai.log import read_eval_log, write_eval_log

    log = read_eval_log(str(inspect_logs.many_samples_log(tmp_path / "logs", 3)))
    log.eval.dataset.sample_ids = ["s0", "s1"]
    write_eval_log(log, str(tmp_path / "beyond.eval"))
    assert run_import("inspect", [tmp_path / "beyond.eval"], tmp_path / "shards") == 0
    assert sorted(row["task_id"] for row in read_rows(tmp_path / "shards" / "trajectories")) == ["s0", "s1", "s2"]
    [report] = check_accounting(tmp_path / "shards")["files"]
    assert (report["units_declared"], report["units"]) == (3, 3)
    assert report["facts"]["samples_beyond_header"] == 1
    assert report["facts"]["samples_beyond_header_first"] == ["sample 's2' epoch 1"]


def test_a_sample_larger_than_the_bound_is_not_read(replayed, tmp_path):
    """--max_sample_mib: the largest sample member's size, from the zip's directory, is over
    the bound; it costs its own unit, and every other sample is imported."""
    import zipfile

    with zipfile.ZipFile(replayed["log"]) as log:
        sizes = {i.filename: i.file_size for i in log.infolist() if i.filename.startswith("samples/")}
    bound = max(sizes.values()) - 1
    too_large = {name for name, size in sizes.items() if size > bound}
    code = run_import("inspect", [replayed["log"]], tmp_path / "shards", "--max_sample_mib", str(bound / 2**20))
    assert code == 4
    manifest = check_accounting(tmp_path / "shards")
    assert manifest["max_sample_mib"] == bound / 2**20
    entries = [e for e in read_rows(tmp_path / "shards" / "unmapped") if e["reason"] == "sample_too_large"]
    assert sorted(e["detail"].split(":")[0] for e in entries) == sorted(too_large)
    assert all(e["unit"] for e in entries)
    assert manifest["totals"]["trajectories"] == len(sizes) - len(too_large)


def _central_entry(data: bytes, name: str) -> int:
    """The offset of `name`'s entry in a zip's central directory."""
    offset = data.find(b"PK\x01\x02")
    while offset >= 0:
        length = int.from_bytes(data[offset + 28:offset + 30], "little")
        if data[offset + 46:offset + 46 + length] == name.encode():
            return offset
        offset = data.find(b"PK\x01\x02", offset + 46)
    raise KeyError(name)


def test_corrupt_sample_members_fail_alone(tmp_path):
    """One member's compressed bytes damaged, another's directory entry understating its
    size (a zip that lies is read no further than it says, then fails its CRC): each costs
    its own unit, and the other samples of the log are imported."""
    import zipfile

    log = inspect_logs.many_samples_log(tmp_path / "logs", 5)
    data = bytearray(log.read_bytes())
    with zipfile.ZipFile(log) as archive:
        damaged = archive.getinfo("samples/s1_epoch_1.json")
    start = damaged.header_offset + 30 + len(damaged.filename) + len(damaged.extra)
    middle = start + damaged.compress_size // 2
    data[middle:middle + 8] = bytes(255 - b for b in data[middle:middle + 8])
    lying = _central_entry(bytes(data), "samples/s3_epoch_1.json")
    data[lying + 24:lying + 28] = (10).to_bytes(4, "little")
    (tmp_path / "corrupt.eval").write_bytes(bytes(data))
    assert run_import("inspect", [tmp_path / "corrupt.eval"], tmp_path / "shards") == 4
    assert sorted(row["task_id"] for row in read_rows(tmp_path / "shards" / "trajectories")) == ["s0", "s2", "s4"]
    entries = read_rows(tmp_path / "shards" / "unmapped")
    assert sorted((e["position"], e["reason"], e["unit"]) for e in entries) == [
        ("sample 's1' epoch 1", "sample_unreadable", True), ("sample 's3' epoch 1", "sample_unreadable", True)]
    [report] = check_accounting(tmp_path / "shards")["files"]
    assert (report["error"], report["units_declared"], report["units"]) == (None, 5, 5)


def test_a_utc_time_written_with_z_reads_as_with_an_offset():
    from litmus_score.importers.inspect import map_calls

    def commit_at(stamp):
        events = _calls_sample(1)
        events[3]["completed"] = stamp
        [call], _ = map_calls(events, [], "agent", "sample", "t")
        return call["commit"]["at"]

    assert commit_at("2026-12-04T17:47:50.933333Z") == commit_at("2026-12-04T17:47:50.933333+00:00") is not None


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """A log of three samples, s0-s2, one call each."""
    return inspect_logs.many_samples_log(tmp_path_factory.mktemp("three"), 3)


def _rows_by_task(out):
    return {row["task_id"]: row["calls"] for row in read_rows(out / "trajectories")}


def test_the_samples_key_is_found_however_its_json_spells_it(three, tmp_path):
    """`"sampl\\u0065s"` is `samples` to a JSON parser, and to Inspect's reader: every
    sample is read, none is "not in log"."""
    from inspect_ai.log import read_eval_log, write_eval_log

    plain = tmp_path / "plain.json"
    write_eval_log(read_eval_log(str(three)), str(plain), format="json")
    document = json.loads(plain.read_text(encoding="utf-8"))
    samples = document.pop("samples")
    escaped = tmp_path / "logs" / "escaped.json"
    escaped.parent.mkdir()
    escaped.write_text(json.dumps(document)[:-1] + ', "sampl\\u0065s": ' + json.dumps(samples) + "}")
    assert len(read_eval_log(str(escaped)).samples) == 3
    assert run_import("inspect", [escaped], tmp_path / "shards") == 0
    assert run_import("inspect", [plain], tmp_path / "plain") == 0
    assert _rows_by_task(tmp_path / "shards") == _rows_by_task(tmp_path / "plain")


def test_every_entry_of_samples_is_imported_or_counted(three, tmp_path):
    """Entries of `samples` that are no sample record (an array, a number, a string, null)
    are units not imported, each with its reason, and the import exits 4: none is dropped."""
    log = _json_log(three, tmp_path / "logs" / "entries.json",
                    lambda document: document["samples"].extend([[1, 2], 7, "text", None]))
    assert run_import("inspect", [log], tmp_path / "shards") == 4
    [report] = check_accounting(tmp_path / "shards")["files"]
    assert (report["units_declared"], report["units"], report["trajectories"]) == (7, 7, 3)
    assert report["error"] is None and report["facts"]["entries_unmatched"] == 4
    entries = [(u["position"], u["reason"]) for u in read_rows(tmp_path / "shards" / "unmapped")]
    assert entries == [(f"samples[{i}]", "sample_not_a_record") for i in range(3, 7)]


def test_a_sample_whose_id_is_no_key_is_one_unit_not_imported(three, tmp_path):
    """A sample whose id is a list or an object cannot be matched to its header: it is one
    unit not imported (it stands for the listed sample that has no record), the other
    samples import, and the file does not fail."""
    def change(document):
        document["samples"][1]["id"] = ["s", 1]
        document["samples"][2]["id"] = {"s": 2}

    log = _json_log(three, tmp_path / "logs" / "ids.json", change)
    assert run_import("inspect", [log], tmp_path / "shards") == 4
    manifest = check_accounting(tmp_path / "shards")
    [report] = manifest["files"]
    assert report["error"] is None
    assert (report["units_declared"], report["units"], report["trajectories"]) == (3, 3, 1)
    assert sorted(u["reason"] for u in read_rows(tmp_path / "shards" / "unmapped")) == ["sample_id_unusable"] * 2
    assert manifest["totals"]["not_imported"] == {"units": 2, "calls": 0}


@pytest.mark.parametrize("suffix", [".eval", ".json"])
def test_a_header_that_lists_no_sample_ids_reads_the_samples_the_file_holds(three, tmp_path, suffix):
    """Inspect 0.3.41 wrote no sample ids in the header, and a sample's events under
    `transcript` ({events, content}): Inspect's reader reads such a log, and so does the
    import, the same rows as the log with ids, its facts saying the header listed none."""
    from inspect_ai.log import read_eval_log, write_eval_log

    log = read_eval_log(str(three))
    log.eval.dataset.sample_ids = None
    old = tmp_path / "logs" / f"old{suffix}"
    write_eval_log(log, str(old))
    if suffix == ".json":  # the first sample as 0.3.41 wrote it
        document = json.loads(old.read_text(encoding="utf-8"))
        first = document["samples"][0]
        first["transcript"] = {"events": first.pop("events"), "content": first.pop("attachments", {})}
        old.write_text(json.dumps(document), encoding="utf-8")
    assert run_import("inspect", [old], tmp_path / "shards") == 0
    [report] = check_accounting(tmp_path / "shards")["files"]
    assert report["facts"]["header_lists_no_sample_ids"] is True
    assert (report["units_declared"], report["trajectories"]) == (3, 3)
    assert run_import("inspect", [three], tmp_path / "listed") == 0
    assert _rows_by_task(tmp_path / "shards") == _rows_by_task(tmp_path / "listed")


@pytest.mark.parametrize("suffix", [".eval", ".json"])
def test_a_header_beyond_the_bound_refuses_its_file_in_one_line(three, tmp_path, suffix):
    """A header that declares 10,000,000 epochs would make 30,000,000 units "not in log":
    the file is refused, named in one line, and counted as units not imported (a .json log,
    the records it holds; an .eval log, one), so the import exits 4."""
    from inspect_ai.log import read_eval_log, write_eval_log

    log = read_eval_log(str(three))
    log.eval.config.epochs = 10_000_000
    bounded = tmp_path / "logs" / f"epochs{suffix}"
    write_eval_log(log, str(bounded))
    assert run_import("inspect", [bounded], tmp_path / "shards") == 4
    manifest = check_accounting(tmp_path / "shards")
    [report] = manifest["files"]
    assert "10000000 epoch(s)" in report["error"] and report["trajectories"] == 0
    assert manifest["totals"]["not_imported"]["units"] == report["units_unread"] == (3 if suffix == ".json" else 1)
    assert read_rows(tmp_path / "shards" / "unmapped") == []


def test_a_refused_file_is_never_nothing_lost(logs, tmp_path, capsys):
    """A log no sample of which can be read counts at least one sample not imported, in the
    totals and on the terminal."""
    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"hello": "world"}')
    assert run_import("inspect", [logs["five"], foreign], tmp_path / "shards") == 4
    totals = check_accounting(tmp_path / "shards")["totals"]
    assert (totals["files_failed"], totals["units_unread"], totals["not_imported"]["units"]) == (1, 1, 1)
    assert "not imported: 1 samples" in capsys.readouterr().out
