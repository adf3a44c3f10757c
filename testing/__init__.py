"""Synthetic data for demos, tests and benchmarks; not part of the scoring job."""
