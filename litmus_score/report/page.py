"""report.html: one self-contained, script-free page that explains a run.

`render_report(metrics, manifest, comparison=None, evidence=None)` builds it
from the documents a run writes (scoring-v1 metrics, the manifest, the
evidence) and, optionally, a litmus-comparison/1 document. Agent, run, tool, task and file names, reasons
and hashes come from adversarial trajectories: they are data, shown as text.
Jinja2 autoescapes them in the page and in its SVG charts (litmus_score.report.charts),
and a Content-Security-Policy forbids scripts and fetches anyway.
The page is deterministic: same inputs, same bytes.

The page is a list of Sections under a contents bar: each has an anchor, a
title, a template of this package and the view it shows (None: left out).
A new section is one more Section in `_sections` and one template.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from litmus_score.report.charts import Series, paired_bars
from litmus_score.report.evidence import evidence_view, validity_view
from litmus_score.report.formats import NAME_CHARS, display
from litmus_score.report.harness import harness_view
from litmus_score.report.jinja import CSP, environment
from litmus_score.scoring import contract
from litmus_score.scoring.metrics import largest_common_k, largest_k
from litmus_score.scoring.stats import wilson_interval

# Size bounds: a run may hold thousands of tools, tasks or shards and
# megabyte-long names; the page stays readable and small.
MAX_ROWS = 50
MAX_GROUPS = 200
MAX_CHART_GROUPS = 40
MAX_AT_K_GROUPS = 10  # a few rows each: the misuse@k chart shows fewer groups
MAX_RULE_AGENTS = 5  # the agents named beside each rule
TEXT_CHARS = 240  # longer text: file paths, issues, comparison reasons
CHART_CHARS = 36
KEEP_CHARS = 32  # names up to this long stay on one line in tables

# Chart colours; the page's CSS uses none of them (the browser test counts them).
COMMIT_COLOR = "#2a6fdb"
LEGACY_COLOR = "#f0a030"
OVER_COLOR = "#8e6cc0"
UNDER_COLOR = "#d62728"

# The spec's table order, then proposal mode's own category.
CATEGORY_ORDER = list(dict.fromkeys(contract.CATEGORIES[contract.COMMIT] + contract.CATEGORIES[contract.PROPOSAL]))
VERDICT_ORDER = ["allow", "deny", None]
COMPARISON_ORDER = ["regression", "watch", "insufficient_data", "new_agent", "missing_agent", "ok"]
MODE_LABELS = {"commit": "commit-time", "strict": "strict", "proposal": "proposal-time"}

def _json(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def _top(items, key, limit):
    """The first `limit` items by `key` (then input order), and how many were left out."""
    ranked = sorted(enumerate(items), key=lambda pair: (key(pair[1]), pair[0]))
    return [item for _, item in ranked[:limit]], max(0, len(items) - limit)


def _largest_groups(groups, limit):
    """The `limit` groups with most trajectories, in their metrics.json order, and how many were left out."""
    ranked = sorted(range(len(groups)), key=lambda i: (-groups[i]["trajectories"]["input"], i))
    keep = set(ranked[:limit])
    return [group for i, group in enumerate(groups) if i in keep], max(0, len(groups) - limit)


def _unscored_reasons(doc) -> list:
    counts = doc["trajectories"]["unscored_by_reason"]
    return sorted(((reason, n) for reason, n in counts.items() if n), key=lambda pair: (-pair[1], pair[0]))


def _group_label(group, several_runs: bool) -> str:
    agent = "(none)" if group["agent"] is None else display(group["agent"], CHART_CHARS)
    if not several_runs:
        return agent
    return agent + "\n" + ("(none)" if group["run_id"] is None else display(group["run_id"], CHART_CHARS))


# ---------------------------------------------------------------- charts


def _charts(groups, totals, mode_label: str) -> dict:
    shown, left_out = _largest_groups(groups, MAX_CHART_GROUPS)
    several_runs = len({group["run_id"] for group in groups}) > 1
    labels = [_group_label(group, several_runs) for group in shown]
    with_totals = shown + [totals]

    def column(block, field):
        return [group[block][field] for group in with_totals]

    rates = paired_bars(
        labels + ["all agents"],
        [Series(f"misuse ({mode_label})", COMMIT_COLOR, column("misuse", "rate"), column("misuse", "ci95")),
         Series("legacy proposal-time", LEGACY_COLOR,
                column("legacy_misuse", "rate"), column("legacy_misuse", "ci95"))],
        "share of scored trajectories (whiskers: 95% Wilson interval)", percent=True, separate_last=True)
    penalties = None if not shown else paired_bars(
        labels,
        [Series("over-penalized: legacy flags, no misuse", OVER_COLOR, [g["over_penalized"] for g in shown]),
         Series("under-penalized: misuse legacy missed", UNDER_COLOR, [g["under_penalized"] for g in shown])],
        "trajectories", percent=False)
    return {"rates": rates, "penalties": penalties, "left_out": left_out,
            **_at_k_chart(groups, several_runs, mode_label)}


def chart_ks(largest: int) -> list:
    """The k the misuse@k chart draws up to a group's largest: 1, 2, 4, ... and the largest itself."""
    return sorted({2 ** i for i in range(largest.bit_length()) if 2 ** i <= largest} | {largest})


def _at_k_label(group, several_runs: bool, k: str) -> str:
    """The agent, then k (and the run, shortened to fit beside it)."""
    agent = _group_label(group, False)
    if not several_runs:
        return f"{agent}\nk = {k}"
    run = "(none)" if group["run_id"] is None else display(group["run_id"], CHART_CHARS - 10)
    return f"{agent}\nk = {k} · {run}"


def _at_k_chart(groups, several_runs: bool, mode_label: str) -> dict:
    """misuse@k against k per group (the largest groups with tasks), commit beside proposal time."""
    with_tasks = [group for group in groups if group.get("misuse_at_k")]
    shown, left_out = _largest_groups(with_tasks, MAX_AT_K_GROUPS)
    rows = [(group, str(k)) for group in shown for k in chart_ks(largest_k(group["misuse_at_k"]))]
    if not rows:
        return {"at_k": None}
    labels = [_at_k_label(group, several_runs, k) for group, k in rows]
    blocks = [group["misuse_at_k"][k] for group, k in rows]
    chart = paired_bars(
        labels,
        [Series(f"misuse@k ({mode_label})", COMMIT_COLOR, [b["estimate"] for b in blocks], [b["ci95"] for b in blocks]),
         Series("legacy proposal-time", LEGACY_COLOR, [b["legacy_estimate"] for b in blocks],
                [b["legacy_ci95"] for b in blocks])],
        "chance of at least one misuse in k attempts at a task (whiskers: 95% interval over tasks)", percent=True)
    return {"at_k": chart, "at_k_left_out": left_out}


# ---------------------------------------------------------------- tables


def _gap_table(rows) -> dict | None:
    """The proposal × commit table: verdicts on both axes, each cell split by state_mutated."""
    if rows is None:
        return None
    seen = {r.get(key) for r in rows for key in ("proposal_verdict", "commit_verdict")}
    extra = sorted(seen - set(VERDICT_ORDER), key=str)
    verdicts = VERDICT_ORDER[:2] + extra + [None]
    cells = {(p, c): {"calls": 0, True: 0, False: 0, None: 0} for p in verdicts for c in verdicts}
    for row in rows:
        cell = cells[(row.get("proposal_verdict"), row.get("commit_verdict"))]
        cell["calls"] += row["calls"]
        cell[row.get("state_mutated")] += row["calls"]
    return {"verdicts": verdicts, "cells": cells, "calls": sum(row["calls"] for row in rows)}


def _categories(slices) -> list:
    present = {category for entry in slices for category in entry["by_category"]}
    return [c for c in CATEGORY_ORDER if c in present] + sorted(present - set(CATEGORY_ORDER))


def _task_row(entry, name, group) -> dict:
    """A task slice as a table row; plain counts of misuse get their rate and Wilson interval."""
    n = entry["trajectories"]

    def block(value):
        if isinstance(value, dict):
            return value
        return {"count": value, "rate": value / n if n else None, "ci95": wilson_interval(value, n)}

    return {"name": name, "run_id": group["run_id"], "agent": group["agent"], "trajectories": n,
            "misuse": block(entry["misuse"]), "legacy_misuse": block(entry["legacy_misuse"])}


def _slices(groups, totals) -> dict:
    slices = totals.get("slices") or {}
    tools, tools_left = _top(
        [dict(entry, name=name) for name, entry in (slices.get("tool") or {}).items()],
        lambda e: (-e["calls"], e["name"]), MAX_ROWS)
    categories, categories_left = _top(
        [dict(entry, name=name) for name, entry in (slices.get("task_category") or {}).items()],
        lambda e: (-e["trajectories"], e["name"]), MAX_ROWS)
    tasks = [_task_row(entry, name, group)
             for group in groups for name, entry in ((group.get("slices") or {}).get("task") or {}).items()]
    # Tasks hold a handful of trajectories each; the ones with misuse are what a reader looks for.
    tasks, tasks_left = _top(
        tasks, lambda e: (-e["misuse"]["count"], -e["legacy_misuse"]["count"], -e["trajectories"]), MAX_ROWS)
    return {
        "present": bool(slices) or bool(tasks),
        "tools": tools, "tools_left": tools_left, "tool_categories": _categories(tools),
        "categories": categories, "categories_left": categories_left,
        "tasks": tasks, "tasks_left": tasks_left,
    }


# Agents whose drivers the page shows (regressions first, then watch); comparison.json has every one's.
MAX_DRIVER_AGENTS = 20


def _drivers(agents) -> tuple:
    """The agents with drivers (comparison.json's, per tool and task category), at most MAX_DRIVER_AGENTS,
    and how many more have them."""
    driven = [{"agent": a.get("agent"), "verdict": a.get("verdict"), "drivers": a["drivers"],
               "css": a.get("verdict") if a.get("verdict") in ("regression", "watch") else "other"}
              for a in agents if isinstance(a.get("drivers"), dict)]
    return driven[:MAX_DRIVER_AGENTS], max(0, len(driven) - MAX_DRIVER_AGENTS)


RULE_LABELS = {"spec": "spec version", "adjudication": "adjudication mode", "policy_sha256": "policy (sha256)"}


def _baseline(comparison) -> dict | None:
    """Which run the comparison's baseline is, as comparison.json names it (None before it did)."""
    named = comparison.get("baseline")
    if not isinstance(named, dict):
        return None
    runs = named.get("runs") or []
    return {**named, "runs": runs[:5], "runs_left": max(0, len(runs) - 5), "rescored": named.get("rescored")}


def _at_largest_common_k(at_k) -> dict | None:
    """Both runs' misuse@k of an agent at the largest k both have (comparison.json's misuse_at_k)."""
    new, old = (at_k or {}).get("new"), (at_k or {}).get("old")
    k = largest_common_k(new, old)
    return None if new is None or old is None or k is None else {"k": k, "new": new[k], "old": old[k]}


def _comparison(comparison) -> dict | None:
    if comparison is None:
        return None
    rank = {verdict: index for index, verdict in enumerate(COMPARISON_ORDER)}
    agents, left = _top(comparison.get("agents") or [], lambda a: rank.get(a.get("verdict"), len(rank)), MAX_GROUPS)
    fields = ("agent", "verdict", "new", "old", "difference", "ci95", "paired_tasks")
    driven, driven_left = _drivers(agents)
    return {
        "baseline": _baseline(comparison),
        "rules_changed": [dict(change, label=RULE_LABELS.get(change.get("rule"), display(change.get("rule"))))
                          for change in comparison.get("rules_changed") or []],
        "policy_diff": comparison.get("policy_diff"),
        "agents": [{**{field: a.get(field) for field in fields},
                    "at_k": _at_largest_common_k(a.get("misuse_at_k")),
                    "css": a.get("verdict") if a.get("verdict") in rank else "other",
                    "reasons": (a.get("reasons") or [])[:10]} for a in agents],
        "left_out": left,
        "drivers": driven, "drivers_left": driven_left,
        "regressions": comparison.get("regressions") or [],
        "watch": comparison.get("watch") or [],
        "false_alarm_level": (comparison.get("thresholds") or {}).get("false_alarm_level"),
        # Scored under other rules (rules_changed): no agent is judged.
        "withheld": bool(comparison.get("withheld")),
        "groups_folded": [run for run in comparison.get("groups_folded") or [] if run in ("new", "old")],
    }


def _inputs(metrics, manifest) -> dict:
    policy = metrics["policy_sha256"] if "policy_sha256" in metrics else manifest.get("policy_sha256")
    manifest_policy = manifest.get("policy_sha256")
    files = manifest.get("inputs") or []
    options = sorted((manifest.get("options") or {}).items())
    return {
        "policy": policy,
        "policy_mismatch": "policy_sha256" in manifest and manifest_policy != policy,
        "manifest_policy": manifest_policy,
        "package": manifest.get("package") or {},
        "options": [(key, _json(value)) for key, value in options],
        "files": files[:MAX_ROWS], "files_left": max(0, len(files) - MAX_ROWS),
        "unreadable": manifest.get("unreadable_files") or [],
        "input_rows": manifest.get("input_rows"),
    }


# ---------------------------------------------------------------- page


@dataclass(frozen=True)
class Section:
    """One section of the page: its anchor, its heading, its name in the contents bar, its
    template and what the template shows as `view` (None: the section is left out)."""

    anchor: str
    title: str
    short: str
    template: str
    view: object


def _gap(groups, totals) -> dict | None:
    if totals.get("adjudication_gap") is None:
        return None
    return {"totals": totals["gap"], "groups": [g for g in groups if g["gap"] and g["gap"]["calls"]]}


def _rules(groups, totals) -> dict | None:
    """The misuse calls per rule that decided them (flagged_by_rule), most first, each with the
    agents it flagged most; None for a run without misuse calls (or written before the field)."""
    flagged = totals.get("flagged_by_rule")
    if not flagged:
        return None
    all_calls = sum(flagged.values())
    ranked = sorted(flagged.items(), key=lambda item: (-item[1], item[0]))
    rules = []
    for rule, calls in ranked[:MAX_ROWS]:
        counts = [((g.get("flagged_by_rule") or {}).get(rule, 0), i) for i, g in enumerate(groups)]
        top = sorted((item for item in counts if item[0]), key=lambda item: (-item[0], item[1]))[:MAX_RULE_AGENTS]
        most = [{"run_id": groups[i]["run_id"], "agent": groups[i]["agent"], "calls": n} for n, i in top]
        rules.append({"rule": rule, "calls": calls, "share": calls / all_calls, "agents": most})
    return {"rules": rules, "left_out": max(0, len(ranked) - MAX_ROWS)}


def _sections(metrics, inputs, comparison, evidence, groups, groups_left, totals, mode_label) -> list:
    slices = _slices(metrics["groups"], metrics["totals"])
    return [
        Section("baseline", "Since the baseline", "Baseline", "baseline.html.j2", _comparison(comparison)),
        Section("agents", "Misuse per agent", "Misuse per agent", "agents.html.j2", {
            "groups": groups, "groups_left": groups_left, "disagreements": "policy_disagreements" in totals,
            "charts": _charts(metrics["groups"], metrics["totals"], mode_label)}),
        Section("gap", "Proposal × commit", "Proposal × commit", "gap.html.j2", _gap(groups, totals)),
        Section("validity", "Where proposal-time scoring holds", "Where proposal-time scoring holds",
                "validity.html.j2", validity_view(totals, MAX_ROWS)),
        Section("harness", "The harness's own verdict beside ours", "Harness verdict", "harness.html.j2",
                harness_view(metrics["groups"], MAX_ROWS)),
        Section("rules", "Misuse calls by rule", "Rules", "rules.html.j2", _rules(metrics["groups"], totals)),
        Section("evidence", "Evidence", "Evidence", "evidence.html.j2", evidence_view(evidence, MAX_GROUPS)),
        Section("unscored", "Unscored trajectories", "Unscored", "unscored.html.j2", {"groups": groups}),
        Section("slices", "Slices", "Slices", "slices.html.j2", slices if slices["present"] else None),
        Section("inputs", "Inputs", "Inputs", "inputs.html.j2", inputs),
    ]


def render_report(metrics: dict, manifest: dict, comparison: dict | None = None, evidence: dict | None = None) -> str:
    """The whole report.html for one run, as a string; `evidence` is the run's evidence.json."""
    groups, totals = metrics["groups"], metrics["totals"]
    mode = metrics["adjudication"]
    mode_label = MODE_LABELS.get(mode, display(mode))
    table_groups, groups_left = _largest_groups(groups, MAX_GROUPS)
    runs = sorted({g["run_id"] for g in groups}, key=lambda run: (run is None, run or ""))
    table_groups = [dict(g, reasons=_unscored_reasons(g)[:MAX_ROWS], gap=_gap_table(g.get("adjudication_gap")))
                    for g in table_groups]
    totals = dict(totals, reasons=_unscored_reasons(totals)[:MAX_ROWS], gap=_gap_table(totals.get("adjudication_gap")))
    inputs = _inputs(metrics, manifest)
    sections = _sections(metrics, inputs, comparison, evidence, table_groups, groups_left, totals, mode_label)
    return _PAGE.render(
        csp=CSP,
        mode=mode,
        mode_label=mode_label,
        runs=runs[:5],
        runs_left=max(0, len(runs) - 5),
        agents=len({g["agent"] for g in groups} - {None}),
        totals=totals,
        policy=inputs["policy"],
        sections=[section for section in sections if section.view is not None],
        limits={"rows": MAX_ROWS, "name": NAME_CHARS, "text": TEXT_CHARS, "keep": KEEP_CHARS,
                "chart": MAX_CHART_GROUPS, "at_k": MAX_AT_K_GROUPS},
    )


_PAGE = environment().get_template("report.html.j2")
