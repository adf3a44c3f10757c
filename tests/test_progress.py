"""The progress line of a local run: on a terminal only, shards done of total and calls."""

import io
import re
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline import progress
from pipeline.cli import main
from tests.conftest import RUNNER, load_json
from transforms.progress import TALLY


class Terminal(io.StringIO):
    def isatty(self):
        return True


def lines(text: str) -> list:
    """What a terminal shows: each redraw replaces the line."""
    return [part.rsplit("\r\x1b[K", 1)[-1] for part in text.split("\n") if part]


def test_the_line_is_redrawn_in_place_and_ends_with_the_totals():
    terminal = Terminal()
    with progress.ProgressLine(5, terminal, after=0, every=0.01):
        TALLY.add(shards=3, calls=1234)
        assert TALLY.read() == (3, 1234)
    shown = terminal.getvalue()
    assert shown.startswith("\r\x1b[K") and shown.endswith("\n")
    assert re.fullmatch(r"litmus-score: 3/5 shards, 1,234 calls, [\d,]+ calls/s, \d+ s", lines(shown)[-1])


def test_nothing_is_drawn_when_stderr_is_not_a_terminal_or_the_run_is_short():
    pipe = io.StringIO()
    with progress.ProgressLine(5, pipe, after=0, every=0.01):
        TALLY.add(shards=1)
    assert pipe.getvalue() == ""
    terminal = Terminal()
    with progress.ProgressLine(5, terminal, after=60):
        TALLY.add(shards=1)
    assert terminal.getvalue() == ""


@pytest.mark.parametrize("argv, shown", [
    ([], True), (["--runner", "FnApiRunner"], True), (["--runner=DirectRunner"], True),
    (["--direct_running_mode=multi_processing"], False), (["--runner", "DataflowRunner"], False),
    (["--runner", "PortableRunner"], False)])
def test_only_runs_in_this_process_show_progress(argv, shown):
    assert progress.runs_in_process(PipelineOptions(argv)) is shown


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("progress")
    assert main(["generate", "--output", str(folder), "--trajectories", "1500", "--shards", "3", "--seed", "3"]) == 0
    return folder


def test_a_run_on_a_terminal_counts_every_shard_and_call(shards, tmp_path, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(progress, "SHOW_AFTER_SECONDS", 0)
    assert main(["score", "--input", str(shards / "*.parquet"), "--output", str(tmp_path / "out"), *RUNNER]) == 0
    calls = load_json(tmp_path / "out" / "metrics.json")["totals"]["calls"]["input"]
    assert calls == sum(len(c or ()) for c in pq.read_table(shards)["calls"].to_pylist())
    assert lines(terminal.getvalue())[-1].startswith(f"litmus-score: 3/3 shards, {calls:,} calls, ")


def test_a_run_whose_stderr_is_a_pipe_prints_no_progress(shards, tmp_path):
    done = subprocess.run([sys.executable, "-m", "pipeline", "score", "--input", str(shards / "*.parquet"),
                           "--output", str(tmp_path / "out"), *RUNNER], capture_output=True, text=True, check=True)
    assert (tmp_path / "out" / "_SUCCESS").exists()
    assert " shards, " not in done.stderr and "\x1b[K" not in done.stderr
