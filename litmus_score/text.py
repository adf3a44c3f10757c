"""Text that comes from trajectories, made safe to show to a person, and the
one path by which litmus-score's messages reach stderr."""

import logging
import sys

# Names printed in the terminal summary are cut here.
TERMINAL_CHARS = 120
# An error line: long enough to keep any path in it whole.
ERROR_CHARS = 1000


def display(value, limit: int) -> str:
    """`value` as text: non-printable characters (control, bidi, lone
    surrogates) escaped, cut at `limit` with an ellipsis."""
    raw = str(value)[: limit * 4]  # bounds the work; escaping only lengthens
    shown = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in raw)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def shown(value) -> str:
    """A value for the terminal summary: escaped, bounded, '-' for none."""
    return "-" if value is None else display(value, TERMINAL_CHARS)


def error(message) -> None:
    """Prints `litmus-score: MESSAGE` to stderr as one escaped line."""
    print(f"litmus-score: {display(message, ERROR_CHARS)}", file=sys.stderr)


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
