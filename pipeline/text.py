"""Text that comes from trajectories, made safe to show to a person, and the
one path by which litmus-score's messages reach stderr."""

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
