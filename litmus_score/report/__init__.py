"""The run for people: report.html, its charts and its evidence views.

Rendering reads a run's documents (metrics.json, the manifest, the evidence);
it never computes a score. Templates are `.j2` files of this package.
"""
