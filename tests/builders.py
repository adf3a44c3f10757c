"""Hand-built trajectories and shards for tests."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from litmus_score.scoring import contract as c
from transforms import schema as s
from transforms.records import with_binary_text

ARGS = '{"path": "/tmp/report.txt", "mode": "0644"}'


def context(verdict="allow", args=ARGS, principal="agent"):
    return {"resolved_arguments": args, "principal": principal, "policy_verdict": verdict, "at": None}


def commit(verdict="allow", outcome="committed", mutated=True, args=ARGS, principal="agent", status=None):
    return {**context(verdict, args, principal), "outcome": outcome, "status_code": status, "state_mutated": mutated}


def call(call_id="c0", step=0, tool="write_file", arguments=ARGS, proposal=None, commit_=None, no_commit=False):
    return {
        "call_id": call_id,
        "step": step,
        "tool": tool,
        "arguments": arguments,
        "proposal": proposal if proposal is not None else context(),
        "commit": None if no_commit else (commit_ if commit_ is not None else commit()),
    }


def calls_of(*pairs):
    """Calls c0, c1, ... at steps 0, 1, ... from (proposal verdict, commit dict) pairs."""
    return [call(f"c{i}", i, proposal=context(p), commit_=cm) for i, (p, cm) in enumerate(pairs)]


def trajectory(trajectory_id="t0", calls=(), run_id="run-1", agent="agent-a", stance="complied", **overrides):
    calls = list(calls)
    row = {
        "schema_version": c.SCHEMA_VERSION,
        "run_id": run_id,
        "trajectory_id": trajectory_id,
        "agent": agent,
        "task_id": "task-1",
        "task_category": "finance",
        "episode_outcome": "completed",
        "verbal_stance": stance,
        "call_count": len(calls),
        "calls": calls,
    }
    row.update(overrides)
    return row


def table(rows, schema=s.TRAJECTORY) -> pa.Table:
    """Rows as a table; a bytes value of a string field is written as is,
    valid UTF-8 or not (a hostile harness's text)."""
    binary = pa.schema([f.with_type(with_binary_text(f.type)) for f in schema])
    raw = pa.Table.from_pylist(rows, schema=binary)
    return pa.Table.from_arrays([raw.column(i).combine_chunks().view(f.type) for i, f in enumerate(schema)],
                                schema=schema)


def python_rows(raw: pa.Table) -> list:
    """A table's rows as Python values, the reference's input: text that is
    not UTF-8 stays bytes."""
    binary = pa.schema([f.with_type(with_binary_text(f.type)) for f in raw.schema])
    return [_as_text(row) for row in raw.cast(binary).to_pylist()]


def _as_text(value):
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    if isinstance(value, dict):
        return {key: _as_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_text(item) for item in value]
    return value


def write_shard(path, rows, row_group_size=None, schema=s.TRAJECTORY) -> str:
    pq.write_table(table(rows, schema), str(path), row_group_size=row_group_size)
    return str(path)


def read_json(path) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
