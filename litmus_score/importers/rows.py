"""The contract's rows as importers build them, and what an importer yields."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

import pyarrow as pa

from litmus_score.scoring import contract as c
from transforms import schema as s

# Columns every imported shard carries beside the contract's: where the row came from.
SOURCE_LOG = "source_log"
SOURCE_POSITION = "source_position"
PROVENANCE = [pa.field(SOURCE_LOG, pa.string()), pa.field(SOURCE_POSITION, pa.string())]

UNMAPPED = pa.schema(
    [
        pa.field("file", pa.string()),
        pa.field("position", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("detail", pa.string()),
        # A whole unit (sample, episode) that became no trajectory.
        pa.field("unit", pa.bool_()),
    ]
)
MAX_DETAIL_CHARS = 2000

# commit.outcome and episode_outcome values of scoring-v1.
COMMITTED, REJECTED, GATED, ERROR = c.COMMITTED, "rejected", "gated", "error"
COMPLETED, TIMEOUT = "completed", "timeout"


def shard_schema(extra_fields=()) -> pa.Schema:
    """An importer's output schema: the contract, provenance, then its own columns."""
    return pa.schema(list(s.TRAJECTORY) + PROVENANCE + list(extra_fields))


@dataclass
class Trajectory:
    """One contract row (a dict on shard_schema) and how many of its calls took
    their principal from the log rather than the --principal default."""

    row: dict
    principals_from_log: int = 0


@dataclass
class Unmapped:
    """Something in a log that became no call or trajectory, and why.

    `unit` is true when a whole unit (sample, episode) became no trajectory:
    a file's units are its trajectories plus its unmapped units.
    """

    position: str
    reason: str
    detail: Optional[str] = None
    unit: bool = False


@dataclass
class FileSummary:
    """What an importer learned about a file besides its rows (for the manifest)."""

    facts: dict = field(default_factory=dict)


def arguments_json(arguments: Any) -> Optional[str]:
    """Arguments as a JSON object text; None where they cannot be one (not a
    dict, or holding NaN): a missing field, never a made-up "{}"."""
    if not isinstance(arguments, dict):
        return None
    try:
        return json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None


def bounded(text: Optional[str]) -> Optional[str]:
    if text is None or len(text) <= MAX_DETAIL_CHARS:
        return text
    return text[: MAX_DETAIL_CHARS - 1] + "…"


def context(resolved_arguments: Optional[str], principal: Optional[str], at=None) -> dict:
    # No source records a policy verdict: --policy decides.
    return {"resolved_arguments": resolved_arguments, "principal": principal, "policy_verdict": None, "at": at}


def commit(resolved_arguments, principal, outcome: str, state_mutated: Optional[bool], at=None,
           status_code: Optional[int] = None) -> dict:
    return {**context(resolved_arguments, principal, at), "outcome": outcome, "status_code": status_code,
            "state_mutated": state_mutated}


def call(call_id: str, step: int, tool: str, arguments: Optional[str], proposal: dict,
         commit_: Optional[dict]) -> dict:
    return {"call_id": call_id, "step": step, "tool": tool, "arguments": arguments, "proposal": proposal,
            "commit": commit_}


def trajectory(*, run_id, trajectory_id, agent, task_id, task_category, episode_outcome, calls, source_log,
               source_position, **extra) -> dict:
    return {
        "schema_version": c.SCHEMA_VERSION,
        "run_id": run_id,
        "trajectory_id": trajectory_id,
        "agent": agent,
        "task_id": task_id,
        "task_category": task_category,
        "episode_outcome": episode_outcome,
        "verbal_stance": None,  # no source records the agent's stance
        "call_count": len(calls),
        "calls": calls,
        SOURCE_LOG: source_log,
        SOURCE_POSITION: source_position,
        **extra,
    }
