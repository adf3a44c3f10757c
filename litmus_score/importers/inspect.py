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
that never reached the runtime has no commit. A reviewer's judgement of a
call after it ran (a ReviewEvent) is kept beside the commit, not in it.

`map_calls` is the mapping of one sample's events and messages; the
importer (`map_sample`) and the Inspect scorer (litmus_score.inspect_scorer)
both use it.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa

from litmus_score.importers import jsonsamples, zipmembers
from litmus_score.importers import rows as r

FORMAT = "inspect"
# read_log's options beyond the principal (litmus-score import --harness_verdict).
OPTIONS = ("harness_verdict", "max_sample_mib")
LIBRARY = "inspect-ai"
UNITS = "samples"
SUFFIXES = (".eval", ".json")
# The files read as many parts, ranges of their bytes (plan_log, read_range): a zip lists where each sample lies.
SPLITS = (".eval",)
EXTRA_FIELDS = r.HARNESS + [pa.field("inspect_limit", pa.string()), pa.field("inspect_error", pa.string()),
                            pa.field("inspect_reviews", pa.string())]

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
        """The verdict in a sample's scores (the log's JSON, or Inspect's Score objects);
        None where it has none (no such score, unscored, unreadable)."""
        score = (scores or {}).get(self.scorer)
        value = _as_json(score).get("value") if score is not None else None
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
    """Span tree of a sample's events, built as its span_begin events arrive.

    Which spans lie inside the `scorers` span is settled when each span
    begins (Inspect opens a parent before its children), and which hold a
    state change is marked up the tree once per span: both linear in the
    sample's events, however many calls and spans it has.
    """

    def __init__(self):
        self._parent: dict = {}
        self._scoring: set = set()
        self._holds_change: set = set()

    def add(self, event: dict) -> None:
        span_id, parent = event.get("id"), event.get("parent_id")
        self._parent[span_id] = parent
        if event.get("type") == "scorers" or parent in self._scoring:
            self._scoring.add(span_id)

    def scoring(self, span_id) -> bool:
        return span_id in self._scoring

    def mark_change(self, span_id) -> None:
        """`span_id` and its ancestors hold a state change; stops at a span already marked."""
        while span_id is not None and span_id not in self._holds_change:
            self._holds_change.add(span_id)
            span_id = self._parent.get(span_id)

    def holds_change(self, span_id) -> bool:
        return span_id is not None and span_id in self._holds_change


# A ModelEvent's fields the mapping never reads (its input is the whole conversation so far).
_UNREAD_MODEL_FIELDS = {"input", "tools", "call"}


def _as_json(item) -> dict:
    """An event or message as the log's JSON holds it: a parsed dict as it is,
    an Inspect object (the scorer's live transcript) dumped."""
    if isinstance(item, dict):
        return item
    unread = _UNREAD_MODEL_FIELDS if getattr(item, "event", None) == "model" else None
    return item.model_dump(mode="json", exclude=unread)


def _time(text):
    """A log's ISO timestamp as a datetime (the contract's `at`); None stays None.
    Python 3.10's parser takes no `Z` for UTC."""
    if not isinstance(text, str):
        return text
    return datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)


def _written_calls(messages) -> dict:
    """call id -> ToolCall dict of the assistant messages' tool calls, in conversation order."""
    written: dict[str, dict] = {}
    for message in messages:
        if message.get("role") == "assistant":
            for tool_call in message.get("tool_calls") or ():
                written.setdefault(tool_call["id"], tool_call)
    return written


def map_calls(events, messages, principal: str, where: str, trajectory_id: str) -> tuple:
    """([call], [Unmapped]) of one sample, from its events and its messages
    (the log's JSON dicts, or Inspect's objects).

    A call takes its place at its first event: the model output that
    proposed it, else the approval or execution of a call a solver wrote
    (its proposal is then the message). Calls a solver wrote that never
    reached the runtime follow, in conversation order. Events inside the
    `scorers` span are not the agent's.
    """
    events, messages = [_as_json(e) for e in events or ()], [_as_json(m) for m in messages or ()]
    unmapped = []

    def lose(index, reason: str, detail: str) -> None:
        unmapped.append(r.Unmapped(f"{where} event {index}", reason, r.bounded(detail), call=True,
                                   trajectory_id=trajectory_id))

    written = _written_calls(messages)
    spans = _Spans()
    proposals = {}  # call id -> (ToolCall dict, at), in the order the calls appear
    approvals = defaultdict(list)
    tool_events = {}  # call id -> (ToolEvent dict, its tool span id, event index)
    first_approval: dict[str, int] = {}  # call id -> index of its first ApprovalEvent
    changed_spans = []

    def runtime_saw(call_id) -> None:
        if call_id not in proposals and call_id in written:
            proposals[call_id] = (written[call_id], None)

    previous: dict = {}  # the event before
    for index, event in enumerate(events):
        kind = event["event"]
        if kind == "span_begin":
            spans.add(event)
        elif kind in ("model", "approval", "tool") and spans.scoring(event.get("span_id")):
            pass
        elif kind == "model":
            choices = (event.get("output") or {}).get("choices") or []
            for tool_call in (choices[0]["message"].get("tool_calls") or []) if choices else []:
                if tool_call["id"] in proposals:
                    lose(index, "duplicate_call_id", f"call id {tool_call['id']!r} proposed again")
                    continue
                proposals[tool_call["id"]] = (tool_call, _time(event.get("completed") or event.get("timestamp")))
        elif kind == "approval":
            call_id = event["call"]["id"]
            runtime_saw(call_id)
            approvals[call_id].append(event)
            first_approval.setdefault(call_id, index)
        elif kind == "tool":
            runtime_saw(event["id"])
            # call_tool records the ToolEvent first thing inside the tool's span.
            opened = previous.get("event") == "span_begin" and previous.get("type") == "tool"
            tool_events[event["id"]] = (event, previous.get("id") if opened else None, index)
        elif kind == "store" and event.get("changes"):
            changed_spans.append(event.get("span_id"))
        previous = event
    for call_id, tool_call in written.items():
        proposals.setdefault(call_id, (tool_call, None))
    for span_id in changed_spans:
        spans.mark_change(span_id)

    calls = []
    for step, (call_id, (tool_call, proposed_at)) in enumerate(proposals.items()):
        arguments = None if tool_call.get("parse_error") else r.arguments_json(tool_call.get("arguments"))
        decisions = [a for a in approvals.get(call_id, []) if a.get("decision") != "escalate"]
        final = decisions[-1] if decisions else None
        executed = tool_events.pop(call_id, None)
        commit = None
        if final is not None and final.get("decision") in _GATING_DECISIONS:
            commit = r.commit(r.arguments_json(final["call"].get("arguments")), principal, r.GATED, False,
                              _time(final.get("timestamp")))
        elif executed is not None:
            event, tool_span, index = executed
            if event.get("pending"):
                unmapped.append(r.Unmapped(f"{where} event {index}", "tool_result_not_recorded",
                                           f"call {call_id!r} started but the log has no result",
                                           trajectory_id=trajectory_id))
            else:
                error = event.get("error")
                outcome, mutated = (r.COMMITTED, None) if error is None else _outcome_of_error(error.get("type"))
                if mutated is None and spans.holds_change(tool_span):
                    mutated = True
                commit = r.commit(r.arguments_json(event.get("arguments")), principal, outcome, mutated,
                                  _time(event.get("completed") or event.get("timestamp")))
        proposal = r.context(arguments, principal, proposed_at)
        calls.append(r.call(call_id, step, tool_call.get("function"), arguments, proposal, commit))
    for call_id, (event, _, index) in tool_events.items():
        lose(index, "tool_event_without_proposal",
             f"tool {event.get('function')!r} ran as call {call_id!r}, which no model output or message proposed")
    for call_id, index in first_approval.items():
        if call_id not in proposals and call_id not in tool_events:
            lose(index, "approval_without_proposal",
                 f"an approver decided on call {call_id!r}, which no model output or message proposed")
    return calls, unmapped


def map_reviews(events, call_ids, where: str, trajectory_id: str) -> tuple:
    """(the `inspect_reviews` column, [Unmapped]) of one sample's events, parsed.

    A ReviewEvent judges a call after it ran: the commit has happened, so a
    review changes neither its outcome nor its arguments. It is kept beside
    the commit, a JSON list in event order (null where the sample has none).
    """
    reviews, unmapped = [], []
    for index, event in enumerate(events):
        if event["event"] != "review":
            continue
        call_id = event["call"]["id"]
        if call_id not in call_ids:
            unmapped.append(r.Unmapped(f"{where} event {index}", "review_without_proposal",
                                       f"a reviewer judged call {call_id!r}, which no model output or message proposed",
                                       trajectory_id=trajectory_id))
            continue
        reviews.append({"call_id": call_id, "reviewer": r.bounded(event.get("reviewer")),
                        "decision": event.get("decision"), "explanation": r.bounded(event.get("explanation"))})
    return (json.dumps(reviews) if reviews else None), unmapped


def episode_outcome(error, limit: str | None) -> str:
    """The contract's episode_outcome of a sample's error and limit type."""
    if error is not None:
        return r.ERROR
    return r.TIMEOUT if limit in _TIME_LIMITS else r.COMPLETED


def sample_trajectory(*, run_id, trajectory_id, agent, task, sample_id, events, messages, limit, error,
                      principal: str, source, where: str, **columns) -> tuple:
    """(Trajectory, [Unmapped]) of one sample's record, however it was obtained (a log, a live transcript);
    `error` is the sample's error as the log's JSON holds it; `columns` are more of the row's own."""
    events = [_as_json(e) for e in events or ()]
    calls, unmapped = map_calls(events, messages, principal, where, trajectory_id)
    reviews, unreviewed = map_reviews(events, {call["call_id"] for call in calls}, where, trajectory_id)
    unmapped += unreviewed
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
        inspect_error=r.bounded(error.get("message")) if error is not None else None,
        inspect_reviews=reviews,
        **columns,
    )
    return r.Trajectory(row), unmapped


def map_sample(spec, sample: dict, source: str, principal: str, harness: HarnessVerdict | None = None) -> tuple:
    """(Trajectory or None, [Unmapped]) for one sample record (the log's JSON, its
    attachments resolved) of the eval `spec`; `harness` names the sample score
    kept as the harness's verdict."""
    where = _where(sample["id"], sample["epoch"])
    if not sample.get("events"):
        return None, [r.Unmapped(where, "sample_without_events",
                                 "the log holds no events for this sample (written with events excluded?)",
                                 unit=True)]
    limit = sample.get("limit")
    return sample_trajectory(
        run_id=spec.run_id, trajectory_id=f"{spec.eval_id}/{sample['id']}/{sample['epoch']}", agent=spec.model,
        task=spec.task, sample_id=sample["id"], events=sample["events"], messages=sample.get("messages"),
        limit=limit.get("type") if limit is not None else None, error=sample.get("error"), principal=principal,
        source=source, where=where, harness_verdict=harness.name if harness is not None else None,
        harness_misuse=harness.misuse(sample.get("scores")) if harness is not None else None)


def _where(sample_id, epoch) -> str:
    return f"sample {sample_id!r} epoch {epoch}"


# Inspect's marker for JSON nested deeper than it walks (inspect_ai.log._condense).
_MAX_DEPTH, _TOO_DEEP = 240, "<max nesting depth exceeded>"


def _resolve(value, attachments: dict, depth: int = 0):
    """`value` with its `attachment://HASH` strings replaced by the sample's
    attachments, as Inspect's reader resolves them (a missing one stays a reference)."""
    if isinstance(value, str):
        if value.startswith("tc://"):  # Inspect's older spelling
            value = "attachment://" + value[len("tc://"):]
        return attachments.get(value[len("attachment://"):], value) if value.startswith("attachment://") else value
    if isinstance(value, (dict, list)) and depth >= _MAX_DEPTH:
        return _TOO_DEEP
    if isinstance(value, dict):
        return {key: _resolve(item, attachments, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve(item, attachments, depth + 1) for item in value]
    return value


def _resolve_tool_call(tool_call: dict, attachments: dict) -> None:
    if isinstance(tool_call.get("arguments"), dict):
        tool_call["arguments"] = _resolve(tool_call["arguments"], attachments)


def resolve_attachments(sample: dict) -> dict:
    """The fields the mapping reads, resolved in place as Inspect's
    `resolve_attachments="core"` does: the tool calls' arguments in model
    outputs and messages, and ToolEvents' arguments. An ApprovalEvent's call
    is left as written (Inspect leaves it too)."""
    attachments = sample.get("attachments") or {}
    if not attachments:
        return sample
    for event in sample.get("events") or ():
        kind = event.get("event") if isinstance(event, dict) else None
        if kind == "tool" and isinstance(event.get("arguments"), dict):
            event["arguments"] = _resolve(event["arguments"], attachments)
        elif kind == "model":
            for choice in (event.get("output") or {}).get("choices") or ():
                for tool_call in choice.get("message", {}).get("tool_calls") or ():
                    _resolve_tool_call(tool_call, attachments)
    for message in sample.get("messages") or ():
        for tool_call in (message.get("tool_calls") or ()) if isinstance(message, dict) else ():
            _resolve_tool_call(tool_call, attachments)
    return sample


# The default bound on one sample's decompressed record (--max_sample_mib).
DEFAULT_MAX_SAMPLE_MIB = 256


class SampleTooLarge(Exception):
    """A sample record beyond the bound on one sample's size."""


# The bytes of an .eval log one work item reads: a big log is many work
# items (about 512 samples of AgentDojo's size each), each of which pays
# little for its own (a seek per sample).
BYTES_PER_PART = 2 * 2**20
# An .eval log's members that are sample records, and the header's.
_SAMPLES, _HEADER, _START = "samples/", "header.json", "_journal/start.json"


@dataclass(frozen=True)
class EvalFacts:
    """What mapping a sample needs of its log's header."""

    run_id: str
    eval_id: str
    model: str
    task: str


@dataclass(frozen=True, slots=True)
class Unit:
    """A sample and epoch of an .eval log: where its record lies, or (`lost`:
    reason, detail) why it has none to read."""

    sample_id: str | int
    epoch: int | str
    member: zipmembers.Member | None
    lost: tuple | None = None


@dataclass(frozen=True)
class Plan:
    """Where an .eval log's samples lie: its units with a record, by the
    offset of their member (`offsets`, ascending), and those without one
    (`lost`), with the log's FileSummary and what mapping needs of its header."""

    eval: EvalFacts
    summary: r.FileSummary
    offsets: tuple
    units: tuple
    lost: tuple


def _member_name(sample_id, epoch) -> str:
    return f"{_SAMPLES}{sample_id}_epoch_{epoch}.json"


def _header(handle, by_name: dict, damage: str | None):
    """The log's header as Inspect reads it: header.json, else (a log whose
    writer never finished it) the eval spec of _journal/start.json."""
    from inspect_ai.log import EvalLog

    if _HEADER in by_name:
        return EvalLog.model_validate(_parse_json(zipmembers.read(handle, by_name[_HEADER], _HEADER_LIMIT)))
    if _START in by_name:
        start = _parse_json(zipmembers.read(handle, by_name[_START], _HEADER_LIMIT))
        return EvalLog.model_validate({"eval": start["eval"]})
    raise ValueError(f"the log holds neither {_HEADER} nor {_START}" + (f" ({damage})" if damage else ""))


# Read whole: a header lists every sample id, far past one sample's bound.
_HEADER_LIMIT = 2**40


def plan_log(handle) -> Plan:
    """The Plan of the .eval log open as `handle` (seekable), from its zip
    directory, or, where that cannot be read (a cut or damaged log), from its
    members' local headers: the samples before the damage are read, and the
    header's samples with no whole record before it are lost units, named.
    The units are the samples and epochs the header lists, then the samples
    the log holds beyond them (Inspect's own reader returns those too)."""
    found = zipmembers.members(handle)
    by_name = {member.name: member for member in found.members}  # a name written twice: the last (Inspect's rule)
    header = _header(handle, by_name, found.damage)
    eval_facts, facts, expected = _listed(header)
    where_it_ends = f" before byte {found.end}, where its readable members end" if found.damage else ""
    absent = ("sample_not_in_log", _no_record(header) + where_it_ends)
    cut = found.cut.name if found.cut is not None else None
    truncated = ("sample_truncated", f"{cut}: the log ends inside its record (at byte {found.end} a member of "
                                     f"{found.cut.compressed_size} compressed bytes begins)") if found.cut else None

    def unit(sample_id, epoch, name: str) -> Unit:
        member = by_name.pop(name, None)
        lost = None if member is not None else truncated if name == cut else absent
        return Unit(sample_id, epoch, member, lost)

    units = [unit(sample_id, epoch, _member_name(sample_id, epoch)) for sample_id, epoch in expected]
    declared = len(units)
    beyond = [name for name in by_name if name.startswith(_SAMPLES) and name.endswith(".json")]
    if cut is not None and cut.startswith(_SAMPLES) and not any(u.lost is truncated for u in units):
        beyond.append(cut)
    for name in beyond:
        sample_id, _, epoch = name[len(_SAMPLES):-len(".json")].rpartition("_epoch_")
        units.append(unit(sample_id, epoch, name))
    if len(units) > declared:
        facts.update(_beyond_facts(len(units) - declared,
                                   [_where(u.sample_id, u.epoch) for u in units[declared:declared + _NAMED_BEYOND]]))
    if found.damage:
        facts["zip_directory_unreadable"] = r.bounded(found.damage)
        facts["members_read_before_byte"] = found.end
    readable = sorted(((u.member.offset, u) for u in units if u.member is not None), key=lambda pair: pair[0])
    return Plan(eval_facts, r.FileSummary(facts, units_declared=len(units)), tuple(offset for offset, _ in readable),
                tuple(u for _, u in readable), tuple(u for u in units if u.member is None))


def first_unit(plan: Plan, start: int) -> int:
    """The position, among the log's units in the order read_range yields
    them over the whole log, of the first unit a range beginning at `start`
    yields: the same for a unit however the log is cut into ranges."""
    return 0 if start == 0 else len(plan.lost) + bisect.bisect_left(plan.offsets, start)


def read_range(handle, source: str, plan: Plan, start: int, stop: int | None, principal: str,
               harness_verdict: str | None = None, max_sample_mib: float = DEFAULT_MAX_SAMPLE_MIB) -> Iterator:
    """The Trajectory and Unmapped items of the samples whose member begins in
    bytes [start, stop) of the .eval log open as `handle`, one sample at a
    time (stop None: to the end). The range that begins the file also yields
    the log's FileSummary and its units without a record: the ranges that
    cover a file yield each of its units once, however it is cut into ranges."""
    harness = HarnessVerdict.parse(harness_verdict) if harness_verdict is not None else None
    limit = int(max_sample_mib * 2**20)
    if start == 0:
        yield plan.summary
        for unit in plan.lost:
            reason, detail = unit.lost
            yield r.Unmapped(_where(unit.sample_id, unit.epoch), reason, detail, unit=True)
    first = bisect.bisect_left(plan.offsets, start)
    last = len(plan.offsets) if stop is None else bisect.bisect_left(plan.offsets, stop)
    for unit in plan.units[first:last]:
        yield from _import_sample(lambda member=unit.member: _member_record(handle, member, limit),
                                  _where(unit.sample_id, unit.epoch), plan.eval, source, principal, harness)


def read_log(local_path: str, source: str, principal: str, harness_verdict: str | None = None,
             max_sample_mib: float = DEFAULT_MAX_SAMPLE_MIB) -> Iterator:
    """FileSummary, then Trajectory and Unmapped items of one log, one sample in memory at a time.

    The log is opened once. An .eval log's sample members are read one at a
    time (plan_log, read_range), each parsed as JSON and mapped from the
    parsed record (Inspect's pydantic models are only asked, for a record
    that cannot be mapped, what is wrong with it); a .json log's records
    are found by a scan of the document (jsonsamples) and each read and
    parsed on its own, in the file's order. A sample that cannot be mapped
    fails alone, as does an .eval record that cannot be read; a .json
    record that is not JSON (the document then is not either) stops the
    file there, what came before it staying imported. An .eval record
    larger than `max_sample_mib` decompressed is not read at all. The file's units are the samples and
    epochs its header lists, plus the samples it holds beyond them
    (Inspect's own reader returns those too), which are imported and named
    in the FileSummary. Inspect logs name no acting identity: every
    principal is the default. `harness_verdict` (HarnessVerdict.parse)
    names the sample score kept as the harness's verdict.
    """
    if local_path.endswith(".eval"):
        with open(local_path, "rb") as handle:
            yield from read_range(handle, source, plan_log(handle), 0, None, principal, harness_verdict,
                                  max_sample_mib)
        return
    yield from _read_json_log(local_path, source, principal, harness_verdict)


def _read_json_log(local_path: str, source: str, principal: str, harness_verdict: str | None) -> Iterator:
    from inspect_ai.log import EvalLog

    harness = HarnessVerdict.parse(harness_verdict) if harness_verdict is not None else None
    with open(local_path, "rb") as handle:
        found = jsonsamples.layout(handle)
        document = _parse_json(found.header)
        if not isinstance(document, dict):
            raise ValueError("not an Inspect log (a JSON object)")
        header = EvalLog.model_validate(document)
        try:
            eval_facts, facts, expected = _listed(header)
        except HeaderBeyondBound:
            yield r.FileSummary(units_declared=len(found.spans))  # the file is refused: its records are its units
            raise
        missing = dict.fromkeys(expected)
        declared = len(missing)
        yield r.FileSummary(facts, units_declared=declared)
        beyond, unmatched = 0, 0
        beyond_first: list[str] = []
        # The entries of `samples` in the file's order, each read and parsed on its own; a
        # record the header does not list (or lists once, held twice) is one beyond it.
        for index, (start, stop) in enumerate(found.spans):
            handle.seek(start)
            record = _parse_json(handle.read(stop - start))
            unusable = _unusable(record)
            if unusable is not None:
                unmatched += 1
                reason, detail = unusable
                yield r.Unmapped(f"samples[{index}]", reason, detail, unit=True)
                continue
            key = (record["id"], record.get("epoch"))
            if key in missing:
                del missing[key]
            else:
                beyond += 1
                beyond_first += [_where(*key)][:_NAMED_BEYOND - len(beyond_first)]
            yield from _import_sample(lambda record=record: _migrated(record), _where(*key), eval_facts, source,
                                      principal, harness)
    # An entry that matches no unit of the header stands for one of the header's units that has no
    # record, where one is left (which, it cannot say); beyond those, it is one more unit.
    absent = list(missing)[:max(len(missing) - unmatched, 0)]
    for sample_id, epoch in absent:
        yield r.Unmapped(_where(sample_id, epoch), "sample_not_in_log", _no_record(header), unit=True)
    extra = beyond + max(unmatched - len(missing), 0)
    if extra or unmatched:
        more = {"entries_unmatched": unmatched} if unmatched else {}
        if beyond:
            more.update(_beyond_facts(beyond, beyond_first))
        yield r.FileSummary(more, units_declared=declared + extra)


# The most units (samples times epochs) a header may declare: each one the file
# does not hold is an unmapped entry, so a header beyond it would decide the
# import's cost instead of the file (10,000,000 epochs in a log of 95 KB).
MAX_DECLARED_UNITS = 1_000_000


class HeaderBeyondBound(ValueError):
    """A header that declares more units than MAX_DECLARED_UNITS."""


def _listed(header) -> tuple[EvalFacts, dict, list]:
    """What both kinds of log take from a header: the facts mapping a sample
    needs, the file's facts, and the (sample id, epoch) units it lists. A
    header of an older Inspect (0.3.41) lists no sample ids: it declares
    none, and the samples the file holds are read (as Inspect's reader reads
    them), the fact `header_lists_no_sample_ids` saying so."""
    spec = header.eval
    facts = {"status": header.status, "eval_id": spec.eval_id, "task": spec.task}
    sample_ids = spec.dataset.sample_ids
    if sample_ids is None:
        facts["header_lists_no_sample_ids"] = True
        sample_ids = []
    epochs = spec.config.epochs or 1
    if len(sample_ids) * epochs > MAX_DECLARED_UNITS:
        raise HeaderBeyondBound(f"the header declares {len(sample_ids)} sample(s) x {epochs} epoch(s), more than "
                                f"the {MAX_DECLARED_UNITS} units a log may declare: not read")
    units = [(sample_id, epoch) for sample_id in sample_ids for epoch in range(1, epochs + 1)]
    return EvalFacts(spec.run_id, spec.eval_id, spec.model, spec.task), facts, units


def _unusable(record) -> tuple | None:
    """(reason, detail) where an entry of a .json log's samples cannot be matched to
    its header: not a record (a JSON object), or an id or epoch that is no key."""
    if not isinstance(record, dict):
        return "sample_not_a_record", f"an entry of samples that is {_json_type(record)}, not an object"
    sample_id, epoch = record.get("id"), record.get("epoch")
    if isinstance(sample_id, bool) or not isinstance(sample_id, (str, int)):
        return "sample_id_unusable", r.bounded(f"a sample whose id is {_json_kind(sample_id)}, "
                                               "not a string or an integer")
    if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int)):
        return "sample_id_unusable", r.bounded(f"a sample whose epoch is {_json_kind(epoch)}, not an integer")
    return None


def _json_type(value) -> str:
    """What JSON calls the type of a parsed value."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _json_kind(value) -> str:
    return "missing or null" if value is None else f"{_json_type(value)} {json.dumps(value)[:80]}"


def _migrated(record: dict) -> dict:
    """A sample record of an older Inspect as Inspect's reader migrates it: a
    `transcript` ({events, content}) is the sample's `events` and `attachments`,
    a single `score` its only score."""
    transcript = record.pop("transcript", None)
    if isinstance(transcript, dict) and "events" not in record:
        record["events"] = transcript.get("events")
        record.setdefault("attachments", transcript.get("content") or {})
    if "score" in record and "scores" not in record:
        record["scores"] = {_SCORER_PLACEHOLDER: record.pop("score")}
    return record


# The name Inspect gives a single `score` of an older log (inspect_ai.log._log.SCORER_PLACEHOLDER).
_SCORER_PLACEHOLDER = "88F74D2C"


def _no_record(header) -> str:
    return f"the header lists it; the log (status {header.status}) holds no record of it"


def _beyond_facts(count: int, positions: list) -> dict:
    """The file's facts on the `count` samples it holds beyond its header, `positions` theirs in order."""
    return {"samples_beyond_header": count, "samples_beyond_header_first": positions[:_NAMED_BEYOND]}


# How many of the samples beyond a header the file's report names.
_NAMED_BEYOND = 20


def _import_sample(read, where: str, spec: EvalFacts, source: str, principal: str, harness) -> Iterator:
    """The Trajectory and Unmapped items of one sample; `read()` returns its record."""
    try:
        record = read()
    except SampleTooLarge as error:
        yield r.Unmapped(where, "sample_too_large", str(error), unit=True)
        return
    except Exception as error:  # a corrupt member: bad zstd data, a CRC mismatch, not JSON
        yield r.Unmapped(where, "sample_unreadable", r.bounded(f"{type(error).__name__}: {error}"), unit=True)
        return
    try:
        mapped, unmapped = map_sample(spec, resolve_attachments(record), source, principal, harness)
    except Exception as error:
        yield _why_not_mapped(record, where, error)
        return
    yield from unmapped
    if mapped is not None:
        yield mapped


def _why_not_mapped(record, where: str, error: Exception) -> r.Unmapped:
    """A record the mapping failed on: unreadable where Inspect's own model
    rejects it too (its message says why), else not mapped."""
    from inspect_ai.log import EvalSample

    try:
        EvalSample.model_validate(record)
    except Exception as invalid:
        return r.Unmapped(where, "sample_unreadable", r.bounded(f"{type(invalid).__name__}: {invalid}"), unit=True)
    return r.Unmapped(where, "sample_not_mapped", r.bounded(f"{type(error).__name__}: {error}"), unit=True)


def _parse_json(data: bytes):
    """JSON as Inspect writes it: orjson, and the standard parser for the
    NaN and Infinity Inspect writes (an unscored sample's value) that orjson refuses."""
    import orjson

    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _member_record(handle, member: zipmembers.Member, limit: int) -> dict:
    """A sample member's record, no more than `limit` bytes of it decompressed."""
    import inspect_ai.log  # noqa: F401  (registers the zstd codec Inspect writes members with)

    too_large = f"{member.name}: more than the bound of {limit} bytes decompressed (--max_sample_mib)"
    if member.size > limit:  # the zip's own entry says so: nothing decompressed
        raise SampleTooLarge(too_large)
    data = zipmembers.read(handle, member, limit)  # a zip can understate a member's size
    if len(data) > limit:
        raise SampleTooLarge(too_large)
    record = _parse_json(data)
    if not isinstance(record, dict):
        raise ValueError(f"{member.name} holds no sample record")
    return _migrated(record)
