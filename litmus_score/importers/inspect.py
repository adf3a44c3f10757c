"""Inspect AI logs (.eval, .json) -> one trajectory per sample and epoch.

The proposal is the tool call in the assistant message the model produced
(the ModelEvent's output), never the ToolEvent's `arguments`: on an
approver's `modify` those are the modified call, the one that ran. The
commit is what happened next: the final decision of the call's
ApprovalEvents (an escalation chain ends in its last decision), the
ToolEvent's error type, and StoreEvents inside the tool's span. A call
that never reached the runtime has no commit.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterator

import pyarrow as pa

from litmus_score.importers import rows as r

FORMAT = "inspect"
LIBRARY = "inspect-ai"
UNITS = "samples"
SUFFIXES = (".eval", ".json")
EXTRA_FIELDS = [pa.field("inspect_limit", pa.string()), pa.field("inspect_error", pa.string())]

# contract field <- log field (None: the log does not record it).
OBSERVES = {
    "run_id": "eval.run_id",
    "trajectory_id": "eval.eval_id / sample.id / sample.epoch",
    "agent": "eval.model",
    "task_id": "sample.id",
    "task_category": "eval.task",
    "episode_outcome": "sample.error, sample.limit",
    "verbal_stance": None,
    "calls.call_id": "ToolCall.id",
    "calls.tool": "ToolCall.function",
    "calls.arguments": "ModelEvent output message tool_calls[].arguments",
    "calls.proposal.resolved_arguments": "ModelEvent output message tool_calls[].arguments",
    "calls.proposal.principal": None,
    "calls.proposal.policy_verdict": None,
    "calls.proposal.at": "ModelEvent.completed",
    "calls.commit.resolved_arguments": "ToolEvent.arguments (gated: ApprovalEvent.call)",
    "calls.commit.principal": None,
    "calls.commit.policy_verdict": None,
    "calls.commit.outcome": "final ApprovalEvent.decision, ToolEvent.error.type",
    "calls.commit.status_code": None,
    "calls.commit.state_mutated": "StoreEvent changes in the tool's span (else null)",
    "calls.commit.at": "ToolEvent.completed / ApprovalEvent.timestamp",
}

# An approver's decisions that stop the call before it runs.
_GATING_DECISIONS = ("reject", "terminate")
# ToolEvent error types raised before the tool's code ran: nothing changed.
_NOT_RUN_ERRORS = {"approval": r.GATED, "parsing": r.ERROR}
# The environment refused the call.
_REFUSED_ERRORS = ("permission",)
_TIME_LIMITS = ("time", "working")


def _outcome_of_error(error_type: str) -> tuple:
    """(commit outcome, state_mutated known from the error alone, or None)."""
    if error_type in _NOT_RUN_ERRORS:
        return _NOT_RUN_ERRORS[error_type], False
    if error_type in _REFUSED_ERRORS:
        return r.REJECTED, None
    return r.ERROR, None


class _Spans:
    """Span tree of a sample's events: ancestry by span id."""

    def __init__(self):
        self._parent, self._type = {}, {}

    def add(self, event) -> None:
        self._parent[event.id] = event.parent_id
        self._type[event.id] = event.type

    def ancestry(self, span_id):
        seen = set()
        while span_id is not None and span_id not in seen:
            seen.add(span_id)
            yield span_id
            span_id = self._parent.get(span_id)

    def within_type(self, span_id, span_type: str) -> bool:
        return any(self._type.get(s) == span_type for s in self.ancestry(span_id))

    def within(self, span_id, ancestor) -> bool:
        return ancestor is not None and ancestor in self.ancestry(span_id)


def map_sample(spec, sample, source: str, principal: str) -> tuple:
    """(Trajectory or None, [Unmapped]) for one EvalSample of the eval `spec`."""
    where = f"sample {sample.id!r} epoch {sample.epoch}"
    if not sample.events:
        return None, [r.Unmapped(where, "sample_without_events",
                                 "the log holds no events for this sample (written with events excluded?)",
                                 unit=True)]
    unmapped = []
    spans = _Spans()
    proposals = {}  # call id -> (ToolCall, at), in the order the model proposed them
    approvals = defaultdict(list)
    tool_events = {}  # call id -> (ToolEvent, its tool span id, event index)
    mutated_spans = set()
    previous = None
    for index, event in enumerate(sample.events):
        kind = event.event
        if kind == "span_begin":
            spans.add(event)
        elif kind == "model" and not spans.within_type(event.span_id, "scorers"):
            choices = event.output.choices if event.output is not None else []
            for tool_call in (choices[0].message.tool_calls or []) if choices else []:
                if tool_call.id in proposals:
                    unmapped.append(r.Unmapped(f"{where} event {index}", "duplicate_call_id",
                                               r.bounded(f"call id {tool_call.id!r} proposed again")))
                    continue
                proposals[tool_call.id] = (tool_call, event.completed or event.timestamp)
        elif kind == "approval":
            approvals[event.call.id].append(event)
        elif kind == "tool":
            # call_tool records the ToolEvent first thing inside the tool's span.
            opened = previous is not None and previous.event == "span_begin" and previous.type == "tool"
            tool_events[event.id] = (event, previous.id if opened else None, index)
        elif kind == "store" and event.changes:
            mutated_spans.add(event.span_id)
        previous = event

    def state_changed(tool_span) -> bool:
        return any(spans.within(span, tool_span) for span in mutated_spans)

    calls = []
    for step, (call_id, (tool_call, proposed_at)) in enumerate(proposals.items()):
        arguments = None if tool_call.parse_error else r.arguments_json(tool_call.arguments)
        decisions = [a for a in approvals.get(call_id, []) if a.decision != "escalate"]
        final = decisions[-1] if decisions else None
        executed = tool_events.pop(call_id, None)
        commit = None
        if final is not None and final.decision in _GATING_DECISIONS:
            commit = r.commit(r.arguments_json(final.call.arguments), principal, r.GATED, False,
                              final.timestamp)
        elif executed is not None:
            event, tool_span, index = executed
            if event.pending:
                unmapped.append(r.Unmapped(f"{where} event {index}", "tool_result_not_recorded",
                                           f"call {call_id!r} started but the log has no result"))
            else:
                outcome, mutated = (r.COMMITTED, None) if event.error is None else _outcome_of_error(event.error.type)
                if mutated is None and state_changed(tool_span):
                    mutated = True
                commit = r.commit(r.arguments_json(event.arguments), principal, outcome, mutated,
                                  event.completed or event.timestamp)
        proposal = r.context(arguments, principal, proposed_at)
        calls.append(r.call(call_id, step, tool_call.function, arguments, proposal, commit))
    for call_id, (event, _, index) in tool_events.items():
        unmapped.append(r.Unmapped(f"{where} event {index}", "tool_event_without_proposal",
                                   r.bounded(f"tool {event.function!r} ran as call {call_id!r}, "
                                             "which no model output proposed")))

    limit = sample.limit.type if sample.limit is not None else None
    if sample.error is not None:
        outcome = r.ERROR
    elif limit in _TIME_LIMITS:
        outcome = r.TIMEOUT
    else:
        outcome = r.COMPLETED
    row = r.trajectory(
        run_id=spec.run_id,
        trajectory_id=f"{spec.eval_id}/{sample.id}/{sample.epoch}",
        agent=spec.model,
        task_id=str(sample.id),
        task_category=spec.task,
        episode_outcome=outcome,
        calls=calls,
        source_log=source,
        source_position=where,
        inspect_limit=limit,
        inspect_error=r.bounded(sample.error.message) if sample.error is not None else None,
    )
    return r.Trajectory(row), unmapped


def read_log(local_path: str, source: str, principal: str) -> Iterator:
    """Trajectory, Unmapped and FileSummary items of one log, streaming one sample at a time.

    Inspect logs name no acting identity: every principal is the default.
    """
    from inspect_ai.log import read_eval_log, read_eval_log_samples

    header = read_eval_log(local_path, header_only=True)
    spec = header.eval
    expected = [(sample_id, epoch) for sample_id in (spec.dataset.sample_ids or [])
                for epoch in range(1, (spec.config.epochs or 1) + 1)]
    yield r.FileSummary({"status": header.status, "eval_id": spec.eval_id, "task": spec.task,
                         "samples_in_header": len(expected)})
    seen = set()
    # Attachments resolved in the core fields: long tool arguments are kept
    # as attachment references otherwise.
    for sample in read_eval_log_samples(local_path, all_samples_required=False, resolve_attachments="core",
                                        exclude_fields={"store"}):
        seen.add((sample.id, sample.epoch))
        mapped, unmapped = map_sample(spec, sample, source, principal)
        yield from unmapped
        if mapped is not None:
            yield mapped
    for sample_id, epoch in expected:
        if (sample_id, epoch) not in seen:
            yield r.Unmapped(f"sample {sample_id!r} epoch {epoch}", "sample_not_in_log",
                             f"the header lists it; the log (status {header.status}) holds no record of it", unit=True)
