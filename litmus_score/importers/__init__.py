"""Importers: agent logs (Inspect AI, AgentDojo, OpenTelemetry, Inspect Scout) -> contract trajectory rows.

Each format has a module with a pure mapping (no Beam) from one log file to
`Trajectory` and `Unmapped` items; `litmus_score.importers.manifest` counts
them into a file's report and the import's manifest, and transforms.imports
runs them, one file per unit of work. What a source does not record stays
null: no importer writes a policy verdict, and arguments that were not
captured are null, not "{}".
"""

from __future__ import annotations

import importlib

FORMATS = ("inspect", "agentdojo", "otel", "scout")


def importer(log_format: str):
    """The format's module (litmus_score.importers.inspect, ...); ValueError for an unknown format."""
    if log_format not in FORMATS:
        raise ValueError(f"unknown log format {log_format!r}; expected one of {', '.join(FORMATS)}")
    return importlib.import_module(f"litmus_score.importers.{log_format}")
