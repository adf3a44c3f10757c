"""Inspect Scout transcript databases -> one trajectory per transcript.

A Scout database is a folder of Parquet files, one row per transcript, on
Scout's documented schema (inspect_scout.transcripts_db_schema): the
transcript's `messages` and `events` are Inspect's own ChatMessage and Event
lists as JSON, whatever the source Scout imported them from (Inspect logs,
Claude Code sessions, ATIF trajectories, traces). So the calls are mapped
exactly as the Inspect importer maps a sample's (inspect.map_calls): the
proposal is the assistant message's tool call, the commit the final
approval decision, the ToolEvent's error and the store changes in the tool's
span. One Parquet file is one unit of work; a transcript that cannot be read
or mapped fails alone.

Scout keeps no acting identity and no Inspect run id: every principal is the
default, and run_id is the transcript's `source_id` (for Inspect logs the
eval's id).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from litmus_score.importers import inspect
from litmus_score.importers import rows as r

FORMAT = "scout"
OPTIONS = ()
LIBRARY = "inspect-scout"
UNITS = "transcripts"
SUFFIXES = (".parquet",)
EXTRA_FIELDS = [pa.field("scout_source_type", pa.string()), pa.field("scout_limit", pa.string()),
                pa.field("scout_error", pa.string())]

# contract field <- database column (None: Scout does not keep it).
OBSERVES = {
    "run_id": "source_id (for Inspect logs the eval's id: Scout keeps no run id)",
    "trajectory_id": "transcript_id",
    "agent": "model, else agent",
    "task_id": "task_id",
    "task_category": "task_set",
    "episode_outcome": "error, limit",
    "verbal_stance": None,
    **{field: f"events/messages, as inspect: {source}" for field, source in inspect.OBSERVES.items()
       if field.startswith("calls.") and source is not None},
    "calls.proposal.principal": None,
    "calls.proposal.policy_verdict": None,
    "calls.commit.principal": None,
    "calls.commit.policy_verdict": None,
    "calls.commit.status_code": None,
}

CLAUDE_CODE = "claude_code"
# The columns read: the mapping needs no other, and the content columns are the large ones.
_COLUMNS = ("transcript_id", "source_type", "source_id", "task_set", "task_id", "agent", "model", "error", "limit",
            "messages", "events", "events_data")
# Transcripts per batch read: a transcript's content can be megabytes.
_BATCH_ROWS = 16


def _check_schema(schema: pa.Schema) -> None:
    """ValueError naming the first column that makes the file no Scout transcript table."""
    from inspect_scout._transcript.database.schema import validate_transcript_schema

    errors = validate_transcript_schema(schema)
    if errors:
        raise ValueError(f"not a Scout transcript table: {errors[0].message}")
    for name in ("events", "messages"):
        if name not in schema.names:
            raise ValueError(f"not a Scout transcript table with content: column {name!r} is missing")


@functools.cache
def _validators() -> tuple:
    """Validators of Inspect's Event and ChatMessage lists: built once, they cost more than a transcript."""
    from inspect_ai.event import Event
    from inspect_ai.model import ChatMessage
    from pydantic import TypeAdapter

    return TypeAdapter(list[Event]), TypeAdapter(list[ChatMessage])


def _content(row: dict) -> tuple:
    """(events, messages) of a row: Inspect Events (the database's pooled
    model inputs restored) and ChatMessages."""
    from inspect_ai.log import expand_events

    events_validator, messages_validator = _validators()
    events_json = row["events"] or "[]"
    if row.get("events_data"):
        events = expand_events(events_json, row["events_data"])
    else:
        events = events_validator.validate_json(events_json)
    return events, messages_validator.validate_json(row["messages"] or "[]")


def _without_result(event) -> bool:
    """Whether a ToolEvent of Scout's Claude Code reader is a call that never
    got its result: the reader records one as completed the instant it
    started, with no result (a result comes from a later session entry,
    always stamped later)."""
    return event.event == "tool" and event.error is None and not event.result and event.completed == event.timestamp


def map_transcript(row: dict, source: str, principal: str) -> tuple:
    """(Trajectory, [Unmapped]) of one transcript row."""
    transcript_id = row["transcript_id"]
    where = f"transcript {transcript_id!r}"
    events, messages = _content(row)
    if row["source_type"] == CLAUDE_CODE:
        # Pending, as Inspect marks a call it started and has no result of: no commit.
        events = [event.model_copy(update={"pending": True}) if _without_result(event) else event
                  for event in events]
    calls, unmapped = inspect.map_calls(events, messages, principal, where, transcript_id)
    # Scout writes "" for an Inspect sample without error or limit.
    error, limit = row["error"] or None, row["limit"] or None
    trajectory = r.trajectory(
        run_id=row["source_id"],
        trajectory_id=transcript_id,
        agent=row["model"] or row["agent"],
        task_id=row["task_id"],
        task_category=row["task_set"],
        episode_outcome=inspect.episode_outcome(error, limit),
        calls=calls,
        source_log=source,
        source_position=where,
        lost=r.lost_calls(unmapped),
        scout_source_type=row["source_type"],
        scout_limit=limit,
        scout_error=r.bounded(error),
    )
    return r.Trajectory(trajectory), unmapped


def read_log(local_path: str, source: str, principal: str) -> Iterator:
    """FileSummary, then Trajectory and Unmapped items of one Parquet file of
    a Scout database, a few transcripts in memory at a time; its units are
    the rows its footer declares."""
    parquet = pq.ParquetFile(local_path)
    _check_schema(parquet.schema_arrow)
    yield r.FileSummary({"transcripts": parquet.metadata.num_rows}, units_declared=parquet.metadata.num_rows)
    columns = [name for name in _COLUMNS if name in parquet.schema_arrow.names]
    position = 0
    for batch in parquet.iter_batches(batch_size=_BATCH_ROWS, columns=columns):
        for row in batch.to_pylist():
            position += 1
            row = {name: row.get(name) for name in _COLUMNS}
            where = f"row {position} transcript {row['transcript_id']!r}"
            try:
                mapped, unmapped = map_transcript(row, source, principal)
            except Exception as error:
                yield r.Unmapped(where, "transcript_not_mapped", r.bounded(f"{type(error).__name__}: {error}"),
                                 unit=True)
                continue
            yield from unmapped
            yield mapped
