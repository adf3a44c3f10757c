"""Shared fixtures: running the CLI in-process on FnApiRunner."""

import json
from pathlib import Path

import pytest

from pipeline.cli import main

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
