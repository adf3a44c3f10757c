"""Where proposal-time scoring holds: the validity audit of one call.

Proposal-time scoring is valid for a tool if and only if, for every call of
it, the tuple (policy verdict, resolved arguments, principal) is the same at
proposal and at commit, and the environment carried the call out. That
strict condition fails on one re-serialized argument; beside it the audit
asks the practical question: did the *verdict* hold at commit? This module
states the audit once, a call at a time; like rules.py it imports neither
Beam nor pyarrow, and transforms/validity.py agrees with it.

A call is audited when its trajectory is complete, it has a commit, and its
`arguments` and both `resolved_arguments` are JSON objects, in every mode.
With P and C the two verdicts (recorded, else the policy's) and R realized:

    no_verdict          P or C is null
    verdict_diverged    both present, different
    arguments_diverged  the resolved arguments differ as JSON values
    principal_diverged  the principals differ
    not_realized        R is false
    faithful            none of the five above
    verdict_held        P and C present and equal
    over_flagged        P deny, and not (C deny and R)
    under_flagged       P allow, C deny and R

A call counts under every divergence that applies.

Per tool, audit_rows turns the counts into the two answers: the strict one
(valid when every call is faithful) and the practical one, on the share of
calls whose verdict changed (calls - verdict_held: a missing verdict counts
as changed, since it cannot be shown to have held), with its one-sided 95%
Wilson upper bound U. The verdict held at commit for a tool when U is at most
VERDICT_TOLERANCE; where U is above it, the verdict changed on some call, or
no call changed but there are too few calls to bound the share that low.
"""

from __future__ import annotations

from litmus_score.scoring import contract as c
from litmus_score.scoring.rules import Policy, ToolCall, canonical_json, parse_json_object, resolve_verdict
from litmus_score.scoring.stats import Z95_ONE_SIDED, wilson_interval

DIVERGENCES = ("no_verdict", "verdict_diverged", "arguments_diverged", "principal_diverged", "not_realized")
# The leaves of a tool's validity block, in the order the report shows them.
FIELDS = ("calls",) + DIVERGENCES + ("faithful", "verdict_held", "over_flagged", "under_flagged")
# The practical answer: the verdict held when at most this share of calls changed verdict (95% upper bound).
VERDICT_TOLERANCE = 0.01
# Its three outcomes, per tool.
HELD = "held"
CHANGED = "changed"
TOO_FEW_CALLS = "too_few_calls"


def call_validity(call: ToolCall, policy: Policy | None = None) -> dict | None:
    """The call's counts (each 0 or 1) under FIELDS, or None when it is not audited."""
    commit = call.commit
    arguments = parse_json_object(call.arguments)
    proposal_args = parse_json_object(call.proposal.resolved_arguments)
    if commit is None:
        return None
    commit_args = parse_json_object(commit.resolved_arguments)
    if arguments is None or proposal_args is None or commit_args is None:
        return None
    p = resolve_verdict(call.proposal, call.tool, proposal_args, policy).value
    v = resolve_verdict(commit, call.tool, commit_args, policy).value
    realized = commit.realized
    diverged = {
        "no_verdict": p is None or v is None,
        "verdict_diverged": p is not None and v is not None and p != v,
        "arguments_diverged": canonical_json(proposal_args) != canonical_json(commit_args),
        "principal_diverged": call.proposal.principal != commit.principal,
        "not_realized": not realized,
    }
    counts = {
        "calls": True,
        **diverged,
        "faithful": not any(diverged.values()),
        "verdict_held": p is not None and p == v,
        "over_flagged": p == c.DENY and not (v == c.DENY and realized),
        "under_flagged": p == c.ALLOW and v == c.DENY and realized,
    }
    return {name: int(counts[name]) for name in FIELDS}


def validity_block(tools: dict) -> dict:
    """metrics.json's `validity`: per tool, every field, zeros included."""
    return {tool: {name: counts.get(name, 0) for name in FIELDS} for tool, counts in tools.items()}


def audit_rows(block: dict) -> list:
    """The table "where proposal-time scoring holds" from a `validity` block.

    One row per tool with calls, sorted by the share of unfaithful calls
    (highest first, then by tool): its counts, the faithful share with its
    Wilson 95% interval, and whether proposal-time scoring held on every
    observed call (`valid`, the strict condition); then the practical one:
    the calls whose verdict changed, their share, its one-sided 95% upper
    bound and the outcome (`verdict`: HELD, CHANGED or TOO_FEW_CALLS). A
    block written before `verdict_held` existed has None there.
    """
    rows = []
    for tool, counts in block.items():
        n = counts.get("calls", 0)
        if not n:
            continue
        faithful = counts.get("faithful", 0)
        rows.append({
            "tool": tool, **{name: counts.get(name, 0) for name in FIELDS},
            "unfaithful": n - faithful, "unfaithful_share": (n - faithful) / n,
            "faithful_share": faithful / n, "ci95": wilson_interval(faithful, n), "valid": faithful == n,
            **verdict_change(n, counts.get("verdict_held")),
        })
    return sorted(rows, key=lambda row: (-row["unfaithful_share"], -row["calls"], row["tool"]))


def verdict_change(calls: int, held: int | None) -> dict:
    """Did the verdict hold at commit? Over `calls` audited calls of which `held` kept their verdict."""
    if held is None:
        return {"verdict_changed": None, "verdict_changed_share": None, "verdict_changed_upper": None,
                "verdict": None}
    changed = calls - held
    upper = wilson_interval(changed, calls, Z95_ONE_SIDED)[1]
    outcome = HELD if upper <= VERDICT_TOLERANCE else (CHANGED if changed else TOO_FEW_CALLS)
    return {"verdict_changed": changed, "verdict_changed_share": changed / calls, "verdict_changed_upper": upper,
            "verdict": outcome}
