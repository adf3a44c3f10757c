"""A run stops when told, at any moment, and says when it died.

The launcher (`python -m pipeline`, the `litmus-score` script) runs each
command in a child it supervises (pipeline.supervise). These tests start it
as a user or a scheduler does and check what a later run finds: an exit code
from the table, one line on stderr, no lock, nothing half published, and a
folder that `--replace` takes over without help."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from litmus_score.exits import Exit, of_signal
from pipeline import publish
from pipeline.cli import main
from pipeline.supervise import STOP_GRACE_S, STOPS
from tests.conftest import RUNNER
from tests.test_launcher_errors import our_lines
from tests.test_publish import ROOT

pytestmark = pytest.mark.slow

# How long a stopped run may take to end: its grace, then the launcher's cleanup on a loaded machine.
# A guard that a hang fails, not a speed check.
STOP_BOUND_S = STOP_GRACE_S + 25
MODES = [["--direct_running_mode=in_memory"], ["--direct_num_workers=2", "--direct_running_mode=multi_threading"]]

# Runs the launcher with a fault forced in the child: the pipeline's finishing step, in a worker thread,
# reads address 0 (a segfault in compiled code, as a faulty transforms._native would).
SEGFAULT = """
import ctypes, sys
import transforms.write as write
write.commit_files = lambda *args, **kwargs: ctypes.string_at(0)
sys.argv = ["litmus-score", *sys.argv[1:]]
from pipeline.cli import entry_point
entry_point()
"""

# Runs the launcher with a child deaf to stops once it has claimed its folder, as a child hung in Beam's
# cleanup is (the main thread in Thread.join); it touches the file ARGV[1] when it is.
DEAF = """
import pathlib, signal, sys, time
import pipeline.job as job
deaf = pathlib.Path(sys.argv[1])
def execute_deaf(*args, **kwargs):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    deaf.touch()
    time.sleep(600)
job.execute = execute_deaf
sys.argv = ["litmus-score", *sys.argv[2:]]
from pipeline.cli import entry_point
entry_point()
"""


@pytest.fixture(scope="module")
def small_shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("small")
    assert main(["generate", "--output", str(folder), "--trajectories", "300", "--shards", "4", "--seed", "3"]) == 0
    return folder


def score_argv(shards: Path, output: Path, *flags) -> list:
    # Small batches: many bundles, so a signal lands inside one as often as between them.
    return ["score", "--input", str(shards / "*.parquet"), "--output", str(output), "--batch_rows", "20", *flags,
            *RUNNER]


def launch(*argv, script: str | None = None) -> subprocess.Popen:
    command = ["-c", script] if script is not None else ["-m", "pipeline"]
    return subprocess.Popen([sys.executable, *command, *argv], cwd=ROOT, text=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def left_for_a_later_run(output: Path) -> str | None:
    """What is wrong with the folder a stopped run left, for the run after it; None when nothing is."""
    if (output / ".lock").exists():
        return "a .lock"
    if (output / "_SUCCESS").exists():
        try:
            publish.read_run(str(output))
        except publish.PublishError as error:
            return f"a _SUCCESS that vouches for an incomplete run ({error})"
    try:  # what `--replace` does first: the attempt left behind is taken over, whatever it holds
        publish.claim(str(output), replace=True).release()
    except publish.PublishError as error:
        return f"a folder --replace cannot take over ({error})"
    return None


def launch_and_time(argv: list, output: Path) -> tuple:
    """(the run, seconds from its launch to its claim of `output`), once it has claimed it;
    (the run, None) if it ended first."""
    launched, run = time.monotonic(), launch(*argv)
    while not (output / ".lock").exists():
        if run.poll() is not None:
            return run, None
        time.sleep(0.01)
    return run, time.monotonic() - launched


def stopped_as_told(run: subprocess.Popen, stop: signal.Signals, output: Path) -> list:
    """What is wrong with how `run` ended after `stop`, and with what it left for a later run."""
    try:
        _, stderr = run.communicate(timeout=STOP_BOUND_S)
    except subprocess.TimeoutExpired:  # was: a run that never ends, its folder locked
        run.kill()
        run.communicate()
        return [f"still running {STOP_BOUND_S} s after the signal"]
    wrong = []
    if "Traceback" in stderr:  # was: a KeyboardInterrupt's, when SIGINT came during an import
        wrong.append(f"a traceback: {stderr[-300:]!r}")
    said = [line.removeprefix("litmus-score: ") for line in stderr.splitlines() if line.startswith("litmus-score:")]
    published = (output / "_SUCCESS").exists()
    if run.returncode == Exit.OK and published and said == []:
        pass  # the run had ended when the signal came
    elif run.returncode != of_signal(stop):
        wrong.append(f"exit {run.returncode}: {stderr[-300:]!r}")
    else:
        unpublished = [STOPS[stop] + f": {output} was not published"]
        # Between the claim and the first file written, the folder may be empty and the lock not yet taken.
        may_say = ([[STOPS[stop]]] if published or not output.exists() else
                   [unpublished] if any(output.iterdir()) else [[STOPS[stop]], unpublished])
        if said not in may_say:
            wrong.append(f"said {said}, not one of {may_say}")
    problem = left_for_a_later_run(output)
    if problem is not None:
        wrong.append(f"left {problem} (exit {run.returncode})")
    return wrong


def test_a_stop_at_any_moment_ends_the_run_at_once_with_its_code_and_a_folder_a_later_run_takes(
        small_shards, tmp_path):
    launched = time.monotonic()
    whole, claimed = launch_and_time(score_argv(small_shards, tmp_path / "whole"), tmp_path / "whole")
    _, stderr = whole.communicate(timeout=300)
    assert whole.returncode == Exit.OK and claimed is not None, stderr[-2000:]
    in_flight = time.monotonic() - launched - claimed  # from the claim to the run's end
    # Two stops before the claim (imports, globs, building the graph), the rest spread from the claim to
    # the end: bundles running, files committed, the run published (a run takes 5-20 s, on a loaded machine).
    moments = [(claimed * fraction, False) for fraction in (0.2, 0.7)]
    moments += [(in_flight * (i + 0.5) / 4, True) for i in range(4)]
    wrong = {}
    for attempt, (delay, after_claim) in enumerate(moments):
        stop = signal.SIGINT if attempt % 3 == 2 else signal.SIGTERM
        output = tmp_path / f"out-{attempt}"
        argv = score_argv(small_shards, output, *MODES[attempt % 2])
        run = launch_and_time(argv, output)[0] if after_claim else launch(*argv)
        time.sleep(delay)
        run.send_signal(stop)
        problems = stopped_as_told(run, stop, output)
        if problems:
            wrong[f"{stop.name} {delay:.2f} s after the {'claim' if after_claim else 'launch'}"] = problems
    assert wrong == {}


def test_a_crash_in_a_worker_thread_is_said_in_one_line_and_leaves_no_lock(small_shards, tmp_path):
    output = tmp_path / "out"
    run = launch(*score_argv(small_shards, output, *MODES[1]), script=SEGFAULT)
    _, stderr = run.communicate(timeout=300)
    # Was: exit 139 from the shell (-11 here), an empty stderr, a .lock and a .temp- folder left behind.
    assert run.returncode == of_signal(signal.SIGSEGV) == Exit.DIED
    assert our_lines(stderr) == [f"litmus-score: the run died (killed by SIGSEGV): {output} was not published"]
    assert left_for_a_later_run(output) is None
    assert main(score_argv(small_shards, output, "--replace")) == Exit.OK


def test_a_child_that_does_not_stop_is_killed_after_its_grace_and_said_so(small_shards, tmp_path, request):
    output, deaf = tmp_path / "out", tmp_path / "deaf"
    run = launch(str(deaf), *score_argv(small_shards, output), script=DEAF)
    request.addfinalizer(run.kill)
    give_up = time.monotonic() + 300  # a guard against a run that never gets there
    while not deaf.exists():
        assert run.poll() is None and time.monotonic() < give_up, "the child never claimed its folder"
        time.sleep(0.05)
    run.send_signal(signal.SIGTERM)
    # Was: never ends (the probe's hang: 2 runs in 30), its folder locked.
    _, stderr = run.communicate(timeout=STOP_BOUND_S)
    assert run.returncode == Exit.TERMINATED
    assert our_lines(stderr) == [f"litmus-score: terminated (SIGTERM): {output} was not published "
                                 f"(the run did not stop within {STOP_GRACE_S} s and was killed)"]
    assert left_for_a_later_run(output) is None
