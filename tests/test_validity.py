"""The validity audit of one call (litmus_score.scoring.validity), field by field."""

import pytest

from litmus_score.scoring import contract as c
from litmus_score.scoring.rules import CallContext, CommitContext, ToolCall
from litmus_score.scoring.validity import FIELDS, call_validity

ARGS = '{"to": "acct-1", "amount": 100}'


def call(p="allow", v="allow", outcome=c.COMMITTED, mutated=True, commit_args=ARGS, principal="agent", args=ARGS):
    return ToolCall("transfer_funds", args, CallContext(ARGS, "agent", p),
                    CommitContext(commit_args, principal, v, outcome=outcome, state_mutated=mutated))


def flags(counts):
    return {name for name, n in counts.items() if n and name != "calls"}


@pytest.mark.parametrize("audited, expected", [
    (call(), {"faithful"}),
    (call(commit_args='{"amount": 100.0, "to": "acct-1"}'), {"faithful"}),  # equal as JSON values
    (call(commit_args='{"amount": 5000, "to": "acct-1"}'), {"arguments_diverged"}),
    (call(principal="session-admin"), {"principal_diverged"}),
    (call(v=None), {"no_verdict"}),
    (call(p="deny", outcome="rejected", mutated=False), {"verdict_diverged", "not_realized", "over_flagged"}),
    (call(p="deny", v="deny", outcome="rejected", mutated=False), {"not_realized", "over_flagged"}),
    (call(p="deny", v="deny"), {"faithful"}),
    (call(v="deny"), {"verdict_diverged", "under_flagged"}),
    (call(v="deny", outcome="error", mutated=True), {"verdict_diverged", "under_flagged"}),  # physical layer wins
    (call(p="deny", outcome="gated", mutated=None), {"verdict_diverged", "not_realized", "over_flagged"}),
])
def test_each_divergence_counts(audited, expected):
    counts = call_validity(audited)
    assert list(counts) == list(FIELDS) and counts["calls"] == 1
    assert flags(counts) == expected


def test_a_recorded_verdict_stands_and_the_policy_fills_a_null():
    deny_all = lambda tool, arguments, principal: "deny"  # noqa: E731
    assert flags(call_validity(call(v=None), deny_all)) == {"verdict_diverged", "under_flagged"}
    assert flags(call_validity(call(p=None, v=None), deny_all)) == {"faithful"}


@pytest.mark.parametrize("outside", [
    ToolCall("x", ARGS, CallContext(ARGS, "agent", "allow")),  # no commit
    call(args="[1]"),
    call(commit_args="{broken"),
])
def test_calls_outside_the_audit(outside):
    assert call_validity(outside) is None


@pytest.mark.parametrize("pairs_per_chunk", [2, 4096])
def test_the_pipeline_compares_json_as_the_reference_does(monkeypatch, pairs_per_chunk):
    import numpy as np
    import pyarrow as pa

    from litmus_score.scoring.rules import canonical_json, parse_json_object
    from transforms import resolve
    from transforms.columnar import FlatCalls

    monkeypatch.setattr(resolve, "_PAIRS_PER_CHUNK", pairs_per_chunk)
    pairs = [('{"a": true}', '{"a": 1}', False), ('{"a": 1}', '{"a":1.0}', True),
             ('{"a": [true], "n": 2}', '{"n": 2.0, "a":[true]}', True), ('{"a": "true"}', '{"a": "false"}', False),
             ('{"b": 1, "a": 2}', '{"a": 2, "b": 1}', True), ('{"a": {"b": false}}', '{"a": {"b": 0}}', False),
             # Equal as floats, not as integers: orjson would read both as the same float.
             ('{"n": 18446744073709551617}', '{"n":18446744073709551616}', False),
             ('{"n": [1, -12345678901234567890]}', '{"n":[1,-12345678901234567890]}', True),
             ('{"id": "12345678901234567890", "b": true}', '{"b": true, "id": "12345678901234567890"}', True),
             # Lone surrogate escapes: json reads them, orjson refuses.
             ('{"s": "\\ud800"}', '{"s":"\\ud800"}', True), ('{"s": "\\ud800", "a": 1}', '{"a": 1, "s": "\\udc00"}', False),
             ('{"a": -0.0}', '{"a": 0}', True), ('{"a": 1e2, "b": false}', '{"b": false, "a": 100}', True)]
    for left, right, same in pairs:  # the expectations are the reference's
        assert (canonical_json(parse_json_object(left)) == canonical_json(parse_json_object(right))) is same
    n = len(pairs)
    contexts = [pa.StructArray.from_arrays([pa.array([pair[i] for pair in pairs]), pa.array(["agent"] * n)],
                                           names=["resolved_arguments", "principal"]) for i in (0, 1)]
    flat = FlatCalls(pa.StructArray.from_arrays([pa.array(["t"] * n), *contexts], names=["tool", "proposal", "commit"]),
                     np.arange(n), n)
    nobody = {"proposal": np.zeros(n, bool), "commit": np.zeros(n, bool)}
    assert resolve.judge(flat, None, nobody, np.ones(n, bool)).same_arguments.tolist() == [pair[2] for pair in pairs]
