"""litmus-score's exit codes, every command's, stated once.

docs/commands.md has the table a person reads; tests/test_exits.py checks
that it lists exactly these. A scheduler alerts on REGRESSION and treats
INCOMPLETE_INPUT as a night not scored in full.
"""

from __future__ import annotations

import enum


class Exit(enum.IntEnum):
    OK = 0
    # The pipeline failed, or the run's files could not be written (a full disk).
    FAILED = 1
    # Refused before anything was touched: a bad flag or file, an output folder that cannot be claimed.
    USAGE = 2
    # Done, and an agent's misuse rate regressed against the baseline.
    REGRESSION = 3
    # Done, but some input could not be scored for a reason outside the spec (the manifest names it).
    INCOMPLETE_INPUT = 4
    # Done, but no regression verdict: the baseline was scored under other rules (spec version, mode or policy).
    WITHHELD = 5


def of_run(lost_input: bool, comparison: int) -> Exit:
    """A finished run's exit code: lost input wins over the comparison's code
    (a regression, a withheld verdict), which wins over OK."""
    return Exit.INCOMPLETE_INPUT if lost_input else Exit(comparison)
