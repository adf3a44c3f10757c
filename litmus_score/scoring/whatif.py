"""whatif.json: what each candidate policy changes against the base, from
their metrics.json documents and the flips the pipeline counted
(transforms.whatif).

The ledger is per agent (summed over its runs): scored trajectories, misuse,
legacy (proposal-time) misuse, and the spec's over-penalized (legacy misuse,
not misuse) and under-penalized (misuse, not legacy misuse) trajectories,
under the base and under the candidate.
"""

from __future__ import annotations

from litmus_score.scoring.layout import METRICS_FILE, WHATIF_SCHEMA

LEDGER_FIELDS = ("scored", "misuse", "legacy_misuse", "over_penalized", "under_penalized")


def _ledger_counts(group: dict) -> dict:
    return {"scored": group["trajectories"]["scored"], "misuse": group["misuse"]["count"],
            "legacy_misuse": group["legacy_misuse"]["count"], "over_penalized": group["over_penalized"],
            "under_penalized": group["under_penalized"]}


def _per_agent(metrics: dict) -> dict:
    agents: dict = {}
    for group in metrics["groups"]:
        counts = agents.setdefault(group["agent"], dict.fromkeys(LEDGER_FIELDS, 0))
        for name, value in _ledger_counts(group).items():
            counts[name] += value
    return agents


def ledger(base: dict, candidate: dict) -> list:
    """Per agent of either metrics document, its counts under the base and the candidate, and the change."""
    ours, theirs = _per_agent(base), _per_agent(candidate)
    empty = dict.fromkeys(LEDGER_FIELDS, 0)
    rows = []
    # A row without an agent is a group of its own (null), listed first.
    for agent in sorted(ours.keys() | theirs.keys(), key=lambda agent: (agent is not None, agent or "")):
        before, after = ours.get(agent, empty), theirs.get(agent, empty)
        rows.append({"agent": agent, "base": before, "candidate": after,
                     "change": {name: after[name] - before[name] for name in LEDGER_FIELDS}})
    return rows


def policy_entry(name: str, file: str, sha256: str) -> dict:
    return {"name": name, "file": file, "policy_sha256": sha256, "metrics": f"{name}/{METRICS_FILE}"}


def whatif_document(adjudication: str, policies: list, metrics: list, flips: dict, diffs: list) -> dict:
    """whatif.json. `policies` are policy_entry()s, the base first; `metrics`
    their metrics.json documents in the same order; `flips` candidate index
    -> its flips (transforms.whatif.FlipsCombineFn); `diffs` each
    candidate's rule-level diff from the base (policy.policy_diff)."""
    # Every input row under each policy: scored, or unscored with its reasons.
    accounted = [{"accounted": {key: document["totals"]["trajectories"][key]
                                for key in ("input", "scored", "unscored", "unscored_by_reason")}}
                 for document in metrics]
    candidates = []
    for index in range(1, len(policies)):
        candidates.append({**policies[index], **accounted[index], "policy_diff": diffs[index - 1], **flips[index],
                           "ledger": ledger(metrics[0], metrics[index])})
    return {"schema": WHATIF_SCHEMA, "adjudication": adjudication, "base": {**policies[0], **accounted[0]},
            "candidates": candidates}
