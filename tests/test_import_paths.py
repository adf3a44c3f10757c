"""What `import` does with the paths its LOGS match that are not plain log
files: a pipe is never opened (it would hang the import), a broken or
looping link is named, a linked folder of logs is imported; each skipped
path is named on the terminal and counted in the manifest."""

from __future__ import annotations

import os
import shutil
import threading

import pytest

from litmus_score.exits import Exit
from tests.importers_support import load_json, require, run_import

require("pydantic_ai")
require("opentelemetry.proto")
from tests import otel_logs  # noqa: E402  (needs the OTel SDK and pydantic-ai)
from transforms.logfiles import match_logs, not_a_file  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def logs(tmp_path):
    """logs/ with a trace file, a FIFO, a broken and a looping link named like
    logs, and a link to another folder of traces."""
    logs, elsewhere = tmp_path / "logs", tmp_path / "elsewhere"
    logs.mkdir()
    elsewhere.mkdir()
    trace = otel_logs.write_trace_file(logs / "traces.jsonl")
    shutil.copy(trace, elsewhere / "more.jsonl")
    (logs / "linked").symlink_to(elsewhere, target_is_directory=True)
    (logs / "dangling.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    (logs / "loop.jsonl").symlink_to(logs / "loop.jsonl")
    os.mkfifo(logs / "pipe.jsonl")
    return logs


@pytest.fixture
def pipe_writer(logs):
    """Writes a line into the pipe should anything open it to read (as the
    import did before), so a test of that fails instead of hanging."""
    pipe = logs / "pipe.jsonl"
    thread = threading.Thread(target=lambda: pipe.write_text("{}\n"), daemon=True)
    thread.start()
    yield
    # Nothing read the pipe: open it ourselves so the writer ends.
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    thread.join()
    os.close(reader)


def test_paths_that_are_no_regular_file_are_named_and_never_opened(logs):
    assert not_a_file(str(logs / "traces.jsonl")) is None
    assert "pipe" in not_a_file(str(logs / "pipe.jsonl"))
    assert "broken or looping link" in not_a_file(str(logs / "dangling.jsonl"))
    assert "broken or looping link" in not_a_file(str(logs / "loop.jsonl"))
    # A folder stands for its logs, a linked folder's included; a glob matches links whatever they lead to.
    names = {os.path.relpath(path, logs) for path in match_logs([str(logs)], (".jsonl",))}
    assert names == {"traces.jsonl", "linked/more.jsonl", "pipe.jsonl", "dangling.jsonl", "loop.jsonl"}
    assert set(match_logs([str(logs / "*.jsonl")], (".jsonl",))) == {
        str(logs / name) for name in ("traces.jsonl", "pipe.jsonl", "dangling.jsonl", "loop.jsonl")}


def test_import_skips_and_counts_each_path_it_cannot_open(logs, pipe_writer, tmp_path, capsys):
    output = tmp_path / "out"
    assert run_import("otel", [logs], output) == Exit.INCOMPLETE_INPUT
    manifest = load_json(output / "import-manifest.json")
    skipped = {str(logs / name) for name in ("pipe.jsonl", "dangling.jsonl", "loop.jsonl")}
    assert set(manifest["failed_files"]) == skipped
    assert manifest["totals"]["files_skipped"] == len(skipped)
    reports = {report["file"]: report for report in manifest["files"]}
    assert all(reports[path]["skipped"] and reports[path]["units"] == 0 for path in skipped)
    # The linked folder's traces import as the folder's own do.
    imported = reports[str(logs / "traces.jsonl")]
    assert imported["trajectories"] > 0 and imported["error"] is None
    assert reports[str(logs / "linked" / "more.jsonl")]["trajectories"] == imported["trajectories"]
    terminal = capsys.readouterr().out
    assert f"{len(skipped)} path(s) skipped" in terminal
    assert all(f"error: {path} not imported: skipped" in terminal for path in skipped)
