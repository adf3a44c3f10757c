"""`import` and `score --input_format` killed mid-way: the re-run is refused
naming --replace, and with it replaces the attempt whole, every row once."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import RUNNER
from tests.importers_support import check_accounting, load_json, require, run_import
from tests.test_publish import ROOT, one_line_error

require("pydantic_ai")
require("opentelemetry.proto")
from pipeline.cli import main  # noqa: E402
from tests import otel_logs  # noqa: E402  (needs the OTel SDK and pydantic-ai)
from tests.test_import_otel import POLICY  # noqa: E402

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

# Runs `litmus-score ARGV[3:]` and kills its own process with SIGKILL inside
# the ARGV[2]-th finishing step of its jobs (`score --input_format` runs one), once
# the Parquet files are in place and before the manifest is written. The
# steps are counted in the file ARGV[1] (the hook is pickled by value into
# each pipeline: a counter in memory would start again).
CRASH = """
import os, pathlib, signal, sys
import transforms.write as write
commit, counter, at = write.commit_files, pathlib.Path(sys.argv[1]), int(sys.argv[2])
def commit_then_die(*args, **kwargs):
    committed = commit(*args, **kwargs)
    with counter.open("a") as steps:
        steps.write("x")
    if counter.stat().st_size == at:
        os.kill(os.getpid(), signal.SIGKILL)
    return committed
write.commit_files = commit_then_die
from pipeline.cli import main
sys.exit(main(sys.argv[3:]))
"""


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    return otel_logs.write_trace_file(tmp_path_factory.mktemp("otel") / "traces.jsonl")


def crash(argv, counter, at: int = 1) -> None:
    done = subprocess.run([sys.executable, "-c", CRASH, str(counter), str(at), *argv], cwd=ROOT, capture_output=True,
                          timeout=300)
    assert done.returncode == -9, done.stderr.decode()[-2000:]


def test_an_import_killed_mid_way_is_refused_then_replaced(trace_file, tmp_path, capsys):
    out = tmp_path / "shards"
    crash(["import", "otel", str(trace_file), "--output", str(out), *RUNNER], tmp_path / "steps")
    assert (out / ".lock").exists() and (out / "trajectories").is_dir()
    assert not (out / "import-manifest.json").exists()
    capsys.readouterr()
    assert run_import("otel", [trace_file], out) == 2
    assert "no longer running); pass --replace" in one_line_error(capsys)
    # Was: "output folder ... is not empty; choose a new one", --replace or not.
    assert run_import("otel", [trace_file], out, "--replace") == 0
    manifest = check_accounting(out)
    assert manifest["totals"]["files"] == 1 and manifest["failed_files"] == []
    assert not (out / ".lock").exists()
    capsys.readouterr()
    assert run_import("otel", [trace_file], out) == 2
    assert "holds an earlier complete import; pass --replace" in one_line_error(capsys)


def test_the_shards_of_an_import_killed_mid_way_are_no_input(trace_file, tmp_path, capsys):
    out = tmp_path / "shards"
    crash(["import", "otel", str(trace_file), "--output", str(out), *RUNNER], tmp_path / "steps")
    assert list((out / "trajectories").glob("*.parquet")) and not (out / "import-manifest.json").exists()
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    scored = tmp_path / "scored"
    argv = ["score", "--input", str(out / "trajectories" / "*.parquet"), "--output", str(scored),
            "--policy", str(policy), *RUNNER]
    assert main(argv) == 4  # was 0: the unfinished import's rows were scored as if complete
    manifest = load_json(scored / "manifest.json")
    reasons = [report["error"] for report in manifest["inputs"] if report["error"]]
    assert manifest["unreadable_files"] and len(reasons) == len(manifest["inputs"])
    assert all("an import that did not finish" in reason for reason in reasons)
    # Finished, the same import's shards are input.
    assert run_import("otel", [trace_file], out, "--replace") == 0
    assert main([*argv, "--replace"]) == 0


def test_import_and_score_killed_mid_way_is_refused_then_replaced(trace_file, tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    out = tmp_path / "out"
    argv = ["score", "--input_format", "otel", "--input", str(trace_file), "--output", str(out),
            "--policy", str(policy), *RUNNER]
    crash(argv, tmp_path / "steps")
    assert (out / ".lock").exists() and not (out / "_SUCCESS").exists()
    capsys.readouterr()
    assert main(argv) == 2
    assert "pass --replace" in one_line_error(capsys)
    assert main([*argv, "--replace"]) == 0
    metrics, manifest = load_json(out / "metrics.json"), load_json(out / "manifest.json")
    imported = manifest["import"]
    trajectories = metrics["totals"]["trajectories"]
    assert manifest["input_rows"] == trajectories["input"] == imported["totals"]["trajectories"] == 1
    assert trajectories["scored"] + trajectories["unscored"] == 1
    assert (out / "_SUCCESS").exists() and not (out / ".lock").exists()
