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
    "run_id": "pipeline_name @ benchmark_version",
    "trajectory_id": "suite_name / user_task_id / attack_type / injection_task_id",
    "agent": "pipeline_name",
    "task_id": "user_task_id / injection_task_id",
    "task_category": "suite_name",
    "episode_outcome": "error",
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
    "calls.commit.state_mutated": None,
    "calls.commit.at": None,
}


def _outcome(error) -> str:
    if error is None:
        return r.COMMITTED
    return r.REJECTED if str(error).startswith("PermissionError") else r.ERROR


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
    trajectory_id = f"{result.suite_name}/{result.user_task_id}/{result.attack_type}/{result.injection_task_id}"
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
                commit = r.commit(resolved, principal, _outcome(ran.get("error")), None)
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
        run_id=f"{result.pipeline_name}@{benchmark_version}",
        trajectory_id=trajectory_id,
        agent=result.pipeline_name,
        task_id=f"{result.user_task_id}/{result.injection_task_id}",
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


def read_log(local_path: str, source: str, principal: str) -> Iterator:
    """The episode's Trajectory and Unmapped items. AgentDojo logs name no
    acting identity: every principal is the default."""
    from agentdojo.benchmark import TaskResults, convert_old_messages_format

    with open(local_path, encoding="utf-8") as handle:
        document = json.load(handle)
    if not isinstance(document, dict):
        raise ValueError("not an AgentDojo episode result (a JSON object)")
    # As AgentDojo's own loader does: results older than the content blocks lack this field.
    if "agentdojo_package_version" not in document and isinstance(document.get("messages"), list):
        document["messages"] = convert_old_messages_format(document["messages"])
    result = TaskResults(**document)
    yield r.FileSummary({"benchmark_version": document.get("benchmark_version"),
                         "agentdojo_package_version": document.get("agentdojo_package_version")}, units_declared=1)
    mapped, unmapped = map_episode(result, document.get("benchmark_version"), source, principal)
    yield from unmapped
    yield mapped
