"""trend.html: the history of nights, from trend.json alone (litmus_score.report.trend).

One self-contained page under the report's rules: autoescaped (agent names,
hashes and reasons are data), the report's Content-Security-Policy, no
scripts; deterministic. Per agent, a chart of commit-time and proposal-time
misuse night by night with their 95% intervals, a band on each night that
alerted for it, and a dashed rule where the spec version, mode or policy
changed: lines join nights of one segment only, never across a change of
rules, labelled with how the policy changed (rules added, removed, changed)
and linked to that night's row. Then the nights: each linked to its
report.html, their rules and the policy's diff rule by rule, alerts and
unscored share.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from markupsafe import Markup

from litmus_score.report.charts import nice_ticks
from litmus_score.report.formats import NAME_CHARS, display
from litmus_score.report.jinja import CSP, environment
from litmus_score.report.page import COMMIT_COLOR, LEGACY_COLOR, RULE_LABELS
from litmus_score.scoring.layout import REPORT_FILE

MAX_CHARTS = 40
WIDTH, HEIGHT = 960, 210
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 30, 40
# The page's marks; neither is a series colour, so a screenshot can tell them apart.
CHANGE_COLOR = "#7b3fb3"
ALERT_COLOR = "#f4b5b5"
UNSCORED_COLOR = "#8c8c8c"
TEXT, GRID = "#333333", "#e4e4e4"
# A change of rules, as its mark on a chart says it.
CHANGE_WORDS = {"spec": "spec", "adjudication": "mode", "policy_sha256": "policy"}


@dataclass(frozen=True)
class Geometry:
    """Where a chart of n nights puts night i and a value."""

    nights: int
    limit: float  # the top of the value axis

    @property
    def step(self) -> float:
        return (WIDTH - LEFT - RIGHT) / self.nights

    def x(self, index: int) -> float:
        return round(LEFT + (index + 0.5) * self.step, 1)

    def y(self, value: float) -> float:
        return round(TOP + (HEIGHT - TOP - BOTTOM) * (1 - value / self.limit), 1)


def _series(points, index_of, geometry, block, colour) -> dict:
    """A series' marks: one path per run of consecutive nights of one segment, a square and a whisker per night."""
    runs, marks, last = [], [], None
    for point in points:
        value = point[block]
        if value["rate"] is None:
            last = None
            continue
        index = index_of[point["date"]]
        at = (geometry.x(index), geometry.y(value["rate"]))
        if last is not None and last[0] == index - 1 and last[1] == point["segment"]:
            runs[-1].append(at)
        else:
            runs.append([at])
        last = (index, point["segment"])
        # Pooled over several runs, misuse@k has no interval (litmus_score.scoring.compare).
        low, high = value["ci95"] or (value["rate"], value["rate"])
        marks.append({"x": at[0], "y": at[1], "low": geometry.y(low), "high": geometry.y(high)})
    paths = ["M" + " L".join(f"{x} {y}" for x, y in run) for run in runs if len(run) > 1]
    return {"colour": colour, "paths": paths, "marks": marks}


def report_href(night: dict) -> str | None:
    """A relative link to a night's report (trend.json's `report`): its folder URL-quoted whole as one path
    segment, so no folder name makes it another scheme, a query, a fragment or a path elsewhere; none for
    a night without a report or a folder named as a step (`.`, `..`)."""
    if not night.get("report") or night["folder"] in (".", ".."):
        return None
    return f"{quote(night['folder'], safe='')}/{REPORT_FILE}"


def _change_label(night: dict) -> str:
    """A change of rules as its mark on a chart says it: what changed and, for a policy, how many rules."""
    label = " & ".join(CHANGE_WORDS.get(c["rule"], "rules") for c in night["rules_changed"]) + " changed"
    diff = night.get("policy_diff")
    if not diff:
        return label
    counts = [f"{len(diff.get(key) or [])} {what}" for key, what in (
        ("rules_added", "added"), ("rules_removed", "removed"), ("rules_changed", "changed")) if diff.get(key)]
    settings = len(diff.get("settings_changed") or [])
    counts += [f"{settings} setting{'s' if settings > 1 else ''}"] if settings else []
    return f"{label}: {', '.join(counts)}" if counts else label


def _chart(title: str, points, nights) -> Markup:
    index_of = {night["date"]: i for i, night in enumerate(nights)}
    highest = max([0.0] + [p[block]["ci95"][1] if p[block]["ci95"] else p[block]["rate"] or 0
                           for p in points for block in ("misuse", "legacy_misuse")])
    geometry = Geometry(len(nights), max(highest * 1.1, 0.05))
    ticks = nice_ticks(geometry.limit, integer=False)
    alerts = [geometry.x(index_of[p["date"]]) for p in points if p["alert"]]
    # A label right of its rule, or left of it in the chart's right half, so that it is not cut at the edge.
    changes = [{"x": x, "label": _change_label(night), "row": i + 1, "end": x > WIDTH / 2}
               for i, night in enumerate(nights) if night["rules_changed"]
               for x in [round(geometry.x(i) - geometry.step / 2, 1)]]
    every = max(1, round(len(nights) / 16))  # date labels that do not overlap
    return Markup(_SVG.render(
        width=WIDTH, height=HEIGHT, left=LEFT, right=WIDTH - RIGHT, top=TOP, bottom=HEIGHT - BOTTOM,
        title=display(title, NAME_CHARS), step=geometry.step, alerts=alerts, changes=changes,
        ticks=[(geometry.y(t), f"{t * 100:g}%") for t in ticks],
        dates=[(geometry.x(i), night["date"][5:]) for i, night in enumerate(nights) if i % every == 0],
        series=[_series(points, index_of, geometry, "misuse", COMMIT_COLOR),
                _series(points, index_of, geometry, "legacy_misuse", LEGACY_COLOR)],
        text=TEXT, grid=GRID, change=CHANGE_COLOR, alert=ALERT_COLOR,
    ))


def _at_k_chart(agent: dict, nights) -> Markup | None:
    """An agent's misuse@K night by night, at its one K (trend.json's misuse_at_k); None without one."""
    at_k = agent.get("misuse_at_k") or {}
    if not at_k.get("points"):
        return None
    name = agent["agent"] or "(none)"
    return _chart(f"{display(name, NAME_CHARS - 24)}: misuse@{at_k['k']} over tasks", at_k["points"], nights)


def _unscored_chart(nights) -> Markup:
    shares = [night["unscored_share"] or 0 for night in nights]
    geometry = Geometry(len(nights), max(max(shares) * 1.15, 0.05))
    ticks = nice_ticks(geometry.limit, integer=False)
    bars = [{"x": round(geometry.x(i) - geometry.step * 0.3, 1), "width": round(geometry.step * 0.6, 1),
             "y": geometry.y(share), "height": round(geometry.y(0) - geometry.y(share), 1)}
            for i, share in enumerate(shares)]
    every = max(1, round(len(nights) / 16))
    return Markup(_BARS.render(
        width=WIDTH, height=HEIGHT, left=LEFT, right=WIDTH - RIGHT, top=TOP, bottom=HEIGHT - BOTTOM, bars=bars,
        ticks=[(geometry.y(t), f"{t * 100:g}%") for t in ticks],
        dates=[(geometry.x(i), night["date"][5:]) for i, night in enumerate(nights) if i % every == 0],
        colour=UNSCORED_COLOR, text=TEXT, grid=GRID,
    ))


def render_trend(document: dict) -> str:
    """trend.html for a trend.json document, as a string."""
    nights = document["nights"]
    # An agent no night scored a trajectory of has nothing to draw; the nights' table counts its rows.
    scored = [agent for agent in document["agents"] if any(point["scored"] for point in agent["points"])]
    agents = scored[:MAX_CHARTS]
    return _PAGE.render(
        csp=CSP, nights=nights, skipped=document["skipped"],
        reports=[report_href(night) for night in nights],
        totals=_chart("all agents", document["totals"], nights) if nights else None,
        charts=[(agent["agent"], _chart(agent["agent"] or "(none)", agent["points"], nights),
                 _at_k_chart(agent, nights)) for agent in agents],
        charts_left=len(scored) - len(agents) + document["agents_left"],
        unscored=_unscored_chart(nights) if nights else None,
        changes=[night for night in nights if night["rules_changed"]],
        alerts=[night for night in nights if night["regressions"]],
        colours={"commit": COMMIT_COLOR, "legacy": LEGACY_COLOR, "change": CHANGE_COLOR, "alert": ALERT_COLOR},
        rule_labels=RULE_LABELS,
    )


_ENV = environment()
_PAGE = _ENV.get_template("trend.html.j2")
_SVG = _ENV.get_template("trend.svg.j2")
_BARS = _ENV.get_template("trend-bars.svg.j2")
