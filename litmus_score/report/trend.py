"""The history of nights as a document: trend.json (litmus-trend/1), computed from nights already read.

    trend_document(nights)     per night its rules, the rules that changed since the
                               night before, its alert and unscored share, its report;
                               per agent,
                               commit-time and proposal-time misuse night by night,
                               and misuse@K at one K for all its nights (the
                               smallest of its nights' largest k)

Pure: the nights are read, and trend.json and trend.html written, by
pipeline.trend (`litmus-score trend`, and `nightly` after it publishes).
Nights scored under other rules (spec version, adjudication mode or policy,
as litmus_score.scoring.compare states them) are not comparable: each run of
nights under the same rules is a `segment`, and the page draws no line
between two segments. trend.html is rendered from trend.json alone
(litmus_score.report.trend_page), as report.html is from a run's documents.
"""

from __future__ import annotations

from collections.abc import Sequence

from litmus_score.scoring.compare import misuse_at_k_by_agent, rules_changed, rules_of
from litmus_score.scoring.layout import REPORT_FILE
from litmus_score.scoring.metrics import largest_k
from litmus_score.scoring.stats import wilson_interval

TREND_SCHEMA = "litmus-trend/1"
TREND_FILE = "trend.json"
TREND_PAGE = "trend.html"
DEFAULT_NIGHTS = 30

# trend.json keeps the agents with most scored trajectories over the nights shown.
MAX_AGENTS = 200


def _point(entry: dict, scored: int, misuse: int, legacy: int, alert: bool) -> dict:
    """One night of a series: commit-time and proposal-time misuse with their Wilson 95% intervals."""
    def rate(count):
        return {"count": count, "rate": count / scored if scored else None, "ci95": wilson_interval(count, scored)}

    return {"date": entry["date"], "segment": entry["segment"], "scored": scored, "misuse": rate(misuse),
            "legacy_misuse": rate(legacy), "alert": alert}


def _at_k_series(points: list) -> dict:
    """An agent's misuse@K night by night from (entry, its misuse_at_k, alert) for the nights that have
    it: K is the largest k every one of them has, so that one line is one measure."""
    k = min((largest_k(at_k) for _, at_k, _ in points), default=None)
    series = [{"date": entry["date"], "segment": entry["segment"], "tasks": at_k[str(k)]["tasks"],
               "misuse": {"rate": at_k[str(k)]["estimate"], "ci95": at_k[str(k)]["ci95"]},
               "legacy_misuse": {"rate": at_k[str(k)]["legacy_estimate"], "ci95": at_k[str(k)]["legacy_ci95"]},
               "alert": alert} for entry, at_k, alert in points] if k is not None else []
    return {"k": k, "points": series}


def _pooled_agents(metrics: dict) -> dict:
    """agent -> (scored, misuse, legacy): one night's groups pooled over their run_ids, as compare does."""
    agents: dict = {}
    for group in metrics["groups"]:
        pooled = agents.setdefault(group["agent"], [0, 0, 0])
        pooled[0] += group["trajectories"]["scored"]
        pooled[1] += group["misuse"]["count"]
        pooled[2] += group["legacy_misuse"]["count"]
    return agents


def _report(night: dict) -> str | None:
    """The night's report.html relative to the root, where its manifest lists one."""
    listed = any(isinstance(entry, dict) and entry.get("path") == REPORT_FILE
                 for entry in night["manifest"].get("outputs") or [])
    return f"{night['folder']}/{REPORT_FILE}" if listed else None


def _night_entry(night: dict, previous: dict | None, segment: int) -> dict:
    metrics, manifest, comparison = night["metrics"], night["manifest"], night["comparison"] or {}
    totals = metrics["totals"]["trajectories"]
    reasons = totals["unscored_by_reason"]
    rules = rules_of(metrics)
    baseline = comparison.get("baseline") or {}
    return {
        "date": night["date"], "folder": night["folder"], "report": _report(night), **rules,
        "rules_changed": rules_changed(rules, rules_of(previous["metrics"])) if previous else [],
        "segment": segment,
        "trajectories": {name: totals[name] for name in ("input", "scored", "unscored")},
        "unscored_share": totals["unscored"] / totals["input"] if totals["input"] else None,
        "unscored_by_reason": {reason: n for reason, n in sorted(reasons.items()) if n},
        "incomplete_input": bool(manifest.get("unreadable_files") or reasons.get("pipeline_error")),
        "compared": bool(comparison),
        "baseline": baseline.get("night") or baseline.get("folder"),
        "compared_across_rules": bool(comparison.get("rules_changed")),
        # Compared with its baseline's inputs scored again under this night's rules (pipeline.rescore).
        "baseline_rescored": bool(baseline.get("rescored")),
        # How the policy changed since the night's baseline, rule by rule (compare's policy_diff).
        "policy_diff": comparison.get("policy_diff"),
        "regressions": list(comparison.get("regressions") or []),
    }


def trend_document(nights: list, skipped: Sequence = ()) -> dict:
    """trend.json for nights oldest first (read_nights' form)."""
    entries, previous, segment = [], None, 0
    for night in nights:
        if previous is not None and rules_changed(rules_of(night["metrics"]), rules_of(previous["metrics"])):
            segment += 1
        entries.append(_night_entry(night, previous, segment))
        previous = night
    series: dict[str | None, list[dict]] = {}
    at_k: dict[str | None, list[tuple]] = {}
    totals = []
    for night, entry in zip(nights, entries):
        for agent, (scored, misuse, legacy) in _pooled_agents(night["metrics"]).items():
            series.setdefault(agent, []).append(_point(entry, scored, misuse, legacy, agent in entry["regressions"]))
        for agent, blocks in misuse_at_k_by_agent(night["metrics"], entry["date"]).items():
            if blocks:
                at_k.setdefault(agent, []).append((entry, blocks, agent in entry["regressions"]))
        whole = night["metrics"]["totals"]
        totals.append(_point(entry, whole["trajectories"]["scored"], whole["misuse"]["count"],
                             whole["legacy_misuse"]["count"], bool(entry["regressions"])))
    by_size = sorted(series, key=lambda agent: (-sum(p["scored"] for p in series[agent]), agent is not None,
                                                agent or ""))
    kept = sorted(by_size[:MAX_AGENTS], key=lambda agent: (agent is not None, agent or ""))
    return {
        "schema": TREND_SCHEMA,
        "nights": entries,
        "skipped": list(skipped),
        "totals": totals,
        "agents": [{"agent": agent, "points": series[agent], "misuse_at_k": _at_k_series(at_k.get(agent, []))}
                   for agent in kept],
        "agents_left": max(0, len(series) - MAX_AGENTS),
    }
