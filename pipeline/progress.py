"""A local run's progress on a terminal: shards done of total, calls read, calls per second.

Drawn on stderr, redrawn in place twice a second, only when stderr is a
terminal and the pipeline runs in this process, and only once a run has
taken more than a few seconds; it ends with one line of the totals.
"""

from __future__ import annotations

import sys
import threading
import time

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from transforms.progress import TALLY

# A run shorter than this shows no progress.
SHOW_AFTER_SECONDS = 3.0
IN_PROCESS_RUNNERS = {None, "direct", "directrunner", "fnapirunner", "switchingdirectrunner"}


def runs_in_process(options: PipelineOptions) -> bool:
    """Whether the workers are threads of this process (where the read stage's tally is visible)."""
    runner = options.view_as(StandardOptions).runner
    return ((runner.lower() if isinstance(runner, str) else runner) in IN_PROCESS_RUNNERS
            and options.view_as(DirectOptions).direct_running_mode != "multi_processing")


def line(shards: int, total: int, calls: int, seconds: float) -> str:
    rate = calls / seconds if seconds > 0 else 0.0
    return f"litmus-score: {shards}/{total} shards, {calls:,} calls, {rate:,.0f} calls/s, {seconds:.0f} s"


class ProgressLine:
    """Context manager: draws the progress line while the block runs."""

    def __init__(self, total_shards: int, stream=None, after: float = None, every: float = 0.5):
        self._total = total_shards
        self._stream = stream if stream is not None else sys.stderr
        self._after, self._every = SHOW_AFTER_SECONDS if after is None else after, every
        self._done = threading.Event()
        self._drawn = False
        self._thread = None

    def __enter__(self):
        TALLY.reset()
        self._start = time.monotonic()
        isatty = getattr(self._stream, "isatty", None)
        if isatty is not None and isatty():
            self._thread = threading.Thread(target=self._draw_until_done, name="litmus-progress", daemon=True)
            self._thread.start()
        return self

    def _draw(self, end: str = "") -> None:
        shards, calls = TALLY.read()
        # \r and "erase to the end of the line": the line is redrawn in place.
        self._stream.write("\r\x1b[K" + line(shards, self._total, calls, time.monotonic() - self._start) + end)
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
                self._draw("\n")
        return False
