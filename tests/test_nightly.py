"""`litmus-score nightly`: a night scored under its root against the latest
earlier complete night, safe to re-run, never over another night."""

import hashlib
import shutil
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from litmus_score import synthetic
from pipeline.cli import main
from tests.conftest import RUNNER, load_json
from tests.test_publish import CRASH, ROOT, one_line_error

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

AGENT = synthetic.AGENTS[3]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The harness's folders: runs/DATE/*.parquet; 2026-12-01 has a planted rise."""
    root = tmp_path_factory.mktemp("runs")
    synthetic.generate(str(root / "2026-11-29"), 6000, 2, seed=20)
    synthetic.generate(str(root / "2026-11-30"), 6000, 2, seed=21)
    synthetic.generate(str(root / "2026-12-01"), 6000, 2, seed=22, misuse_factor={AGENT: 2.0})
    return root


def nightly(runs, root, date, *flags):
    return main(["nightly", "--date", date, "--input", str(runs / "{date}" / "*.parquet"),
                 "--output_root", str(root), *flags, *RUNNER])


def test_a_night_is_compared_with_the_latest_earlier_complete_night(runs, tmp_path, capsys):
    root = tmp_path / "scores"
    assert nightly(runs, root, "2026-11-30") == 0
    first = root / "date=2026-11-30"
    assert "baseline none" in capsys.readouterr().out
    assert not (first / "comparison.json").exists() and (first / "_SUCCESS").exists()
    manifest = load_json(first / "manifest.json")
    assert manifest["night"] == {"date": "2026-11-30", "inputs": [str(runs / "2026-11-30" / "*.parquet")]}
    assert manifest["input_rows"] == 6000

    assert nightly(runs, root, "2026-12-01") == 3
    assert f"baseline {first}" in capsys.readouterr().out
    night = root / "date=2026-12-01"
    comparison = load_json(night / "comparison.json")
    assert comparison["regressions"] == [AGENT]
    assert load_json(night / "manifest.json")["options"]["baseline"] == str(first)
    metrics = (night / "metrics.json").read_bytes()

    # The same night again replaces its own run: same answer, counted once.
    assert nightly(runs, root, "2026-12-01", "--direct_num_workers=1") == 3
    assert (night / "metrics.json").read_bytes() == metrics
    scored_calls = load_json(night / "metrics.json")["totals"]["calls"]["scored"]
    assert pq.read_table(night / "scored").num_rows == scored_calls
    listed = [e for e in load_json(night / "manifest.json")["outputs"] if e["path"].startswith("scored/")]
    assert sum(e["rows"] for e in listed) == scored_calls
    assert sorted(p.name for p in (night / "scored").iterdir()) == [e["path"][len("scored/"):] for e in listed]


def test_incomplete_nights_are_not_baselines_and_another_mode_is_judged_on_the_rescored_baseline(runs, tmp_path,
                                                                                                capsys):
    root = tmp_path / "scores"
    assert nightly(runs, root, "2026-11-29") == 0
    assert nightly(runs, root, "2026-11-30") == 0
    (root / "date=2026-11-30" / "_SUCCESS").unlink()  # as if killed before it finished
    capsys.readouterr()
    assert nightly(runs, root, "2026-12-01") == 3
    assert f"baseline {root / 'date=2026-11-29'}" in capsys.readouterr().out
    # Its own night again: the unfinished attempt is replaced; a later night is never a baseline.
    assert nightly(runs, root, "2026-11-30") == 0
    assert f"baseline {root / 'date=2026-11-29'}" in capsys.readouterr().out
    assert (root / "date=2026-11-30" / "_SUCCESS").exists()
    # Tonight in strict mode: last night is still the baseline, its inputs scored again in strict mode.
    code = nightly(runs, root, "2026-12-01", "--adjudication", "strict")
    assert f"baseline {root / 'date=2026-11-30'}" in capsys.readouterr().out
    comparison = load_json(root / "date=2026-12-01" / "comparison.json")
    assert comparison["withheld"] is False and comparison["rules_changed"] == [] and code == comparison["exit_code"]
    assert comparison["baseline"]["rescored"]["scored_under"]["adjudication"] == "commit"


# Runs `litmus-score ARGV[3:]` and holds inside the pipeline's final step,
# after touching ARGV[1], until ARGV[2] exists.
HOLD = """
import pathlib, sys, time
import transforms.write as write
commit, ready, go = write.commit_files, pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
def commit_then_hold(*args, **kwargs):
    committed = commit(*args, **kwargs)
    ready.touch()
    while not go.exists():
        time.sleep(0.1)
    return committed
write.commit_files = commit_then_hold
from pipeline.cli import main
sys.exit(main(sys.argv[3:]))
"""


def held(tmp_path, name, argv):
    """A run held in its final step: (the process, the file that releases it)."""
    ready, go = tmp_path / f"{name}.ready", tmp_path / f"{name}.go"
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(ready), str(go), *argv], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    give_up = time.monotonic() + 300  # a guard against a hang, not a speed check
    while not ready.exists():
        assert process.poll() is None, process.communicate()[1][-2000:]
        assert time.monotonic() < give_up, f"{name} never reached its final step"
        time.sleep(0.2)
    return process, go


def test_tonight_compares_with_the_baseline_it_read_when_it_started(runs, tmp_path):
    root = tmp_path / "scores"
    assert nightly(runs, root, "2026-11-30") == 0
    last = root / "date=2026-11-30"
    pinned = hashlib.sha256((last / "metrics.json").read_bytes()).hexdigest()
    argv = ["nightly", "--input", str(runs / "{date}" / "*.parquet"), "--output_root", str(root), *RUNNER]
    tonight, release_tonight = held(tmp_path, "tonight", [*argv, "--date", "2026-12-01"])
    # Last night re-run meanwhile, and held mid-way: its folder is cleared and not complete.
    rerun, release_rerun = held(tmp_path, "rerun", [*argv, "--date", "2026-11-30"])
    try:
        assert not (last / "_SUCCESS").exists() and not (last / "metrics.json").exists()
        release_tonight.touch()
        out, err = tonight.communicate(timeout=300)
        # Was: exit 2 after the scoring ("baseline: ... not a complete run"), nothing published.
        assert tonight.returncode == 3, err[-2000:]
        assert f"baseline {last}" in out
        night = root / "date=2026-12-01"
        comparison = load_json(night / "comparison.json")
        assert comparison["regressions"] == [AGENT]
        assert comparison["baseline"]["folder"] == str(last) and comparison["baseline"]["metrics_sha256"] == pinned
        metrics = load_json(night / "metrics.json")
        assert load_json(night / "manifest.json")["input_rows"] == metrics["totals"]["trajectories"]["input"] == 6000
        assert (night / "_SUCCESS").exists()
    finally:
        release_tonight.touch()
        release_rerun.touch()
        tonight.kill()
    assert rerun.wait(timeout=300) == 0
    assert hashlib.sha256((last / "metrics.json").read_bytes()).hexdigest() == pinned


def test_a_crashed_night_is_replaced_by_its_rerun(runs, tmp_path):
    root = tmp_path / "scores"
    assert nightly(runs, root, "2026-11-30") == 0
    argv = ["nightly", "--date", "2026-12-01", "--input", str(runs / "{date}" / "*.parquet"),
            "--output_root", str(root), "--batch_rows", "700", "--direct_num_workers=2",
            "--direct_running_mode=multi_threading", *RUNNER]
    done = subprocess.run([sys.executable, "-c", CRASH, *argv], cwd=ROOT, capture_output=True, timeout=300)
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    night = root / "date=2026-12-01"
    assert (night / ".lock").exists() and not (night / "metrics.json").exists()
    crashed_rows = pq.read_table(night / "scored").num_rows

    assert nightly(runs, root, "2026-12-01", "--direct_num_workers=1") == 3
    metrics = load_json(night / "metrics.json")
    assert pq.read_table(night / "scored").num_rows == metrics["totals"]["calls"]["scored"] == crashed_rows
    assert metrics["totals"]["trajectories"]["input"] == 6000
    assert len(list((night / "scored").iterdir())) == 1


def test_another_nights_results_are_never_written_over(runs, tmp_path, capsys):
    root = tmp_path / "scores"
    assert nightly(runs, root, "2026-11-30") == 0
    shutil.copytree(root / "date=2026-11-30", root / "date=2026-12-01")
    before = (root / "date=2026-12-01" / "metrics.json").read_bytes()
    capsys.readouterr()
    for flags in ((), ("--replace",)):
        assert nightly(runs, root, "2026-12-01", *flags) == 2
        assert one_line_error(capsys).endswith(
            "holds the results of another night ('2026-11-30'), not 2026-12-01; refusing to write over them")
    assert (root / "date=2026-12-01" / "metrics.json").read_bytes() == before
    # The same night from other inputs: only with --replace.
    other = ["--input", str(runs / "2026-11-29" / "*.parquet")]
    assert main(["nightly", "--date", "2026-11-30", *other, "--output_root", str(root), *RUNNER]) == 2
    assert "scored from other inputs" in one_line_error(capsys)
    assert main(["nightly", "--date", "2026-11-30", *other, "--output_root", str(root), "--replace", *RUNNER]) == 0


@pytest.mark.parametrize("argv, message", [
    (["--date", "2026-13-01"], "--date must be a date written YYYY-MM-DD, got '2026-13-01'"),
    (["--date", "20261201"], "--date must be a date written YYYY-MM-DD, got '20261201'"),
    (["--date", "2026-2-1"], "--date must be a date written YYYY-MM-DD, got '2026-2-1'"),
    (["--date", "2026-12-01", "--adjudicaton", "strict"],
     "unknown option --adjudicaton (did you mean --adjudication?)"),
    (["--date", "2026-12-01", "--output_rot", "x"], "unknown option --output_rot (did you mean --output_root?)"),
    (["--date", "2026-12-01", "--output", "x"], "nightly chooses --output itself (under --output_root); drop it"),
    (["--date", "2026-12-01", "--baseline=x"], "nightly chooses --baseline itself (under --output_root); drop it"),
    (["--date", "2026-12-01", "--adjudication", "lax"], None),
])
def test_bad_invocations_are_one_line(runs, tmp_path, capsys, argv, message):
    argv = [*argv, "--input", str(runs / "{date}" / "*.parquet")]
    if "--output_rot" not in argv:
        argv += ["--output_root", str(tmp_path / "scores")]
    assert main(["nightly", *argv, *RUNNER]) == 2
    line = one_line_error(capsys)
    assert line == f"litmus-score: {message}" if message else "lax" in line
    assert not (tmp_path / "scores").exists()
