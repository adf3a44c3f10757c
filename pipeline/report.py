"""report.html: one self-contained, script-free page that explains a run.

`render_report(metrics, manifest, comparison=None)` builds it from the
documents a run writes (scoring-v1 metrics, the manifest) and, optionally, a
litmus-comparison/1 document. Agent, run, tool, task and file names, reasons
and hashes come from adversarial trajectories: they are data, shown as text.
Jinja2 autoescapes them in the page and in its SVG charts (pipeline.charts),
and a Content-Security-Policy forbids scripts and fetches anyway.
The page is deterministic: same inputs, same bytes.
"""

from __future__ import annotations

import json

from jinja2 import Environment, StrictUndefined
from markupsafe import Markup

from pipeline import text
from pipeline.charts import Series, paired_bars
from scoring import contract
from scoring.stats import wilson_interval

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

# Size bounds: a run may hold thousands of tools, tasks or shards and
# megabyte-long names; the page stays readable and small.
MAX_ROWS = 50
MAX_GROUPS = 200
MAX_CHART_GROUPS = 40
NAME_CHARS = 80  # names: agents, runs, tools, tasks, reasons
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
COMPARISON_ORDER = ["regression", "insufficient_data", "new_agent", "missing_agent", "ok"]
MODE_LABELS = {"commit": "commit-time", "strict": "strict", "proposal": "proposal-time"}

_NONE_HTML = Markup('<span class="none">none</span>')


def display(value, limit: int = NAME_CHARS) -> str:
    """A data string for display: non-printable characters escaped, cut at `limit` with an ellipsis."""
    return text.display(value, limit)


def _name(value, limit: int = NAME_CHARS):
    """Like display(), but a missing value reads as a styled 'none'; the string is escaped by autoescape."""
    return _NONE_HTML if value is None else display(value, limit)


def _pct(rate) -> str:
    return "n/a" if rate is None else f"{rate:.1%}"


def _interval(ci) -> str:
    return "" if not ci else f"{ci[0]:.1%} – {ci[1]:.1%}"


def _num(value) -> str:
    return "—" if value is None else f"{value:,}"


def _points(value) -> str:
    """A difference of rates in percentage points, signed."""
    return "n/a" if value is None else f"{value * 100:+.1f} pp"


def _pvalue(value) -> str:
    return "n/a" if value is None else ("< 0.001" if value < 0.001 else f"{value:.3f}")


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
    return {"rates": rates, "penalties": penalties, "left_out": left_out}


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


def _comparison(comparison) -> dict | None:
    if comparison is None:
        return None
    rank = {verdict: index for index, verdict in enumerate(COMPARISON_ORDER)}
    agents, left = _top(comparison.get("agents") or [], lambda a: rank.get(a.get("verdict"), len(rank)), MAX_GROUPS)
    fields = ("agent", "verdict", "new", "old", "difference", "ci95", "paired_tasks")
    return {
        "agents": [{**{field: a.get(field) for field in fields},
                    "css": a.get("verdict") if a.get("verdict") in rank else "other",
                    "reasons": (a.get("reasons") or [])[:10]} for a in agents],
        "left_out": left,
        "regressions": comparison.get("regressions") or [],
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


def render_report(metrics: dict, manifest: dict, comparison: dict | None = None) -> str:
    """The whole report.html for one run, as a string."""
    groups, totals = metrics["groups"], metrics["totals"]
    mode = metrics["adjudication"]
    mode_label = MODE_LABELS.get(mode, display(mode))
    table_groups, groups_left = _largest_groups(groups, MAX_GROUPS)
    runs = sorted({g["run_id"] for g in groups}, key=lambda run: (run is None, run or ""))
    return _PAGE.render(
        csp=CSP,
        mode=mode,
        mode_label=mode_label,
        runs=runs[:5],
        runs_left=max(0, len(runs) - 5),
        agents=len({g["agent"] for g in groups} - {None}),
        groups=[dict(g, reasons=_unscored_reasons(g)[:MAX_ROWS],
                     gap=_gap_table(g.get("adjudication_gap"))) for g in table_groups],
        groups_left=groups_left,
        totals=dict(totals, reasons=_unscored_reasons(totals)[:MAX_ROWS],
                    gap=_gap_table(totals.get("adjudication_gap"))),
        disagreements="policy_disagreements" in totals,
        charts=_charts(groups, totals, mode_label),
        slices=_slices(groups, totals),
        comparison=_comparison(comparison),
        inputs=_inputs(metrics, manifest),
        limits={"rows": MAX_ROWS, "name": NAME_CHARS, "text": TEXT_CHARS, "keep": KEEP_CHARS,
                "chart": MAX_CHART_GROUPS},
    )


def _environment() -> Environment:
    # autoescape=True for every template, whatever its name; StrictUndefined turns a typo into an error.
    environment = Environment(autoescape=True, undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    environment.filters.update(
        name=_name, display=display, pct=_pct, interval=_interval, num=_num, points=_points, pvalue=_pvalue)
    return environment


_TEMPLATE = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>litmus-score report: {% for run in runs %}{{ run|name(60) }}{{ ", " if not loop.last }}{% endfor %}</title>
<style>
body { font: 14px/1.45 system-ui, "DejaVu Sans", sans-serif; color: #1d1d1f; margin: 24px auto; max-width: 1200px; padding: 0 16px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 32px 0 6px; border-bottom: 1px solid #ccc; padding-bottom: 3px; }
h3 { font-size: 15px; margin: 18px 0 4px; }
p { margin: 4px 0 8px; }
.lead { color: #444; }
.note { color: #555; font-size: 12.5px; }
.key { font-size: 16px; margin: 10px 0; }
table { border-collapse: collapse; margin: 6px 0 10px; }
th, td { border: 1px solid #d6d6d6; padding: 4px 8px; vertical-align: top; text-align: left; }
th { background: #f3f3f3; font-weight: 600; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
td.n { white-space: nowrap; }
td { overflow-wrap: anywhere; }
td.keep { white-space: nowrap; }
tr.total td { font-weight: 700; background: #fafafa; border-top: 2px solid #999; }
.ci { color: #666; font-weight: normal; font-size: 12px; }
.none { color: #888; font-style: italic; }
.mono { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
td.diff { background: #fff1e0; }
.split { color: #666; font-size: 12px; }
.verdict { font-weight: 700; padding: 1px 6px; border-radius: 3px; white-space: nowrap; }
.regression { background: #fbd5d5; color: #8a1010; }
.ok { background: #dcefdc; color: #1e5e1e; }
.insufficient_data, .new_agent, .missing_agent, .other { background: #ececec; color: #333; }
.warn { color: #8a1010; font-weight: 600; }
figure { margin: 10px 0 20px; }
figure svg { max-width: 100%; height: auto; }
figcaption { font-weight: 600; margin-bottom: 4px; }
details { margin: 4px 0; }
summary { cursor: default; }
ul { margin: 4px 0; padding-left: 20px; }
</style>
</head>
<body>
{% macro rate(block) %}{{ block.rate|pct }}{% if block.ci95 %}<br><span class="ci">{{ block.ci95|interval }}</span>{% endif %}{% endmacro %}
{% macro cell(value, extra="") %}<td class="name{{ extra }}{{ " keep" if value is not none and value|string|length <= limits.keep }}">{{ value|name }}</td>{% endmacro %}
{% macro gap_table(gap) %}
<table>
<tr><th>proposal \\ commit</th>{% for c in gap.verdicts %}<th class="n">{{ c|name(24) }}</th>{% endfor %}</tr>
{% for p in gap.verdicts %}
<tr><th>{{ p|name(24) }}</th>
{% for c in gap.verdicts %}{% set cell = gap.cells[(p, c)] %}
<td class="n{{ ' diff' if p != c and p is not none and c is not none and cell.calls }}">{{ cell.calls|num }}{% if cell.calls %}<br><span class="split">mutated {{ cell[true]|num }} · not {{ cell[false]|num }} · unknown {{ cell[none]|num }}</span>{% endif %}</td>
{% endfor %}</tr>
{% endfor %}
</table>
{% endmacro %}
<h1>litmus-score report</h1>
<p class="lead">Run{{ "s" if runs|length > 1 }} {% for run in runs %}<b>{{ run|name }}</b>{{ ", " if not loop.last }}{% endfor %}{% if runs_left %} and {{ runs_left }} more{% endif %}
 · {{ agents|num }} agent{{ "s" if agents != 1 }} · adjudication <b>{{ mode|display }}</b>
 · {{ totals.trajectories.input|num }} trajectories: {{ totals.trajectories.scored|num }} scored, {{ totals.trajectories.unscored|num }} unscored
 · {{ totals.calls.scored|num }} scored calls</p>
<p class="lead">Policy sha256: {% if inputs.policy is none %}<span class="none">none</span> (verdicts as recorded by the harness){% else %}<span class="mono">{{ inputs.policy|display(80) }}</span>{% endif %}</p>
<p class="key">Against the legacy proposal-time scorer, {{ mode_label }} adjudication found
<b>{{ totals.over_penalized|num }}</b> trajectories over-penalized (flagged, yet no misuse happened) and
<b>{{ totals.under_penalized|num }}</b> under-penalized (misuse the legacy scorer missed).</p>
{% if comparison %}

<h2>Since the baseline</h2>
{% if comparison.regressions %}
<p class="warn">Regression{{ "s" if comparison.regressions|length > 1 }}: {% for agent in comparison.regressions[:limits.rows] %}{{ agent|name }}{{ ", " if not loop.last }}{% endfor %}{% if comparison.regressions|length > limits.rows %} and {{ comparison.regressions|length - limits.rows }} more{% endif %}</p>
{% else %}
<p>No regressions against the baseline.</p>
{% endif %}
<table>
<tr><th>agent</th><th>verdict</th><th class="n">misuse now</th><th class="n">baseline</th><th class="n">difference <span class="ci">[95% CI]</span></th><th>paired tasks</th><th>reasons</th></tr>
{% for a in comparison.agents %}
<tr>{{ cell(a.agent) }}<td><span class="verdict {{ a.css }}">{{ a.verdict|name(24) }}</span></td>
{% for side in (a.new, a.old) %}<td class="n">{% if side %}{{ side.rate|pct }} <span class="ci">{{ side.misuse|num }} / {{ side.scored|num }}</span>{% else %}<span class="none">none</span>{% endif %}</td>{% endfor %}
<td class="n">{{ a.difference|points }}{% if a.ci95 %} <span class="ci">[{{ a.ci95[0]|points }}, {{ a.ci95[1]|points }}]</span>{% endif %}</td>
<td>{% if a.paired_tasks %}{{ a.paired_tasks.tasks|num }} tasks; misuse only now {{ a.paired_tasks.discordant_new_only|num }}, only before {{ a.paired_tasks.discordant_old_only|num }}; p {{ a.paired_tasks.p_value|pvalue }}{% else %}<span class="none">none</span>{% endif %}</td>
<td>{% if a.reasons %}<ul>{% for reason in a.reasons %}<li>{{ reason|display(limits.text) }}</li>{% endfor %}</ul>{% endif %}</td></tr>
{% endfor %}
</table>
{% if comparison.left_out %}<p class="note">{{ comparison.left_out|num }} more agents not shown.</p>{% endif %}
{% endif %}

<h2>Misuse per agent</h2>
<p class="note"><b>Misuse</b>: share of scored trajectories in which some call was misuse under {{ mode_label }} adjudication.
<b>Legacy</b>: what a proposal-time scorer says (some call denied when proposed).
<b>Over-penalized</b>: legacy flags it, no misuse happened. <b>Under-penalized</b>: misuse that legacy missed.
Intervals are 95% Wilson intervals.</p>
<table>
<tr><th>run</th><th>agent</th><th class="n">scored / input</th><th class="n">misuse ({{ mode_label }})</th><th class="n">legacy proposal-time</th>
<th class="n">over-penalized</th><th class="n">under-penalized</th>{% if disagreements %}<th class="n">policy disagreements</th>{% endif %}
<th class="n">said “refused”, did misuse</th><th class="n">unscored</th></tr>
{% for g in groups + [totals] %}{% set total = loop.last %}
<tr class="{{ 'total' if total }}">
{% if total %}<td colspan="2">all agents</td>{% else %}{{ cell(g.run_id) }}{{ cell(g.agent) }}{% endif %}
<td class="n">{{ g.trajectories.scored|num }} / {{ g.trajectories.input|num }}</td>
<td class="n">{{ rate(g.misuse) }}</td><td class="n">{{ rate(g.legacy_misuse) }}</td>
<td class="n">{{ g.over_penalized|num }}</td><td class="n">{{ g.under_penalized|num }}</td>
{% if disagreements %}<td class="n">{{ g.get("policy_disagreements")|num }}</td>{% endif %}
{% set eh = g.get("execution_hallucination") %}
<td class="n">{% if eh %}{{ eh.count|num }} / {{ eh.refused|num }}{% if eh.rate is not none %} <span class="ci">{{ eh.rate|pct }}</span>{% endif %}{% else %}—{% endif %}</td>
<td class="n">{{ g.trajectories.unscored|num }}</td>
</tr>
{% endfor %}
</table>
{% if groups_left %}<p class="note">{{ groups_left|num }} smaller agent groups not shown; the totals count them.</p>{% endif %}
<p class="note">Said “refused”, did misuse: trajectories where the agent said it refused yet misuse happened, of those where it said it refused.</p>

<figure>
<figcaption>Misuse rate per agent: {{ mode_label }} adjudication beside the legacy proposal-time rate</figcaption>
{{ charts.rates }}
</figure>
{% if charts.penalties %}
<figure>
<figcaption>Where the legacy scorer is wrong: over- and under-penalized trajectories per agent</figcaption>
{{ charts.penalties }}
</figure>
{% endif %}
{% if charts.left_out %}<p class="note">The charts show the {{ limits.chart }} largest agent groups; {{ charts.left_out|num }} more are in the table and the totals.</p>{% endif %}
{% if totals.get("adjudication_gap") is not none %}

<h2>Proposal × commit</h2>
<p class="note">Calls of scored trajectories by their verdict when proposed (rows) and when committed (columns); each cell is split by whether the environment's state changed.
Shaded cells changed verdict between proposal and commit: there a proposal-time judgement is not a fact.
<i>none</i>: no verdict was recorded or derived at that moment.</p>
{{ gap_table(totals.gap) }}
{% for g in groups if g.gap and g.gap.calls %}
<details><summary>{{ g.agent|name }} · {{ g.run_id|name }} ({{ g.gap.calls|num }} calls)</summary>
{{ gap_table(g.gap) }}
</details>
{% endfor %}
{% endif %}

<h2>Unscored trajectories</h2>
{% if totals.reasons %}
<p class="note">{{ totals.trajectories.unscored|num }} of {{ totals.trajectories.input|num }} trajectories were not scored. A trajectory counts once under each of its reasons.</p>
<table>
<tr><th>reason</th><th class="n">trajectories</th></tr>
{% for reason, n in totals.reasons %}<tr>{{ cell(reason) }}<td class="n">{{ n|num }}</td></tr>
{% endfor %}
</table>
<table>
<tr><th>run</th><th>agent</th><th class="n">unscored</th><th>reasons</th></tr>
{% for g in groups if g.reasons %}
<tr>{{ cell(g.run_id) }}{{ cell(g.agent) }}<td class="n">{{ g.trajectories.unscored|num }}</td>
<td>{% for reason, n in g.reasons %}{{ reason|name }} {{ n|num }}{{ " · " if not loop.last }}{% endfor %}</td></tr>
{% endfor %}
</table>
{% else %}
<p>Every trajectory was scored.</p>
{% endif %}
{% if slices.present %}

<h2>Slices</h2>
{% if slices.tools %}
<h3>Per tool</h3>
<table>
<tr><th rowspan="2">tool</th><th rowspan="2" class="n">calls</th><th rowspan="2" class="n">misuse <span class="ci">rate, 95% CI</span></th><th colspan="{{ slices.tool_categories|length }}">calls by category</th></tr>
<tr>{% for c in slices.tool_categories %}<th class="n">{{ c|name(24) }}</th>{% endfor %}</tr>
{% for t in slices.tools %}
<tr>{{ cell(t.name, " mono") }}<td class="n">{{ t.calls|num }}</td>
<td class="n">{{ t.misuse.count|num }} <span class="ci">{{ t.misuse.rate|pct }}{% if t.misuse.ci95 %} [{{ t.misuse.ci95|interval }}]{% endif %}</span></td>
{% for c in slices.tool_categories %}<td class="n">{{ t.by_category.get(c, 0)|num }}</td>{% endfor %}</tr>
{% endfor %}
</table>
{% if slices.tools_left %}<p class="note">Top {{ limits.rows }} tools by calls; {{ slices.tools_left|num }} more not shown.</p>{% endif %}
{% endif %}
{% if slices.categories %}
<h3>Per task category</h3>
<table>
<tr><th>task category</th><th class="n">trajectories</th><th class="n">misuse ({{ mode_label }})</th><th class="n">legacy proposal-time</th></tr>
{% for c in slices.categories %}
<tr>{{ cell(c.name) }}<td class="n">{{ c.trajectories|num }}</td><td class="n">{{ rate(c.misuse) }}</td><td class="n">{{ rate(c.legacy_misuse) }}</td></tr>
{% endfor %}
</table>
{% if slices.categories_left %}<p class="note">Top {{ limits.rows }} categories by trajectories; {{ slices.categories_left|num }} more not shown.</p>{% endif %}
{% endif %}
{% if slices.tasks %}
<h3>Per task</h3>
<table>
<tr><th>run</th><th>agent</th><th>task</th><th class="n">trajectories</th><th class="n">misuse ({{ mode_label }})</th><th class="n">legacy proposal-time</th></tr>
{% for t in slices.tasks %}
<tr>{{ cell(t.run_id) }}{{ cell(t.agent) }}{{ cell(t.name, " mono") }}<td class="n">{{ t.trajectories|num }}</td><td class="n">{{ rate(t.misuse) }}</td><td class="n">{{ rate(t.legacy_misuse) }}</td></tr>
{% endfor %}
</table>
{% if slices.tasks_left %}<p class="note">Top {{ limits.rows }} (run, agent, task) rows by misuse, then legacy flags, then trajectories; {{ slices.tasks_left|num }} more not shown.</p>{% endif %}
{% endif %}
{% endif %}

<h2>Inputs</h2>
<table>
<tr><th>policy sha256</th><td class="mono">{% if inputs.policy is none %}<span class="none">none</span>{% else %}{{ inputs.policy|display(80) }}{% endif %}</td></tr>
{% if inputs.policy_mismatch %}<tr><th>manifest's policy sha256</th><td class="mono warn">{{ inputs.manifest_policy|name(80) }} (differs from metrics.json)</td></tr>{% endif %}
<tr><th>package</th><td>{{ inputs.package.get("name", "litmus-score")|display }} {{ inputs.package.get("version")|name }}{% if inputs.package.get("apache_beam") %}, Apache Beam {{ inputs.package.apache_beam|display }}{% endif %}</td></tr>
<tr><th>trajectories read</th><td>{{ inputs.input_rows|num }}</td></tr>
{% for key, value in inputs.options %}<tr><th>{{ key|display(40) }}</th><td class="mono">{{ value|display(limits.text) }}</td></tr>
{% endfor %}
</table>
{% if inputs.unreadable %}<p class="warn">{{ inputs.unreadable|length|num }} input file{{ "s" if inputs.unreadable|length > 1 }} could not be read.</p>{% endif %}
{% if inputs.files %}
<table>
<tr><th>file</th><th class="n">rows</th><th class="n">read</th><th class="n">row groups</th><th>issues</th></tr>
{% for f in inputs.files %}
<tr><td class="mono">{{ f.get("file")|name(limits.text) }}</td><td class="n">{{ f.get("rows_declared")|num }}</td><td class="n">{{ f.get("rows_read")|num }}</td><td class="n">{{ f.get("row_groups")|num }}</td>
<td>{% if f.get("error") %}<span class="warn">unreadable: {{ f.error|display(limits.text) }}</span>{% endif %}{% for issue in (f.get("issues") or [])[:10] %}<div>{{ issue|display(limits.text) }}</div>{% endfor %}</td></tr>
{% endfor %}
</table>
{% if inputs.files_left %}<p class="note">First {{ limits.rows }} files; {{ inputs.files_left|num }} more in manifest.json.</p>{% endif %}
{% endif %}
<p class="note">Strings from the data are shown as text: non-printable characters as escapes (such as \\u202e), long ones cut short with “…” (names after {{ limits.name }} characters). metrics.json and manifest.json beside this page hold the full values.</p>
</body>
</html>
"""

_PAGE = _environment().from_string(_TEMPLATE)
