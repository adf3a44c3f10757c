"""Text that comes from trajectories, made safe to show to a person."""

# Names printed in the terminal summary and in error lines are cut here.
TERMINAL_CHARS = 120


def display(value, limit: int) -> str:
    """`value` as text: non-printable characters (control, bidi, lone
    surrogates) escaped, cut at `limit` with an ellipsis."""
    raw = str(value)[: limit * 4]  # bounds the work; escaping only lengthens
    shown = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in raw)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
