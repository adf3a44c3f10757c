"""The note a supervised run keeps of the locks it takes (pipeline.supervise).

A child notes each lock before it takes it, in a file its launcher opened and
reads once the child has ended: a lock the child could not release (it was
stopped, or it crashed) is released by the launcher. Apart from the launcher,
so that publishing, which takes the locks, needs nothing of it.
"""

from __future__ import annotations

import json
import os

# The notes file's descriptor, shared across the fork; set in the child only.
_notes_fd: int | None = None


def keep_notes(fd: int) -> None:
    """From now on this process (a supervised child) notes its locks in the open file `fd`."""
    global _notes_fd
    _notes_fd = fd


def noting() -> bool:
    """Whether this process notes its locks: it is a supervised child."""
    return _notes_fd is not None


def note_lock(path: str) -> None:
    """Says, before a lock is taken at `path`, that this process may hold it."""
    if _notes_fd is not None:
        os.write(_notes_fd, (json.dumps(path) + "\n").encode("utf-8"))


def noted_locks(fd: int) -> list:
    """The lock paths noted in the open file `fd`, each once, in the order first noted."""
    text = os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8")
    return list(dict.fromkeys(json.loads(line) for line in text.splitlines()))
