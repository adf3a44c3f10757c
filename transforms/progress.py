"""How much this process has read, for the launcher's progress line.

Counted by the stages in whatever process runs them and read only by a
launcher that runs the pipeline in its own process (DirectRunner's
threads), to draw its progress line: the duplicate-key pass declares the
trajectories each shard's footer holds (it reads every footer before the
main read starts), and the read stage counts shards done, trajectories and
calls. Nothing here decides a result: a runner's workers count for no one,
and Beam's counters stay the record.
"""

from __future__ import annotations

import threading
import time
from typing import NamedTuple


class Counts(NamedTuple):
    shards: int  # shards read to the end
    rows: int  # trajectories read
    calls: int  # tool calls read
    declared: int  # trajectories the footers declare, of the shards the key pass has opened
    reading_since: float | None  # time.monotonic() of the first trajectory read


class Tally:
    """Counts of a run, safe across worker threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._shards = self._rows = self._calls = 0
        self._declared: dict[str, int] = {}
        self._reading_since: float | None = None

    def add(self, shards: int = 0, rows: int = 0, calls: int = 0) -> None:
        with self._lock:
            if rows and self._reading_since is None:
                self._reading_since = time.monotonic()
            self._shards += shards
            self._rows += rows
            self._calls += calls

    def declare(self, path: str, rows: int) -> None:
        """The trajectories a shard's footer declares; a shard opened again counts once."""
        with self._lock:
            self._declared[path] = rows

    def read(self) -> Counts:
        with self._lock:
            return Counts(self._shards, self._rows, self._calls, sum(self._declared.values()), self._reading_since)

    def reset(self) -> None:
        with self._lock:
            self._shards = self._rows = self._calls = 0
            self._declared = {}
            self._reading_since = None


TALLY = Tally()
