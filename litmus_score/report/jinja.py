"""The report's Jinja environment: templates ship as files of this package."""

from __future__ import annotations

from jinja2 import Environment, PackageLoader, StrictUndefined


def environment(**filters) -> Environment:
    # autoescape=True for every template, whatever its name; StrictUndefined turns a typo into an error.
    env = Environment(loader=PackageLoader("litmus_score.report", "templates"), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters.update(filters)
    return env
