"""Importers: agent logs (Inspect AI, AgentDojo, OpenTelemetry) -> contract trajectory rows.

Each format has a module with a pure mapping (no Beam) from one log file to
`Trajectory` and `Unmapped` items; `litmus_score.importers.pipeline` runs them one file
per unit of work. What a source does not record stays null: no importer
writes a policy verdict, and arguments that were not captured are null,
not "{}".
"""
