"""Folders left half written, or named to mislead: an output path with glob
characters is a path, a re-run killed while it deletes the earlier attempt
leaves no _SUCCESS vouching for files that are gone, an import killed before
its manifest is no input, and a night is one thing to every reader."""

import contextlib
import copy
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from litmus_score.scoring.layout import MANIFEST_FILE, SUCCESS_MARKER
from pipeline import publish
from pipeline.cli import main
from pipeline.nightly import find_baseline
from pipeline.trend import read_nights
from tests import memfs
from tests.conftest import RUNNER
from tests.test_publish import score, tree

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    assert main(["generate", "--output", str(folder), "--trajectories", "300", "--shards", "2", "--seed", "7"]) == 0
    return folder


@pytest.fixture(scope="module")
def complete_run(shards, tmp_path_factory):
    output = tmp_path_factory.mktemp("complete") / "out"
    assert score(shards, output) == 0
    return output


def test_an_output_named_with_glob_characters_replaces_itself_only(shards, complete_run, tmp_path):
    # o[ab] as a pattern names oa and ob: both complete runs stay byte for byte.
    for name in ("oa", "ob", "o[ab]"):
        shutil.copytree(complete_run, tmp_path / name)
    before = {name: tree(tmp_path / name) for name in ("oa", "ob")}
    assert score(shards, tmp_path / "o[ab]", "--replace") == 0
    assert {name: tree(tmp_path / name) for name in ("oa", "ob")} == before
    assert (tmp_path / "o[ab]" / SUCCESS_MARKER).exists()


def test_an_object_store_output_named_with_glob_characters_replaces_itself_only(shards):
    root = f"{memfs.SCHEME}://bucket/glob"
    assert score(shards, f"{root}/o[ab]") == 0
    written = memfs.objects(f"{root}/o[ab]/")
    for name in ("oa", "ob"):
        for path, data in written.items():
            with memfs._guard:
                memfs._objects[path.replace("/o[ab]/", f"/{name}/")] = data
    before = {name: memfs.objects(f"{root}/{name}/") for name in ("oa", "ob")}
    assert score(shards, f"{root}/o[ab]", "--replace") == 0
    assert {name: memfs.objects(f"{root}/{name}/") for name in ("oa", "ob")} == before
    assert f"{root}/o[ab]/{SUCCESS_MARKER}" in memfs.objects(f"{root}/o[ab]/")


class Killed(BaseException):
    """The run's process dying (kill -9) at this point of the deletion."""


def vouched_files_exist(folder: Path) -> bool:
    """Whether every file the manifest lists exists, wherever a _SUCCESS says the run is complete."""
    if not (folder / SUCCESS_MARKER).exists():
        return True
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    return all((folder / entry["path"]).is_file() for entry in manifest["outputs"])


def test_a_rerun_killed_at_any_step_of_deleting_the_earlier_attempt_leaves_no_success_that_lies(
        complete_run, tmp_path, monkeypatch):
    real_delete = publish.delete_exactly
    steps = len(list(complete_run.iterdir()))
    for kill_at in range(steps):
        folder = tmp_path / f"kill-{kill_at}"
        shutil.copytree(complete_run, folder)
        deleted: list = []

        def dying(paths, deleted=deleted, kill_at=kill_at):
            for path in paths:  # one at a time, in the order given, as delete_exactly does
                if len(deleted) == kill_at:
                    raise Killed
                real_delete([path])
                deleted.append(path)

        monkeypatch.setattr(publish, "delete_exactly", dying)
        with pytest.raises(Killed):
            publish.claim(str(folder), replace=True)
        assert vouched_files_exist(folder), (kill_at, deleted)
        with pytest.raises(publish.PublishError) if kill_at else contextlib.nullcontext():
            publish.read_run(str(folder))


@pytest.fixture(scope="module")
def one_night(shards, tmp_path_factory):
    """An output root holding the complete night date=2026-11-09, scored by `nightly`."""
    root = tmp_path_factory.mktemp("nights")
    assert main(["nightly", "--date", "2026-11-09", "--input", str(shards / "*.parquet"),
                 "--output_root", str(root), *RUNNER]) == 0
    return root


def copy_night(root: Path, source: str, target: str, night_date: str | None = None, metrics=None) -> Path:
    """root/date=target, a copy of root/date=source; its manifest naming `night_date` and holding
    `metrics` (its checksum kept valid) where given."""
    folder = root / f"date={target}"
    shutil.copytree(root / f"date={source}", folder)
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    if night_date is not None:
        manifest["night"]["date"] = night_date
    if metrics is not None:
        data = json.dumps(metrics).encode()
        (folder / "metrics.json").write_bytes(data)
        entry = next(e for e in manifest["outputs"] if e["path"] == "metrics.json")
        entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))
    return folder


def test_nightly_takes_for_a_baseline_only_what_trend_takes_for_a_night(one_night, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(one_night, root)
    copy_night(root, "2026-11-09", "2026-11-10")  # complete, but its manifest names 2026-11-09
    baseline = find_baseline(str(root), "2026-11-11")
    assert baseline is not None and baseline.folder.endswith("date=2026-11-09")  # was date=2026-11-10
    nights, skipped = read_nights(str(root))
    assert [night["folder"] for night in nights] == ["date=2026-11-09"]
    assert [left_out["folder"] for left_out in skipped] == ["date=2026-11-10"]


def without(document: dict, *path) -> dict:
    document = copy.deepcopy(document)
    inner = document
    for key in path[:-1]:
        inner = inner[key]
    del inner[path[-1]]
    return document


def retyped(document: dict, value, *path) -> dict:
    document = copy.deepcopy(document)
    inner = document
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value
    return document


@pytest.mark.parametrize("odd", [
    lambda metrics: without(metrics, "totals"),
    lambda metrics: without(metrics, "totals", "trajectories", "unscored_by_reason"),
    lambda metrics: retyped(metrics, "many", "groups"),
    lambda metrics: retyped(metrics, "7", "totals", "trajectories", "input"),
    lambda metrics: retyped(metrics, [1], "groups", 0, "misuse"),
], ids=["no totals", "no unscored_by_reason", "groups a string", "input a string", "misuse a list"])
def test_trend_skips_and_names_a_night_whose_metrics_it_cannot_read(one_night, tmp_path, capsys, odd):
    root = tmp_path / "root"
    shutil.copytree(one_night, root)
    metrics = json.loads((root / "date=2026-11-09" / "metrics.json").read_text())
    copy_night(root, "2026-11-09", "2026-11-10", night_date="2026-11-10", metrics=odd(metrics))
    capsys.readouterr()
    assert main(["trend", str(root)]) == 0  # was a traceback, exit 1, neither file written
    assert "date=2026-11-10 left out" in capsys.readouterr().out
    document = json.loads((root / "trend.json").read_text())
    assert [night["date"] for night in document["nights"]] == ["2026-11-09"]
    assert [left_out["folder"] for left_out in document["skipped"]] == ["date=2026-11-10"]
    assert "date=2026-11-10" in (root / "trend.html").read_text()
