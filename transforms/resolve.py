"""Stage 3: resolve each call's adjudication context.

Every rule of litmus_score.scoring.rules.score_tool_call is computed here on whole
columns: the verdicts, whether the environment realized the call, and every
reason a call cannot be adjudicated in the mode. The JSON texts are judged by
transforms.jsontext (compiled, or its pure-Python twin): which are JSON
objects, whether argument pairs that differ byte for byte are the same value
(the validity audit compares them in every mode) and, with a policy, the
values at the paths it reads (`judge`). tests/test_agreement.py proves the
results equal the reference's, with either implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.metrics import Metrics

from litmus_score.scoring import contract as c
from transforms import NAMESPACE, jsontext
from transforms.columnar import FlatCalls, equals, is_null
from transforms.elements import RESOLVED_CALLS, RESOLVED_TRAJECTORIES, Checked, Resolved, Tag
from transforms.records import unscored_table
from transforms.validity import audit_masks, validity_statistics


def json_object(array: pa.Array, same: np.ndarray | None = None, known_ok: np.ndarray | None = None) -> np.ndarray:
    """Which texts are JSON objects, exactly as litmus_score.scoring.rules.parse_json_object says.

    Where `same` says a text equals a known one byte for byte, `known_ok`
    already says (resolved arguments usually repeat the arguments).
    """
    if same is None:
        return jsontext.json_objects(array)
    ok = known_ok & same
    other = np.flatnonzero(~same)
    if len(other):
        ok[other] = jsontext.json_objects(array.take(pa.array(other)))
    return ok


# Calls whose texts are parsed at a time: parsed objects take several times their
# text's memory (about 13 MiB per 8,192 calls here), and each chunk costs the
# compiled policy a few vectorized steps per rule.
_PAIRS_PER_CHUNK = 8192


@dataclass(frozen=True)
class Judged:
    """What parsing the resolved arguments settles: each policy's ruling of
    each context (`rulings`, per policy a {context: indices into its
    decisions} dict) and, where both texts are valid JSON objects, whether
    they are the same value."""

    rulings: list
    same_arguments: np.ndarray


def judge(flat: FlatCalls, policies: list, asked: dict, comparable: np.ndarray, same_texts: np.ndarray) -> Judged:
    """Each policy's rulings (`asked[context]`: the calls to put to it) and
    the JSON comparison of the `comparable` pairs (`same_texts`: where the two
    contexts' texts are equal byte for byte); the texts are read once for
    all the policies.

    The commit context's ruling is the proposal's where its text and
    principal are byte for byte the proposal's (the policy sees the same call).
    Compiled (transforms.jsontext), nothing is parsed: the policy reads its
    paths from the texts, and pairs are compared on them. In pure Python each
    text is parsed once, and the parsed objects are shared.
    """
    left, right = flat.field("proposal.resolved_arguments"), flat.field("commit.resolved_arguments")
    same = same_texts.copy()
    differ = comparable & ~same
    rulings = [{context: np.zeros(len(left), np.int32) for context in asked} for _ in policies]
    need = {context: np.zeros(len(left), bool) for context in asked}
    reuse = np.zeros(len(left), bool)
    ask = None
    if policies:
        # Here, not at the top: transforms.policy builds the policy's pydantic models when imported
        # (about 0.1 CPU-s), which a run without a policy, most runs, never needs.
        from transforms.policy import ArgumentTexts

        tools = flat.field("tool")
        principals = {context: flat.field(f"{context}.principal") for context in asked}
        reuse = asked["proposal"] & asked["commit"] & same & equals(pc.equal(*principals.values()), True)
        need = {"proposal": asked["proposal"], "commit": asked["commit"] & ~reuse}

        def ask(context: str, at: np.ndarray, arguments) -> None:
            taken = pa.array(at)
            for policy, ruled in zip(policies, rulings):
                ruled[context][at] = policy.rulings(tools.take(taken), principals[context].take(taken), arguments)

    if jsontext.native():
        for context, texts in (("proposal", left), ("commit", right)):
            at = np.flatnonzero(need[context])
            if len(at):
                ask(context, at, ArgumentTexts(texts, at))
        pairs = np.flatnonzero(differ)
        same[pairs] = jsontext.same_values(left, right, pairs)
    else:
        _judge_parsed(left, right, need, differ, same, ask)
    for ruled in rulings:
        ruled["commit"][reuse] = ruled["proposal"][reuse]
    return Judged(rulings, same)


def _judge_parsed(left: pa.Array, right: pa.Array, need: dict, differ: np.ndarray, same: np.ndarray, ask) -> None:
    """judge() in pure Python: `same` settled for the `differ` pairs, `ask`
    called for the calls each context `need`s, on parsed objects."""
    # Commit texts equal to their proposal's are parsed on the proposal's side.
    parse_left = need["proposal"] | differ | (need["commit"] & same)
    parse_right = differ | (need["commit"] & ~same)
    work = np.flatnonzero(parse_left | parse_right)
    for start in range(0, len(work), _PAIRS_PER_CHUNK):
        chunk = work[start:start + _PAIRS_PER_CHUNK]
        parsed_left = _parsed(left, chunk[parse_left[chunk]])
        # A commit text equal to its proposal's is the proposal's parsed object.
        parsed_right = {**parsed_left, **_parsed(right, chunk[parse_right[chunk]])}
        for context, parsed in (("proposal", parsed_left), ("commit", parsed_right)):
            at = chunk[need[context][chunk]]
            if len(at):
                ask(context, at, [parsed[i] for i in at.tolist()])
        pairs = chunk[differ[chunk]]
        if len(pairs):
            same[pairs] = jsontext.equal_parsed(left.take(pa.array(pairs)), right.take(pa.array(pairs)),
                                                [parsed_left[i] for i in pairs.tolist()],
                                                [parsed_right[i] for i in pairs.tolist()])


def _parsed(texts: pa.Array, at: np.ndarray) -> dict:
    """Call index -> parsed object, for the valid JSON object texts at `at`."""
    if not len(at):
        return {}
    return dict(zip(at.tolist(), jsontext.parse_objects(texts.take(pa.array(at)))))


@dataclass(frozen=True)
class ContextVerdicts:
    """One context's verdict per call (resolve_verdict of litmus_score.scoring.rules, by column)."""

    value: pa.Array  # allow, deny or null
    source: pa.Array  # recorded, policy or null
    disputed: np.ndarray  # recorded, and the policy says otherwise
    decided_by: pa.Array  # recorded, the policy's rule id or check, or null
    # Where disputed: the policy's own verdict and what decided it; else null.
    policy_ruling: pa.Array
    policy_decided_by: pa.Array


_NULL_TEXT = pa.scalar(None, pa.string())


def _verdict_or_null(array: pa.Array) -> pa.Array:
    return pc.if_else(pc.is_in(array, pa.array(c.VERDICTS)), array, _NULL_TEXT)


def context_verdicts(flat: FlatCalls, context: str, rulings: np.ndarray | None, decisions=()) -> ContextVerdicts:
    """Recorded verdicts, the policy's `rulings` (indices into its `decisions`)
    where none is recorded, and disputes; recorded verdicts only without rulings."""
    raw = flat.field(f"{context}.policy_verdict")
    recorded = _verdict_or_null(raw)
    sourced = pc.if_else(is_null(recorded), _NULL_TEXT, pa.scalar(c.RECORDED))
    if rulings is None:
        nulls = pa.nulls(len(raw), pa.string())
        return ContextVerdicts(recorded, sourced, np.zeros(len(raw), bool), sourced, nulls, nulls)
    codes = pa.array(rulings)
    ruling = pa.array([verdict for verdict, _ in decisions], pa.string()).take(codes)
    by_rule = pa.array([decided_by for _, decided_by in decisions], pa.string()).take(codes)
    unrecorded = pa.array(is_null(raw))
    value = pc.if_else(unrecorded, ruling, recorded)
    by_policy = pc.if_else(is_null(ruling), _NULL_TEXT, pa.scalar(c.FROM_POLICY))
    disputed = ~is_null(recorded) & ~is_null(ruling) & ~equals(pc.equal(recorded, ruling), True)
    in_dispute = pa.array(disputed)
    return ContextVerdicts(value, pc.if_else(unrecorded, by_policy, sourced), disputed,
                           pc.if_else(unrecorded, by_rule, sourced),
                           pc.if_else(in_dispute, ruling, _NULL_TEXT), pc.if_else(in_dispute, by_rule, _NULL_TEXT))


@dataclass(frozen=True)
class CallResolution:
    """Per call: the verdicts, realization, and each reason (a mask) it is unscored."""

    proposal: ContextVerdicts
    commit: ContextVerdicts
    realized: pa.Array
    reasons: dict
    audit: dict  # litmus_score.scoring.validity's counts as masks (transforms.validity.audit_masks)

    @property
    def unscored(self) -> np.ndarray:
        return np.logical_or.reduce(list(self.reasons.values()))


def resolve_calls(flat: FlatCalls, mode: str, policy, considered: np.ndarray) -> CallResolution:
    """The rules of score_tool_call in `mode`, for every call of a batch.

    The results are meaningful for the `considered` calls (those of complete
    rows) only, and only those are put to the policy.
    """
    return resolve_calls_under(flat, mode, [policy] if policy is not None else [], considered)[0]


def resolve_calls_under(flat: FlatCalls, mode: str, policies: list, considered: np.ndarray) -> list:
    """resolve_calls under each of `policies` (compiled), or without a policy
    when the list is empty: one CallResolution each. What no policy changes
    (which texts are JSON objects, which argument pairs are the same value,
    realization) is worked out once for all of them."""
    arguments, proposal_arguments = flat.field("arguments"), flat.field("proposal.resolved_arguments")
    arguments_ok = json_object(arguments)
    proposal_ok = json_object(proposal_arguments, equals(pc.equal(proposal_arguments, arguments), True), arguments_ok)
    commit_arguments = flat.field("commit.resolved_arguments")
    same_texts = equals(pc.equal(commit_arguments, proposal_arguments), True)
    commit_ok = json_object(commit_arguments, same_texts, proposal_ok)
    has_commit = ~is_null(flat.field("commit"))
    # The validity audit (litmus_score.scoring.validity) reads both contexts in every mode.
    comparable = considered & has_commit & proposal_ok & commit_ok
    audited = comparable & arguments_ok
    asked = {"proposal": proposal_ok & considered, "commit": commit_ok & considered & has_commit}
    # same_arguments is meaningful where comparable; strict mode reads it too.
    judged = judge(flat, policies, asked, comparable, same_texts)
    realized = _realized(flat)
    shared = _Shared(arguments_ok, proposal_ok, commit_ok, has_commit, audited, judged.same_arguments, realized)
    if not policies:
        return [_resolution(flat, mode, shared, {"proposal": None, "commit": None}, ())]
    return [_resolution(flat, mode, shared, ruled, policy.decisions)
            for policy, ruled in zip(policies, judged.rulings)]


@dataclass(frozen=True)
class _Shared:
    """What resolve_calls_under works out once for every policy."""

    arguments_ok: np.ndarray
    proposal_ok: np.ndarray
    commit_ok: np.ndarray
    has_commit: np.ndarray
    audited: np.ndarray
    same_arguments: np.ndarray
    realized: pa.Array


def _resolution(flat: FlatCalls, mode: str, shared: _Shared, rulings: dict, decisions) -> CallResolution:
    """The CallResolution under one policy's `rulings` (None: no policy)."""
    has_commit, same_arguments, realized = shared.has_commit, shared.same_arguments, shared.realized
    proposal = context_verdicts(flat, "proposal", rulings["proposal"], decisions)
    commit = context_verdicts(flat, "commit", rulings["commit"], decisions)
    audit = audit_masks(flat, proposal, commit, realized, shared.audited, same_arguments)
    malformed = ~(shared.arguments_ok & shared.proposal_ok)
    reasons = {c.NO_VERDICT: is_null(proposal.value), c.MALFORMED_ARGUMENTS: malformed}
    if mode == c.PROPOSAL:
        # The commit's recorded verdict is reported beside the score, unjudged.
        return CallResolution(proposal, context_verdicts(flat, "commit", None), realized, reasons, audit)

    reasons[c.MALFORMED_ARGUMENTS] = malformed | (has_commit & ~shared.commit_ok)
    reasons[c.NO_VERDICT] = reasons[c.NO_VERDICT] | (has_commit & is_null(commit.value))
    reasons[c.NO_COMMIT_CONTEXT] = ~has_commit
    if mode == c.STRICT:
        both_verdicts = has_commit & ~is_null(proposal.value) & ~is_null(commit.value)
        reasons[c.VERDICT_DIVERGED] = both_verdicts & ~equals(pc.equal(proposal.value, commit.value), True)
        both_valid = has_commit & shared.proposal_ok & shared.commit_ok
        reasons[c.ARGUMENTS_DIVERGED] = both_valid & ~same_arguments
        principals = pc.equal(flat.field("proposal.principal"), flat.field("commit.principal"))
        reasons[c.PRINCIPAL_DIVERGED] = has_commit & ~equals(principals, True)
    return CallResolution(proposal, commit, realized, reasons, audit)


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
            "proposal_verdict": resolution.proposal.value.filter(keep),
            "commit_verdict": resolution.commit.value.filter(keep),
            "realized": resolution.realized.filter(keep),
            "state_mutated": flat.field("commit.state_mutated").filter(keep),
            "proposal_verdict_source": resolution.proposal.source.filter(keep),
            "commit_verdict_source": resolution.commit.source.filter(keep),
            "proposal_decided_by": resolution.proposal.decided_by.filter(keep),
            "commit_decided_by": resolution.commit.decided_by.filter(keep),
            "proposal_policy_ruling": resolution.proposal.policy_ruling.filter(keep),
            "proposal_policy_decided_by": resolution.proposal.policy_decided_by.filter(keep),
            "commit_policy_ruling": resolution.commit.policy_ruling.filter(keep),
            "commit_policy_decided_by": resolution.commit.policy_decided_by.filter(keep),
            "policy_disagreement": pa.array(
                (resolution.proposal.disputed | resolution.commit.disputed)[in_rows], pa.bool_()
            ),
            "outcome": flat.field("commit.outcome").filter(keep),
            "status_code": flat.field("commit.status_code").filter(keep),
            "source_call": np.flatnonzero(in_rows),
        },
        schema=RESOLVED_CALLS,
    )
    return Resolved(trajectories, calls, pa.table({"call": flat.calls}))


def _unscored_reasons(flat: FlatCalls, resolution: CallResolution, unscored_calls: np.ndarray, rows: np.ndarray):
    """(reasons, detail) of each row in `rows`, from its `unscored_calls`."""
    bad_calls = np.flatnonzero(unscored_calls)
    call_ids = flat.field("call_id").take(pa.array(bad_calls)).to_pylist()
    per_row: dict = {}
    for call, call_id in zip(bad_calls, call_ids):
        names = [reason for reason, mask in resolution.reasons.items() if mask[call]]
        per_row.setdefault(flat.row[call], []).append((call_id, names))
    reasons, details = [], []
    for row in rows:
        calls = per_row[row]
        reasons.append(c.order_reasons([c.UNSCORED_CALLS] + [n for _, names in calls for n in names]))
        details.append("; ".join(f"{call_id}: {', '.join(c.order_reasons(names))}" for call_id, names in calls))
    return reasons, details


@dataclass(frozen=True)
class BatchOutcome:
    """What one resolution makes of a Checked batch: the Resolved form of its
    scorable rows (`scored_rows`), the validity audit's statistics, and the
    UNSCORED table of the complete rows some call of which is unscored
    (None: there are none)."""

    resolved: Resolved
    scored_rows: np.ndarray
    validity: dict
    unscored: pa.Table | None


def batch_outcome(checked: Checked, flat: FlatCalls, resolution: CallResolution) -> BatchOutcome:
    batch = checked.batch
    unscored_calls = resolution.unscored & checked.complete[flat.row]
    unscored = flat.any_per_row(unscored_calls)
    scored_rows = checked.complete & ~unscored
    table = None
    if unscored.any():
        rows = np.flatnonzero(unscored)
        reasons, details = _unscored_reasons(flat, resolution, unscored_calls, rows)
        table = unscored_table(batch.filter(pa.array(unscored)), reasons, details)
    return BatchOutcome(_resolved(batch, flat, resolution, scored_rows), scored_rows,
                        validity_statistics(batch, flat, resolution.audit), table)


def compiled(policy):
    """transforms.policy.compile_policy's form of `policy`; None for no policy,
    without importing transforms.policy (see judge)."""
    if policy is None:
        return None
    from transforms.policy import compile_policy

    return compile_policy(policy)


class ResolveContextsFn(beam.DoFn):
    def __init__(self, mode: str, policy=None):
        self._mode = mode
        self._policy = compiled(policy)
        self._unscored = Metrics.counter(NAMESPACE, "trajectories_with_unscored_calls")

    def process(self, checked: Checked):
        flat = FlatCalls.of(checked.batch)
        resolution = resolve_calls(flat, self._mode, self._policy, checked.complete[flat.row])
        outcome = batch_outcome(checked, flat, resolution)
        yield outcome.resolved
        if outcome.validity:
            yield beam.pvalue.TaggedOutput(Tag.VALIDITY, outcome.validity)
        if outcome.unscored is not None:
            self._unscored.inc(outcome.unscored.num_rows)
            yield beam.pvalue.TaggedOutput(Tag.UNSCORED, outcome.unscored)


@beam.typehints.with_input_types(Checked)
class ResolveContexts(beam.PTransform):
    """Checked batches -> Resolved (main), UNSCORED tables (`unscored`), the
    validity audit's statistics (`validity`, litmus_score.scoring.metrics form) and,
    should a batch raise unexpectedly, the Checked batch and its error (`failed`).

    `policy` (a litmus_score.scoring.rules.Policy, e.g. litmus_score.scoring.policy.PolicyDocument)
    decides where a context recorded no verdict, and checks those recorded.
    """

    def __init__(self, mode: str, policy=None):
        super().__init__()
        self._mode = c.check_mode(mode)
        # Compiled once, when the graph is built; workers unpickle the compiled form.
        self._policy = compiled(policy)

    def expand(self, batches):
        fn = ResolveContextsFn(self._mode, self._policy)
        return batches | "Resolve contexts" >> beam.ParDo(fn).with_output_types(
            Resolved, **{Tag.UNSCORED: pa.Table, Tag.VALIDITY: dict}
        ).with_outputs(Tag.UNSCORED, Tag.VALIDITY, main="resolved").with_exception_handling(dead_letter_tag=Tag.FAILED)
