"""Text that comes from trajectories, paths and flags, made safe to show to a
person, and the one path by which litmus-score's messages reach stderr.

Every command's stdout and stderr pass through TerminalStream while it runs
(pipeline.cli), so no value printed by any command, or by a library on its
behalf, can drive the terminal; display() and shown() also bound a value's
length where a line would otherwise grow without end.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import unicodedata
from collections.abc import Collection, Iterator, Sequence

# Names printed in the terminal summary are cut here.
TERMINAL_CHARS = 120
# An error line: long enough to keep any path in it whole.
ERROR_CHARS = 1000


def escape(value: str) -> str:
    """`value` with each non-printable character (control, bidi, lone
    surrogate, line break) written as its Python escape: \\x1b, \\n, \\u202e."""
    if value.isprintable():  # the common case, checked in C
        return value
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in value)


def display(value, limit: int) -> str:
    """`value` as text: non-printable characters escaped, cut at `limit` with an ellipsis."""
    shown = escape(str(value)[: limit * 4])  # bounds the work; escaping only lengthens
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def shown(value) -> str:
    """A value for the terminal summary: escaped, bounded, '-' for none."""
    return "-" if value is None else display(value, TERMINAL_CHARS)


def error(message) -> None:
    """Prints `litmus-score: MESSAGE` to stderr as one escaped line."""
    print(f"litmus-score: {display(message, ERROR_CHARS)}", file=sys.stderr)


def width(cell: str) -> int:
    """Columns `cell` takes on a terminal: two for a wide (East Asian) character, none for a combining one."""
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
               for ch in cell)


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int] = ()) -> list:
    """Lines of an aligned table of escaped cells: each column as wide as its
    widest cell (a long name widens its column instead of being cut), the
    columns numbered in `right` aligned right, two spaces between columns."""
    widths = [max(width(cell) for cell in column) for column in zip(header, *rows)]

    def line(cells) -> str:
        padded = (" " * (size - width(cell)) + cell if i in right else cell + " " * (size - width(cell))
                  for i, (cell, size) in enumerate(zip(cells, widths)))
        return "  ".join(padded).rstrip()

    return [line(header), *(line(cells) for cells in rows)]


class StreamFilter(io.TextIOBase):
    """A text stream in front of `raw`: a subclass's `write` decides what
    reaches it; everything else (flushing, the descriptor, the encoding) is raw's."""

    def __init__(self, raw):
        self.raw = raw

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        self.raw.flush()

    def fileno(self) -> int:
        return self.raw.fileno()

    def isatty(self) -> bool:
        return self.raw.isatty()

    @property
    def encoding(self):  # type: ignore[override]  # the stream's, read-only as on any text stream
        return self.raw.encoding


class TerminalStream(StreamFilter):
    """A text stream that writes to `raw` with every non-printable character
    but the line break escaped: whatever a command prints, a path, a flag or a
    name from the data holding ESC or a carriage return reaches the terminal inert."""

    def write(self, data: str) -> int:
        self.raw.write("\n".join(escape(line) for line in data.split("\n")))
        return len(data)


def unescaped(stream):
    """The stream under a TerminalStream (for the progress line, whose
    control sequences are its own), or `stream` itself."""
    return stream.raw if isinstance(stream, TerminalStream) else stream


@contextlib.contextmanager
def escaped_terminal() -> Iterator[None]:
    """sys.stdout and sys.stderr through TerminalStream for the block (once, however nested)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (stream if isinstance(stream, TerminalStream) else TerminalStream(stream)
                              for stream in saved)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # a closed pipe
            sys.stdout.flush()
            sys.stderr.flush()
        sys.stdout, sys.stderr = saved


class EscapingFormatter(logging.Formatter):
    """A log formatter for the terminal: each line of a record escaped as
    display() escapes (a shard named with terminal escape sequences reaches
    stderr inert, whichever library logged it), and no traceback: an
    exception that stops a command is reported in one line by the command."""

    def formatException(self, ei) -> str:  # noqa: N802 (logging's name)
        return ""

    def formatStack(self, stack_info) -> str:  # noqa: N802 (logging's name)
        return ""

    def format(self, record: logging.LogRecord) -> str:
        return "\n".join(display(line, ERROR_CHARS) for line in super().format(record).rstrip("\n").split("\n"))
