"""The contract's rows as importers build them, and what an importer yields."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from litmus_score import schema as s
from litmus_score.scoring import contract as c

# Columns every imported shard carries beside the contract's: where the row came from.
SOURCE_LOG = "source_log"
SOURCE_POSITION = "source_position"
PROVENANCE = [pa.field(SOURCE_LOG, pa.string()), pa.field(SOURCE_POSITION, pa.string())]
# The harness's own verdict, where the log keeps one (scoring compares it with ours).
HARNESS = [pa.field(s.HARNESS_VERDICT, pa.string()), pa.field(s.HARNESS_MISUSE, pa.bool_())]

UNMAPPED = pa.schema(
    [
        pa.field("file", pa.string()),
        pa.field("position", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("detail", pa.string()),
        # A whole unit (sample, episode) that became no trajectory.
        pa.field("unit", pa.bool_()),
        # A call the log shows that no trajectory's `calls` hold: counted in
        # the call_count of `trajectory_id` (so completeness unscores it as
        # call_count_mismatch), or in no trajectory where that is null.
        pa.field("call", pa.bool_()),
        pa.field("trajectory_id", pa.string()),
    ]
)
MAX_DETAIL_CHARS = 2000

# commit.outcome and episode_outcome values of scoring-v1.
COMMITTED, REJECTED, GATED, ERROR = c.COMMITTED, "rejected", "gated", "error"
COMPLETED, TIMEOUT = "completed", "timeout"


def shard_schema(extra_fields=()) -> pa.Schema:
    """An importer's output schema: the contract, provenance, then its own
    columns; marked as recording no verdict (`score` asks for --policy)."""
    return pa.schema(list(s.TRAJECTORY) + PROVENANCE + list(extra_fields), metadata={s.VERDICTS: s.NO_VERDICTS})


# The contexts whose principal an import counts by source.
PROPOSAL, COMMIT = "proposal", "commit"
FROM_LOG, FROM_DEFAULT = "log", "default"


@dataclass
class Trajectory:
    """One contract row (a dict on shard_schema) and, per context, how many of
    its calls took their principal from the log rather than the --principal
    default, and (where the format has several) from which attribute."""

    row: dict
    principals_from_log: dict = field(default_factory=lambda: {PROPOSAL: 0, COMMIT: 0})
    principal_attributes: dict = field(default_factory=lambda: {PROPOSAL: {}, COMMIT: {}})

    def principal_sources(self) -> dict:
        """{context: {log: n, default: n}} over the contexts the row holds."""
        calls = self.row["calls"]
        present = {PROPOSAL: len(calls), COMMIT: sum(call["commit"] is not None for call in calls)}
        return {context: {FROM_LOG: self.principals_from_log[context],
                          FROM_DEFAULT: present[context] - self.principals_from_log[context]}
                for context in (PROPOSAL, COMMIT)}


@dataclass
class Unmapped:
    """Something in a log that became no call or trajectory, and why.

    `unit` is true when a whole unit (sample, episode) became no trajectory:
    a file's units are its trajectories plus its unmapped units. `call` is
    true when the entry is a call the log shows that its trajectory's
    `calls` lack; `trajectory_id` names that trajectory (its call_count
    counts the entry), or is None where the entry belongs to none.
    """

    position: str
    reason: str
    detail: str | None = None
    unit: bool = False
    call: bool = False
    trajectory_id: str | None = None


@dataclass
class FileSummary:
    """What an importer learned about a file besides its rows (for the manifest);
    `units_declared`, where the file lists its units (an Inspect header, its
    samples), is what its units must reconcile with."""

    facts: dict = field(default_factory=dict)
    units_declared: int | None = None


def arguments_json(arguments: Any) -> str | None:
    """Arguments as a JSON object text; None where they cannot be one (not a
    dict, or holding NaN): a missing field, never a made-up "{}"."""
    if not isinstance(arguments, dict):
        return None
    try:
        return json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None


def bounded(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_DETAIL_CHARS:
        return text
    return text[: MAX_DETAIL_CHARS - 1] + "…"


def context(resolved_arguments: str | None, principal: str | None, at=None) -> dict:
    # No source records a policy verdict: --policy decides.
    return {"resolved_arguments": resolved_arguments, "principal": principal, "policy_verdict": None, "at": at}


def commit(resolved_arguments, principal, outcome: str, state_mutated: bool | None, at=None,
           status_code: int | None = None) -> dict:
    return {**context(resolved_arguments, principal, at), "outcome": outcome, "status_code": status_code,
            "state_mutated": state_mutated}


def call(call_id: str, step: int, tool: str | None, arguments: str | None, proposal: dict,
         commit_: dict | None) -> dict:
    """A contract call; a log without the tool's name leaves it null, for completeness to unscore."""
    return {"call_id": call_id, "step": step, "tool": tool, "arguments": arguments, "proposal": proposal,
            "commit": commit_}


def lost_calls(unmapped) -> int:
    """How many of a trajectory's unmapped entries are calls its `calls` lack."""
    return sum(entry.call for entry in unmapped)


def trajectory(*, run_id, trajectory_id, agent, task_id, task_category, episode_outcome, calls, source_log,
               source_position, lost: int = 0, **extra) -> dict:
    """A contract row. `lost` counts the calls the log shows that `calls`
    lack: call_count holds them too, so completeness unscores the row
    (call_count_mismatch) instead of scoring a shorter trajectory as whole."""
    return {
        "schema_version": c.SCHEMA_VERSION,
        "run_id": run_id,
        "trajectory_id": trajectory_id,
        "agent": agent,
        "task_id": task_id,
        "task_category": task_category,
        "episode_outcome": episode_outcome,
        "verbal_stance": None,  # no source records the agent's stance
        "call_count": len(calls) + lost,
        "calls": calls,
        SOURCE_LOG: source_log,
        SOURCE_POSITION: source_position,
        **extra,
    }
