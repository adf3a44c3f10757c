"""Inspect Scout transcript databases, built by Scout from Inspect logs and a
Claude Code session written here -> shards -> scores."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import RUNNER
from tests.importers_support import check_accounting, load_json, read_rows, require, run_import

require("inspect_ai")
require("inspect_scout")
from inspect_ai.log import read_eval_log  # noqa: E402

from pipeline.cli import main  # noqa: E402
from tests import inspect_logs, scout_dbs  # noqa: E402  (need inspect_ai, inspect_scout)

pytestmark = pytest.mark.slow

# The contract fields of a trajectory that do not name where it was read from.
SAME_FIELDS = ("agent", "task_id", "task_category", "episode_outcome", "verbal_stance", "call_count", "calls")
LONG_VALUE = "x" * 500  # long enough that Inspect keeps it as an attachment in the log


@pytest.fixture(scope="module")
def inspect_source(tmp_path_factory):
    """Inspect logs (approvals, a modified call, errors, store changes, a
    terminated sample, a replay agent) and the Scout database Scout builds from them."""
    folder = tmp_path_factory.mktemp("scout-inspect")
    logs = folder / "logs"
    inspect_logs.five_calls_log(logs)
    inspect_logs.terminated_log(logs)
    inspect_logs.replayed_log(logs)
    scout_dbs.long_argument_log(logs, LONG_VALUE)
    (folder / "policy.yaml").write_text(inspect_logs.POLICY)
    return {"logs": logs, "db": scout_dbs.from_inspect_logs(logs, folder / "db"), "policy": folder / "policy.yaml"}


def _by_task(folder):
    return {row["task_id"]: row for row in read_rows(folder / "trajectories")}


def test_a_database_of_inspect_logs_imports_as_the_logs_do(inspect_source, tmp_path):
    assert run_import("scout", [inspect_source["db"]], tmp_path / "scout") == 0
    assert run_import("inspect", [inspect_source["logs"]], tmp_path / "inspect") == 0
    from_scout, from_logs = _by_task(tmp_path / "scout"), _by_task(tmp_path / "inspect")
    assert from_scout.keys() == from_logs.keys()
    for task_id, row in from_logs.items():
        assert {f: from_scout[task_id][f] for f in SAME_FIELDS} == {f: row[f] for f in SAME_FIELDS}, task_id
    # Scout keeps no run id: run_id is the eval's id (Scout's source_id).
    eval_ids = {row["task_id"]: row["trajectory_id"].split("/")[0] for row in from_logs.values()}
    assert {task_id: row["run_id"] for task_id, row in from_scout.items()} == eval_ids
    [long_call] = from_scout["long"]["calls"]
    assert json.loads(long_call["commit"]["resolved_arguments"])["value"] == LONG_VALUE
    manifest = check_accounting(tmp_path / "scout")
    assert manifest["units"] == "transcripts" and manifest["library"]["name"] == "inspect-scout"
    assert manifest["totals"]["unmapped_by_reason"] == load_json(
        tmp_path / "inspect" / "import-manifest.json")["totals"]["unmapped_by_reason"]


def test_a_database_of_inspect_logs_scores_as_the_logs_do(inspect_source, tmp_path):
    def score(input_format, source, output):
        return main(["score", "--input_format", input_format, "--input", str(source), "--output", str(output),
                     "--policy", str(inspect_source["policy"]), *RUNNER])

    assert score("scout", inspect_source["db"], tmp_path / "scout") == score(
        "inspect", inspect_source["logs"], tmp_path / "inspect") == 0
    from_scout, from_logs = load_json(tmp_path / "scout" / "metrics.json"), load_json(
        tmp_path / "inspect" / "metrics.json")
    # The one difference: a group's run_id is the eval's id, and groups are sorted by it.
    eval_id = {}
    for log in inspect_source["logs"].glob("*.eval"):
        spec = read_eval_log(str(log), header_only=True).eval
        eval_id[spec.run_id] = spec.eval_id
    for group in from_logs["groups"]:
        group["run_id"] = eval_id[group["run_id"]]
    from_logs["groups"].sort(key=lambda group: (group["run_id"], group["agent"]))
    # And the inputs: one database, the logs it was built from one file each.
    assert (from_scout["inputs"]["files"], from_logs["inputs"]["files"]) == (1, len(eval_id))
    from_logs["inputs"]["files"] = 1
    assert from_scout == from_logs


def test_a_claude_code_session_keeps_its_calls_results_and_errors(tmp_path):
    session = scout_dbs.claude_code_session(tmp_path / "sessions")
    db = scout_dbs.from_claude_code(session, tmp_path / "db")
    assert run_import("scout", [db], tmp_path / "shards", "--principal", "dev-laptop") == 0
    [row] = read_rows(tmp_path / "shards" / "trajectories")
    assert (row["run_id"], row["agent"], row["scout_source_type"]) == (
        scout_dbs.SESSION_ID, scout_dbs.MODEL, "claude_code")
    expected = {}
    for tool_id, tool, arguments, result, is_error in scout_dbs.SESSION_CALLS:
        # No result recorded: no commit. An error result is an error (Scout keeps no cause).
        expected[tool_id] = (tool, arguments, None if result is None else "error" if is_error else "committed")
    assert {call["call_id"]: (call["tool"], json.loads(call["arguments"]),
                              call["commit"] and call["commit"]["outcome"]) for call in row["calls"]} == expected
    # Scout keeps no acting identity: the default is every principal.
    assert {call["proposal"]["principal"] for call in row["calls"]} == {"dev-laptop"}
    [missing] = read_rows(tmp_path / "shards" / "unmapped")
    assert missing["reason"] == "tool_result_not_recorded" and not missing["unit"]
    check_accounting(tmp_path / "shards")


def test_a_foreign_file_and_a_corrupt_transcript_fail_alone(inspect_source, tmp_path):
    [table_path] = inspect_source["db"].glob("*.parquet")
    table = pq.read_table(table_path)
    db = tmp_path / "db"
    db.mkdir()
    # One transcript's events are not JSON; the others are intact.
    events = table.column("events").to_pylist()
    broken = table.column("transcript_id")[0].as_py()
    table = table.set_column(table.schema.get_field_index("events"), "events",
                             pa.array(["{not json", *events[1:]], table.schema.field("events").type))
    pq.write_table(table, db / "transcripts.parquet")
    pq.write_table(pa.table({"id": ["a"]}), db / "foreign.parquet")
    assert run_import("scout", [db], tmp_path / "shards") == 4
    manifest = check_accounting(tmp_path / "shards")
    assert manifest["failed_files"] == [str(db / "foreign.parquet")]
    assert "transcript_id" in manifest["files"][0]["error"]
    [unmapped] = [u for u in read_rows(tmp_path / "shards" / "unmapped") if u["unit"]]
    assert unmapped["reason"] == "transcript_not_mapped" and broken in unmapped["position"]
    assert manifest["totals"]["trajectories"] == table.num_rows - 1
