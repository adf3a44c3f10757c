"""A run stops when told, at any moment, by any signal that would end it, and says when it died.

The launcher (`python -m pipeline`, the `litmus-score` script) runs each
command in a child it supervises (pipeline.supervise). These tests start it
as a user or a scheduler does and check what a later run finds: an exit code
from the table, one line on stderr, no lock, nothing half published, and a
folder that `--replace` takes over without help."""

import os
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
from tests.test_portable import PRIVATE_NETWORK, private_network_available
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

# Runs the launcher with a worker process of `--direct_running_mode=multi_processing` that segfaults in the
# pipeline's finishing step: a folder holding this file as sitecustomize.py, first on the workers' PYTHONPATH
# (they are new interpreters: no patch of the launcher's reaches them).
WORKER_SEGFAULT = """
import os
if "CONTROL_API_SERVICE_DESCRIPTOR" in os.environ:  # an SDK worker, as Beam starts it
    import ctypes
    import transforms.write as write
    write.commit_files = lambda *args, **kwargs: ctypes.string_at(0)
"""

# Runs the launcher held at one moment of a run (ARGV[2], one of HELD_AT) until a signal comes; it touches the
# file ARGV[1] once there.
HELD = """
import functools, importlib, pathlib, sys, time
held, (module, name, when) = pathlib.Path(sys.argv[1]), sys.argv[2].split(":")
*owners, name = name.split(".")
where = functools.reduce(getattr, owners, importlib.import_module(module))
function = getattr(where, name)
@functools.wraps(function)
def hold(*args, **kwargs):
    if when == "after":
        function(*args, **kwargs)
    held.touch()
    time.sleep(600)
setattr(where, name, hold)
sys.argv = ["litmus-score", *sys.argv[3:]]
from pipeline.cli import entry_point
entry_point()
"""
HELD_AT = {
    "before the claim": "pipeline.publish:claim:before",  # globs matched, the graph built, nothing written
    "mid-bundle": "transforms.write:WriteBundleFn.process:before",
    "after the commit": "transforms.write:commit_files:after",  # the scored files in place, no metrics yet
    "publishing": "pipeline.publish:write_text:before",  # the report and manifest written, no _SUCCESS
}
# Whom the signal is sent to: the launcher, its child alone, or both (the process group, as a terminal's hangup).
TARGETS = ("the launcher", "the child", "the group")

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


def child_of(launcher: int) -> int:
    """The pid of the launcher's child (Linux /proc)."""
    children = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    return int(children[0])


@pytest.mark.parametrize("moment", HELD_AT)
@pytest.mark.parametrize("stop", [stop for stop in STOPS if stop not in (signal.SIGTERM, signal.SIGINT)],
                         ids=lambda stop: stop.name)
def test_every_signal_that_would_end_a_run_stops_it_as_sigterm_does(small_shards, tmp_path, request, stop, moment):
    output, held = tmp_path / "out", tmp_path / "held"
    target = TARGETS[(list(STOPS).index(stop) + list(HELD_AT).index(moment)) % len(TARGETS)]
    run = subprocess.Popen([sys.executable, "-c", HELD, str(held), HELD_AT[moment], *score_argv(small_shards, output)],
                           cwd=ROOT, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           start_new_session=True)
    request.addfinalizer(run.kill)
    give_up = time.monotonic() + 300  # a guard against a run that never gets there
    while not held.exists():
        assert run.poll() is None and time.monotonic() < give_up, f"the run never got {moment}"
        time.sleep(0.05)
    if target == "the group":
        os.killpg(run.pid, stop)
    else:
        os.kill(run.pid if target == "the launcher" else child_of(run.pid), stop)
    # Was (SIGHUP, SIGQUIT, SIGUSR1, ...): the launcher killed at once, nothing said, the child's lock left.
    assert stopped_as_told(run, stop, output) == []
    assert run.returncode == of_signal(stop)


# A supervised command that writes to its stdout, a pipe whose reader has gone, as `litmus-score ... | head` is.
WRITES_TO_A_CLOSED_PIPE = """
import os, sys
from pipeline.supervise import supervise
def write() -> int:
    try:
        os.write(1, b"a line")
    except BrokenPipeError:
        return 7
    return 0
sys.exit(supervise(write))
"""


def test_a_sigpipe_from_a_write_to_a_closed_pipe_is_an_error_the_command_sees_not_a_stop():
    run = subprocess.Popen([sys.executable, "-c", WRITES_TO_A_CLOSED_PIPE], cwd=ROOT, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    run.stdout.close()
    _, stderr = run.communicate(timeout=60)
    # The kernel's SIGPIPE is the writing thread's: the write fails with EPIPE, and the command decides.
    assert (run.returncode, stderr) == (7, "")


# Runners whose SDK workers are processes the command starts, and a prefix for the launcher's command line.
WORKER_PROCESSES = [
    # DirectRunner (the default) hands the workers the job's options; FnApiRunner named alone gives them none.
    pytest.param(["--runner", "DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"],
                 id="multi_processing"),
    # Beam's gRPC servers bind every interface: the job runs in a private network namespace (tests/test_portable.py).
    pytest.param(["--runner", "PortableRunner", "--job_endpoint", "embed", "--environment_type",
                  "beam:env:harness_subprocess_python:v1", "--environment_config",
                  f"{sys.executable} -m apache_beam.runners.worker.sdk_worker_main"], id="portable, embedded",
                 marks=pytest.mark.engine),
]


@pytest.mark.parametrize("runner", WORKER_PROCESSES)
def test_a_crash_in_a_worker_process_is_said_in_one_line_and_leaves_no_lock(small_shards, tmp_path, runner):
    prefix = []
    if "PortableRunner" in runner:
        if not private_network_available():
            pytest.skip("needs a private network namespace (unshare --net, as root)")
        prefix = PRIVATE_NETWORK
    (tmp_path / "crash").mkdir()
    (tmp_path / "crash" / "sitecustomize.py").write_text(WORKER_SEGFAULT)
    output = tmp_path / "out"
    path = os.pathsep.join([str(tmp_path / "crash"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    argv = ["score", "--input", str(small_shards / "*.parquet"), "--output", str(output), *runner]
    done = subprocess.run([*prefix, sys.executable, "-m", "pipeline", *argv], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=path), timeout=300)
    # Was: exit 1 and 93 lines ending "Channel closed prematurely", or a run waiting forever on the dead worker.
    # The workers' own lines (the shell's "Segmentation fault", a sibling's lost channel) are not litmus-score's.
    assert done.returncode == Exit.DIED, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("litmus-score:")]
    assert said == [f"litmus-score: the run died (killed by SIGSEGV): {output} was not published"]
    assert left_for_a_later_run(output) is None
    assert main(score_argv(small_shards, output, "--replace")) == Exit.OK
