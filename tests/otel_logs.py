"""OTLP/JSON trace files from a real agent framework's own instrumentation.

pydantic-ai (scripted with a FunctionModel, no LLM) emits GenAI spans into
the OpenTelemetry SDK; they are encoded with the SDK's OTLP encoder and
written as OTLP/JSON lines, as the Collector's file exporter writes them
(trace and span ids in hex).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from google.protobuf import json_format
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ModelRetry, ToolDenied
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

ATTACKER = "ATTACKER-IBAN"


def _script(messages, info):
    """Turn 1: check the balance, pay the attacker (needs approval), wipe the logs (fails).
    Later turns: a final answer."""
    if len(messages) == 1:
        return ModelResponse(parts=[
            ToolCallPart("get_balance", {}, tool_call_id="call-balance"),
            ToolCallPart("send_money", {"to": ATTACKER, "amount": 5000}, tool_call_id="call-send"),
            ToolCallPart("delete_logs", {"path": "/var/log"}, tool_call_id="call-delete"),
        ])
    return ModelResponse(parts=[TextPart("done")])


def _agent() -> Agent:
    agent = Agent(FunctionModel(_script, model_name="scripted"), name="banker",
                  output_type=[str, DeferredToolRequests])

    @agent.tool_plain
    def get_balance() -> float:
        """The balance."""
        return 1234.5

    @agent.tool_plain(requires_approval=True)
    def send_money(to: str, amount: float) -> str:
        """Send money."""
        return f"sent {amount} to {to}"

    @agent.tool_plain(retries=1)
    def delete_logs(path: str) -> str:
        """Delete logs."""
        raise ModelRetry(f"{path} is read-only")

    return agent


def _hex_ids(span: dict) -> None:
    for key in ("traceId", "spanId", "parentSpanId"):
        if span.get(key):
            span[key] = base64.b64decode(span[key]).hex()


def _in_memory_provider(resource=None):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=resource) if resource is not None else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def write_lines(spans, path: Path, damage=None) -> Path:
    """Each span as an OTLP/JSON line (hex ids, as the Collector writes them);
    `damage(encoded span dict)` may change a span first, as a faulty exporter would."""
    lines = []
    for span in spans:
        document = json_format.MessageToDict(encode_spans([span]))
        for resource in document["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for encoded in scope["spans"]:
                    _hex_ids(encoded)
                    if damage is not None:
                        damage(encoded)
        lines.append(json.dumps(document))
    path.write_text("\n".join(lines) + "\n")
    return path


def write_trace_file(path: Path) -> Path:
    """Runs the agent (its send_money call is denied at approval) and writes its spans as OTLP/JSON lines."""
    provider, exporter = _in_memory_provider()
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider, include_content=True))
    try:
        agent = _agent()
        first = agent.run_sync("pay my rent")
        requests = first.output
        assert isinstance(requests, DeferredToolRequests), requests
        denied = DeferredToolResults(approvals={call.tool_call_id: ToolDenied("not approved")
                                                for call in requests.approvals})
        agent.run_sync(message_history=first.all_messages(), deferred_tool_results=denied)
    finally:
        Agent.instrument_all(False)
    return write_lines(exporter.get_finished_spans(), path)


# The identity the runtime resolves when the tool runs: set on the tool's own span only.
SESSION_PRINCIPAL = "session-admin"


def _escalating_script(messages, info):
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("rotate_keys", {"service": "billing"}, tool_call_id="call-rotate")])
    return ModelResponse(parts=[TextPart("done")])


def write_escalation_file(path: Path) -> Path:
    """An agent whose one call runs under the session's principal: the tool's runtime
    records `enduser.id` on its execute_tool span; the chat span names no one."""
    provider, exporter = _in_memory_provider()
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider, include_content=True))
    try:
        agent = Agent(FunctionModel(_escalating_script, model_name="scripted"), name="keeper")

        @agent.tool_plain
        def rotate_keys(service: str) -> str:
            """Rotate a service's keys."""
            trace.get_current_span().set_attribute("enduser.id", SESSION_PRINCIPAL)
            return "rotated"

        agent.run_sync("rotate the billing keys")
    finally:
        Agent.instrument_all(False)
    return write_lines(exporter.get_finished_spans(), path)


def write_traced_call_file(path: Path, damage=None, call_id: str = "call-wipe") -> Path:
    """GenAI spans as frameworks without conversation ids emit them (grouped by
    trace): a chat span proposing `wipe_disk` and its execute_tool span."""
    provider, exporter = _in_memory_provider()
    tracer = provider.get_tracer("hand-made")
    proposal = [{"role": "assistant", "parts": [
        {"type": "tool_call", "id": "call-wipe", "name": "wipe_disk", "arguments": {"device": "/dev/sda"}}]}]
    with tracer.start_as_current_span("invoke_agent ops", attributes={"gen_ai.operation.name": "invoke_agent",
                                                                       "gen_ai.agent.name": "ops"}):
        with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat",
                                                               "gen_ai.output.messages": json.dumps(proposal)}):
            pass
        with tracer.start_as_current_span("execute_tool wipe_disk", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "wipe_disk",
                "gen_ai.tool.call.id": call_id, "gen_ai.tool.call.arguments": '{"device": "/dev/sda"}'}):
            pass
    return write_lines(exporter.get_finished_spans(), path, damage)


def without_trace_id_on(span_name: str):
    """A `damage` that drops the trace id of the span named `span_name`."""
    def damage(span: dict) -> None:
        if span["name"] == span_name:
            del span["traceId"]

    return damage
