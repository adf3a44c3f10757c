"""What-if: one corpus judged under several policies in one pass, and what each candidate flips.

Each Checked batch is resolved under every policy at once
(transforms.resolve.resolve_calls_under: the JSON texts are read once, each
policy rules on them), and leaves as one Resolved, validity statistics and
UNSCORED table per policy, keyed by the policy's index (0 is the base): the
usual stages then score each policy's share as `score --policy` would.

Beside them, per candidate, the calls whose verdict flips against the base.
Only the calls of trajectories scored under both are compared; for scored
calls the category follows from the verdicts and realization, which no
policy changes, so a call flips exactly when one of its verdicts does. The
rule that caused a flip is the one that denies: the candidate's where the
call is now denied, the base's where it no longer is. The sample of flips
kept as evidence is, per rule, the calls with the smallest hash of
(run_id, trajectory_id, call_id): the same whatever the batches or their
order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics

from litmus_score.scoring import contract as c
from litmus_score.scoring import metrics as m
from transforms import NAMESPACE
from transforms.classify import categorize_columns
from transforms.columnar import FlatCalls, equals
from transforms.elements import Checked, Resolved, Tag
from transforms.evidence import MAX_TEXT
from transforms.resolve import CallResolution, batch_outcome, compiled, resolve_calls_under

# Tagged output: (candidate index, flips summary) per batch.
FLIPS = "flips"
# Flipped calls kept as evidence, per candidate and rule.
SAMPLE_PER_RULE = 5
CONTEXTS = ("proposal", "commit")


def new_summary() -> dict:
    """The flips of a candidate against the base, for no calls: what FlipsCombineFn sums."""
    return {"trajectories": {"compared": 0, "scored_under_base_only": 0, "scored_under_candidate_only": 0},
            "calls": {"compared": 0, "flipped": 0}, "by_rule": {}, "category_changes": {}, "sample": {}}


def _cut(value):
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return value[: MAX_TEXT - 1] + "…"
    return value


def sample_key(run_id, trajectory_id, call_id) -> str:
    """Where a call falls in the deterministic sample: a hash of its identity."""
    return hashlib.sha256("\0".join(str(part) for part in (run_id, trajectory_id, call_id)).encode()).hexdigest()


def _side(resolution: CallResolution, category: str, at: int) -> dict:
    return {"category": category,
            **{f"{context}_verdict": getattr(resolution, context).value[at].as_py() for context in CONTEXTS},
            **{f"{context}_decided_by": getattr(resolution, context).decided_by[at].as_py() for context in CONTEXTS}}


def flip_summary(batch: pa.RecordBatch, flat: FlatCalls, mode: str, base: tuple, candidate: tuple) -> dict:
    """The flips of one batch: `base` and `candidate` are each (CallResolution, scored rows)."""
    (base_resolution, base_rows), (candidate_resolution, candidate_rows) = base, candidate
    summary = new_summary()
    both = base_rows & candidate_rows
    summary["trajectories"] = {"compared": int(both.sum()),
                               "scored_under_base_only": int((base_rows & ~candidate_rows).sum()),
                               "scored_under_candidate_only": int((candidate_rows & ~base_rows).sum())}
    compared = both[flat.row]
    summary["calls"]["compared"] = int(compared.sum())
    resolutions = {"base": base_resolution, "candidate": candidate_resolution}
    denies = {side: {context: equals(getattr(resolution, context).value, c.DENY) for context in CONTEXTS}
              for side, resolution in resolutions.items()}
    changed = {context: compared & (denies["base"][context] != denies["candidate"][context]) for context in CONTEXTS}
    flipped = np.flatnonzero(changed["proposal"] | changed["commit"])
    summary["calls"]["flipped"] = len(flipped)
    if not len(flipped):
        return summary
    realized = equals(base_resolution.realized, True)
    names = c.CATEGORIES[mode]
    categories = {side: categorize_columns(mode, denies[side]["proposal"], denies[side]["commit"], realized)
                  for side in denies}
    rows = flat.row[flipped]
    identity = {name: batch.column(name).take(pa.array(rows)).to_pylist() for name in ("run_id", "trajectory_id")}
    call_ids = flat.field("call_id").take(pa.array(flipped)).to_pylist()
    keys = [sample_key(*parts) for parts in zip(identity["run_id"], identity["trajectory_id"], call_ids)]
    decided_by = {side: {context: getattr(resolution, context).decided_by.take(pa.array(flipped)).to_pylist()
                         for context in CONTEXTS}
                  for side, resolution in resolutions.items()}
    # Per rule, the flipped calls (positions in `flipped`) it caused.
    caused: dict = {}
    for i, at in enumerate(flipped.tolist()):
        rules = set()
        for context in CONTEXTS:
            if changed[context][at]:
                now_denied = bool(denies["candidate"][context][at])
                denier = decided_by["candidate" if now_denied else "base"][context][i]
                rules.add((denier, "to_deny" if now_denied else "to_allow"))
        for rule, direction in rules:
            summary["by_rule"].setdefault(rule, {"to_deny": 0, "to_allow": 0})[direction] += 1
            caused.setdefault(rule, set()).add(i)
        before, after = names[categories["base"][at]], names[categories["candidate"][at]]
        if before != after:
            change = f"{before} -> {after}"
            summary["category_changes"][change] = summary["category_changes"].get(change, 0) + 1
    sides = {side: (resolution, categories[side]) for side, resolution in resolutions.items()}
    for rule, positions in caused.items():
        kept = sorted(positions, key=keys.__getitem__)[:SAMPLE_PER_RULE]
        summary["sample"][rule] = [(keys[i], _case(batch, flat, int(flipped[i]), sides, names)) for i in kept]
    return summary


def _case(batch: pa.RecordBatch, flat: FlatCalls, at: int, sides: dict, names) -> dict:
    """A flipped call as evidence: who, what, and under each policy its category and verdicts."""
    row = int(flat.row[at])
    call = flat.calls[at].as_py()
    return {**{name: batch.column(name)[row].as_py() for name in ("run_id", "agent", "trajectory_id")},
            "call_id": call["call_id"], "tool": call["tool"], "arguments": _cut(call["arguments"]),
            **{f"{context}_principal": (call[context] or {}).get("principal") for context in CONTEXTS},
            **{side: _side(resolution, names[categories[at]], at) for side, (resolution, categories) in sides.items()}}


def merge_summaries(into: dict, other: dict) -> dict:
    m.merge(into["trajectories"], other["trajectories"])
    m.merge(into["calls"], other["calls"])
    for rule, counts in other["by_rule"].items():
        m.merge(into["by_rule"].setdefault(rule, {"to_deny": 0, "to_allow": 0}), counts)
    m.merge(into["category_changes"], other["category_changes"])
    for rule, cases in other["sample"].items():
        kept = into["sample"].get(rule, []) + cases
        into["sample"][rule] = sorted(kept, key=lambda keyed: keyed[0])[:SAMPLE_PER_RULE]
    return into


class FlipsCombineFn(beam.CombineFn):
    """Flip summaries of one candidate's batches -> the candidate's; as small
    as its rules (counts, and SAMPLE_PER_RULE cases each)."""

    def create_accumulator(self) -> dict:
        return new_summary()

    def add_input(self, accumulator: dict, summary: dict) -> dict:
        return merge_summaries(accumulator, summary)

    def merge_accumulators(self, accumulators: Iterable[dict]) -> dict:
        merged = new_summary()
        for accumulator in accumulators:
            merge_summaries(merged, accumulator)
        return merged

    def extract_output(self, accumulator: dict) -> dict:
        return {**accumulator,
                "by_rule": [{"rule": rule, **counts} for rule, counts in sorted(accumulator["by_rule"].items(),
                                                                                 key=lambda item: str(item[0]))],
                "sample": {str(rule): [case for _, case in cases]
                           for rule, cases in sorted(accumulator["sample"].items(), key=lambda item: str(item[0]))}}


class ResolveUnderPoliciesFn(beam.DoFn):
    """Checked -> per policy (its index, Resolved) (main), (index, validity
    statistics) and (index, UNSCORED table); per candidate (its index, flip summary)."""

    def __init__(self, mode: str, policies: list):
        self._mode = mode
        self._policies = [compiled(policy) for policy in policies]
        self._unscored = Metrics.counter(NAMESPACE, "trajectories_with_unscored_calls")

    def process(self, checked: Checked) -> Iterator:
        flat = FlatCalls.of(checked.batch)
        resolutions = resolve_calls_under(flat, self._mode, self._policies, checked.complete[flat.row])
        outcomes = [batch_outcome(checked, flat, resolution) for resolution in resolutions]
        for index, outcome in enumerate(outcomes):
            yield index, outcome.resolved
            if outcome.validity:
                yield beam.pvalue.TaggedOutput(Tag.VALIDITY, (index, outcome.validity))
            if outcome.unscored is not None:
                self._unscored.inc(outcome.unscored.num_rows)
                yield beam.pvalue.TaggedOutput(Tag.UNSCORED, (index, outcome.unscored))
        base = (resolutions[0], outcomes[0].scored_rows)
        for index in range(1, len(resolutions)):
            summary = flip_summary(checked.batch, flat, self._mode, base,
                                   (resolutions[index], outcomes[index].scored_rows))
            yield beam.pvalue.TaggedOutput(FLIPS, (index, summary))


@beam.typehints.with_input_types(Checked)
class ResolveUnderPolicies(beam.PTransform):
    """Checked batches -> (policy index, Resolved) (`resolved`), (index,
    validity statistics) (`validity`), (index, UNSCORED table) (`unscored`),
    (candidate index, flip summary) (`flips`) and, should a batch raise
    unexpectedly, the batch and its error (`failed`).

    The policies (PolicyDocuments, the base first) are compiled once, here,
    and travel with the step: they are known and checked before the job
    starts, so a side input would only add a stage that reads them back."""

    def __init__(self, mode: str, policies: list):
        super().__init__()
        self._mode = c.check_mode(mode)
        if not policies:
            raise ValueError("Invalid policies: a what-if needs at least the base policy")
        self._policies = [compiled(policy) for policy in policies]

    def expand(self, batches):
        fn = ResolveUnderPoliciesFn(self._mode, self._policies)
        return batches | "Resolve under each policy" >> beam.ParDo(fn).with_output_types(
            tuple[int, Resolved], **{Tag.UNSCORED: tuple[int, pa.Table], Tag.VALIDITY: tuple[int, dict],
                                     FLIPS: tuple[int, dict]}
        ).with_outputs(Tag.UNSCORED, Tag.VALIDITY, FLIPS, main="resolved").with_exception_handling(
            dead_letter_tag=Tag.FAILED)
