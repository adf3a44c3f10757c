"""`score --input_format`: logs imported and scored in one Beam job, no file
between the two, and the same metrics as `import` then `score`."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import RUNNER
from tests.importers_support import load_json, read_rows, require, run_import

require("inspect_ai")
from pipeline import job  # noqa: E402
from pipeline.cli import main  # noqa: E402
from tests import inspect_logs  # noqa: E402  (needs inspect_ai)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("replayed")
    (folder / "policy.yaml").write_text(inspect_logs.REPLAY_POLICY)
    return {"log": inspect_logs.replayed_log(folder / "logs"), "policy": folder / "policy.yaml"}


@pytest.fixture
def jobs(monkeypatch):
    """The pipelines the command runs, counted."""
    ran = []
    execute = job.execute

    def counted(pipeline, *args, **kwargs):
        ran.append(pipeline)
        return execute(pipeline, *args, **kwargs)

    monkeypatch.setattr(job, "execute", counted)
    return ran


def two_steps(logs, out, flags):
    """`import` then `score` of its trajectories: the run's folder and the import's manifest."""
    assert run_import("inspect", logs, out / "shards", *flags[-2:]) == 0
    assert main(["score", "--input", str(out / "shards" / "trajectories" / "*.parquet"), "--output", str(out / "run"),
                 *flags[:-2], *RUNNER]) == 0
    return out / "run", load_json(out / "shards" / "import-manifest.json")


def test_one_job_scores_logs_as_import_then_score_does(replayed, tmp_path, jobs):
    flags = ["--policy", str(replayed["policy"]), "--harness_verdict", "breach"]
    one = tmp_path / "one"
    assert main(["score", "--input_format", "inspect", "--input", str(replayed["log"]), "--output", str(one),
                 *flags, *RUNNER]) == 0
    assert len(jobs) == 1
    run, imported = two_steps([replayed["log"]], tmp_path / "two", flags)
    assert (one / "metrics.json").read_bytes() == (run / "metrics.json").read_bytes()
    # No file between import and scoring: the run's folder holds no shards.
    assert not (one / "imported").exists()
    manifest = load_json(one / "manifest.json")
    # The log is the run's input, recorded as a shard is.
    [identity] = manifest["input_identities"]
    assert (identity["file"], identity["size"]) == (str(replayed["log"]), replayed["log"].stat().st_size)
    [report] = manifest["inputs"]
    assert (report["file"], report["rows_read"], report["error"]) == (str(replayed["log"]), 7, None)
    # The import's manifest is part of the run's; its unmapped entries are the run's unmapped/.
    for key in ("totals", "files", "failed_files", "principal", "format", "observes"):
        assert manifest["import"][key] == imported[key], key
    assert read_rows(one / "unmapped") == read_rows(tmp_path / "two" / "shards" / "unmapped")
    assert "unmapped/part-00000-of-00001.parquet" in {entry["path"] for entry in manifest["outputs"]}


def test_the_duplicate_pass_works_on_the_imported_trajectories(replayed, tmp_path):
    """A log and its copy: each trajectory twice, identical, counted once, as the
    two-step run counts them in its one shard (it reads one file, the job two logs)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("a.eval", "b.eval"):
        shutil.copy(replayed["log"], logs / name)
    flags = ["--policy", str(replayed["policy"]), "--harness_verdict", "breach"]
    assert main(["score", "--input_format", "inspect", "--input", str(logs), "--output", str(tmp_path / "one"),
                 *flags, *RUNNER]) == 0
    run, _ = two_steps([logs], tmp_path / "two", flags)
    one, two = load_json(tmp_path / "one" / "metrics.json"), load_json(run / "metrics.json")
    assert one["totals"]["trajectories"]["duplicates_dropped"] == 7
    assert (one["inputs"]["files"], two["inputs"]["files"]) == (2, 1)
    one["inputs"]["files"] = two["inputs"]["files"]
    assert one == two


def test_a_log_that_fails_is_an_unreadable_input_and_exit_4(replayed, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(replayed["log"], logs / "good.eval")
    (logs / "broken.eval").write_bytes(b"not a zip archive at all")
    out = tmp_path / "out"
    assert main(["score", "--input_format", "inspect", "--input", str(logs), "--output", str(out),
                 "--policy", str(replayed["policy"]), *RUNNER]) == 4
    manifest = load_json(out / "manifest.json")
    assert manifest["unreadable_files"] == manifest["import"]["failed_files"] == [str(logs / "broken.eval")]
    # The broken log, refused whole, is one sample declared and not read: never "nothing lost".
    assert load_json(out / "metrics.json")["inputs"] == {"files": 2, "unreadable_files": 1, "rows_declared": 8,
                                                         "rows_read": 7}
    assert (out / "_SUCCESS").exists()
