"""How much this process has read: shards done and calls, for the launcher's progress line.

Counted by the read stage in whatever process runs it and read only by a
launcher that runs the pipeline in its own process (DirectRunner's
threads), to draw its progress line. Nothing here decides a result: a
runner's workers count for no one, and Beam's counters stay the record.
"""

from __future__ import annotations

import threading


class Tally:
    """Shards done and calls read, safe across worker threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._shards = self._calls = 0

    def add(self, shards: int = 0, calls: int = 0) -> None:
        with self._lock:
            self._shards += shards
            self._calls += calls

    def read(self) -> tuple:
        with self._lock:
            return self._shards, self._calls

    def reset(self) -> None:
        with self._lock:
            self._shards = self._calls = 0


TALLY = Tally()
