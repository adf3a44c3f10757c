"""The OTel importer's acting identity: the first of an ordered list of
attributes a span sets (enduser.id, user.id, gen_ai.agent.identity.id), then
its resource's; vendors' prefixed names given with --identity_attributes; the
manifest counts which attribute named each principal. Spans are made with
the OTel SDK and exported with its own OTLP encoder."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from litmus_score.importers import otel
from tests.importers_support import check_accounting, read_rows, require, run_import

require("opentelemetry.proto")
from google.protobuf import json_format  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

pytestmark = pytest.mark.slow

# One tool span per trace: (its identity attributes, its resource's).
SPANS = [
    ({"enduser.id": "alice"}, {}),
    ({"user.id": "bob"}, {}),
    ({"gen_ai.agent.identity.id": "agent-7"}, {}),
    ({"gen_ai.agent.identity.id": "agent-7", "user.id": "bob", "enduser.id": "alice"}, {}),
    ({"user.id": "bob"}, {"enduser.id": "service-account"}),
    ({}, {"user.id": "service-account"}),
    ({"acme.user_id": "carol"}, {}),
    ({}, {}),
]
DEFAULT = "agent"


def expected(names) -> list:
    """Per span, (principal, attribute) as the importer's rule says: the span's first attribute among `names`, else
    its resource's, else the default."""
    found = []
    for attributes, resource in SPANS:
        hit = next(((attributes[n], n) for n in names if n in attributes), None)
        hit = hit or next(((resource[n], f"resource {n}") for n in names if n in resource), (DEFAULT, None))
        found.append(hit)
    return found


def write_traces(path):
    lines = []
    for position, (attributes, resource) in enumerate(SPANS):
        exporter = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": "desk", **resource}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        with provider.get_tracer("hand-made").start_as_current_span("tool", attributes={
                "openinference.span.kind": "TOOL", "tool.name": "lookup", "input.value": json.dumps({"n": position}),
                **attributes}):
            pass
        lines.append(json.dumps(json_format.MessageToDict(encode_spans(exporter.get_finished_spans()))))
    path.write_text("\n".join(lines) + "\n")
    return path


def imported(tmp_path, *flags):
    output = tmp_path / "out"
    assert run_import("otel", [write_traces(tmp_path / "traces.jsonl")], output, "--principal", DEFAULT, *flags) == 0
    commits = [row["calls"][0]["commit"] for row in read_rows(output / "trajectories")]
    principals = {json.loads(commit["resolved_arguments"])["n"]: commit["principal"] for commit in commits}
    return [principals[n] for n in range(len(SPANS))], check_accounting(output)


@pytest.mark.parametrize("names", [None, "acme.user_id,user.id,enduser.id"])
def test_the_first_identity_attribute_names_the_principal_and_the_manifest_says_which(tmp_path, names):
    tried = otel.IDENTITY_ATTRIBUTES if names is None else tuple(names.split(","))
    principals, manifest = imported(tmp_path, *([] if names is None else ["--identity_attributes", names]))
    want = expected(tried)
    assert principals == [principal for principal, _ in want]
    counts = dict(Counter(attribute for _, attribute in want if attribute))
    # An execution no chat span proposed names the proposal's principal too.
    assert manifest["principal"]["attribute"] == {"proposal": counts, "commit": counts}
    assert manifest["principal"]["identity_attributes"] == list(tried)
    named = sum(counts.values())
    assert manifest["principal"]["source"]["commit"] == {"log": named, "default": len(SPANS) - named}


def test_the_default_order_reads_every_convention():
    assert otel.IDENTITY_ATTRIBUTES == ("enduser.id", "user.id", "gen_ai.agent.identity.id")
    assert {principal for principal, _ in expected(otel.IDENTITY_ATTRIBUTES)} == {
        "alice", "bob", "agent-7", "service-account", DEFAULT}


def test_identity_attributes_naming_none_is_refused(tmp_path, capsys):
    path = write_traces(tmp_path / "traces.jsonl")
    assert run_import("otel", [path], tmp_path / "out", "--identity_attributes", " , ") == 2
    assert "--identity_attributes names no attribute" in capsys.readouterr().err
    assert run_import("agentdojo", [path], tmp_path / "out2", "--identity_attributes", "user.id") == 2
