"""Inspect AI logs (.eval, .json) -> one trajectory per sample and epoch.

The proposal is the tool call of the assistant message that carries the
call's id, wherever that message came from: the model's output (a
ModelEvent), or the sample's messages where a solver wrote it (scripted,
replayed and human agents append a ChatMessageAssistant and run
execute_tools, with no model call). Never the ToolEvent's `arguments`: on
an approver's `modify` those are the modified call, the one that ran. The
commit is what happened next: the final decision of the call's
ApprovalEvents (an escalation chain ends in its last decision), the
ToolEvent's error type, and StoreEvents inside the tool's span. A call
that never reached the runtime has no commit.

`map_calls` is the mapping of one sample's events and messages; the
importer (`map_sample`) and the Inspect scorer (litmus_score.inspect_scorer)
both use it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from litmus_score.importers import rows as r

FORMAT = "inspect"
# read_log's options beyond the principal (litmus-score import --harness_verdict).
OPTIONS = ("harness_verdict",)
LIBRARY = "inspect-ai"
UNITS = "samples"
SUFFIXES = (".eval", ".json")
EXTRA_FIELDS = r.HARNESS + [pa.field("inspect_limit", pa.string()), pa.field("inspect_error", pa.string())]

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
    "calls.arguments": "tool_calls[].arguments of the assistant message with the call's id: "
                       "ModelEvent output, else sample.messages",
    "calls.proposal.resolved_arguments": "as calls.arguments",
    "calls.proposal.principal": None,
    "calls.proposal.policy_verdict": None,
    "calls.proposal.at": "ModelEvent.completed (null for a message a solver wrote)",
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


@dataclass(frozen=True)
class HarnessVerdict:
    """Which of a sample's own scores is the harness's verdict of misuse
    (`--harness_verdict`): SCORER or SCORER.KEY (a key of a dict value); a
    value that reads as true (C, P, yes, true, a positive number) means misuse
    happened. With the prefix `not:` it reads the other way: true means the
    agent was safe."""

    scorer: str
    key: str | None = None
    inverted: bool = False

    @classmethod
    def parse(cls, text: str) -> HarnessVerdict:
        inverted = text.startswith("not:")
        scorer, _, key = text.removeprefix("not:").partition(".")
        if not scorer:
            raise ValueError(f"--harness_verdict {text!r}: expected SCORER, SCORER.KEY or not:SCORER[.KEY]")
        return cls(scorer, key or None, inverted)

    @property
    def name(self) -> str:
        return f"inspect:{'not:' if self.inverted else ''}{self.scorer}{'.' + self.key if self.key else ''}"

    def misuse(self, scores) -> bool | None:
        """The verdict in a sample's scores; None where it has none (no such score, unscored, unreadable)."""
        score = (scores or {}).get(self.scorer)
        value = score.value if score is not None else None
        if self.key is not None:
            value = value.get(self.key) if isinstance(value, dict) else None
        positive = _truth(value)
        return None if positive is None else positive != self.inverted


# Inspect's score strings (correct, partial, incorrect, no answer) and the usual words.
_TRUE, _FALSE = ("c", "p", "yes", "true"), ("i", "n", "no", "false")


def _truth(value) -> bool | None:
    """An Inspect score value as true or false (partial credit is true); None where it is neither."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return None if math.isnan(value) else value > 0
    if isinstance(value, str):
        text = value.strip().lower()
        return True if text in _TRUE else False if text in _FALSE else None
    return None


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



def _written_calls(messages) -> dict:
    """call id -> ToolCall of the assistant messages' tool calls, in conversation order."""
    written: dict[str, Any] = {}  # inspect_ai's ToolCall, imported only where the importer runs
    for message in messages or ():
        if message.role == "assistant":
            for tool_call in message.tool_calls or ():
                written.setdefault(tool_call.id, tool_call)
    return written


def map_calls(events, messages, principal: str, where: str, trajectory_id: str) -> tuple:
    """([call], [Unmapped]) of one sample, from its events and its messages.

    A call takes its place at its first event: the model output that
    proposed it, else the approval or execution of a call a solver wrote
    (its proposal is then the message). Calls a solver wrote that never
    reached the runtime follow, in conversation order. Events inside the
    `scorers` span are not the agent's.
    """
    unmapped = []

    def lose(index, reason: str, detail: str) -> None:
        unmapped.append(r.Unmapped(f"{where} event {index}", reason, r.bounded(detail), call=True,
                                   trajectory_id=trajectory_id))

    written = _written_calls(messages)
    spans = _Spans()
    proposals = {}  # call id -> (ToolCall, at), in the order the calls appear
    approvals = defaultdict(list)
    tool_events = {}  # call id -> (ToolEvent, its tool span id, event index)
    mutated_spans = set()
    first_approval: dict[str, int] = {}  # call id -> index of its first ApprovalEvent

    def runtime_saw(call_id) -> None:
        if call_id not in proposals and call_id in written:
            proposals[call_id] = (written[call_id], None)

    previous: Any = None  # the event before, of inspect_ai's Event union (imported only where the importer runs)
    for index, event in enumerate(events):
        kind = event.event
        if kind == "span_begin":
            spans.add(event)
        elif kind in ("model", "approval", "tool") and spans.within_type(event.span_id, "scorers"):
            pass
        elif kind == "model":
            choices = event.output.choices if event.output is not None else []
            for tool_call in (choices[0].message.tool_calls or []) if choices else []:
                if tool_call.id in proposals:
                    lose(index, "duplicate_call_id", f"call id {tool_call.id!r} proposed again")
                    continue
                proposals[tool_call.id] = (tool_call, event.completed or event.timestamp)
        elif kind == "approval":
            runtime_saw(event.call.id)
            approvals[event.call.id].append(event)
            first_approval.setdefault(event.call.id, index)
        elif kind == "tool":
            runtime_saw(event.id)
            # call_tool records the ToolEvent first thing inside the tool's span.
            opened = previous is not None and previous.event == "span_begin" and previous.type == "tool"
            tool_events[event.id] = (event, previous.id if opened else None, index)
        elif kind == "store" and event.changes:
            mutated_spans.add(event.span_id)
        previous = event
    for call_id, tool_call in written.items():
        proposals.setdefault(call_id, (tool_call, None))

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
                                           f"call {call_id!r} started but the log has no result",
                                           trajectory_id=trajectory_id))
            else:
                outcome, mutated = (r.COMMITTED, None) if event.error is None else _outcome_of_error(event.error.type)
                if mutated is None and state_changed(tool_span):
                    mutated = True
                commit = r.commit(r.arguments_json(event.arguments), principal, outcome, mutated,
                                  event.completed or event.timestamp)
        proposal = r.context(arguments, principal, proposed_at)
        calls.append(r.call(call_id, step, tool_call.function, arguments, proposal, commit))
    for call_id, (event, _, index) in tool_events.items():
        lose(index, "tool_event_without_proposal",
             f"tool {event.function!r} ran as call {call_id!r}, which no model output or message proposed")
    for call_id, index in first_approval.items():
        if call_id not in proposals and call_id not in tool_events:
            lose(index, "approval_without_proposal",
                 f"an approver decided on call {call_id!r}, which no model output or message proposed")
    return calls, unmapped


def episode_outcome(error, limit: str | None) -> str:
    """The contract's episode_outcome of a sample's error and limit type."""
    if error is not None:
        return r.ERROR
    return r.TIMEOUT if limit in _TIME_LIMITS else r.COMPLETED


def sample_trajectory(*, run_id, trajectory_id, agent, task, sample_id, events, messages, limit, error,
                      principal: str, source, where: str, **columns) -> tuple:
    """(Trajectory, [Unmapped]) of one sample's record, however it was obtained (a log, a live transcript);
    `columns` are more of the row's own."""
    calls, unmapped = map_calls(events, messages, principal, where, trajectory_id)
    row = r.trajectory(
        run_id=run_id,
        trajectory_id=trajectory_id,
        agent=agent,
        task_id=str(sample_id),
        task_category=task,
        episode_outcome=episode_outcome(error, limit),
        calls=calls,
        source_log=source,
        source_position=where,
        lost=r.lost_calls(unmapped),
        inspect_limit=limit,
        inspect_error=r.bounded(error.message) if error is not None else None,
        **columns,
    )
    return r.Trajectory(row), unmapped


def map_sample(spec, sample, source: str, principal: str, harness: HarnessVerdict | None = None) -> tuple:
    """(Trajectory or None, [Unmapped]) for one EvalSample of the eval `spec`; `harness`
    names the sample score kept as the harness's verdict."""
    where = f"sample {sample.id!r} epoch {sample.epoch}"
    if not sample.events:
        return None, [r.Unmapped(where, "sample_without_events",
                                 "the log holds no events for this sample (written with events excluded?)",
                                 unit=True)]
    return sample_trajectory(
        run_id=spec.run_id, trajectory_id=f"{spec.eval_id}/{sample.id}/{sample.epoch}", agent=spec.model,
        task=spec.task, sample_id=sample.id, events=sample.events, messages=sample.messages,
        limit=sample.limit.type if sample.limit is not None else None, error=sample.error, principal=principal,
        source=source, where=where, harness_verdict=harness.name if harness is not None else None,
        harness_misuse=harness.misuse(sample.scores) if harness is not None else None)


def read_log(local_path: str, source: str, principal: str, harness_verdict: str | None = None) -> Iterator:
    """FileSummary, then Trajectory and Unmapped items of one log, one sample in memory at a time.

    Every sample and epoch the header lists is read on its own, so a sample
    Inspect cannot read (or this importer cannot map) fails alone and the
    file's units are the header's. A .json log is one document, which Inspect
    validates whole: its samples are parsed once here and validated one by
    one, so there too a bad sample fails alone. Inspect logs name no
    acting identity: every principal is the default. `harness_verdict`
    (HarnessVerdict.parse) names the sample score kept as the harness's verdict.
    """
    from inspect_ai.log import read_eval_log, read_eval_log_sample

    harness = HarnessVerdict.parse(harness_verdict) if harness_verdict is not None else None
    header = read_eval_log(local_path, header_only=True)
    spec = header.eval
    if spec.dataset.sample_ids is None:
        raise ValueError("the log's header lists no sample ids (read and re-write it with Inspect to add them)")
    expected = [(sample_id, epoch) for sample_id in spec.dataset.sample_ids
                for epoch in range(1, (spec.config.epochs or 1) + 1)]
    yield r.FileSummary({"status": header.status, "eval_id": spec.eval_id, "task": spec.task},
                        units_declared=len(expected))
    if local_path.endswith(".eval"):
        def read(sample_id, epoch):
            # Attachments resolved in the core fields: long tool arguments are kept
            # as attachment references otherwise.
            return read_eval_log_sample(local_path, sample_id, epoch, resolve_attachments="core",
                                        exclude_fields={"store"})
    else:
        read = _json_samples(local_path)
    for sample_id, epoch in expected:
        where = f"sample {sample_id!r} epoch {epoch}"
        try:
            sample = read(sample_id, epoch)
        except IndexError:
            yield r.Unmapped(where, "sample_not_in_log",
                             f"the header lists it; the log (status {header.status}) holds no record of it", unit=True)
            continue
        except Exception as error:
            yield r.Unmapped(where, "sample_unreadable", r.bounded(f"{type(error).__name__}: {error}"), unit=True)
            continue
        try:
            mapped, unmapped = map_sample(spec, sample, source, principal, harness)
        except Exception as error:
            yield r.Unmapped(where, "sample_not_mapped", r.bounded(f"{type(error).__name__}: {error}"), unit=True)
            continue
        yield from unmapped
        if mapped is not None:
            yield mapped


def _json_samples(local_path: str):
    """read(sample_id, epoch) -> EvalSample of a .json log: the document parsed
    once, each sample validated (and its attachments resolved) on its own;
    IndexError for one the log does not hold."""
    import orjson
    from inspect_ai.log import EvalSample, resolve_sample_attachments

    with open(local_path, "rb") as handle:
        document = orjson.loads(handle.read())
    records = document.get("samples") if isinstance(document, dict) else None
    by_key = {(record.get("id"), record.get("epoch")): record
              for record in records or () if isinstance(record, dict)}

    def read(sample_id, epoch):
        if (sample_id, epoch) not in by_key:
            raise IndexError(sample_id)
        record = {key: value for key, value in by_key[(sample_id, epoch)].items() if key != "store"}
        return resolve_sample_attachments(EvalSample.model_validate(record), "core")

    return read
