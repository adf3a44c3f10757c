"""The progress line of a local run, on a terminal only: shards done of total, calls, share done, time left."""

import io
import re
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline import progress
from pipeline.cli import main
from tests.conftest import RUNNER, load_json
from transforms.progress import TALLY, Counts


class Terminal(io.StringIO):
    def isatty(self):
        return True


def lines(text: str) -> list:
    """What a terminal shows: each redraw replaces the line."""
    return [part.rsplit("\r\x1b[K", 1)[-1] for part in text.split("\n") if part]


def test_the_line_is_redrawn_in_place_and_ends_with_the_totals():
    terminal = Terminal()
    with progress.ProgressLine(5, terminal, after=0, every=0.01):
        TALLY.declare("a.parquet", 600)
        TALLY.declare("b.parquet", 400)
        TALLY.add(shards=3, rows=250, calls=1234)
        assert TALLY.read()[:4] == (3, 250, 1234, 1000)
        while "% done" not in terminal.getvalue():
            time.sleep(0.01)
    shown = terminal.getvalue()
    assert shown.startswith("\r\x1b[K") and shown.endswith("\n")
    redraws = shown.split("\r\x1b[K")[1:]
    assert re.fullmatch(r"litmus-score: 3/5 shards, 1,234 calls, [\d,]+ calls/s, \d+ s: 25% done, about \d+ s left",
                        redraws[-2]), redraws
    assert re.fullmatch(r"litmus-score: 3/5 shards, 1,234 calls, [\d,]+ calls/s, \d+ s\n", redraws[-1])


def test_the_share_done_is_of_the_declared_trajectories_and_the_time_left_keeps_the_pace():
    # 250 of 1,000 trajectories read in the 10 s since the main read started: 30 s to go.
    counts = Counts(shards=1, rows=250, calls=2000, declared=1000, reading_since=100.0)
    assert progress.share_done(counts) == 0.25
    assert progress.seconds_left(counts, now=110.0) == 30.0
    assert progress.line(counts, 4, 12.0, left=30.0) == (
        "litmus-score: 1/4 shards, 2,000 calls, 167 calls/s, 12 s: 25% done, about 30 s left")
    # Before the main read starts (the key pass may have declared some shards), neither is known.
    for before in (Counts(0, 0, 0, 1000, None), Counts(0, 0, 0, 0, None)):
        assert progress.share_done(before) is None and progress.seconds_left(before, now=110.0) is None


def test_a_shard_opened_twice_is_declared_once():
    TALLY.reset()
    TALLY.declare("a.parquet", 600)
    TALLY.declare("a.parquet", 600)  # the re-read of repeated keys opens it again
    TALLY.declare("b.parquet", 400)
    assert TALLY.read().declared == 1000


@pytest.mark.parametrize("seconds, shown", [
    (0.4, "0 s"), (59.4, "59 s"), (60, "1 min 00 s"), (605, "10 min 05 s"), (3599.6, "1 h 00 min"),
    (7 * 3600 + 5 * 60 + 59, "7 h 05 min")])
def test_durations_read_at_a_glance(seconds, shown):
    assert progress.duration(seconds) == shown


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
    table = pq.read_table(shards)
    assert calls == sum(len(c or ()) for c in table["calls"].to_pylist())
    assert lines(terminal.getvalue())[-1].startswith(f"litmus-score: 3/3 shards, {calls:,} calls, ")
    # The duplicate-key pass declared every footer's trajectories, and the read read them all: 100% at the end.
    counts = TALLY.read()
    assert (counts.rows, counts.declared) == (table.num_rows, table.num_rows) and progress.share_done(counts) == 1


def test_a_run_whose_stderr_is_a_pipe_prints_no_progress(shards, tmp_path):
    done = subprocess.run([sys.executable, "-m", "pipeline", "score", "--input", str(shards / "*.parquet"),
                           "--output", str(tmp_path / "out"), *RUNNER], capture_output=True, text=True, check=True)
    assert (tmp_path / "out" / "_SUCCESS").exists()
    assert " shards, " not in done.stderr and "\x1b[K" not in done.stderr
