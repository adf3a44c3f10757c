"""OpenTelemetry traces (OTLP/JSON, one TracesData per line) -> one trajectory per conversation.

Each line is parsed into the official `opentelemetry-proto` TracesData
message with protobuf's json_format. OTLP/JSON writes trace and span ids in
hex, protobuf's JSON mapping expects base64: ids are converted first (both
spellings are read).

GenAI semantic conventions: `chat` spans' `gen_ai.output.messages` tool
calls are the proposals; `execute_tool` spans (and OpenInference TOOL
spans) the commits. Spans are grouped by `gen_ai.conversation.id`, else by
trace, within one file. A proposed call with no execution span (a denied
approval, a run that stopped) has no commit; an execution whose proposal no
span shows keeps null proposal arguments rather than the executed ones.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import datetime, timezone

import pyarrow as pa

from litmus_score.importers import rows as r

FORMAT = "otel"
LIBRARY = "opentelemetry-proto"
UNITS = "conversations"
SUFFIXES = (".json", ".jsonl")
EXTRA_FIELDS = [pa.field("otel_trace_ids", pa.list_(pa.string()))]
OPTIONS = ("identity_attributes",)
# Where the GenAI conventions (still moving) put the acting identity, in the
# order they are tried: the span's own attributes, then its resource's.
# Vendors' prefixed copies are named with --identity_attributes.
IDENTITY_ATTRIBUTES = ("enduser.id", "user.id", "gen_ai.agent.identity.id")
# The key a span's attributes hold its acting identity under, once found:
# (identity, the attribute that named it, "resource " before a resource's), or None.
_ACTOR = "litmus.acting_identity"

OBSERVES = {
    "run_id": "resource service.name (else 'otel')",
    "trajectory_id": "gen_ai.conversation.id, else trace id (a span without one is unmapped)",
    "agent": "gen_ai.agent.name, else gen_ai.request.model",
    "task_id": None,
    "task_category": None,
    "episode_outcome": "invoke_agent span status",
    "verbal_stance": None,
    "calls.call_id": "tool_call part id / gen_ai.tool.call.id",
    "calls.tool": "tool_call part name / gen_ai.tool.name / tool.name",
    "calls.arguments": "chat span gen_ai.output.messages tool_call arguments",
    "calls.proposal.resolved_arguments": "chat span gen_ai.output.messages tool_call arguments",
    "calls.proposal.principal": "chat span identity attribute (enduser.id, user.id, gen_ai.agent.identity.id, "
                                "first found), else its resource's, else the default",
    "calls.proposal.policy_verdict": None,
    "calls.proposal.at": "chat span end time",
    "calls.commit.resolved_arguments": "gen_ai.tool.call.arguments / input.value, where captured",
    "calls.commit.principal": "execute_tool span identity attribute (as the proposal's), else its resource's, "
                              "else the default",
    "calls.commit.policy_verdict": None,
    "calls.commit.outcome": "span status, error.type",
    "calls.commit.status_code": None,
    "calls.commit.state_mutated": None,
    "calls.commit.at": "execute_tool span end time",
}

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")
_ID_BYTES = {"traceId": 16, "spanId": 8, "parentSpanId": 8}
_STATUS_ERROR = 2  # Status.STATUS_CODE_ERROR


def _base64_id(value: str, size: int) -> str:
    """An OTLP/JSON id (hex) as protobuf's JSON mapping wants it (base64); base64 passes."""
    if len(value) == 2 * size:
        try:
            return base64.b64encode(binascii.unhexlify(value)).decode("ascii")
        except binascii.Error:
            pass
    return value


def _with_base64_ids(document: dict) -> dict:
    for resource in document.get("resourceSpans") or []:
        for scope in resource.get("scopeSpans") or []:
            for span in scope.get("spans") or []:
                for key in _ID_FIELDS:
                    if isinstance(span.get(key), str) and span[key]:
                        span[key] = _base64_id(span[key], _ID_BYTES[key])
                for link in span.get("links") or []:
                    for key in ("traceId", "spanId"):
                        if isinstance(link.get(key), str) and link[key]:
                            link[key] = _base64_id(link[key], _ID_BYTES[key])
    return document


def _value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in any_value.kvlist_value.values}
    return getattr(any_value, kind) if kind else None


def _attributes(key_values) -> dict:
    return {kv.key: _value(kv.value) for kv in key_values}


def _time(nanos: int):
    return datetime.fromtimestamp(nanos / 1e9, tz=timezone.utc) if nanos else None


def _json_object(text):
    """A captured arguments value as a dict, or None where it is not one."""
    if isinstance(text, dict):
        return text
    if not isinstance(text, str):
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def parse_lines(lines) -> Iterator:
    """(line number, resource attributes, Span) of every span; ValueError naming the line of a fault."""
    from google.protobuf import json_format
    from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            document = json.loads(line)
            if not isinstance(document, dict):
                raise ValueError("not a JSON object")
            traces = json_format.ParseDict(_with_base64_ids(document), TracesData())
        except (ValueError, json_format.ParseError) as error:
            raise ValueError(f"line {number}: not OTLP/JSON traces: {error}") from None
        for resource_spans in traces.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    yield number, resource, span


def _kind(attributes: dict):
    operation = attributes.get("gen_ai.operation.name")
    if operation in ("chat", "execute_tool", "invoke_agent"):
        return operation
    span_kind = attributes.get("openinference.span.kind")
    if span_kind == "TOOL":
        return "execute_tool"
    if span_kind == "AGENT":
        return "invoke_agent"
    return None


def _outcome(span, attributes: dict) -> str:
    error = attributes.get("error.type")
    if span.status.code == _STATUS_ERROR or error:
        return r.REJECTED if error and "permission" in str(error).lower() else r.ERROR
    return r.COMMITTED


def identity_attributes(names) -> tuple:
    """The ordered attribute names from `--identity_attributes` text (a
    comma-separated list) or a sequence; ValueError if it names none."""
    if isinstance(names, str):
        names = names.split(",")
    found = tuple(name.strip() for name in names if name.strip())
    if not found:
        raise ValueError("--identity_attributes names no attribute; give NAME[,NAME...] "
                         f"(default {','.join(IDENTITY_ATTRIBUTES)})")
    return found


def _acting_identity(attributes: dict, resource: dict, names) -> tuple | None:
    """(identity, attribute) from the first of `names` a span sets, else the
    first its resource sets (attribute then prefixed "resource "); None if none does."""
    for where, holder in (("", attributes), ("resource ", resource)):
        for name in names:
            value = holder.get(name)
            if value:
                return str(value), where + name
    return None


def _principal(attributes: dict, principal: str) -> tuple:
    """(acting identity, the attribute that named it, None for the default)."""
    found = attributes.get(_ACTOR)
    return found if found else (principal, None)


def _commit(span, attributes: dict, principal: str) -> tuple:
    """(commit of an execution span, the attribute its principal came from or None).

    The principal is the execution span's: an identity the runtime resolved
    when the tool ran (a session principal with more rights) belongs there,
    not on the chat span that proposed the call."""
    ran = attributes.get("gen_ai.tool.call.arguments", attributes.get("input.value"))
    who, attribute = _principal(attributes, principal)
    return r.commit(r.arguments_json(_json_object(ran)), who, _outcome(span, attributes), None,
                    _time(span.end_time_unix_nano)), attribute


def map_conversation(key: str, spans, source: str, principal: str) -> tuple:
    """(Trajectory, [Unmapped]) from the GenAI spans of one conversation: (line, resource, span, attributes, kind)."""
    spans = sorted(spans, key=lambda s: (s[2].start_time_unix_nano, s[2].end_time_unix_nano))
    proposals, executions, unmapped = {}, {}, []
    agent = run_id = None
    failed = False

    def lose(line, span, reason: str, detail: str) -> None:
        unmapped.append(r.Unmapped(f"line {line} span {span.name}", reason, r.bounded(detail), call=True,
                                   trajectory_id=key))

    for line, resource, span, attributes, kind in spans:
        run_id = run_id or resource.get("service.name")
        agent = agent or attributes.get("gen_ai.agent.name")
        if kind == "invoke_agent":
            failed = failed or span.status.code == _STATUS_ERROR
        elif kind == "chat":
            agent = agent or attributes.get("gen_ai.request.model")
            try:
                messages = json.loads(attributes.get("gen_ai.output.messages") or "[]")
            except ValueError:
                lose(line, span, "unreadable_output_messages",
                     "gen_ai.output.messages is not JSON: the calls it proposed, if any, are lost")
                continue
            parts = [part for message in (messages if isinstance(messages, list) else [])
                     for part in ((message.get("parts") or []) if isinstance(message, dict) else [])
                     if isinstance(part, dict) and part.get("type") == "tool_call"]
            for position, part in enumerate(parts):
                # A call without an id keeps one of its own: answered by no execution span.
                call_id = part.get("id") if part.get("id") is not None else f"span-{span.span_id.hex()}.{position}"
                if call_id in proposals:
                    lose(line, span, "duplicate_call_id", f"call id {call_id!r} proposed again")
                    continue
                proposals[call_id] = (part, span, attributes)
        elif kind == "execute_tool":
            call_id = attributes.get("gen_ai.tool.call.id") or attributes.get("tool_call.id")
            call_id = str(call_id) if call_id else f"span-{span.span_id.hex()}"
            if call_id in executions:
                lose(line, span, "duplicate_call_id", f"call id {call_id!r} executed again")
                continue
            executions[call_id] = (span, attributes)

    calls: list[dict] = []
    attributes_used: dict[str, Counter] = {r.PROPOSAL: Counter(), r.COMMIT: Counter()}

    def named_by(context: str, attribute: str | None) -> None:
        if attribute:
            attributes_used[context][attribute] += 1

    for call_id, (part, chat, chat_attributes) in proposals.items():
        arguments = r.arguments_json(_json_object(part.get("arguments")))
        who, attribute = _principal(chat_attributes, principal)
        named_by(r.PROPOSAL, attribute)
        commit = None
        if call_id in executions:
            commit, attribute = _commit(*executions.pop(call_id), principal)
            named_by(r.COMMIT, attribute)
        calls.append(r.call(str(call_id), len(calls), part.get("name"), arguments,
                            r.context(arguments, who, _time(chat.end_time_unix_nano)), commit))
    for call_id, (span, attributes) in executions.items():
        # An execution no chat span proposed: its proposal is not in the trace.
        commit, attribute = _commit(span, attributes, principal)
        named_by(r.PROPOSAL, attribute)
        named_by(r.COMMIT, attribute)
        calls.append(r.call(call_id, len(calls), attributes.get("gen_ai.tool.name") or attributes.get("tool.name"),
                            None, r.context(None, commit["principal"]), commit))
    traces = sorted({s[2].trace_id.hex() for s in spans})
    row = r.trajectory(
        run_id=run_id or "otel", trajectory_id=key, agent=agent, task_id=None, task_category=None,
        episode_outcome=r.ERROR if failed else r.COMPLETED, calls=calls, source_log=source,
        source_position=f"lines {spans[0][0]}-{spans[-1][0]}", lost=r.lost_calls(unmapped), otel_trace_ids=traces)
    from_log = {context: sum(used.values()) for context, used in attributes_used.items()}
    return r.Trajectory(row, principals_from_log=from_log, principal_attributes=attributes_used), unmapped


def _has_trace_id(span) -> bool:
    # OTLP: 16 bytes, all-zero is invalid.
    return len(span.trace_id) == _ID_BYTES["traceId"] and any(span.trace_id)


def _orphan(line, span, kind: str, owner) -> r.Unmapped:
    """A GenAI span without a trace id: unmapped, and a lost call of `owner` (or of no trajectory)."""
    lost = "its call" if kind == "execute_tool" else "the calls it proposed" if kind == "chat" else "its outcome"
    return r.Unmapped(f"line {line} span {span.name}", "span_without_trace_id",
                      f"a {kind} span with no valid trace id: {lost} not imported", call=kind != "invoke_agent",
                      trajectory_id=owner)


def read_log(local_path: str, source: str, principal: str,
             identity_attributes: tuple = IDENTITY_ATTRIBUTES) -> Iterator:
    """The file's conversations as Trajectory items (the whole file is parsed
    first: a conversation's spans come in any order).

    A GenAI span without a valid trace id is invalid OTLP: it is unmapped,
    never grouped (no phantom trajectory). Where its conversation id or its
    call id names a trajectory, that trajectory counts it as a lost call and
    is left unscored; otherwise no trajectory accounts for it and the file's
    import is incomplete. A span's acting identity is read from the first of
    `identity_attributes` it sets, else the first its resource sets."""
    groups, orphans = defaultdict(list), []
    counts = {"spans": 0, "spans_genai": 0}
    with open(local_path, encoding="utf-8") as handle:
        for line, resource, span in parse_lines(handle):
            counts["spans"] += 1
            attributes = _attributes(span.attributes)
            kind = _kind(attributes)
            if kind is None:
                continue
            counts["spans_genai"] += 1
            # Set over whatever the log holds under the key: the log cannot forge where an identity came from.
            attributes[_ACTOR] = _acting_identity(attributes, resource, identity_attributes)
            if not _has_trace_id(span):
                orphans.append((line, span, attributes, kind))
                continue
            key = attributes.get("gen_ai.conversation.id") or f"trace-{span.trace_id.hex()}"
            groups[key].append((line, resource, span, attributes, kind))
    yield r.FileSummary(counts)
    mapped = {key: map_conversation(key, groups[key], source, principal) for key in sorted(groups)}
    holder = {call["call_id"]: key for key, (trajectory, _) in mapped.items() for call in trajectory.row["calls"]}
    for line, span, attributes, kind in orphans:
        conversation = attributes.get("gen_ai.conversation.id")
        call_id = attributes.get("gen_ai.tool.call.id") or attributes.get("tool_call.id")
        owner = conversation if conversation in mapped else holder.get(call_id)
        entry = _orphan(line, span, kind, owner)
        if owner is not None:
            mapped[owner][0].row["call_count"] += entry.call
        yield entry
    for trajectory, unmapped in mapped.values():
        yield from unmapped
        yield trajectory
