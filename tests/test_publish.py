"""Publishing a run: a crashed attempt is never read or added to, a re-run
replaces it whole or is refused, one run writes a folder at a time, readers
take only complete runs, and mistyped flags are refused."""

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from litmus_score.scoring.layout import LOCK_FILE, PARTIAL_PREFIX
from pipeline import processes, publish
from pipeline.cli import main
from pipeline.flags import check_flags
from pipeline.options import UsageError
from pipeline.publish import listed_files
from tests.conftest import RUNNER, load_json

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
TWO_THREADS = ["--direct_num_workers=2", "--direct_running_mode=multi_threading"]
ONE_THREAD = ["--direct_num_workers=1"]

# Runs `litmus-score score` and kills its own process with SIGKILL inside
# the pipeline's final step, once the Parquet files are in place and before
# metrics.json and the manifest are written: the probe's crash.
CRASH = """
import os, signal, sys
import transforms.write as write
commit = write.commit_files
def commit_then_die(*args, **kwargs):
    commit(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
write.commit_files = commit_then_die
from pipeline.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    assert main(["generate", "--output", str(folder), "--trajectories", "3000", "--shards", "3", "--seed", "5"]) == 0
    return folder


def score(shards, output, *flags):
    return main(["score", "--input", str(shards / "*.parquet"), "--output", str(output), *flags, *RUNNER])


def one_line_error(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def crash(shards, output, *flags):
    argv = ["score", "--input", str(shards / "*.parquet"), "--output", str(output), *flags, *RUNNER]
    done = subprocess.run([sys.executable, "-c", CRASH, *argv], cwd=ROOT, capture_output=True, timeout=300)
    assert done.returncode == -9, done.stderr.decode()[-2000:]


def test_rerun_after_a_crash_is_refused_and_replace_counts_every_row_once(shards, tmp_path, capsys):
    clean = tmp_path / "clean"
    assert score(shards, clean, *ONE_THREAD) == 0
    clean_metrics = load_json(clean / "metrics.json")
    scored_calls = clean_metrics["totals"]["calls"]["scored"]

    out = tmp_path / "night"
    crash(shards, out, "--batch_rows", "500", *TWO_THREADS)
    # What the probe found: complete-looking scored/ and unscored/, nothing else.
    assert pq.read_table(out / "scored").num_rows == scored_calls
    assert len(list((out / "scored").glob("*.parquet"))) == 2
    assert not (out / "metrics.json").exists() and not (out / "_SUCCESS").exists()
    assert (out / ".lock").exists()  # the dead run's
    left = tree(out)
    capsys.readouterr()

    # Refused, whatever is in the way: the crashed run's lock ...
    assert score(shards, out, *ONE_THREAD) == 2
    assert "did not finish" in one_line_error(capsys) and tree(out) == left
    # ... or its files alone.
    (out / ".lock").unlink()
    assert score(shards, out, *ONE_THREAD) == 2
    error = one_line_error(capsys)
    assert "is not empty: it holds an earlier run that did not finish" in error and "--replace" in error
    # Readers refuse it.
    assert main(["compare", str(out), str(clean), "--output", str(tmp_path / "cmp")]) == 2
    assert "not a complete litmus-score run" in one_line_error(capsys)

    crash(shards, out, "--replace", "--batch_rows", "500", *TWO_THREADS)  # crash again: a stale lock too
    assert score(shards, out, "--replace", *ONE_THREAD) == 0
    metrics, manifest = load_json(out / "metrics.json"), load_json(out / "manifest.json")
    assert metrics == clean_metrics
    scored_files = sorted(p.relative_to(out).as_posix() for p in (out / "scored").glob("*.parquet"))
    listed = listed_files(str(out), manifest, "scored")
    assert [str(Path(path).relative_to(out)) for path in listed] == scored_files == [
        "scored/part-00000-of-00001.parquet"]
    # Through the manifest's list and through the folder: every call once.
    assert pq.read_table(out / "scored").num_rows == scored_calls
    assert sum(pq.read_table(path).num_rows for path in listed) == scored_calls
    assert sum(e["rows"] for e in manifest["outputs"] if e["path"].startswith("scored/")) == scored_calls
    unscored = pq.read_table(out / "unscored").num_rows
    assert unscored == metrics["totals"]["trajectories"]["unscored"] > 0
    # Every file is listed with its true checksum; nothing else is there.
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert on_disk == {e["path"] for e in manifest["outputs"]} | {"manifest.json", "_SUCCESS"}
    for entry in manifest["outputs"]:
        data = (out / entry["path"]).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["bytes"] == len(data)


def test_readers_refuse_a_run_without_success_or_with_a_torn_metrics_file(shards, tmp_path, capsys):
    old, new = tmp_path / "old", tmp_path / "new"
    assert score(shards, old) == 0 and score(shards, new) == 0
    compare = ["compare", str(new), str(old), "--output", str(tmp_path / "cmp"), "--replace"]
    assert main(compare) == 0
    capsys.readouterr()
    # A launcher killed before _SUCCESS: every file there, still not a run.
    (old / "_SUCCESS").unlink()
    assert main(compare) == 2
    assert "no _SUCCESS" in one_line_error(capsys)
    assert score(shards, tmp_path / "o", "--baseline", str(old)) == 2
    assert "baseline" in one_line_error(capsys) and not (tmp_path / "o").exists()
    # The 0-byte metrics.json the probe saw cannot pass for a run.
    (old / "_SUCCESS").write_text("")
    (old / "metrics.json").write_bytes(b"")
    assert main(compare) == 2
    assert "metrics.json does not match its manifest" in one_line_error(capsys)
    (old / "manifest.json").write_text("{")
    assert main(compare) == 2
    assert "no valid manifest.json" in one_line_error(capsys)


def test_compare_writes_its_own_folder_and_never_modifies_a_published_run(shards, tmp_path, capsys):
    old, new = tmp_path / "old", tmp_path / "new"
    assert score(shards, old) == 0 and score(shards, new) == 0
    published = {run: tree(run) for run in (old, new)}
    out = tmp_path / "cmp"
    assert main(["compare", str(new), str(old), "--output", str(out)]) == 0
    assert {run: tree(run) for run in (old, new)} == published  # was: new's comparison.json, report, manifest
    manifest = load_json(out / "manifest.json")
    assert manifest["new"]["folder"] == str(new) and manifest["baseline"]["folder"] == str(old)
    for run, role in ((new, "new"), (old, "baseline")):
        metrics_entry = next(e for e in load_json(run / "manifest.json")["outputs"] if e["path"] == "metrics.json")
        assert manifest[role]["metrics_sha256"] == metrics_entry["sha256"]
    entries = {e["path"]: e for e in manifest["outputs"]}
    assert set(entries) == {"comparison.json", "report.html"}
    for name, entry in entries.items():
        assert entry["sha256"] == hashlib.sha256((out / name).read_bytes()).hexdigest()
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "comparison.json", "manifest.json", "report.html"]
    assert load_json(out / "comparison.json")["baseline"]["folder"] == str(old)
    # Its folder is not a run: no reader takes it for one.
    assert main(["compare", str(out), str(old), "--output", str(tmp_path / "cmp2")]) == 2
    assert "no valid manifest.json" in one_line_error(capsys)


def test_compare_after_a_crash_accepts_the_replace_it_asks_for(shards, tmp_path, capsys):
    old, new = tmp_path / "old", tmp_path / "new"
    assert score(shards, old) == 0 and score(shards, new) == 0
    out = tmp_path / "cmp"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    write_lock(out, int(dead.stdout))  # a compare that crashed
    (out / "comparison.json").write_text("{")
    argv = ["compare", str(new), str(old), "--output", str(out)]
    capsys.readouterr()
    assert main(argv) == 2
    assert "pass --replace" in one_line_error(capsys)
    assert main([*argv, "--replace"]) == 0
    assert (out / "_SUCCESS").exists() and not (out / ".lock").exists()
    assert load_json(out / "comparison.json")["exit_code"] == 0
    # Without --replace, a finished comparison is kept.
    assert main(argv) == 2
    assert "holds an earlier complete comparison; pass --replace" in one_line_error(capsys)


@pytest.mark.parametrize("output, relation", [(".", "is"), ("sub", "is inside"), ("..", "holds")])
def test_an_output_that_is_the_baseline_is_refused_before_anything_is_touched(shards, tmp_path, capsys, output,
                                                                               relation):
    baseline = tmp_path / "runs" / "baseline"
    assert score(shards, baseline) == 0
    before = tree(tmp_path / "runs")
    capsys.readouterr()
    target = baseline / output
    assert score(shards, target, "--baseline", str(baseline), "--replace") == 2
    assert f"{relation} the baseline" in one_line_error(capsys)
    assert tree(tmp_path / "runs") == before  # was: the baseline deleted, then a failure at the end
    assert main(["compare", str(baseline), str(baseline), "--output", str(target), "--replace"]) == 2
    assert f"{relation} the new run" in one_line_error(capsys)
    assert tree(tmp_path / "runs") == before


def test_a_complete_run_is_replaced_only_when_asked(shards, tmp_path, capsys):
    out = tmp_path / "out"
    assert score(shards, out) == 0
    before = tree(out)
    capsys.readouterr()
    assert score(shards, out) == 2
    assert "is not empty: it holds an earlier complete run" in one_line_error(capsys)
    assert tree(out) == before
    assert score(shards, out, "--replace") == 0
    assert (out / "metrics.json").read_bytes() == before["metrics.json"]


def test_a_folder_of_other_files_is_never_replaced(shards, tmp_path, capsys):
    out = tmp_path / "mine"
    (out / "scored").mkdir(parents=True)
    (out / "thesis.tex").write_text("years of work")
    for flags in ((), ("--replace",)):
        assert score(shards, out, *flags) == 2
        assert "holds files litmus-score did not write ('thesis.tex')" in one_line_error(capsys)
    assert (out / "thesis.tex").read_text() == "years of work" and not (out / ".lock").exists()


def test_output_root_of_the_disk_is_refused_at_once(shards, capsys):
    # It used to hang: the emptiness check listed the whole disk, recursively.
    for flags in ((), ("--replace",)):
        assert score(shards, Path("/"), *flags) == 2
        assert "'/' holds files litmus-score did not write" in one_line_error(capsys)
    assert not Path("/.lock").exists() and not Path("/scored").exists()


# Runs `litmus-score score` and stops inside its final step, holding the
# lock, after touching the file named by its first argument.
PAUSE = """
import pathlib, sys, time
import transforms.write as write
commit = write.commit_files
def commit_then_wait(*args, **kwargs):
    commit(*args, **kwargs)
    pathlib.Path(sys.argv[1]).touch()
    time.sleep(600)
write.commit_files = commit_then_wait
from pipeline.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_a_run_into_a_folder_being_written_is_refused(shards, tmp_path, capsys):
    out, ready = tmp_path / "out", tmp_path / "ready"
    argv = ["score", "--input", str(shards / "*.parquet"), "--output", str(out), *RUNNER]
    first = subprocess.Popen([sys.executable, "-c", PAUSE, str(ready), *argv], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        give_up = time.monotonic() + 300  # a guard against a hang, not a speed check
        while not ready.exists():
            assert first.poll() is None, "the first run ended before its final step"
            assert time.monotonic() < give_up, "the first run never reached its final step"
            time.sleep(0.2)
        being_written = tree(out)
        for flags in ((), ("--replace",)):
            assert score(shards, out, *flags) == 2
            assert f"is in use by another run (pid {first.pid} on" in one_line_error(capsys)
        assert tree(out) == being_written  # nothing interleaved
    finally:
        first.kill()
        first.wait()
    # Killed, its lock is stale: --replace takes the folder over.
    assert score(shards, out, "--replace") == 0
    assert (out / "_SUCCESS").exists() and not (out / ".lock").exists()


def write_lock(folder: Path, pid: int, host: str | None = None, **fields) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / ".lock"
    lock.write_text(json.dumps({"pid": pid, "host": host or socket.gethostname(), "started": "2026-12-01T02:00:00",
                                **fields}))
    return lock


def test_a_second_run_at_the_same_time_is_refused(shards, tmp_path, capsys):
    out = tmp_path / "busy"
    lock = write_lock(out, os.getpid())  # a live process holds it
    before = lock.read_bytes()
    for flags in ((), ("--replace",)):
        assert score(shards, out, *flags) == 2
        error = one_line_error(capsys)
        assert f"is in use by another run (pid {os.getpid()} on {socket.gethostname()}" in error
    assert [p.name for p in out.iterdir()] == [".lock"] and lock.read_bytes() == before
    assert main(["compare", str(out), str(out), "--output", str(tmp_path / "cmp")]) == 2  # no reader takes it for a run
    assert "not a complete litmus-score run" in one_line_error(capsys)
    # A lock from another host cannot be judged: never broken.
    write_lock(out, 1, host="elsewhere")
    assert score(shards, out, "--replace") == 2
    assert "in use by another run (pid 1 on elsewhere" in one_line_error(capsys)


def test_a_stale_lock_alone_is_broken_with_replace(shards, tmp_path, capsys):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    out = tmp_path / "stale"
    write_lock(out, int(dead.stdout))
    assert score(shards, out) == 2
    assert "no longer running); pass --replace" in one_line_error(capsys)
    assert score(shards, out, "--replace") == 0
    assert (out / "_SUCCESS").exists() and not (out / ".lock").exists()


def test_a_lock_of_a_run_that_died_unreaped_is_stale(shards, tmp_path, capsys):
    # A run killed with its launcher is reparented; where nothing reaps orphans (a container without an
    # init) its pid stays, a zombie. Was: "in use by another run" for as long as the zombie lasted.
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        give_up = time.monotonic() + 30
        while not processes.process_ended(ended.pid):
            assert time.monotonic() < give_up, "the child never ended"
            time.sleep(0.01)
        out = tmp_path / "stale"
        write_lock(out, ended.pid, boot_id=processes.boot_id(), process_start=processes.process_start(ended.pid))
        assert score(shards, out) == 2
        assert "no longer running); pass --replace" in one_line_error(capsys)
    finally:
        ended.wait()
    assert not processes.process_ended(os.getpid())


def assert_every_row_once(out: Path) -> None:
    metrics, manifest = load_json(out / "metrics.json"), load_json(out / "manifest.json")
    trajectories = metrics["totals"]["trajectories"]
    assert manifest["input_rows"] == trajectories["input"] == trajectories["scored"] + trajectories["unscored"] == 3000
    assert pq.read_table(out / "scored").num_rows == metrics["totals"]["calls"]["scored"]


@pytest.mark.parametrize("lock", [
    b"",  # a full disk at the start of a night: created, never written
    b'{"pid": 12',  # torn
    "the pid of a live process, since another start (the pid was reused)",
    "the pid of a live process, on an earlier boot of this host",
])
def test_a_lock_whose_owner_is_provably_gone_is_stale_whatever_its_size(shards, tmp_path, capsys, lock):
    out = tmp_path / "stale"
    if isinstance(lock, bytes):
        out.mkdir()
        (out / ".lock").write_bytes(lock)
    elif "reused" in lock:
        started = processes.process_start(os.getpid())
        write_lock(out, os.getpid(), boot_id=processes.boot_id(), process_start=started - 1)
    else:
        write_lock(out, os.getpid(), boot_id="an-earlier-boot", process_start=processes.process_start(os.getpid()))
    capsys.readouterr()
    assert score(shards, out) == 2
    assert "no longer running); pass --replace" in one_line_error(capsys)
    # Was: "in use by another run", --replace included, until the lock was removed by hand.
    assert score(shards, out, "--replace") == 0
    assert (out / "_SUCCESS").exists() and not (out / ".lock").exists()
    assert_every_row_once(out)


def test_nightly_breaks_a_stale_lock_of_its_own_night(shards, tmp_path):
    night = tmp_path / "scores" / "date=2026-12-01"
    night.mkdir(parents=True)
    (night / ".lock").write_bytes(b"")
    assert main(["nightly", "--date", "2026-12-01", "--input", str(shards / "*.parquet"), "--output_root",
                 str(tmp_path / "scores"), *RUNNER]) == 0
    assert (night / "_SUCCESS").exists() and not (night / ".lock").exists()
    assert_every_row_once(night)


def test_the_lock_names_its_owner_whole(shards, tmp_path):
    out = tmp_path / "out"
    lock = publish.claim(str(out))
    try:
        record = load_json(out / ".lock")
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
        assert record["boot_id"] == processes.boot_id()
        assert record["process_start"] == processes.process_start(os.getpid())
        assert [p.name for p in out.iterdir()] == [".lock"]  # the record was linked in whole: no partial file left
    finally:
        lock.release()
    assert not (out / ".lock").exists()


@pytest.mark.parametrize("night", [None, {"date": "2026-12-01", "inputs": ["/runs/2026-12-01/*.parquet"]}])
def test_a_partial_lock_left_by_a_killed_claim_is_that_attempt_s_not_foreign(tmp_path, night):
    """A run killed between writing its lock's record and linking it into place (or while it set a
    stale lock aside) leaves a partial lock: part of its attempt, cleared as the rest is, never
    taken for a user's file that would make the folder untouchable."""
    out = tmp_path / "out"
    out.mkdir()
    (out / f"{PARTIAL_PREFIX}{uuid.uuid4().hex}{LOCK_FILE}").write_bytes(b'{"pid": 12')
    if night is None:
        with pytest.raises(publish.PublishError, match="an earlier run that did not finish"):
            publish.claim(str(out))
    lock = publish.claim(str(out), replace=night is None, night=night)
    assert [p.name for p in out.iterdir()] == [LOCK_FILE]
    lock.release()


@pytest.mark.parametrize("flag, nearest", [
    ("--adjudicaton", "--adjudication"), ("--basline", "--baseline"), ("--polcy", "--policy"),
])
def test_a_mistyped_flag_is_refused_naming_the_nearest(shards, tmp_path, capsys, flag, nearest):
    assert score(shards, tmp_path / "o", flag, "strict") == 2
    assert one_line_error(capsys) == f"litmus-score: unknown option {flag} (did you mean {nearest}?)"
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, message", [
    (["--adjudication=strict", "--replce"], "unknown option --replce (did you mean --replace?)"),
    (["--direct_num_worker=2"], "unknown option --direct_num_worker (did you mean --direct_num_workers?)"),
    (["--temp_locaton", "gs://b/t"], "unknown option --temp_locaton (did you mean --temp_location?)"),
    (["--no_such_thing_at_all"], "unknown option --no_such_thing_at_all"),
    (["--batch_rows", "many"], "argument --batch_rows: invalid int value: 'many'"),
    (["strict"], "unexpected argument 'strict'"),
])
def test_flag_errors_are_one_line(argv, message):
    with pytest.raises(UsageError) as error:
        check_flags(argv)
    assert str(error.value) == message


def test_every_runner_option_stays_accepted():
    check_flags([
        "--runner", "DataflowRunner", "--project", "p", "--region", "r", "--temp_location=gs://b/t",
        "--staging_location", "gs://b/s", "--setup_file", "./pyproject.toml", "--save_main_session",
        "--experiments=a", "--experiments", "b", "--machine_type", "n1", "--max_num_workers=3",
        "--flink_master", "localhost:8081", "--spark_master_url", "local[2]", "--job_endpoint", "localhost:8099",
        "--environment_type=LOOPBACK", "--direct_num_workers=2", "--direct_running_mode", "multi_threading",
        "--input", "a", "--output", "b", "--adjudication", "strict", "--replace", "--batch_rows=7",
    ])
