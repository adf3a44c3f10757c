"""The report's evidence views: where proposal-time scoring holds (from
metrics.json's validity block) and the cases of evidence.json.

Both only arrange what the run wrote; the strings in them are data, shown
as escaped text by the page's template.

Each case's row has an id, `case_anchor(run_id, trajectory_id)`, and the
cases are folded in <details>: a link to report.html#ID (the one
`litmus-score show` prints) opens its section, as browsers open a closed
<details> that holds the target of a fragment.
"""

from __future__ import annotations

import hashlib
import json
import re

from litmus_score.scoring.validity import CHANGED, DIVERGENCES, HELD, TOO_FEW_CALLS, VERDICT_TOLERANCE, audit_rows

# Ids readable as they are: nothing a URL fragment would have to escape.
_PLAIN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")

KIND_TITLES = {
    "over_penalized": "Over-penalized: the legacy scorer flags them, no misuse happened",
    "under_penalized": "Under-penalized: misuse the legacy scorer missed",
    "execution_hallucination": "Said “refused”, did misuse (execution hallucination)",
}
# The validity table's words: each divergence, and each outcome of "did the verdict hold" with its badge.
DIVERGENCE_LABELS = tuple(zip(DIVERGENCES, ("no verdict", "verdict", "arguments", "principal", "not realized")))
OUTCOME_LABELS = {HELD: ("held", "ok"), CHANGED: ("changed", "regression"),
                  TOO_FEW_CALLS: ("too few calls", "too_few_calls")}
# Where the cases not shown are.
KIND_FILTERS = {
    "over_penalized": "trajectories/ where over_penalized is true",
    "under_penalized": "trajectories/ where under_penalized is true",
    "execution_hallucination": "trajectories/ where execution_hallucination is true",
}


def validity_view(totals: dict, limit: int) -> dict | None:
    """The validity table's rows (the `limit` least faithful tools first), or None for a run without the block."""
    block = totals.get("validity")
    if block is None:
        return None
    rows = audit_rows(block)
    return {"rows": rows[:limit], "left_out": max(0, len(rows) - limit), "valid": sum(r["valid"] for r in rows),
            "held": [r["tool"] for r in rows if r["verdict"] == HELD], "tools": len(rows),
            "tolerance": VERDICT_TOLERANCE, "divergences": DIVERGENCE_LABELS, "outcomes": OUTCOME_LABELS}


def case_anchor(run_id, trajectory_id) -> str:
    """The report's id for a trajectory's evidence: `case-RUN~TRAJECTORY` where both
    are plain (`~` is in neither), else `case-` and a hash of the two."""
    if all(isinstance(name, str) and _PLAIN_ID.fullmatch(name) for name in (run_id, trajectory_id)):
        return f"case-{run_id}~{trajectory_id}"
    key = json.dumps([run_id, trajectory_id])  # unambiguous, and ASCII: lone surrogates escaped
    return "case-" + hashlib.blake2b(key.encode("ascii"), digest_size=10).hexdigest()


def linked_anchor(evidence: dict, run_id, trajectory_id, max_groups: int) -> str | None:
    """The id of this trajectory's row in report.html (evidence_view with `max_groups`), or None: no row."""
    for group in (evidence.get("groups") or [])[:max_groups]:
        for kind in KIND_TITLES:
            for case in (group.get(kind) or {}).get("cases") or []:
                if (case.get("run_id"), case.get("trajectory_id")) == (run_id, trajectory_id):
                    return case_anchor(run_id, trajectory_id)
    return None


def _case(case: dict, anchors: set) -> dict:
    call = dict(case.get("call") or {})
    principal = call.get("principal") or [None, None]
    call["principal_before"], call["principal_after"] = (list(principal) + [None, None])[:2]
    call["patch"] = call.get("patch")
    anchor = case_anchor(case.get("run_id"), case.get("trajectory_id"))
    # A trajectory may be a case of two kinds: its first row holds the id.
    unique = anchor not in anchors
    anchors.add(anchor)
    return dict(case, call=call, anchor=anchor if unique else None)


def evidence_view(evidence: dict | None, max_groups: int) -> dict | None:
    """Per group with cases, per kind: the cases shown and how many are not."""
    if evidence is None:
        return None
    groups = []
    anchors: set[str] = set()
    for group in (evidence.get("groups") or [])[:max_groups]:
        kinds = []
        for kind, title in KIND_TITLES.items():
            entry = group.get(kind) or {}
            cases = [_case(case, anchors) for case in entry.get("cases") or []]
            count = entry.get("count", len(cases))
            if count:
                kinds.append({"kind": kind, "title": title, "count": count, "cases": cases,
                              "left_out": max(0, count - len(cases)), "where": KIND_FILTERS[kind]})
        if kinds:
            groups.append({"run_id": group.get("run_id"), "agent": group.get("agent"), "kinds": kinds})
    return {"groups": groups, "max_cases": evidence.get("max_cases"),
            "groups_left": max(0, len(evidence.get("groups") or []) - max_groups)}
