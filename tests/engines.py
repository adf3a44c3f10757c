"""Helpers for the tests that run the pipeline on other engines: one run must equal FnApiRunner's."""

from pathlib import Path

import pyarrow.parquet as pq

from pipeline.cli import main


def reference_data(folder: Path) -> Path:
    """The reference-1200 shards in `folder`; returns their glob."""
    assert main(["generate", "--output", str(folder), "--profile", "reference-1200"]) == 0
    return folder / "*.parquet"


def rows(output: Path, kind: str) -> list:
    """A run's scored or unscored rows in a canonical order (file and bundle boundaries differ by engine)."""
    return sorted(repr(sorted(row.items())) for row in pq.read_table(output / kind).to_pylist())


def assert_same_run(output: Path, expected: Path) -> None:
    """metrics.json byte for byte, and the same scored and unscored rows."""
    assert (output / "metrics.json").read_bytes() == (expected / "metrics.json").read_bytes()
    for kind in ("scored", "unscored"):
        assert rows(output, kind) == rows(expected, kind), kind
    assert (output / "_SUCCESS").exists()
