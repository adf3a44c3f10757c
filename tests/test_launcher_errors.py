"""What stops the launcher is one line a person can read, with a documented
exit code; the lock is released and nothing is published. Signals, a
read-only or full disk, a folder that cannot exist, a runner that does not,
a policy file that is a FIFO, a hostile file name in a log line, and the
worker processes of a killed launcher."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from litmus_score.exits import Exit
from pipeline.cli import main
from tests import sandbox
from tests.conftest import RUNNER, load_json
from tests.test_publish import ROOT, one_line_error, shards

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

TIMEOUT_S = 300

# Runs the console entry point and stops inside the pipeline's final step,
# once the Parquet files are in place, after touching the file named by its
# first argument: a run a signal can reach mid-way.
PAUSE = """
import pathlib, sys, time
import transforms.write as write
commit, ready = write.commit_files, pathlib.Path(sys.argv[1])
def commit_then_wait(*args, **kwargs):
    commit(*args, **kwargs)
    ready.touch()
    time.sleep(600)
write.commit_files = commit_then_wait
sys.argv = ["litmus-score", *sys.argv[2:]]
from pipeline.cli import entry_point
entry_point()
"""


def score_argv(shards, output, *flags):
    return ["score", "--input", str(shards / "*.parquet"), "--output", str(output), *flags, *RUNNER]


def our_lines(stderr: str) -> list:
    """litmus-score's own lines on stderr (Beam's warnings, which say nothing of the failure, aside)."""
    assert "Traceback" not in stderr, stderr[-3000:]
    return [line for line in stderr.splitlines() if line.startswith("litmus-score:")]


def assert_accounted(output: Path, trajectories: int) -> None:
    metrics, manifest = load_json(output / "metrics.json"), load_json(output / "manifest.json")
    totals = metrics["totals"]["trajectories"]
    assert manifest["input_rows"] == totals["input"] == totals["scored"] + totals["unscored"] == trajectories
    assert pq.read_table(output / "trajectories").num_rows == totals["scored"]
    assert pq.read_table(output / "unscored").num_rows == totals["unscored"]


@pytest.mark.parametrize("mode", ["in_memory", "multi_threading"])
@pytest.mark.parametrize("stop, code, said", [
    (signal.SIGTERM, Exit.TERMINATED, "terminated (SIGTERM)"),
    (signal.SIGINT, Exit.INTERRUPTED, "interrupted (SIGINT)"),
])
def test_a_signal_is_one_line_its_exit_code_and_nothing_published(shards, tmp_path, mode, stop, code, said):
    out, ready = tmp_path / "out", tmp_path / "ready"
    argv = score_argv(shards, out, "--direct_num_workers=2", f"--direct_running_mode={mode}")
    run = subprocess.Popen([sys.executable, "-c", PAUSE, str(ready), *argv], cwd=ROOT, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        give_up = time.monotonic() + TIMEOUT_S  # a guard against a hang, not a speed check
        while not ready.exists():
            assert run.poll() is None, run.communicate()[1][-2000:]
            assert time.monotonic() < give_up, "the run never reached its final step"
            time.sleep(0.2)
        run.send_signal(stop)
        _, stderr = run.communicate(timeout=60)  # was: SIGTERM's -15 with a stale lock, SIGINT's traceback
    finally:
        run.kill()
    assert run.returncode == code
    assert our_lines(stderr) == [f"litmus-score: {said}: {out} was not published"]
    assert not (out / ".lock").exists() and not (out / "_SUCCESS").exists()
    # What it left is an attempt that did not finish: refused, then replaced whole.
    assert main(score_argv(shards, out)) == Exit.USAGE
    assert main(score_argv(shards, out, "--replace")) == Exit.OK
    assert_accounted(out, 3000)


@pytest.fixture
def private_mounts():
    sandbox.require_private_mounts()


def test_a_read_only_output_folder_is_refused_in_one_line(shards, tmp_path, private_mounts):
    disk = tmp_path / "disk"
    done, files = sandbox.litmus_on_tmpfs(disk, "ro", *score_argv(shards, disk / "out"))
    assert done.returncode == Exit.USAGE, done.stderr[-2000:]
    assert our_lines(done.stderr) == [f"litmus-score: cannot write output folder '{disk / 'out'}': "
                                      "Read-only file system"]
    assert files == []


@pytest.mark.parametrize("command", ["score", "nightly"])
def test_a_full_disk_at_the_start_leaves_no_lock(shards, tmp_path, private_mounts, command):
    disk = tmp_path / "disk"
    if command == "score":
        argv, out = score_argv(shards, disk / "out"), disk / "out"
    else:
        argv = ["nightly", "--date", "2026-12-01", "--input", str(shards / "*.parquet"), "--output_root", str(disk),
                *RUNNER]
        out = disk / "date=2026-12-01"
    done, files = sandbox.litmus_on_tmpfs(disk, "size=64k", *argv, fill=True)
    assert done.returncode == Exit.USAGE, done.stderr[-2000:]
    assert our_lines(done.stderr) == [f"litmus-score: cannot write output folder '{out}': No space left on device"]
    assert ".lock" not in {Path(name).name for name in files}  # was: a 0-byte .lock that blocked every later run


@pytest.mark.parametrize("size, mode", [
    ("300k", "in_memory"),  # full while the bundles write their files
    ("300k", "multi_threading"),
    ("1m", "multi_threading"),  # full while the files are committed, or the run published
])
def test_a_disk_filling_mid_write_is_one_line_and_nothing_published(shards, tmp_path, private_mounts, size, mode):
    disk = tmp_path / "disk"
    workers = ["--direct_num_workers=2"] if mode == "multi_threading" else []
    argv = score_argv(shards, disk / "out", *workers, f"--direct_running_mode={mode}")
    done, files = sandbox.litmus_on_tmpfs(disk, f"size={size}", *argv)
    assert done.returncode == Exit.FAILED, done.stderr[-2000:]
    # The whole of stderr. Was: Beam's records of the failed bundle, the worker's traceback printed
    # besides them, and the half-written files' writers failing again when collected: up to 150 lines.
    (line,) = done.stderr.splitlines()
    out = re.escape(str(disk / "out"))
    assert re.fullmatch(f"litmus-score: cannot (write the run's files|publish {out}): No space left on device; "
                        f"{out} was not published", line), line
    names = {Path(name).name for name in files}
    assert ".lock" not in names and "_SUCCESS" not in names


@pytest.mark.parametrize("argv, message", [
    (["--output", "/proc/litmus/out"], "cannot write output folder '/proc/litmus/out': No such file or directory"),
    (["--runner=NoSuchRunner"], "Unexpected pipeline runner: NoSuchRunner."),
])
def test_an_output_or_runner_that_cannot_be_is_one_line(shards, tmp_path, capsys, argv, message):
    flags = ["--output", str(tmp_path / "out"), "--runner", "FnApiRunner"]
    flags = [*argv, *(flags[2:] if argv[0] == "--output" else flags[:2])]
    assert main(["score", "--input", str(shards / "*.parquet"), *flags]) == Exit.USAGE
    assert one_line_error(capsys).startswith(f"litmus-score: {message}")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [
    ["score", "--policy", "{fifo}"],
    ["score", "--thresholds", "{fifo}", "--baseline", "{run}"],
    ["policy", "check", "{fifo}"],
    ["audit", "--policy", "{fifo}"],
])
def test_a_config_file_that_is_a_fifo_is_refused_not_waited_on(shards, tmp_path, argv):
    fifo = tmp_path / "policy.yaml"
    os.mkfifo(fifo)
    run = tmp_path / "run"
    if "{run}" in argv:
        assert main(score_argv(shards, run)) == Exit.OK
    argv = [part.format(fifo=fifo, run=run) for part in argv]
    if argv[0] == "score":
        argv = [*score_argv(shards, tmp_path / "out"), *argv[1:]]
    elif argv[0] == "audit":
        argv = ["audit", str(shards / "*.parquet"), *argv[1:], *RUNNER]
    # Was: blocked forever in open(), waiting for a writer.
    done = subprocess.run([sys.executable, "-m", "pipeline", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == Exit.USAGE
    assert our_lines(done.stderr) == [f"litmus-score: {fifo}: not a regular file (a FIFO)"]
    assert not (tmp_path / "out").exists()


def test_a_hostile_file_name_reaches_stderr_escaped_through_every_log_line(tmp_path):
    folder = tmp_path / "in"
    assert main(["generate", "--output", str(folder), "--trajectories", "20", "--shards", "1"]) == 0
    hostile = folder / "evil\x1b]0;pwned\x07\x1b[2J.parquet"
    hostile.write_bytes(b"PAR1 not parquet PAR1")
    done = subprocess.run([sys.executable, "-m", "pipeline", *score_argv(folder, tmp_path / "out")], cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == Exit.INCOMPLETE_INPUT, done.stderr[-2000:]
    # The read stage's warning names the file: was `WARNING:root:unreadable shard ...` with the raw escapes.
    warning = next(line for line in done.stderr.splitlines() if "unreadable shard" in line)
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J.parquet" in warning
    for stream in (done.stderr, done.stdout):
        assert "\x1b" not in stream and "\x07" not in stream
    assert load_json(tmp_path / "out" / "metrics.json")["totals"]["trajectories"]["input"] == 20


def descendants(pid: int) -> set:
    """Pids of every process below `pid` (Linux /proc)."""
    children = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, set()).add(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc")
def test_killing_the_launcher_in_multi_processing_mode_kills_its_workers(tmp_path):
    folder = tmp_path / "in"
    assert main(["generate", "--output", str(folder), "--trajectories", "40000", "--shards", "4"]) == 0
    # DirectRunner (the default) hands the workers the job's options; FnApiRunner named alone gives them none.
    argv = ["score", "--input", str(folder / "*.parquet"), "--output", str(tmp_path / "out"), "--runner",
            "DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    launcher = subprocess.Popen([sys.executable, "-m", "pipeline", *argv], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    workers = set()
    try:
        give_up = time.monotonic() + TIMEOUT_S
        while len(workers) < 2:
            assert launcher.poll() is None, "the run ended before its workers were seen"
            assert time.monotonic() < give_up, "no worker processes started"
            workers = {pid for pid in descendants(launcher.pid)
                       if b"sdk_worker_main" in (Path("/proc") / str(pid) / "cmdline").read_bytes()}
            time.sleep(0.1)
        launcher.kill()
        launcher.wait()
        give_up = time.monotonic() + 20  # was: alive for minutes, until their gRPC channels timed out
        while any(alive(pid) for pid in workers) and time.monotonic() < give_up:
            time.sleep(0.2)
        assert not [pid for pid in workers if alive(pid)]
    finally:
        launcher.kill()
        for pid in descendants(launcher.pid) | workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
