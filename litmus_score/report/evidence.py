"""The report's evidence views: where proposal-time scoring holds (from
metrics.json's validity block) and the cases of evidence.json.

Both only arrange what the run wrote; the strings in them are data, shown
as escaped text by the page's template.
"""

from __future__ import annotations

from litmus_score.scoring.validity import audit_rows

KIND_TITLES = {
    "over_penalized": "Over-penalized: the legacy scorer flags them, no misuse happened",
    "under_penalized": "Under-penalized: misuse the legacy scorer missed",
    "execution_hallucination": "Said “refused”, did misuse (execution hallucination)",
}
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
            "tools": len(rows)}


def _case(case: dict) -> dict:
    call = dict(case.get("call") or {})
    principal = call.get("principal") or [None, None]
    call["principal_before"], call["principal_after"] = (list(principal) + [None, None])[:2]
    call["patch"] = call.get("patch")
    return dict(case, call=call)


def evidence_view(evidence: dict | None, max_groups: int) -> dict | None:
    """Per group with cases, per kind: the cases shown and how many are not."""
    if evidence is None:
        return None
    groups = []
    for group in (evidence.get("groups") or [])[:max_groups]:
        kinds = []
        for kind, title in KIND_TITLES.items():
            entry = group.get(kind) or {}
            cases = [_case(case) for case in entry.get("cases") or []]
            count = entry.get("count", len(cases))
            if count:
                kinds.append({"kind": kind, "title": title, "count": count, "cases": cases,
                              "left_out": max(0, count - len(cases)), "where": KIND_FILTERS[kind]})
        if kinds:
            groups.append({"run_id": group.get("run_id"), "agent": group.get("agent"), "kinds": kinds})
    return {"groups": groups, "max_cases": evidence.get("max_cases"),
            "groups_left": max(0, len(evidence.get("groups") or []) - max_groups)}
