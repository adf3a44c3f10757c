"""Publishing on an object store (an in-memory one with GCS's semantics:
no folders, listing by prefix, rename = copy + delete): the same protocol,
read and listed through Beam's FileSystems only."""

import io
import json
import socket

import pyarrow.parquet as pq
import pytest
from apache_beam.io.filesystems import FileSystems

from litmus_score import synthetic
from pipeline import publish
from pipeline.cli import main
from tests import builders as b
from tests import memfs
from tests.conftest import RUNNER
from tests.test_publish import one_line_error

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow

ROOT = f"{memfs.SCHEME}://bucket/scores"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for day in ("2026-11-30", "2026-12-01"):  # the same trajectories twice: no regression
        synthetic.generate(str(root / day), 2000, 2, seed=31)
    return root


def nightly(runs, date, *flags):
    return main(["nightly", "--date", date, "--input", str(runs / "{date}" / "*.parquet"), "--output_root", ROOT,
                 *flags, *RUNNER])


def load(path: str) -> dict:
    return json.loads(memfs.objects(path)[path])


def scored_rows(objects: dict, folder: str) -> int:
    return sum(pq.read_table(io.BytesIO(data)).num_rows for path, data in objects.items()
               if path.startswith(f"{folder}/scored/"))


def test_nights_publish_compare_and_replace_through_beam_filesystems(runs, capsys):
    assert nightly(runs, "2026-11-30") == 0
    first = f"{ROOT}/date=2026-11-30"
    names = {path[len(first) + 1:] for path in memfs.objects(first + "/")}
    assert {"_SUCCESS", "manifest.json", "metrics.json", "report.html"} <= names
    assert not [name for name in names if name.startswith(".")]  # no lock, no temporary, no partial file left
    manifest = load(f"{first}/manifest.json")
    assert {entry["path"] for entry in manifest["outputs"]} == names - {"manifest.json", "_SUCCESS"}
    capsys.readouterr()

    assert nightly(runs, "2026-12-01") == 0
    assert f"baseline {first}" in capsys.readouterr().out
    night = f"{ROOT}/date=2026-12-01"
    assert load(f"{night}/comparison.json")["regressions"] == []
    compared = f"{ROOT}/compared"
    assert main(["compare", night, first, "--output", compared]) == 0
    assert f"wrote {compared}/ (comparison.json" in capsys.readouterr().out
    assert load(f"{compared}/comparison.json")["baseline"]["folder"] == first
    assert memfs.objects(f"{compared}/_SUCCESS") and not memfs.objects(f"{compared}/.lock")

    # A crash's leftovers, as an object store keeps them: objects under a prefix, no manifest.
    crashed = f"{memfs.SCHEME}://bucket/crashed"
    fs = memfs.MemoryFileSystem(None)
    old = sorted(path for path in memfs.objects(night + "/") if "/scored/" in path or "/unscored/" in path)
    fs.copy(old, [crashed + path[len(night):] for path in old])
    fs.copy([old[0]], [f"{crashed}/scored/part-00007-of-00009.parquet"])  # another worker count's file
    argv = ["score", "--input", str(runs / "2026-12-01" / "*.parquet"), "--output", crashed, *RUNNER]
    assert main(argv) == 2
    assert "is not empty: it holds an earlier run that did not finish" in one_line_error(capsys)
    assert main(["compare", crashed, first, "--output", f"{ROOT}/compared-crashed"]) == 2
    assert "not a complete litmus-score run" in one_line_error(capsys)
    assert main([*argv, "--replace"]) == 0
    objects = memfs.objects(crashed + "/")
    metrics = load(f"{crashed}/metrics.json")
    listed = {f"{crashed}/{e['path']}" for e in load(f"{crashed}/manifest.json")["outputs"]}
    assert set(objects) == listed | {f"{crashed}/manifest.json", f"{crashed}/_SUCCESS"}
    assert scored_rows(objects, crashed) == metrics["totals"]["calls"]["scored"] == scored_rows(
        memfs.objects(night + "/"), night)


def test_foreign_objects_and_held_locks_are_refused(runs, capsys):
    mine = f"{memfs.SCHEME}://bucket/mine"
    with memfs.MemoryFileSystem(None).create(f"{mine}/notes.txt") as handle:
        handle.write(b"mine")
    argv = ["score", "--input", str(runs / "2026-11-30" / "*.parquet"), *RUNNER]
    for flags in ((), ("--replace",)):
        assert main([*argv, "--output", mine, *flags]) == 2
        assert "holds files litmus-score did not write ('notes.txt')" in one_line_error(capsys)
    busy = f"{memfs.SCHEME}://bucket/busy"
    with memfs.MemoryFileSystem(None).create(f"{busy}/.lock") as handle:
        handle.write(json.dumps({"pid": 1, "host": socket.gethostname() + "-other", "started": "x"}).encode())
    assert main([*argv, "--output", busy, "--replace"]) == 2
    assert "is in use by another run" in one_line_error(capsys)
    assert list(memfs.objects(busy + "/")) == [f"{busy}/.lock"]


def test_local_folders_and_object_stores_are_told_apart(tmp_path):
    # Local folders get O_EXCL locks and a one-level listing; object stores a prefix listing.
    assert publish.is_local(str(tmp_path)) and publish.is_local("relative/out")
    assert not publish.is_local(ROOT)


def put(path: str, data: bytes) -> None:
    with FileSystems.create(path) as handle:
        handle.write(data)


def shard_bytes(*ids) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(b.table([b.trajectory(i, b.calls_of(("allow", b.commit()))) for i in ids]), buffer)
    return buffer.getvalue()


def test_a_folder_on_an_object_store_stands_for_the_shards_under_it(tmp_path, capsys):
    folder = f"{memfs.SCHEME}://bucket/night-{tmp_path.name}"
    put(f"{folder}/a.parquet", shard_bytes("t1", "t2"))
    put(f"{folder}/sub/b.parquet", shard_bytes("t3"))
    put(f"{folder}/_temporary/c.parquet", shard_bytes("t4"))  # what a writer keeps while writing
    put(f"{folder}/.partial-x/d.parquet", shard_bytes("t5"))
    put(f"{folder}/notes.txt", b"not a shard\n")
    shards = [f"{folder}/a.parquet", f"{folder}/sub/b.parquet"]

    def score(*inputs):
        out = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
        code = main(["score", *[a for i in inputs for a in ("--input", i)], "--output", str(out), *RUNNER])
        return code, out

    code, named = score(*shards)
    assert code == 0
    for spelling in (folder, folder + "/"):
        code, out = score(spelling)
        assert code == 0
        assert sorted(r["file"] for r in json.loads((out / "manifest.json").read_text())["inputs"]) == shards
        assert (out / "metrics.json").read_bytes() == (named / "metrics.json").read_bytes()
    capsys.readouterr()
    code, out = score(f"{memfs.SCHEME}://bucket/no-such-night/")
    assert code == 2 and "no file matches" in one_line_error(capsys) and not out.exists()
