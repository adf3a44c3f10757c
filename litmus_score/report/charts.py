"""The report's bar charts as inline SVG, drawn from a Jinja template.

Two charts of horizontal bar pairs do not need a plotting library: a
template draws them in milliseconds (matplotlib cost half a second of every
run), and autoescaping makes every label from the data escaped text. Only
<svg>, <g>, <rect>, <path>, <text> and <tspan> are ever emitted; the page's
tests hold that list. Same inputs, same bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from markupsafe import Markup

from litmus_score.report.jinja import environment

WIDTH = 960
LABELS = 270  # label column: CHART_CHARS characters at 12px
VALUE_ROOM = 64  # right of the longest bar, for its value
LEGEND = 34
LEGEND_ENTRY = 330  # room for one series' swatch and name
AXIS = 52  # tick labels and the axis title
BAR = 12
GAP = 9  # between rows
TEXT = "#333333"
GRID = "#e4e4e4"
RULE = "#999999"


@dataclass(frozen=True)
class Series:
    """One bar per row: its values (None: n/a) and, optionally, a 95% interval per row."""

    name: str
    colour: str
    values: list
    intervals: list | None = None


def nice_ticks(highest: float, integer: bool, count: int = 5) -> list:
    """Round tick values from 0 up to `highest`, about `count` steps apart."""
    rough = highest / count
    magnitude = 10 ** math.floor(math.log10(rough))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= rough)
    if integer:
        step = max(1, round(step))
    return [i * step for i in range(int(highest / step + 1e-9) + 1)]


def _tick_label(value: float, percent: bool) -> str:
    return f"{value * 100:g}%" if percent else f"{value:,g}"


def _value_label(value, percent: bool) -> str:
    if value is None:
        return "n/a"
    return f"{value:.1%}" if percent else f"{value:,}"


def paired_bars(labels, series, xlabel: str, percent: bool, separate_last: bool = False) -> Markup:
    """Horizontal bars, one group of len(series) bars per label; labels may hold one line break."""
    highest = max([0] + [v for s in series for v in s.values if v is not None]
                  + [ci[1] for s in series for ci in (s.intervals or []) if ci])
    limit = max(highest * 1.18, 0.05 if percent else 5)
    ticks = nice_ticks(limit, integer=not percent)
    plot = WIDTH - LABELS - VALUE_ROOM
    x = lambda value: round(LABELS + plot * value / limit, 1)  # noqa: E731
    row = BAR * len(series) + GAP + (10 if any("\n" in label for label in labels) else 0)
    bottom = LEGEND + row * len(labels)
    rows = []
    for index, label in enumerate(labels):
        top = LEGEND + index * row
        bars = []
        for offset, s in enumerate(series):
            value = s.values[index]
            ci = s.intervals[index] if s.intervals else None
            y = top + GAP / 2 + offset * BAR
            end = x(value or 0)
            bars.append({
                "y": y, "width": round(end - LABELS, 1), "colour": s.colour,
                "whisker": (x(ci[0]), x(ci[1]), y + BAR / 2) if ci else None,
                "text_x": (x(ci[1]) if ci else end) + 4, "text_y": y + BAR - 2,
                "text": _value_label(value, percent),
            })
        rows.append({"lines": label.split("\n"), "y": top + row / 2, "bars": bars})
    return Markup(_SVG.render(
        width=WIDTH, height=bottom + AXIS, labels=LABELS, top=LEGEND, bottom=bottom, rows=rows,
        series=series, ticks=[(x(t), _tick_label(t, percent)) for t in ticks], xlabel=xlabel,
        separator=bottom - row if separate_last and len(labels) > 1 else None, right=x(limit),
        text=TEXT, grid=GRID, rule=RULE, center=LABELS + plot / 2, bar=BAR, entry=LEGEND_ENTRY,
    ))


_SVG = environment().get_template("bars.svg.j2")
