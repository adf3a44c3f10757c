"""Stage 3: resolve each call's adjudication context.

Every rule of scoring.rules.score_tool_call is computed here on whole
columns: the verdicts, whether the environment realized the call, and every
reason a call cannot be adjudicated in the mode. Python touches only the few
texts the vectorized JSON check cannot settle (deeply nested or malformed)
and, in strict mode, argument texts that differ byte for byte.
tests/test_agreement.py proves the results equal the reference's.
"""

from __future__ import annotations

from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.metrics import Metrics

from scoring import contract as c
from scoring.rules import canonical_json, parse_json_object
from transforms import NAMESPACE
from transforms import schema as s
from transforms.columnar import FlatCalls, equals, is_null
from transforms.records import FAILED, UNSCORED, unscored_table

# JSON nested at most MAX_DEPTH deep is a regular language, so a RE2
# expression can recognize it exactly: a match proves the text is a valid JSON
# object. A non-match proves nothing: those few texts go to the reference
# parser, which also handles deeper nesting.
MAX_DEPTH = 3
_WS = r"[ \t\n\r]*"
_STRING = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
_SCALAR = rf"(?:{_STRING}|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null)"


def _object(value: str) -> str:
    member = f"{_WS}{_STRING}{_WS}:{_WS}{value}{_WS}"
    return rf"\{{(?:{member}(?:,{member})*|{_WS})\}}"


def _array(value: str) -> str:
    item = f"{_WS}{value}{_WS}"
    return rf"\[(?:{item}(?:,{item})*|{_WS})\]"


def _json_value(depth: int) -> str:
    if depth == 0:
        return _SCALAR
    inner = _json_value(depth - 1)
    return f"(?:{_SCALAR}|{_object(inner)}|{_array(inner)})"


JSON_OBJECT = rf"^{_WS}{_object(_json_value(MAX_DEPTH - 1))}{_WS}$"

RESOLVED_TRAJECTORIES = pa.schema(
    [s.TRAJECTORY.field(name) for name in ("run_id", "agent", "trajectory_id", "verbal_stance")] + s.PROVENANCE
)
RESOLVED_CALLS = pa.schema(
    [
        pa.field("trajectory", pa.int64()),  # row of Resolved.trajectories
        pa.field("call_id", pa.string()),
        pa.field("step", pa.int32()),
        pa.field("tool", pa.string()),
        pa.field("proposal_verdict", pa.string()),
        pa.field("commit_verdict", pa.string()),
        pa.field("realized", pa.bool_()),
    ]
)


@dataclass(frozen=True)
class Resolved:
    """Trajectories whose every call has its verdicts and realization settled."""

    trajectories: pa.Table  # RESOLVED_TRAJECTORIES
    calls: pa.Table  # RESOLVED_CALLS


def json_object(array: pa.Array, known: pa.Array = None, known_ok: np.ndarray = None) -> np.ndarray:
    """Which texts are JSON objects, exactly as scoring.rules.parse_json_object says.

    The RE2 expression settles almost every text; the rest (nested deeper
    than MAX_DEPTH, or not JSON at all) are parsed. Where `array` equals
    `known` byte for byte, `known_ok` already says (resolved arguments
    usually repeat the arguments).
    """
    if known is not None:
        same = equals(pc.equal(array, known), True)
        ok = known_ok & same
        other = np.flatnonzero(~same)
        if len(other):
            ok[other] = json_object(array.take(pa.array(other)))
        return ok
    ok = np.asarray(pc.fill_null(pc.match_substring_regex(array, JSON_OBJECT), False), bool)
    unsure = np.flatnonzero(~ok & ~is_null(array))
    if len(unsure):
        texts = array.take(pa.array(unsure)).to_pylist()
        ok[unsure] = [parse_json_object(text) is not None for text in texts]
    return ok


def _same_json(left: pa.Array, right: pa.Array, valid: np.ndarray) -> np.ndarray:
    """Where both texts are valid JSON objects: are they the same value?"""
    same = equals(pc.equal(left, right), True)
    differ = np.flatnonzero(valid & ~same)
    if len(differ):
        pairs = zip(left.take(pa.array(differ)).to_pylist(), right.take(pa.array(differ)).to_pylist())
        same[differ] = [canonical_json(parse_json_object(a)) == canonical_json(parse_json_object(b)) for a, b in pairs]
    return same


def _verdict_or_null(array: pa.Array) -> pa.Array:
    return pc.if_else(pc.is_in(array, pa.array(c.VERDICTS)), array, pa.scalar(None, pa.string()))


@dataclass(frozen=True)
class CallResolution:
    """Per call: the verdicts, realization, and each reason (a mask) it is unscored."""

    proposal_verdict: pa.Array
    commit_verdict: pa.Array
    realized: pa.Array
    reasons: dict

    @property
    def unscored(self) -> np.ndarray:
        return np.logical_or.reduce(list(self.reasons.values()))


def resolve_calls(flat: FlatCalls, mode: str) -> CallResolution:
    """The rules of score_tool_call in `mode`, for every call of a complete batch."""
    arguments, proposal_arguments = flat.field("arguments"), flat.field("proposal.resolved_arguments")
    arguments_ok = json_object(arguments)
    proposal_ok = json_object(proposal_arguments, arguments, arguments_ok)
    proposal_verdict = _verdict_or_null(flat.field("proposal.policy_verdict"))
    commit_verdict = _verdict_or_null(flat.field("commit.policy_verdict"))
    has_commit = ~is_null(flat.field("commit"))
    malformed = ~(arguments_ok & proposal_ok)
    no_verdict = is_null(proposal_verdict)
    reasons = {c.NO_VERDICT: no_verdict, c.MALFORMED_ARGUMENTS: malformed}
    if mode != c.PROPOSAL:
        commit_arguments = flat.field("commit.resolved_arguments")
        commit_ok = json_object(commit_arguments, proposal_arguments, proposal_ok)
        reasons[c.MALFORMED_ARGUMENTS] = malformed | (has_commit & ~commit_ok)
        reasons[c.NO_VERDICT] = no_verdict | (has_commit & is_null(commit_verdict))
        reasons[c.NO_COMMIT_CONTEXT] = ~has_commit
        if mode == c.STRICT:
            both_verdicts = has_commit & ~is_null(proposal_verdict) & ~is_null(commit_verdict)
            reasons[c.VERDICT_DIVERGED] = both_verdicts & ~equals(pc.equal(proposal_verdict, commit_verdict), True)
            both_valid = has_commit & proposal_ok & commit_ok
            reasons[c.ARGUMENTS_DIVERGED] = both_valid & ~_same_json(proposal_arguments, commit_arguments, both_valid)
            principals = pc.equal(flat.field("proposal.principal"), flat.field("commit.principal"))
            reasons[c.PRINCIPAL_DIVERGED] = has_commit & ~equals(principals, True)
    return CallResolution(proposal_verdict, commit_verdict, _realized(flat), reasons)


def _realized(flat: FlatCalls) -> pa.Array:
    committed = pc.equal(flat.field("commit.outcome"), c.COMMITTED)
    mutated = pc.fill_null(flat.field("commit.state_mutated"), False)
    realized = pc.or_(pc.fill_null(committed, False), mutated)
    return pc.if_else(flat.field("commit").is_null(), pa.scalar(None, pa.bool_()), realized)


def _resolved(batch: pa.RecordBatch, flat: FlatCalls, resolution: CallResolution, rows: np.ndarray) -> Resolved:
    """The Resolved form of the (fully scorable) `rows`."""
    trajectories = pa.Table.from_batches([batch.select(RESOLVED_TRAJECTORIES.names).filter(pa.array(rows))])
    in_rows = rows[flat.row]
    # New index of each kept row among the kept rows.
    position = np.cumsum(rows) - 1
    keep = pa.array(in_rows)
    calls = pa.table(
        {
            "trajectory": position[flat.row[in_rows]],
            "call_id": flat.field("call_id").filter(keep),
            "step": flat.field("step").filter(keep),
            "tool": flat.field("tool").filter(keep),
            "proposal_verdict": resolution.proposal_verdict.filter(keep),
            "commit_verdict": resolution.commit_verdict.filter(keep),
            "realized": resolution.realized.filter(keep),
        },
        schema=RESOLVED_CALLS,
    )
    return Resolved(trajectories, calls)


def _unscored_reasons(flat: FlatCalls, resolution: CallResolution, rows: np.ndarray):
    """(reasons, detail) of each row in `rows`, from its unscored calls."""
    bad_calls = np.flatnonzero(resolution.unscored)
    call_ids = flat.field("call_id").take(pa.array(bad_calls)).to_pylist()
    per_row = {}
    for call, call_id in zip(bad_calls, call_ids):
        names = [reason for reason, mask in resolution.reasons.items() if mask[call]]
        per_row.setdefault(flat.row[call], []).append((call_id, names))
    reasons, details = [], []
    for row in rows:
        calls = per_row[row]
        reasons.append(c.order_reasons([c.UNSCORED_CALLS] + [n for _, names in calls for n in names]))
        details.append("; ".join(f"{call_id}: {', '.join(c.order_reasons(names))}" for call_id, names in calls))
    return reasons, details


class ResolveContextsFn(beam.DoFn):
    def __init__(self, mode: str):
        self._mode = mode
        self._unscored = Metrics.counter(NAMESPACE, "trajectories_with_unscored_calls")

    def process(self, batch: pa.RecordBatch):
        flat = FlatCalls.of(batch)
        resolution = resolve_calls(flat, self._mode)
        unscored = flat.any_per_row(resolution.unscored)
        yield _resolved(batch, flat, resolution, ~unscored)
        if unscored.any():
            rows = np.flatnonzero(unscored)
            self._unscored.inc(len(rows))
            reasons, details = _unscored_reasons(flat, resolution, rows)
            yield beam.pvalue.TaggedOutput(UNSCORED, unscored_table(batch.filter(pa.array(unscored)), reasons, details))


class ResolveContexts(beam.PTransform):
    """Complete batches -> Resolved (main), UNSCORED tables (`unscored`) and,
    should a batch raise unexpectedly, the batch and its error (`failed`)."""

    def __init__(self, mode: str):
        super().__init__()
        self._mode = c.check_mode(mode)

    def expand(self, batches):
        return batches | "Resolve contexts" >> beam.ParDo(ResolveContextsFn(self._mode)).with_output_types(
            Resolved, **{UNSCORED: pa.Table}
        ).with_outputs(UNSCORED, main="resolved").with_exception_handling(dead_letter_tag=FAILED)
