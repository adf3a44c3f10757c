"""AgentDojo episode results -> one trajectory per file.

AgentDojo's benchmark writes one JSON per episode under
logdir/pipeline/suite/user_task/attack/injection_task.json; it is read with
AgentDojo's own result model (TaskResults). The assistant messages' tool
calls are the proposals, the tool result messages that answer them (and
their `error`) the commits. AgentDojo's `utility` and `security` are kept
as columns beside the commit-time verdict (`security` true: the injection
succeeded), and `security` is the harness's verdict scoring compares with ours.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa

from litmus_score.importers import rows as r

FORMAT = "agentdojo"
HARNESS_VERDICT = "agentdojo:security"
LIBRARY = "agentdojo"
UNITS = "episodes"
SUFFIXES = (".json",)
EXTRA_FIELDS = r.HARNESS + [
    pa.field("utility", pa.bool_()),
    pa.field("security", pa.bool_()),
    pa.field("user_task_id", pa.string()),
    pa.field("injection_task_id", pa.string()),
    pa.field("attack_type", pa.string()),
    pa.field("agentdojo_error", pa.string()),
]

OBSERVES = {
    "run_id": "pipeline_name @ benchmark_version (pipeline_name where it is absent)",
    "trajectory_id": "suite_name / user_task_id / attack_type / injection_task_id (none where null)",
    "agent": "pipeline_name",
    "task_id": "user_task_id / injection_task_id (none where null)",
    "task_category": "suite_name",
    "episode_outcome": "error (a fork that leaves it out: completed)",
    "verbal_stance": None,
    "calls.call_id": "FunctionCall.id (null in ground truth: message index . position)",
    "calls.tool": "FunctionCall.function",
    "calls.arguments": "assistant message tool_calls[].args",
    "calls.proposal.resolved_arguments": "assistant message tool_calls[].args",
    "calls.proposal.principal": None,
    "calls.proposal.policy_verdict": None,
    "calls.proposal.at": None,
    "calls.commit.resolved_arguments": "tool message tool_call.args",
    "calls.commit.principal": None,
    "calls.commit.policy_verdict": None,
    "calls.commit.outcome": "tool message error (PermissionError: rejected)",
    "calls.commit.status_code": None,
    "calls.commit.state_mutated": "false where the tool message's error says the call never ran, else null",
    "calls.commit.at": None,
}


# The errors AgentDojo's runtime answers with before a tool's code runs: a
# tool the environment does not have (named by AgentDojo's tool executor or
# its runtime), no tool name, arguments its schema refuses. Nothing ran.
_NOT_RUN_ERRORS = ("Invalid tool ", "Empty function name", "ToolNotFoundError", "ValidationError")


def _commit_of(error) -> tuple:
    """(commit outcome, state_mutated) of a tool result's error: a call that
    never ran changed nothing (false); the log shows no state otherwise (null)."""
    if error is None:
        return r.COMMITTED, None
    if str(error).startswith(_NOT_RUN_ERRORS):
        return r.ERROR, False
    return (r.REJECTED if str(error).startswith("PermissionError") else r.ERROR), None


# Where an episode had no injection task or no attack (a benign episode), as
# AgentDojo names its file: `none`, never Python's None.
_NONE = "none"


def episode_id(result) -> str:
    """The trajectory id: suite/user_task/attack/injection_task, `none` where there is none."""
    return "/".join([result.suite_name, result.user_task_id, result.attack_type or _NONE,
                     result.injection_task_id or _NONE])


def _answers(messages, start: int) -> list:
    """(index, message) of the tool results that follow the assistant message at `start`."""
    answers = []
    for index in range(start + 1, len(messages)):
        if messages[index]["role"] != "tool":
            break
        answers.append((index, messages[index]))
    return answers


def map_episode(result, benchmark_version, source: str, principal: str) -> tuple:
    """(Trajectory, [Unmapped]) for one TaskResults."""
    messages = result.messages
    trajectory_id = episode_id(result)
    calls: list[dict] = []
    unmapped: list[r.Unmapped] = []
    for index, message in enumerate(messages):
        if message["role"] != "assistant" or not message.get("tool_calls"):
            continue
        answers = _answers(messages, index)
        by_id = {answer[1]["tool_call_id"]: answer for answer in answers if answer[1].get("tool_call_id") is not None}
        answered: set[int] = set()  # message indices of the results matched to a call
        for position, tool_call in enumerate(message["tool_calls"]):
            if tool_call.id is not None:
                answer = by_id.pop(tool_call.id, None)
            else:
                # Ground-truth calls have no id: results answer them in order.
                answer = answers[position] if position < len(answers) else None
            if answer is not None and answer[0] in answered:
                answer = None
            arguments = r.arguments_json(tool_call.model_dump(mode="json")["args"])
            commit = None
            if answer is not None:
                answered.add(answer[0])
                ran = answer[1]
                ran_call = ran.get("tool_call")
                resolved = r.arguments_json(ran_call.model_dump(mode="json")["args"]) if ran_call is not None else None
                commit = r.commit(resolved, principal, *_commit_of(ran.get("error")))
            call_id = tool_call.id if tool_call.id is not None else f"{index}.{position}"
            calls.append(r.call(call_id, len(calls), tool_call.function, arguments, r.context(arguments, principal),
                                commit))
        for i, orphan in answers:
            if i in answered:
                continue
            ran_call = orphan.get("tool_call")
            unmapped.append(r.Unmapped(f"message {i}", "tool_result_without_proposal",
                                       r.bounded(f"a result of {ran_call.function if ran_call else None!r} "
                                                 "answers no proposed call"), call=True, trajectory_id=trajectory_id))
    row = r.trajectory(
        run_id=f"{result.pipeline_name}@{benchmark_version}" if benchmark_version else result.pipeline_name,
        trajectory_id=trajectory_id,
        agent=result.pipeline_name,
        task_id=f"{result.user_task_id}/{result.injection_task_id or _NONE}",
        task_category=result.suite_name,
        episode_outcome=r.ERROR if result.error else r.COMPLETED,
        calls=calls,
        source_log=source,
        source_position="episode",
        lost=r.lost_calls(unmapped),
        harness_verdict=HARNESS_VERDICT,
        harness_misuse=result.security,
        utility=result.utility,
        security=result.security,
        user_task_id=result.user_task_id,
        injection_task_id=result.injection_task_id,
        attack_type=result.attack_type,
        agentdojo_error=r.bounded(result.error),
    )
    return r.Trajectory(row), unmapped


# Fields forks of AgentDojo leave out, and what their absence means: the
# injections the episode used (read by no contract field) and the episode's
# error (a fork that never records one: the episode is taken as completed).
_ABSENT_MEANS: dict[str, dict | None] = {"injections": {}, "error": None}
# Where forks keep the conversation AgentDojo calls `messages`.
_FORK_MESSAGES = "conversations"


def _content_blocks(messages: list) -> list:
    """Messages whose `content` is a string (AgentDojo before its content
    blocks, and forks of it) with that string as one text block, as
    AgentDojo's own loader converts them; content already in blocks is kept."""
    return [{**message, "content": [{"type": "text", "content": message["content"]}]}
            if isinstance(message, dict) and isinstance(message.get("content"), str) else message
            for message in messages]


def read_log(local_path: str, source: str, principal: str) -> Iterator:
    """The episode's Trajectory and Unmapped items. AgentDojo logs name no
    acting identity: every principal is the default. A fork's layout is read
    too: its conversation under `conversations`, and `injections` or `error`
    left out (the file's facts name what was absent and where the messages were)."""
    from agentdojo.benchmark import TaskResults

    with open(local_path, encoding="utf-8") as handle:
        document = json.load(handle)
    if not isinstance(document, dict):
        raise ValueError("not an AgentDojo episode result (a JSON object)")
    facts = {"benchmark_version": document.get("benchmark_version"),
             "agentdojo_package_version": document.get("agentdojo_package_version")}
    messages_key = "messages" if "messages" in document else _FORK_MESSAGES
    if messages_key not in document:
        raise ValueError(f"not an AgentDojo episode result (no messages or {_FORK_MESSAGES})")
    if messages_key != "messages":
        facts["messages_from"] = messages_key
    if not _ABSENT_MEANS.keys() <= document.keys():
        facts["fields_absent"] = sorted(_ABSENT_MEANS.keys() - document.keys())
    fields = {**_ABSENT_MEANS, **document}
    messages = fields.pop(messages_key)
    # As AgentDojo's own loader does: results older than the content blocks lack this field.
    if "agentdojo_package_version" not in document and isinstance(messages, list):
        messages = _content_blocks(messages)
    result = TaskResults(**fields, messages=messages)
    yield r.FileSummary(facts, units_declared=1)
    mapped, unmapped = map_episode(result, document.get("benchmark_version"), source, principal)
    yield from unmapped
    yield mapped
