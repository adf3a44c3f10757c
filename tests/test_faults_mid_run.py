"""Faults the launcher's tests do not reach: a disk that fills during an
import or a one-job run, two nightly runs racing on one night with one
killed, a log that changes while it is read, a truncated .eval and one
whose samples share an id. Each time nothing is published half, and every
row that was read is accounted for."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from litmus_score.exits import Exit
from pipeline.cli import main
from tests import sandbox
from tests.conftest import RUNNER, load_json
from tests.importers_support import require
from tests.test_launcher_errors import assert_accounted, our_lines
from tests.test_publish import ROOT
from tests.test_signals import HELD, HELD_AT

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

TIMEOUT_S = 300


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    assert main(["generate", "--output", str(folder), "--trajectories", "300", "--shards", "3", "--seed", "11"]) == 0
    return folder


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    require("pydantic_ai")
    require("opentelemetry.proto")
    from tests import otel_logs

    return otel_logs.write_trace_file(tmp_path_factory.mktemp("otel") / "traces.jsonl")


@pytest.fixture
def private_mounts():
    sandbox.require_private_mounts()


# (command, tmpfs size): a disk full while the workers write, and one full while their files are committed
# or the run published (what fills when depends on the size: each file takes a 4 KiB page at least).
@pytest.mark.parametrize("command, size", [("import", "8k"), ("import", "16k"), ("score", "8k"), ("score", "16k"),
                                           ("score", "32k")])
def test_a_disk_filling_during_an_import_or_a_one_job_run_is_one_line_and_nothing_published(
        trace_file, tmp_path, private_mounts, command, size):
    disk = tmp_path / "disk"
    out = disk / "out"
    argv = (["import", "otel", str(trace_file), "--output", str(out)] if command == "import" else
            ["score", "--input_format", "otel", "--input", str(trace_file), "--output", str(out),
             "--accept_no_verdict"])
    done, files = sandbox.litmus_on_tmpfs(disk, f"size={size}", *argv, *RUNNER)
    assert done.returncode == Exit.FAILED, done.stderr[-2000:]
    unpublished = "imported" if command == "import" else "published"
    escaped = re.escape(str(out))
    [line] = our_lines(done.stderr)
    assert re.fullmatch(f"litmus-score: cannot (write the run's files|publish {escaped}): No space left on device; "
                        f"{escaped} was not {unpublished}", line), line
    names = {Path(name).name for name in files}
    # No lock for the next run to refuse, and nothing that says the run or the import is there.
    assert not names & {".lock", "_SUCCESS", "manifest.json", "import-manifest.json"}, files


def nightly_argv(shards: Path, root: Path) -> list:
    return ["nightly", "--date", "2026-12-01", "--input", str(shards / "*.parquet"), "--output_root", str(root),
            *RUNNER]


def test_two_nightly_runs_racing_on_one_night_with_one_killed(shards, tmp_path, request):
    root, held = tmp_path / "root", tmp_path / "held"
    night = root / "date=2026-12-01"
    first = subprocess.Popen([sys.executable, "-c", HELD, str(held), HELD_AT["after the commit"],
                              *nightly_argv(shards, root)], cwd=ROOT, text=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, start_new_session=True)
    request.addfinalizer(first.kill)
    give_up = time.monotonic() + TIMEOUT_S
    while not held.exists():
        assert first.poll() is None and time.monotonic() < give_up, "the first night never wrote its files"
        time.sleep(0.05)
    # The second, while the first writes: refused, the first's files untouched.
    second = subprocess.run([sys.executable, "-m", "pipeline", *nightly_argv(shards, root)], cwd=ROOT,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    assert second.returncode == Exit.USAGE, second.stderr[-2000:]
    [line] = our_lines(second.stderr)
    assert "is in use by another run" in line
    assert (night / ".lock").exists() and list((night / "scored").glob("*.parquet"))
    # The first killed as the OOM killer or a scheduler's hard stop does: its lock stays, naming a dead process.
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert (night / ".lock").exists() and not (night / "_SUCCESS").exists()
    # The next night's run breaks the stale lock of its own night, replaces the attempt, counts every row once.
    third = subprocess.run([sys.executable, "-m", "pipeline", *nightly_argv(shards, root)], cwd=ROOT,
                           capture_output=True, text=True, timeout=TIMEOUT_S)
    assert third.returncode == Exit.OK, third.stderr[-2000:]
    assert not (night / ".lock").exists()
    assert_accounted(night, 300)


@pytest.fixture(scope="module")
def inspect_log(tmp_path_factory):
    """An .eval log of six samples written by Inspect, and the policy that gives its calls verdicts."""
    require("inspect_ai")
    from tests import inspect_logs

    folder = tmp_path_factory.mktemp("inspect")
    (folder / "policy.yaml").write_text(inspect_logs.POLICY)
    return {"log": inspect_logs.many_samples_log(folder / "logs", 6), "policy": folder / "policy.yaml"}


def one_job(log: Path, output: Path, *flags) -> int:
    """`score --input_format` on `log`; its calls without a verdict unless `flags` give a policy."""
    verdicts = flags or ("--accept_no_verdict",)
    return main(["score", "--input_format", "inspect" if log.suffix == ".eval" else "otel", "--input", str(log),
                 "--output", str(output), *verdicts, *RUNNER])


def assert_imported_and_scored_alike(output: Path) -> dict:
    """The one-job run's manifest, after checking that what the import read is what was scored:
    every trajectory imported is an input row, scored or unscored, and every unit read became a
    trajectory or a unit not imported, beside those of the files that failed never read."""
    metrics, manifest = load_json(output / "metrics.json"), load_json(output / "manifest.json")
    totals, imported = metrics["totals"]["trajectories"], manifest["import"]["totals"]
    assert totals["input"] == totals["scored"] + totals["unscored"] + totals["duplicates_dropped"]
    assert imported["trajectories"] == totals["input"] == manifest["input_rows"]
    assert imported["units"] + imported["units_unread"] == imported["trajectories"] + imported["not_imported"]["units"]
    assert (output / "_SUCCESS").exists() and not (output / ".lock").exists()
    return manifest


def copy_of(log: Path, folder: Path) -> Path:
    folder.mkdir()
    (folder / log.name).write_bytes(log.read_bytes())
    return folder / log.name


@pytest.mark.parametrize("change", ["grows", "is replaced"])
def test_a_log_that_changes_while_it_is_read_is_input_not_read_whole(trace_file, inspect_log, tmp_path, monkeypatch,
                                                                      change):
    from transforms import imports

    # A collector still appending spans; an .eval log Inspect rewrites whole (a retried sample) under the run.
    log = copy_of(trace_file if change == "grows" else inspect_log["log"], tmp_path / "logs")
    original, real = log.read_bytes(), imports.ImportLogFn._items

    def changing(self, path, byte_range):
        if change == "grows":
            with open(path, "ab") as handle:
                handle.write(original)
        else:
            aside = log.with_suffix(".new")
            aside.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))  # same size, another file
            os.replace(aside, log)
        return real(self, path, byte_range)

    monkeypatch.setattr(imports.ImportLogFn, "_items", changing)
    # Was: exit 0, the manifest naming the log as it was matched, its rows what was there when read.
    assert one_job(log, tmp_path / "out") == Exit.INCOMPLETE_INPUT
    manifest = assert_imported_and_scored_alike(tmp_path / "out")
    [report] = manifest["import"]["files"]
    assert report["error"].startswith("LogChanged: the log changed after the run matched it (")


def test_a_truncated_eval_is_scored_as_far_as_it_goes_and_the_rest_accounted(inspect_log, tmp_path):
    log = inspect_log["log"]
    with zipfile.ZipFile(log) as archive:
        third = sorted((info for info in archive.infolist() if info.filename.startswith("samples/")),
                       key=lambda info: info.header_offset)[2]
    cut = tmp_path / "logs" / "cut.eval"
    cut.parent.mkdir()
    cut.write_bytes(log.read_bytes()[:third.header_offset + 40])  # inside the third sample's member
    assert one_job(cut, tmp_path / "out", "--policy", str(inspect_log["policy"])) == Exit.INCOMPLETE_INPUT
    manifest = assert_imported_and_scored_alike(tmp_path / "out")
    [report] = manifest["import"]["files"]
    assert (report["units_declared"], report["units"], report["trajectories"]) == (6, 6, 2)


@pytest.mark.parametrize("how", ["two samples, one id", "one member written twice"])
def test_an_eval_whose_samples_share_an_id_counts_each_record_once(inspect_log, tmp_path, how):
    from tests import inspect_logs

    logs = tmp_path / "logs"
    logs.mkdir()
    if how == "two samples, one id":
        # s1's record says it is s0: two trajectories of one id, whose calls differ in nothing but their ids.
        log = inspect_logs.damage_sample(inspect_log["log"], "s1", lambda record: record.update(id="s0"),
                                         logs / "shared.eval")
    else:
        # A writer that appended s0's record again instead of replacing it: the last copy is the sample.
        log = logs / "twice.eval"
        with zipfile.ZipFile(inspect_log["log"]) as source, zipfile.ZipFile(log, "w") as copy:
            for info in source.infolist():
                copy.writestr(info, source.read(info))
            with pytest.warns(UserWarning, match="Duplicate name"):
                copy.writestr(source.getinfo("samples/s0_epoch_1.json"), source.read("samples/s0_epoch_1.json"))
    assert one_job(log, tmp_path / "out", "--policy", str(inspect_log["policy"])) == Exit.OK
    manifest = assert_imported_and_scored_alike(tmp_path / "out")
    [report] = manifest["import"]["files"]
    assert (report["units_declared"], report["units"], report["trajectories"]) == (6, 6, 6)
    # The ids the sample records carry (a member written twice: its last copy, as Inspect reads it).
    with zipfile.ZipFile(log) as archive:
        members = {info.filename: info for info in archive.infolist() if info.filename.startswith("samples/")}
        carried = Counter(json.loads(archive.read(info))["id"] for info in members.values())
    shared = {sample for sample, copies in carried.items() if copies > 1}
    # Two differing trajectories of one id are both set aside, as two such rows of a shard are; the others scored.
    unscored = pq.read_table(tmp_path / "out" / "unscored").to_pylist()
    assert sorted(row["trajectory_id"].split("/")[1] for row in unscored) == sorted(
        sample for sample in shared for _ in range(carried[sample]))
    assert all(row["reasons"] == ["duplicate_trajectory"] for row in unscored)
    scored = pq.read_table(tmp_path / "out" / "trajectories").column("trajectory_id").to_pylist()
    assert sorted(trajectory.split("/")[1] for trajectory in scored) == sorted(set(carried) - shared)
