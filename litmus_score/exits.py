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
    # Interrupted (SIGINT, Ctrl-C) or terminated (SIGTERM): 128 + the signal's number, as shells report it;
    # the other signals that stop a run (pipeline.supervise.STOPS: SIGHUP, ...) exit 128 + theirs too.
    INTERRUPTED = 130
    TERMINATED = 143
    # The run died of another signal (a crash: SIGSEGV in compiled code); any such signal N exits 128 + N,
    # as shells report it (134 SIGABRT, 137 SIGKILL from the OOM killer), and this is SIGSEGV's.
    DIED = 139


class Terminated(BaseException):
    """SIGTERM, raised in the launcher's main thread (as SIGINT raises
    KeyboardInterrupt) so that the lock is released and nothing half done is published."""


def of_signal(signum: int) -> int:
    """The exit code of a run that a signal ended (a stop, or a death): 128 + its number."""
    return 128 + signum


def of_stop(stop: BaseException) -> Exit:
    """The exit code of a launcher stopped by a signal."""
    return Exit.TERMINATED if isinstance(stop, Terminated) else Exit.INTERRUPTED


def stop_name(stop: BaseException) -> str:
    return "terminated (SIGTERM)" if isinstance(stop, Terminated) else "interrupted (SIGINT)"


def of_run(lost_input: bool, comparison: int) -> Exit:
    """A finished run's exit code: lost input wins over the comparison's code
    (a regression, a withheld verdict), which wins over OK."""
    return Exit.INCOMPLETE_INPUT if lost_input else Exit(comparison)
