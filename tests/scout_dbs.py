"""Inspect Scout transcript databases built by Scout itself, offline: from
Inspect logs the tests write, and from Claude Code session files written here."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import get_model
from inspect_ai.solver import generate, use_tools
from inspect_scout import transcripts_db, transcripts_from
from inspect_scout.sources import claude_code

from tests import inspect_logs

SESSION_ID = "5b1f0c52-0000-4000-8000-000000000001"
MODEL = "claude-sonnet-4-5"
# The session's calls: (id, tool, input, result, is_error); None: no result recorded.
SESSION_CALLS = [
    ("toolu_1", "Bash", {"command": "rm -rf /var/lib/app"}, "removed", False),
    ("toolu_2", "Write", {"file_path": "/etc/hosts", "content": "0.0.0.0 audit"}, "EACCES: permission denied", True),
    ("toolu_3", "Bash", {"command": "shutdown -h now"}, None, False),
]


def build(db: Path, source) -> Path:
    """Inserts the transcripts of `source` (an async iterable of Scout transcripts) into the database `db`."""
    async def insert():
        async with transcripts_db(str(db)) as database:
            await database.insert(source)

    asyncio.run(insert())
    return db


def from_inspect_logs(logs: Path, db: Path) -> Path:
    return build(db, transcripts_from(str(logs)))


def long_argument_log(log_dir: Path, value: str) -> Path:
    """One sample ("long"): a config change whose value is `value`, which Inspect keeps as an attachment when long."""
    task = Task(name="long_argument", dataset=[Sample(id="long", input="configure")],
                solver=[use_tools([inspect_logs.update_config()]), generate()])
    outputs = [inspect_logs.output(("long-1", "update_config", {"key": "motd", "value": value})),
               inspect_logs.output()]
    [log] = eval(task, model=get_model("mockllm/model", custom_outputs=outputs), log_dir=str(log_dir),
                 display="none")
    return Path(log.location)


def _event(kind: str, index: int, message: dict) -> dict:
    return {"type": kind, "uuid": f"00000000-0000-4000-8000-{index:012d}",
            "parentUuid": f"00000000-0000-4000-8000-{index - 1:012d}" if index else None,
            "timestamp": f"2026-12-01T10:00:{index:02d}.000Z", "sessionId": SESSION_ID, "cwd": "/srv/app",
            "version": "2.1.0", "message": message}


def claude_code_session(folder: Path) -> Path:
    """A Claude Code session file: a prompt, then one assistant turn per call of SESSION_CALLS and its result."""
    usage = {"input_tokens": 10, "output_tokens": 5}
    events = [_event("user", 0, {"role": "user", "content": "clean up the server"})]
    for tool_id, tool, arguments, result, is_error in SESSION_CALLS:
        events.append(_event("assistant", len(events), {
            "role": "assistant", "model": MODEL, "id": f"msg_{tool_id}", "stop_reason": "tool_use", "usage": usage,
            "content": [{"type": "tool_use", "id": tool_id, "name": tool, "input": arguments}]}))
        if result is not None:
            events.append(_event("user", len(events), {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": tool_id, "content": result, "is_error": is_error}]}))
    events.append(_event("assistant", len(events), {
        "role": "assistant", "model": MODEL, "id": "msg_end", "stop_reason": "end_turn", "usage": usage,
        "content": [{"type": "text", "text": "done"}]}))
    project = folder / "-srv-app"
    project.mkdir(parents=True, exist_ok=True)
    session = project / f"{SESSION_ID}.jsonl"
    session.write_text("".join(json.dumps(event) + "\n" for event in events))
    return session


def from_claude_code(session: Path, db: Path) -> Path:
    return build(db, claude_code(str(session)))
