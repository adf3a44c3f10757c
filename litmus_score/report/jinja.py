"""The report's Jinja environment: templates ship as files of this package."""

from __future__ import annotations

from jinja2 import Environment, PackageLoader, StrictUndefined

from litmus_score.report.formats import FILTERS

# Both pages' Content-Security-Policy: no script, no fetch, styles inline, images only as data: URLs.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def environment() -> Environment:
    # autoescape=True for every template, whatever its name; StrictUndefined turns a typo into an error.
    env = Environment(loader=PackageLoader("litmus_score.report", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(FILTERS)
    return env
