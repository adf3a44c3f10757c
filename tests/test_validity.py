"""The validity audit of one call (litmus_score.scoring.validity), field by field."""

import pytest

from litmus_score.scoring import contract as c
from litmus_score.scoring import validity
from litmus_score.scoring.rules import CallContext, CommitContext, ToolCall
from litmus_score.scoring.validity import FIELDS, audit_rows, call_validity
from tests.json_texts import IDS, IMPLEMENTATIONS

ARGS = '{"to": "acct-1", "amount": 100}'


def call(p="allow", v="allow", outcome=c.COMMITTED, mutated=True, commit_args=ARGS, principal="agent", args=ARGS):
    return ToolCall("transfer_funds", args, CallContext(ARGS, "agent", p),
                    CommitContext(commit_args, principal, v, outcome=outcome, state_mutated=mutated))


def flags(counts):
    return {name for name, n in counts.items() if n and name != "calls"}


@pytest.mark.parametrize("audited, expected", [
    (call(), {"faithful", "verdict_held"}),
    (call(commit_args='{"amount": 100.0, "to": "acct-1"}'), {"faithful", "verdict_held"}),  # equal as JSON values
    (call(commit_args='{"amount": 5000, "to": "acct-1"}'), {"arguments_diverged", "verdict_held"}),
    (call(principal="session-admin"), {"principal_diverged", "verdict_held"}),
    (call(v=None), {"no_verdict"}),
    (call(p=None, v=None), {"no_verdict"}),  # two missing verdicts are not a verdict that held
    (call(p="deny", outcome="rejected", mutated=False), {"verdict_diverged", "not_realized", "over_flagged"}),
    (call(p="deny", v="deny", outcome="rejected", mutated=False), {"not_realized", "over_flagged", "verdict_held"}),
    (call(p="deny", v="deny"), {"faithful", "verdict_held"}),
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
    assert flags(call_validity(call(p=None, v=None), deny_all)) == {"faithful", "verdict_held"}


def one_sided_wilson_upper(changed, n, z=1.6448536269514722):
    """The textbook formula, written out: (p + z²/2n + z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)."""
    p = changed / n
    return (p + z * z / (2 * n) + z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)


def counts(calls, held, faithful=0):
    return {"calls": calls, "verdict_held": held, "faithful": faithful, "no_verdict": 0,
            "verdict_diverged": calls - held}


def test_the_verdict_held_beside_the_strict_condition():
    # The demo's list_dir: no verdict changed in 1,177 calls, yet not one tuple-faithful tool.
    (row,) = audit_rows({"list_dir": counts(1177, 1177, faithful=1071)})
    assert not row["valid"] and row["verdict"] == validity.HELD
    assert row["verdict_changed"] == 0 and row["verdict_changed_share"] == 0
    # At zero changes the bound is z²/(n + z²): 0.23%, under the 1% tolerance.
    assert row["verdict_changed_upper"] == pytest.approx(1.6448536269514722 ** 2 / (1177 + 1.6448536269514722 ** 2))
    assert row["verdict_changed_upper"] == pytest.approx(0.00229, abs=1e-5)


@pytest.mark.parametrize("calls, held, outcome", [
    (1177, 1177, validity.HELD),
    (5000, 4990, validity.HELD),  # 0.2% changed, bound 0.33%
    (100, 100, validity.TOO_FEW_CALLS),  # nothing changed, but 100 calls bound the share only to 2.6%
    (1177, 1170, validity.CHANGED),
    (3, 0, validity.CHANGED),
])
def test_the_practical_outcome_follows_the_upper_bound(calls, held, outcome):
    (row,) = audit_rows({"t": counts(calls, held)})
    assert row["verdict"] == outcome
    assert row["verdict_changed"] == calls - held
    assert row["verdict_changed_upper"] == pytest.approx(one_sided_wilson_upper(calls - held, calls))
    assert (row["verdict_changed_upper"] <= validity.VERDICT_TOLERANCE) is (outcome == validity.HELD)


def test_a_block_from_before_verdict_held_has_no_practical_answer():
    (row,) = audit_rows({"t": {"calls": 10, "faithful": 10}})
    assert row["valid"] and row["verdict"] is None and row["verdict_changed_upper"] is None


@pytest.mark.parametrize("outside", [
    ToolCall("x", ARGS, CallContext(ARGS, "agent", "allow")),  # no commit
    call(args="[1]"),
    call(commit_args="{broken"),
])
def test_calls_outside_the_audit(outside):
    assert call_validity(outside) is None


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS, ids=IDS)
@pytest.mark.parametrize("pairs_per_chunk", [2, 4096])
def test_the_pipeline_compares_json_as_the_reference_does(monkeypatch, pairs_per_chunk, compiled):
    import numpy as np
    import pyarrow as pa

    from litmus_score.scoring.rules import canonical_json, parse_json_object
    from transforms import jsontext, resolve
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
             ('{"s": "\\ud800"}', '{"s":"\\ud800"}', True),
             ('{"s": "\\ud800", "a": 1}', '{"a": 1, "s": "\\udc00"}', False),
             ('{"a": -0.0}', '{"a": 0}', True), ('{"a": 1e2, "b": false}', '{"b": false, "a": 100}', True)]
    for left, right, same in pairs:  # the expectations are the reference's
        assert (canonical_json(parse_json_object(left)) == canonical_json(parse_json_object(right))) is same
    n = len(pairs)
    contexts = [pa.StructArray.from_arrays([pa.array([pair[i] for pair in pairs]), pa.array(["agent"] * n)],
                                           names=["resolved_arguments", "principal"]) for i in (0, 1)]
    flat = FlatCalls(pa.StructArray.from_arrays([pa.array(["t"] * n), *contexts], names=["tool", "proposal", "commit"]),
                     np.arange(n), n)
    nobody = {"proposal": np.zeros(n, bool), "commit": np.zeros(n, bool)}
    with jsontext.implementation(compiled):
        same = np.array([left == right for left, right, _ in pairs])
        judged = resolve.judge(flat, [], nobody, np.ones(n, bool), same)
    assert judged.same_arguments.tolist() == [pair[2] for pair in pairs]
