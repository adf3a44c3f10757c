"""How the report's pages write values: the Jinja filters report.html and trend.html share.

Strings from the data go through display(): non-printable characters
escaped, cut with an ellipsis; the template's autoescaping does the rest.
"""

from __future__ import annotations

from markupsafe import Markup, escape

from litmus_score import text

NAME_CHARS = 80  # names: agents, runs, tools, tasks, reasons

_NONE_HTML = Markup('<span class="none">none</span>')


def display(value, limit: int = NAME_CHARS) -> str:
    """A data string for display: non-printable characters escaped, cut at `limit` with an ellipsis."""
    return text.display(value, limit)


def name(value, limit: int = NAME_CHARS):
    """Like display(), but a missing value reads as a styled 'none'; the string is escaped by autoescape."""
    return _NONE_HTML if value is None else display(value, limit)


def pct(rate) -> str:
    return "n/a" if rate is None else f"{rate:.1%}"


def interval(ci) -> str:
    return "" if not ci else f"{ci[0]:.1%}–{ci[1]:.1%}"


def bound(share) -> str:
    """A small share with the precision its bound needs: 0.23%, 2.6%."""
    return "n/a" if share is None else (f"{share:.2%}" if share < 0.01 else f"{share:.1%}")


def breakable(value) -> Markup:
    """A name that may wrap after its underscores (category names in a narrow column)."""
    return Markup("_<wbr>").join(escape(part) for part in display(value).split("_"))


def num(value) -> str:
    return "—" if value is None else f"{value:,}"


def points(value) -> str:
    """A difference of rates in percentage points, signed."""
    return "n/a" if value is None else f"{value * 100:+.1f} pp"


def pvalue(value) -> str:
    return "n/a" if value is None else ("< 0.001" if value < 0.001 else f"{value:.3f}")


FILTERS = {"display": display, "name": name, "pct": pct, "interval": interval, "bound": bound,
           "breakable": breakable, "num": num, "points": points, "pvalue": pvalue}
