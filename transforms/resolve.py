"""Stage 3: resolve each call's adjudication context.

A call is "plain" when the vectorized checks can settle it: recorded
verdicts, arguments that a strict regular expression proves to be JSON
objects, a commit where the mode needs one, and (strict mode) identical
tuples. Trajectories whose calls are all plain are resolved with pyarrow;
the rest (nested or malformed JSON, missing verdicts, missing commits,
divergence) go through the reference rules one row at a time, which either
score them or send them to UNSCORED with every reason that applies.
"""

from __future__ import annotations

from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.metrics import Metrics

from scoring import contract as c
from scoring.trajectory import score_trajectory
from transforms import NAMESPACE
from transforms import schema as s
from transforms.columnar import FlatCalls, equals, is_null
from transforms.records import FAILED, UNSCORED, unscored_table

# JSON nested at most MAX_DEPTH deep is a regular language, so a RE2
# expression can recognize it exactly: a match proves the text is a valid JSON
# object. A non-match proves nothing and sends the call to the reference
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


def json_object(array: pa.Array) -> np.ndarray:
    """Texts proven to be JSON objects (nested at most MAX_DEPTH deep)."""
    return np.asarray(pc.fill_null(pc.match_substring_regex(array, JSON_OBJECT), False), bool)


def _verdict_or_null(array: pa.Array) -> pa.Array:
    return pc.if_else(pc.is_in(array, pa.array(c.VERDICTS)), array, pa.scalar(None, pa.string()))


def plain_calls(flat: FlatCalls, mode: str) -> np.ndarray:
    """Calls the vectorized path can settle exactly in `mode`."""
    proposal_verdict = flat.field("proposal.policy_verdict")
    plain = json_object(flat.field("arguments")) & json_object(flat.field("proposal.resolved_arguments"))
    plain &= ~is_null(_verdict_or_null(proposal_verdict))
    if mode == c.PROPOSAL:
        return plain
    commit_verdict = flat.field("commit.policy_verdict")
    plain &= ~is_null(flat.field("commit"))
    plain &= json_object(flat.field("commit.resolved_arguments"))
    plain &= ~is_null(_verdict_or_null(commit_verdict))
    if mode == c.STRICT:
        plain &= equals(pc.equal(proposal_verdict, commit_verdict), True)
        plain &= equals(pc.equal(flat.field("proposal.principal"), flat.field("commit.principal")), True)
        # Byte-identical text is the same value; anything else is compared
        # as parsed JSON by the reference.
        plain &= equals(
            pc.equal(flat.field("proposal.resolved_arguments"), flat.field("commit.resolved_arguments")), True
        )
    return plain


def _realized(flat: FlatCalls) -> pa.Array:
    committed = pc.equal(flat.field("commit.outcome"), c.COMMITTED)
    mutated = pc.fill_null(flat.field("commit.state_mutated"), False)
    realized = pc.or_(pc.fill_null(committed, False), mutated)
    return pc.if_else(flat.field("commit").is_null(), pa.scalar(None, pa.bool_()), realized)


def _vectorized(batch: pa.RecordBatch, flat: FlatCalls, rows: np.ndarray) -> Resolved:
    """Resolve the calls of `rows` (all plain) with pyarrow."""
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
            "proposal_verdict": flat.field("proposal.policy_verdict").filter(keep),
            "commit_verdict": _verdict_or_null(flat.field("commit.policy_verdict")).filter(keep),
            "realized": _realized(flat).filter(keep),
        },
        schema=RESOLVED_CALLS,
    )
    return Resolved(trajectories, calls)


def _from_reference(rows, scores, offset: int) -> Resolved:
    """Resolved form of rows the reference rules scored."""
    trajectories = pa.Table.from_pylist(
        [{name: row.get(name) for name in RESOLVED_TRAJECTORIES.names} for row in rows],
        schema=RESOLVED_TRAJECTORIES,
    )
    calls = [
        {
            "trajectory": offset + i,
            "call_id": call["call_id"],
            "step": call["step"],
            "tool": call["tool"],
            "proposal_verdict": score.proposal_verdict,
            "commit_verdict": score.commit_verdict,
            "realized": score.realized,
        }
        for i, (row, trajectory_score) in enumerate(zip(rows, scores))
        for call, score in zip(row["calls"], trajectory_score.calls)
    ]
    return Resolved(trajectories, pa.Table.from_pylist(calls, schema=RESOLVED_CALLS))


class ResolveContextsFn(beam.DoFn):
    def __init__(self, mode: str):
        self._mode = mode
        self._reference_rows = Metrics.counter(NAMESPACE, "trajectories_resolved_by_reference")
        self._unscored = Metrics.counter(NAMESPACE, "trajectories_with_unscored_calls")

    def process(self, batch: pa.RecordBatch):
        flat = FlatCalls.of(batch)
        plain_rows = flat.all_per_row(plain_calls(flat, self._mode))
        resolved = _vectorized(batch, flat, plain_rows)
        if plain_rows.all():
            yield resolved
            return
        rows = batch.filter(pa.array(~plain_rows)).to_pylist()
        self._reference_rows.inc(len(rows))
        scores = [score_trajectory(row, self._mode) for row in rows]
        scored = [(row, score) for row, score in zip(rows, scores) if score.scored]
        if scored:
            extra = _from_reference([r for r, _ in scored], [sc for _, sc in scored], resolved.trajectories.num_rows)
            resolved = Resolved(
                pa.concat_tables([resolved.trajectories, extra.trajectories]),
                pa.concat_tables([resolved.calls, extra.calls]),
            )
        yield resolved
        unscored = [(row, score) for row, score in zip(rows, scores) if not score.scored]
        if unscored:
            self._unscored.inc(len(unscored))
            yield beam.pvalue.TaggedOutput(
                UNSCORED,
                unscored_table([r for r, _ in unscored], [sc.reasons for _, sc in unscored],
                               [sc.detail for _, sc in unscored]),
            )


class ResolveContexts(beam.PTransform):
    """Complete batches -> Resolved (main), UNSCORED tables (`unscored`) and,
    should a batch raise unexpectedly, the batch and its error (`failed`)."""

    def __init__(self, mode: str):
        super().__init__()
        self._mode = c.check_mode(mode)

    def expand(self, batches):
        return batches | "Resolve contexts" >> beam.ParDo(ResolveContextsFn(self._mode)).with_outputs(
            UNSCORED, main="resolved"
        ).with_exception_handling(dead_letter_tag=FAILED)
