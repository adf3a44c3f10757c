"""Which process is which, across pid reuse and reboots (Linux's /proc;
None elsewhere), a local run's worker processes ended with their launcher, a
worker process's crash made the run's, and the allocators a local run keeps
its memory in.

`--direct_running_mode=multi_processing` starts SDK workers as child
processes (through a shell), and a killed launcher leaves them waiting on
its gRPC services for minutes. While such a job runs, the launcher marks
its environment (LAUNCHER_ENV, inherited by every worker) and starts a
watchdog, `python -m pipeline.processes MARK`, that waits for the launcher
to end, however it ends (SIGKILL included), and then kills every process
carrying the mark. On systems without /proc and pidfds it does nothing.

Those workers, and those Beam's embedded job service starts for the
portable runner, are subprocesses a thread of the runner waits for; one that
dies of a signal (a segfault in compiled code, the OOM killer) ends only
that thread, with an error, and the run then fails on a closed channel
(about 90 lines of Beam's) or waits forever for the worker. In a supervised
child (pipeline.supervise), while a job runs, the process dies of that same
signal instead, so that its launcher says so in one line, as for a crash in
a worker thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

from pipeline import locknotes

# "PID:START" of the launcher, in the environment of the workers it starts.
LAUNCHER_ENV = "LITMUS_LAUNCHER"
_LOCAL_RUNNERS = (None, "direct", "directrunner", "fnapirunner", "switchingdirectrunner")
# What Beam's thread raises for a worker subprocess that ended badly (local_job_service.SubprocessSdkWorker):
# its code is -N for a signal N, or 128 + N from the shell the worker was started through.
_WORKER_ENDED = re.compile(r"Worker subprocess exited with return code (-?\d+)")


def boot_id() -> str | None:
    """This boot of this host, or None where the system does not say."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _stat(pid: int) -> list | None:
    """Fields 3 on of /proc/PID/stat (state, parent, ...), or None where the system does not say."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            # The command name (field 2) is in parentheses and may hold spaces.
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot, or None."""
    fields = _stat(pid)
    try:
        return int(fields[19]) if fields is not None else None  # field 22
    except (IndexError, ValueError):
        return None


def process_ended(pid: int) -> bool:
    """Whether `pid` is a process that has ended but was not yet reaped (a zombie): a run killed with
    its launcher is reparented, and where nothing reaps orphans (a container without an init) its
    pid lives on as a zombie that holds nothing."""
    fields = _stat(pid)
    return fields is not None and len(fields) > 0 and fields[0] in ("Z", "X")


def _local_processes(options) -> bool:
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

    runner = options.view_as(StandardOptions).runner
    return ((runner.lower() if isinstance(runner, str) else runner) in _LOCAL_RUNNERS
            and options.view_as(DirectOptions).direct_running_mode == "multi_processing")


@contextlib.contextmanager
def workers_die_with_launcher(options):
    """Around a job's run: when its workers are local processes, they are
    marked and watched, and killed as soon as this process ends."""
    start = process_start(os.getpid())
    if not _local_processes(options) or start is None or not hasattr(os, "pidfd_open"):
        yield
        return
    mark = f"{os.getpid()}:{start}"
    watchdog = subprocess.Popen([sys.executable, "-m", "pipeline.processes", mark], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ[LAUNCHER_ENV] = mark
    try:
        yield
    finally:
        del os.environ[LAUNCHER_ENV]
        _kill_marked(mark)  # none after a job that ended; those of a job a signal stopped
        watchdog.kill()
        watchdog.wait()


def _fatal_signal(error: BaseException) -> int | None:
    """The signal a worker subprocess died of, when `error` is Beam's word of it; None otherwise."""
    found = _WORKER_ENDED.search(str(error)) if isinstance(error, RuntimeError) else None
    code = int(found.group(1)) if found else 0
    signum = -code if code < 0 else code - 128 if code > 128 else None
    return signum if signum in signal.valid_signals() else None


@contextlib.contextmanager
def worker_crash_ends_run():
    """Around a job's run in a supervised child: a worker subprocess that dies
    of a signal makes this process die of it (module docstring). Meanwhile
    other threads' errors are held: those the crash causes (the runner's
    channels to the dead worker closing) are its echo, and said only if the
    process lives on."""
    if not locknotes.noting():
        yield
        return
    previous, held, dying = threading.excepthook, [], threading.Lock()

    def hook(args) -> None:
        signum = _fatal_signal(args.exc_value)
        if signum is None:
            held.append(args)
            return
        if not dying.acquire(blocking=False):
            return  # another worker's end, from the first one's killing it
        mark = os.environ.get(LAUNCHER_ENV)
        if mark is not None:
            _kill_marked(mark)  # the other workers: they would report the lost channels too
        # Its default action, or for a stop the child's own handler (pipeline.supervise): either ends the run.
        os.kill(os.getpid(), signum)

    threading.excepthook = hook
    try:
        yield
    finally:
        # Set back before a job's leftover workers are killed (workers_die_with_launcher): those are no crash.
        threading.excepthook = previous
        for args in held:
            previous(args)


def _kill_marked(mark: str) -> None:
    """Kills every other process whose environment carries `mark`."""
    needle = f"{LAUNCHER_ENV}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)
            except OSError:  # ended meanwhile, or not ours to read
                continue


def watch(mark: str) -> None:
    """The watchdog: waits for the launcher `mark` names, then kills its workers."""
    pid, start = mark.split(":")
    try:
        launcher = os.pidfd_open(int(pid))  # readable once the process has ended
    except OSError:
        launcher = None  # already gone
    if launcher is not None and str(process_start(int(pid))) == start:
        select.select([launcher], [], [])
    _kill_marked(mark)


def allocators_from_the_start() -> None:
    """Before pyarrow is imported and before any thread starts: jemalloc for
    Arrow's buffers and two glibc arenas. Chosen this early, they cover every
    buffer and thread (Arrow's C++ reads its default pool once, at its first
    allocation; a thread keeps the arena it started with), which keeps about
    100 MiB less at 1M calls than settle_memory's alone (docs/performance.md).
    The user's own setting of either wins; workers a run starts inherit them."""
    if sys.platform.startswith("linux"):  # where pyarrow's wheels carry jemalloc
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    if "MALLOC_ARENA_MAX" not in os.environ:
        _at_most_two_arenas()


def _at_most_two_arenas() -> None:
    try:
        ctypes.CDLL("libc.so.6").mallopt(-8, 2)  # M_ARENA_MAX: arenas made from now on
    except (OSError, AttributeError):
        pass  # not glibc


def settle_memory() -> None:
    """For a run whose workers are this process's threads (DirectRunner):
    most of a run's peak RSS is what allocators keep after frees; jemalloc for
    Arrow's buffers and two glibc arenas for everything else keep less, at no
    CPU cost (docs/performance.md)."""
    import pyarrow as pa  # here: the watchdog, this module's other user, needs none

    if "jemalloc" in pa.supported_memory_backends():
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    _at_most_two_arenas()


if __name__ == "__main__":
    watch(sys.argv[1])
