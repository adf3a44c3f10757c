"""A local run's progress on a terminal: shards done of total, calls read,
calls per second, and, once the main read has started, how much of the
input is done and how long the rest should take.

The share done is of trajectories: those read, of those the shards'
footers declare (the duplicate-key pass reads every footer before the main
read starts; calls are not known until they are read). The time left
extrapolates the main read's pace so far.

Drawn on stderr, redrawn in place twice a second, only when stderr is a
terminal and the pipeline runs in this process, and only once a run has
taken more than a few seconds; it ends with one line of the totals.
"""

from __future__ import annotations

import sys
import threading
import time

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from litmus_score import text
from transforms.progress import TALLY, Counts

# A run shorter than this shows no progress.
SHOW_AFTER_SECONDS = 3.0
IN_PROCESS_RUNNERS = {None, "direct", "directrunner", "fnapirunner", "switchingdirectrunner",
                      "pipeline.threaded_runner.threadedrunner"}


def runs_in_process(options: PipelineOptions) -> bool:
    """Whether the workers are threads of this process (where the read stage's tally is visible)."""
    runner = options.view_as(StandardOptions).runner
    return ((runner.lower() if isinstance(runner, str) else runner) in IN_PROCESS_RUNNERS
            and options.view_as(DirectOptions).direct_running_mode != "multi_processing")


def duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds // 60 % 60:02d} min"


def share_done(counts: Counts):
    """Trajectories read of those declared (None before the main read starts)."""
    if not counts.rows or not counts.declared:
        return None
    # At most all, though a file rewritten between the two passes may hold more rows than it declared.
    return min(1.0, counts.rows / counts.declared)


def seconds_left(counts: Counts, now: float):
    """The rest of the trajectories at the main read's pace so far (None before it starts)."""
    done = share_done(counts)
    if done is None or counts.reading_since is None:
        return None
    return (now - counts.reading_since) * (1 - done) / done


def line(counts: Counts, total_shards: int, seconds: float, left=None) -> str:
    """The progress line; with `left` (seconds), the share done and the time left."""
    rate = counts.calls / seconds if seconds > 0 else 0.0
    text = (f"litmus-score: {counts.shards}/{total_shards} shards, {counts.calls:,} calls, "
            f"{rate:,.0f} calls/s, {duration(seconds)}")
    if left is None:
        return text
    return f"{text}: {share_done(counts):.0%} done, about {duration(left)} left"


class ProgressLine:
    """Context manager: draws the progress line while the block runs."""

    def __init__(self, total_shards: int, stream=None, after: float | None = None, every: float = 0.5):
        self._total = total_shards
        # The terminal itself: its control sequences are the line's own, everything else printed is escaped.
        self._stream = stream if stream is not None else text.unescaped(sys.stderr)
        self._after, self._every = SHOW_AFTER_SECONDS if after is None else after, every
        self._done = threading.Event()
        self._drawn = False
        self._thread: threading.Thread | None = None

    def __enter__(self):
        TALLY.reset()
        self._start = time.monotonic()
        isatty = getattr(self._stream, "isatty", None)
        if isatty is not None and isatty():
            thread = threading.Thread(target=self._draw_until_done, name="litmus-progress", daemon=True)
            thread.start()
            self._thread = thread
        return self

    def _draw(self, final: bool = False) -> None:
        counts, now = TALLY.read(), time.monotonic()
        shown = line(counts, self._total, now - self._start, None if final else seconds_left(counts, now))
        # \r and "erase to the end of the line": the line is redrawn in place.
        self._stream.write("\r\x1b[K" + shown + ("\n" if final else ""))
        self._stream.flush()
        self._drawn = True

    def _draw_until_done(self) -> None:
        if self._done.wait(self._after):
            return
        while not self._done.is_set():
            self._draw()
            self._done.wait(self._every)

    def __exit__(self, *exc_info):
        self._done.set()
        if self._thread is not None:
            self._thread.join()
            if self._drawn:
                self._draw(final=True)
        return False
