"""Every command runs in a child process that its launcher supervises, so
that whatever ends a run, the launcher ends promptly, says so in one line
with a documented exit code, and leaves no lock behind.

    launcher  forks before any work and waits. It passes every stop (STOPS:
              each catchable signal whose default action ends a process) on
              to the child; a child that has not ended STOP_GRACE_S after is
              killed. A child that was stopped or died of a signal (a
              crash such as a segfault in compiled code) leaves its locks to
              the launcher, which deletes those that still name the child
              and says in one line which folders were not published.
    child     runs the command. A stop signal ends it at once (128 + the
              signal), wherever it is: a run stopped mid-bundle is not
              unwound, since Beam's cleanup can wait forever on a worker
              that stopped (the main thread in Thread.join, the worker on its
              control stream). It notes each lock before it takes it, and
              dies with its launcher.

The output a stopped run leaves is an attempt that did not finish, as after
any crash: a later run replaces it (--replace, or `nightly` for its night).
Where there is no fork, the command runs in the launcher's own process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable

from litmus_score import text
from litmus_score.exits import Exit, of_signal
from litmus_score.scoring.layout import SUCCESS_MARKER
from pipeline import locknotes

# How long a stopped child may take to end before it is killed.
STOP_GRACE_S = 5
# Every catchable signal whose default action ends a process stops a run, as SIGTERM does; what each is said as.
STOPS: dict[int, str] = {
    signal.SIGTERM: "terminated (SIGTERM)", signal.SIGINT: "interrupted (SIGINT)",
    **{stop: f"stopped ({stop.name})" for stop in (signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
                                                  signal.SIGPIPE, signal.SIGALRM)}}
_PR_SET_PDEATHSIG = 1

# The file, shared by a launcher and its child, where the child notes the locks it takes.
_notes_fd: int | None = None


def supervised() -> bool:
    """Whether this process is a supervised child (its stops are handled already)."""
    return locknotes.noting()


def supervise(command: Callable[[], int]) -> int:
    """Runs `command` in a supervised child; its exit code, or the launcher's for a child that died."""
    if not hasattr(os, "fork"):
        return command()
    global _notes_fd
    _flush()
    notes = tempfile.TemporaryFile()  # open until both sides are done with it
    _notes_fd = notes.fileno()
    # Blocked across the fork: each side handles a stop only once its handlers are in place.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    launcher = os.getpid()
    child = os.fork()
    if child == 0:
        _run_child(command, launcher)
    return _Launcher(child).wait()


def _run_child(command: Callable[[], int], launcher: int) -> None:
    assert _notes_fd is not None
    locknotes.keep_notes(_notes_fd)
    _die_with(launcher)
    handled = STOPS.keys() - {signal.SIGPIPE}
    for signum in handled:
        signal.signal(signum, _stop_now)
    threading.Thread(target=_stop_when_piped, name="stop on SIGPIPE", daemon=True).start()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, handled)
    try:
        code = command()
    except SystemExit as stop:  # argparse's --help and usage errors
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
    except BaseException:  # what Python would print, then the child's exit
        traceback.print_exc()
        code = Exit.FAILED
    _flush()
    # Never returns into the caller's code; a stopped pipeline's threads cannot keep the child alive.
    os._exit(int(code))


def _die_with(launcher: int) -> None:
    """The child is killed when its launcher ends, however it ends (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return  # no prctl: the child outlives a launcher killed with SIGKILL
    if os.getppid() != launcher:  # it ended before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)


def _stop_now(signum, frame) -> None:
    # Nothing else here: the main thread may be anywhere, holding any lock (stderr's, the import lock).
    try:
        _flush()
    finally:
        os._exit(of_signal(signum))


def _stop_when_piped() -> None:
    """A SIGPIPE sent to the child stops it as the other stops do. It stays
    blocked in every other thread (they inherit the main thread's mask): the
    SIGPIPE the kernel sends a thread whose write finds a closed pipe or
    socket is that thread's alone, never seen here, and the write fails with
    EPIPE as where Python ignores the signal, so a library may retry it."""
    signal.sigwait({signal.SIGPIPE})
    _stop_now(signal.SIGPIPE, None)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe, or a write the signal interrupted
            stream.flush()


def _release_locks(pid: int) -> list:
    """Deletes the locks noted in this launch that still name process `pid`;
    the folders they were in that hold no finished run."""
    assert _notes_fd is not None
    noted = locknotes.noted_locks(_notes_fd)
    # A local lock that is not there needs no look through Beam: the child released it, or the stop came
    # between the note and the lock's creation; then its folder, claimed, holds no run unless one finished.
    unmade = [os.path.dirname(path) for path in noted if "://" not in path and not os.path.lexists(path)]
    folders = [folder for folder in unmade if os.path.isdir(folder) and not os.path.exists(
        os.path.join(folder, SUCCESS_MARKER))]
    paths = [path for path in noted if "://" in path or os.path.lexists(path)]
    if not paths:
        return folders
    # Beam's import: only after a run that took a lock.
    from apache_beam.io.filesystems import FileSystems

    from pipeline.publish import release_abandoned

    released = [FileSystems.split(path)[0] for path in paths if release_abandoned(path, pid)]
    return folders + [folder for folder in released
                      if not FileSystems.exists(FileSystems.join(folder, SUCCESS_MARKER))]


def _say(what: str, folders: list, why: str = "") -> None:
    unpublished = (f": {', '.join(folders)} {'was' if len(folders) == 1 else 'were'} not published"
                   if folders else "")
    text.error(f"{what}{unpublished}{why}")


class _Launcher:
    def __init__(self, child: int):
        self.child = child
        self.stop: int | None = None  # the first stop signal passed on
        self.deadline: float | None = None  # when a child that has not ended since is killed
        self.killed = False
        self.ended = False

    def wait(self) -> int:
        for stop in STOPS:
            signal.signal(stop, self._pass_on)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a handler: its signal wakes the wait
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        code = os.waitstatus_to_exitcode(self._reap())
        signum: int | None = -code if code < 0 else None  # it died of a signal
        if code - of_signal(0) in STOPS:  # it stopped itself, told to
            signum = code - of_signal(0)
        if signum is None and not self.killed:
            return code  # the command ended as it does: it said how, its locks released
        folders = _release_locks(self.child)
        if self.killed and self.stop is not None:
            _say(STOPS[self.stop], folders, f" (the run did not stop within {STOP_GRACE_S} s and was killed)")
            return of_signal(self.stop)
        assert signum is not None
        _say(STOPS.get(signum) or f"the run died (killed by {signal.Signals(signum).name})", folders)
        return of_signal(signum)

    def _reap(self) -> int:
        """The child's wait status once it has ended; killed once its grace after a stop is over. (No
        SIGALRM timer: that signal is a stop.)"""
        wakeup, woken = os.pipe()
        for end in (wakeup, woken):
            os.set_blocking(end, False)
        signal.set_wakeup_fd(woken, warn_on_full_buffer=False)  # a byte for every signal: none is missed
        while True:
            pid, status = os.waitpid(self.child, os.WNOHANG)
            if pid:
                self.ended = True
                return status
            if self.deadline is not None and time.monotonic() >= self.deadline:
                self.deadline, self.killed = None, True
                os.kill(self.child, signal.SIGKILL)
            select.select([wakeup], [], [], None if self.deadline is None else
                          max(0.0, self.deadline - time.monotonic()))
            with contextlib.suppress(BlockingIOError):
                os.read(wakeup, 4096)

    def _pass_on(self, signum, frame) -> None:
        if self.ended:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.child, signum)
        if self.stop is None:
            self.stop = signum
            self.deadline = time.monotonic() + STOP_GRACE_S
