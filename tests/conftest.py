"""Shared fixtures: running the CLI in-process on FnApiRunner; Hypothesis's profiles."""

import json
import os
from pathlib import Path

import pytest

from pipeline.cli import main

# The property tests run the same examples on every run (derandomized, each test's own budget), so
# a red build is reproducible and never a roll of the dice; HYPOTHESIS_PROFILE=explore draws new
# examples each run, to look for what the fixed ones miss.
# (Airflow's own virtualenv, which runs only the DAG's test, has no Hypothesis.)
try:
    from hypothesis import settings
except ImportError:
    settings = None
if settings is not None:
    settings.register_profile("repeatable", derandomize=True, database=None, deadline=None)
    settings.register_profile("explore", deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

# DirectRunner would first try to download Prism; tests pin FnApiRunner.
RUNNER = ["--runner", "FnApiRunner"]


@pytest.fixture
def score_cli(tmp_path):
    """score_cli(inputs, *flags) -> (exit code, output folder)."""
    counter = iter(range(1000))

    def run(inputs, *flags):
        output = tmp_path / f"out-{next(counter)}"
        args = ["score", *[a for pattern in inputs for a in ("--input", str(pattern))], "--output", str(output)]
        return main([*args, *flags, *RUNNER]), output

    return run


def load_json(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))
