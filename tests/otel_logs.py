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


def write_trace_file(path: Path) -> Path:
    """Runs the agent (its send_money call is denied at approval) and writes its spans as OTLP/JSON lines."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
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
    lines = []
    for span in exporter.get_finished_spans():
        document = json_format.MessageToDict(encode_spans([span]))
        for resource in document["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for encoded in scope["spans"]:
                    _hex_ids(encoded)
        lines.append(json.dumps(document))
    path.write_text("\n".join(lines) + "\n")
    return path
