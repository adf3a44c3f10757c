"""Shared by the importers' tests: their libraries, and the import CLI run in-process."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from tests.conftest import RUNNER

# CI sets this: a missing importer library then fails the tests instead of skipping them.
REQUIRE = os.environ.get("LITMUS_REQUIRE_IMPORTERS") == "1"


def require(module: str):
    """The module; without it, a skip locally and an error in CI."""
    if REQUIRE:
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[importers-test]')")


def run_import(log_format: str, logs, output: Path, *flags) -> int:
    return main(["import", log_format, *map(str, logs), "--output", str(output), *flags, *RUNNER])


def read_rows(folder: Path) -> list:
    """Every row of the Parquet files in `folder`, in file order."""
    return [row for path in sorted(Path(folder).glob("*.parquet")) for row in pq.read_table(path).to_pylist()]


def load_json(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def check_accounting(output: Path) -> dict:
    """The import's manifest, after checking that its counts reconcile with what it wrote."""
    manifest = load_json(output / "import-manifest.json")
    trajectories = read_rows(output / "trajectories")
    unmapped = read_rows(output / "unmapped")
    totals = manifest["totals"]
    assert totals["trajectories"] == len(trajectories) == sum(f["trajectories"] for f in manifest["files"])
    assert totals["calls"] == sum(len(row["calls"]) for row in trajectories)
    assert totals["unmapped"] == len(unmapped)
    # Every call the log shows is a call of a trajectory, or an unmapped call
    # counted in its trajectory's call_count, or one no trajectory holds.
    assert totals["calls_unmapped"] == sum(u["call"] for u in unmapped)
    for row in trajectories:
        lost = [u for u in unmapped if u["call"] and u["trajectory_id"] == row["trajectory_id"]
                and u["file"] == row["source_log"]]
        assert row["call_count"] == len(row["calls"]) + len(lost), row["trajectory_id"]
    assert totals["not_imported"]["calls"] == sum(u["call"] and u["trajectory_id"] is None for u in unmapped)
    # Every unit read became a trajectory or an unmapped unit ...
    assert totals["units"] == totals["trajectories"] + sum(u["unit"] for u in unmapped)
    # ... and the units not imported are those, with the units of the files that failed never read:
    # at least one a failed file, whatever it declares.
    assert totals["not_imported"]["units"] == sum(u["unit"] for u in unmapped) + totals["units_unread"]
    assert totals["units_unread"] == sum(f["units_unread"] for f in manifest["files"])
    assert totals["files_failed"] == len(manifest["failed_files"])
    for context in ("proposal", "commit"):
        source = manifest["principal"]["source"][context]
        present = sum(call[context] is not None for row in trajectories for call in row["calls"])
        assert source["log"] + source["default"] == present, context
    for report in manifest["files"]:
        mine = [u for u in unmapped if u["file"] == report["file"]]
        assert report["unmapped"] == len(mine)
        assert report["trajectories"] == sum(row["source_log"] == report["file"] for row in trajectories)
        # ... and a file that lists its units has them all accounted for; one that failed, the rest unread.
        if report["units_declared"] is not None and report["error"] is None:
            assert report["units"] == report["units_declared"], report["file"]
        if report["error"] is None:
            assert report["units_unread"] == 0, report["file"]
        else:
            assert report["units_unread"] == max((report["units_declared"] or 0) - report["units"], 1), report["file"]
        assert report["not_imported"]["units"] == sum(u["unit"] for u in mine) + report["units_unread"]
    assert [entry["path"] for entry in manifest["outputs"]] == sorted(
        str(p.relative_to(output)) for p in output.rglob("*.parquet"))
    return manifest


class OverBudget(Exception):
    """More lines ran than lines_run's budget."""


def lines_run(module, function, budget: int) -> int:
    """How many lines of `module`'s own file `function()` runs (a measure of work that
    does not depend on the machine's speed); OverBudget past `budget`, so that a
    quadratic run stops early."""
    import sys

    count = 0

    def count_line(frame, event, arg):
        nonlocal count
        count += 1
        if count > budget:
            raise OverBudget(count)
        return count_line

    def trace(frame, event, arg):
        return count_line if frame.f_code.co_filename == module.__file__ else None

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        function()
    finally:
        sys.settrace(previous)
    return count
