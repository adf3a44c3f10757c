"""The evidence: per (run_id, agent), the over-penalized, under-penalized and
execution-hallucination trajectories a reader can check, each with the call
that decided it.

Classification picks, per batch, the first MAX_CASES of each kind in a
stable order (trajectory_id, source file, source row) and describes only
those; EvidenceCombineFn keeps the first MAX_CASES over all batches, adds
up the counts and makes the JSON Patches of the cases it keeps, so
evidence.json is bounded however large the run.

The deciding call: for an over-penalized trajectory the first call denied
at proposal (the flag that was not misuse); otherwise the first misuse call.
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Iterable

import apache_beam as beam
import jsonpatch
import numpy as np
import pyarrow as pa

from litmus_score.scoring.layout import EVIDENCE_SCHEMA
from litmus_score.scoring.rules import parse_json_object
from transforms import schema as s
from transforms.columnar import group_codes, struct_field

KINDS = ("over_penalized", "under_penalized", "execution_hallucination")
MAX_CASES = 25
# Bounds on what one case may say: texts from trajectories are data.
MAX_TEXT = 1000
MAX_PATCH_OPS = 20
# A lone surrogate: JSON may escape one ("\ud800"), UTF-8 cannot hold it, so
# neither Beam's coders nor evidence.json can. Python's json joins a valid
# pair into one character, so any surrogate left in a parsed text is lone.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# A described call's resolved arguments, whole, until its patch is made.
RESOLVED = "resolved_arguments"


def _cut(value):
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return value[: MAX_TEXT - 1] + "…"
    return value


def _escaped(text: str) -> str:
    """`text` with each lone surrogate written as its JSON escape, \\udXXX, as the data spelled it."""
    return _LONE_SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def case_key(case: dict) -> tuple:
    return case["trajectory_id"], case["source_file"], case["source_row"]


def arguments_patch(proposal: str, commit) -> list | None:
    """The JSON Patch (RFC 6902) from the proposal's resolved arguments to the
    commit's, values as JSON text; None when either is not a JSON object."""
    before, after = parse_json_object(proposal), parse_json_object(commit)
    if before is None or after is None:
        return None
    operations = jsonpatch.make_patch(before, after).patch[:MAX_PATCH_OPS]
    return [{key: _cut(_escaped(value if key in ("op", "path", "from") else json.dumps(value, ensure_ascii=False)))
             for key, value in op.items()} for op in operations]


# The deciding call's fields a case shows, read a column at a time (a null commit's are null).
_CALL_FIELDS = ("call_id", "step", "tool", "arguments", "proposal.principal", "proposal.resolved_arguments",
                "commit.outcome", "commit.status_code", "commit.state_mutated", "commit.principal",
                "commit.resolved_arguments")


def _deciding_call(call: dict, scored: dict) -> dict:
    """A case's call from its fields (_CALL_FIELDS) and its scored verdicts."""
    return {
        "call_id": _cut(call["call_id"]), "step": call["step"], "tool": _cut(call["tool"]),
        "arguments": _cut(call["arguments"]),
        **scored,
        "outcome": _cut(call["commit.outcome"]), "status_code": call["commit.status_code"],
        "state_mutated": call["commit.state_mutated"],
        "principal": [_cut(call["proposal.principal"]), _cut(call["commit.principal"])],
        # Made into the patch once a case is among the first (EvidenceCombineFn.extract_output).
        RESOLVED: [call["proposal.resolved_arguments"], call["commit.resolved_arguments"]],
    }


def batch_evidence(resolved, flags: dict, deciding: dict, codes: np.ndarray, names, kept: dict) -> dict:
    """{(run_id, agent, kind): {"count", "cases"}} of one batch of scored trajectories.

    `flags[kind]` marks the trajectories of each kind, `deciding[kind]` the
    calls that can decide it; each call's category is names[codes[call]].
    `kept` holds, per (run_id, agent, kind), the keys (case_key) of the first
    MAX_CASES cases shown so far in this bundle, and is updated: a case after
    them cannot be among the first over all batches (a bundle's outputs reach
    EvidenceCombineFn together, or none do), so it is counted, not described.
    """
    trajectories, calls = resolved.trajectories, resolved.calls
    owner = calls["trajectory"].to_numpy()
    group, keys = group_codes(trajectories["run_id"], trajectories["agent"])
    evidence: dict[tuple, dict] = {}
    shown: list[tuple[dict, int, int]] = []  # (case, trajectory row, deciding call)
    for kind in KINDS:
        rows = np.flatnonzero(flags[kind])
        if not len(rows):
            continue
        candidates = np.flatnonzero(deciding[kind])
        first = np.full(trajectories.num_rows, -1)
        owners, at = np.unique(owner[candidates], return_index=True)
        first[owners] = candidates[at]
        take = lambda name: trajectories[name].take(pa.array(rows)).to_pylist()  # noqa: E731, B023 (called in this iteration)
        for trajectory_id, source_file, source_row, row in sorted(
                zip(take("trajectory_id"), take(s.SOURCE_FILE), take(s.SOURCE_ROW), rows.tolist())):
            entry = evidence.setdefault((*keys[group[row]], kind), {"count": 0, "cases": []})
            entry["count"] += 1
            earlier = kept.get((*keys[group[row]], kind), ())
            if len(entry["cases"]) < MAX_CASES and (len(earlier) < MAX_CASES
                                                    or (trajectory_id, source_file, source_row) < earlier[-1]):
                case = {"trajectory_id": trajectory_id, "source_file": source_file, "source_row": source_row,
                        "run_id": _cut(keys[group[row]][0]), "agent": _cut(keys[group[row]][1])}
                entry["cases"].append(case)
                shown.append((case, row, int(first[row])))
    if shown:
        _describe(resolved, shown, codes, names)
    for key, entry in evidence.items():
        if entry["cases"]:
            kept[key] = sorted([*kept.get(key, ()), *map(case_key, entry["cases"])])[:MAX_CASES]
    return evidence


_SCORED_FIELDS = ("proposal_verdict", "commit_verdict", "proposal_verdict_source", "commit_verdict_source",
                  "proposal_decided_by", "commit_decided_by", "proposal_policy_ruling", "proposal_policy_decided_by",
                  "commit_policy_ruling", "commit_policy_decided_by", "realized")


def _describe(resolved, shown: list, codes: np.ndarray, names) -> None:
    """Adds to each shown case its trajectory's task and stance and its deciding call, a column at a time
    (a whole call's struct made into Python dicts costs four times its fields)."""
    trajectories, calls = resolved.trajectories, resolved.calls
    rows = pa.array([row for _, row, _ in shown])
    at = pa.array([call for _, _, call in shown])
    columns = {name: trajectories[name].take(rows).to_pylist() for name in ("task_id", "verbal_stance")}
    scored = {name: calls[name].take(at).to_pylist() for name in _SCORED_FIELDS}
    sources = resolved.inputs["call"].take(calls["source_call"].take(at))
    fields = {name: struct_field(sources, name).to_pylist() for name in _CALL_FIELDS}
    for i, (case, _, call) in enumerate(shown):
        case["task_id"] = _cut(columns["task_id"][i])
        case["verbal_stance"] = _cut(columns["verbal_stance"][i])
        verdicts = {name: values[i] for name, values in scored.items()}
        source = {name: values[i] for name, values in fields.items()}
        case["call"] = _deciding_call(source, {"category": names[codes[call]], **verdicts})


def _with_patch(case: dict) -> dict:
    call = dict(case["call"])
    call["patch"] = arguments_patch(*call.pop(RESOLVED))
    return {**case, "call": call}


@beam.typehints.with_input_types(dict)
@beam.typehints.with_output_types(dict)
class EvidenceCombineFn(beam.CombineFn):
    """Per-batch evidence -> evidence.json: counts added, the first MAX_CASES kept."""

    def create_accumulator(self) -> dict:
        return {}

    def add_input(self, accumulator: dict, evidence: dict) -> dict:
        for key, entry in evidence.items():
            into = accumulator.setdefault(key, {"count": 0, "cases": []})
            into["count"] += entry["count"]
            into["cases"] = heapq.nsmallest(MAX_CASES, into["cases"] + entry["cases"], key=case_key)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[dict]) -> dict:
        merged: dict = {}
        for accumulator in accumulators:
            self.add_input(merged, accumulator)
        return merged

    def extract_output(self, accumulator: dict) -> dict:
        groups: dict[tuple, dict] = {}
        for (run_id, agent, kind), entry in accumulator.items():
            entry = {"count": entry["count"], "cases": [_with_patch(case) for case in entry["cases"]]}
            groups.setdefault((run_id, agent), {"run_id": run_id, "agent": agent})[kind] = entry
        return {
            "schema": EVIDENCE_SCHEMA,
            "max_cases": MAX_CASES,
            "groups": [{kind: {"count": 0, "cases": []} for kind in KINDS} | groups[key]
                       for key in sorted(groups, key=lambda k: tuple((v is not None, v or "") for v in k))],
        }


@beam.typehints.with_input_types(dict)
@beam.typehints.with_output_types(dict)
class CollectEvidence(beam.PTransform):
    """Per-batch evidence -> the single evidence.json document (also for empty input)."""

    def expand(self, evidence: beam.PCollection[dict]) -> beam.PCollection[dict]:
        return evidence | "Keep the first cases" >> beam.CombineGlobally(EvidenceCombineFn())
