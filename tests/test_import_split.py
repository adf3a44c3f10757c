"""A big .eval log is many work items, and a cut or damaged one costs only what it lost."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tests.conftest import RUNNER
from tests.importers_support import check_accounting, load_json, read_rows, require, run_import

require("inspect_ai")
from pipeline.cli import main  # noqa: E402
from tests import inspect_logs  # noqa: E402  (needs inspect_ai)

# Whole commands, end to end: make test runs them, make check does not.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """The replay agent's log (its samples of every category) and a log of nine
    samples, one of them damaged, one beyond those its header lists."""
    from inspect_ai.log import read_eval_log, write_eval_log

    folder = tmp_path_factory.mktemp("split")
    (folder / "policy.yaml").write_text(inspect_logs.REPLAY_POLICY)
    many = read_eval_log(str(inspect_logs.many_samples_log(folder / "many", 9)))
    many.eval.dataset.sample_ids = [f"s{i}" for i in range(8)]
    write_eval_log(many, str(folder / "beyond.eval"))
    (folder / "logs").mkdir()
    damaged = inspect_logs.damage_sample(folder / "beyond.eval", "s3",
                                         lambda record: record.update(events={"not": "a list"}),
                                         folder / "logs" / "damaged.eval")
    replayed = inspect_logs.replayed_log(folder / "logs")
    return {"folder": folder / "logs", "policy": folder / "policy.yaml", "replayed": replayed, "damaged": damaged}


def _rows(folder: Path, key: str) -> list:
    return sorted(read_rows(folder), key=lambda row: (row[key], str(row)))


def _read_in_ranges(log: Path, size: int) -> list:
    """(range start, item) of the log read in ranges of `size` bytes."""
    from litmus_score.importers.inspect import plan_log, read_range

    with open(log, "rb") as handle:
        plan, end = plan_log(handle), log.stat().st_size
        return [(start, item) for start in range(0, end, size)
                for item in read_range(handle, str(log), plan, start, start + size, "agent")]


def test_ranges_of_a_log_read_each_sample_once(logs):
    """Read in ranges of 1 KiB (each holds at most the start of one sample's member, most
    none), the log's items are those it yields read whole, and no range reads two samples."""
    from collections import Counter

    ranged, whole = _read_in_ranges(logs["damaged"], 2**10), _read_in_ranges(logs["damaged"], 2**40)
    assert sorted(map(repr, (item for _, item in ranged))) == sorted(map(repr, (item for _, item in whole)))
    per_range = Counter(start for start, item in ranged if hasattr(item, "row") or getattr(item, "unit", False))
    assert max(per_range.values()) == 1 and sum(per_range.values()) == 9


@pytest.mark.parametrize("bytes_per_part", [2**10, 8 * 2**10])
def test_results_do_not_depend_on_how_a_log_is_split(logs, tmp_path, monkeypatch, bytes_per_part):
    """The same logs imported whole (one part a log) and in parts of `bytes_per_part`
    bytes (at most one sample each, or several), then scored: shards, unmapped entries,
    manifest and metrics.json are equal."""
    from litmus_score.importers import inspect

    def import_and_score(name: str):
        shards, out = tmp_path / f"shards-{name}", tmp_path / f"out-{name}"
        assert run_import("inspect", [logs["folder"]], shards) == 4  # the damaged sample
        assert main(["score", "--input", str(shards / "trajectories"), "--output", str(out),
                     "--policy", str(logs["policy"]), *RUNNER]) == 0
        return shards, out

    monkeypatch.setattr(inspect, "BYTES_PER_PART", 2**40)
    whole, whole_out = import_and_score("whole")
    monkeypatch.setattr(inspect, "BYTES_PER_PART", bytes_per_part)
    split, split_out = import_and_score("split")
    assert _rows(split / "trajectories", "trajectory_id") == _rows(whole / "trajectories", "trajectory_id")
    assert _rows(split / "unmapped", "position") == _rows(whole / "unmapped", "position")
    manifests = [check_accounting(folder) for folder in (whole, split)]
    for manifest in manifests:
        manifest.pop("outputs")  # the files the rows landed in
    assert manifests[0] == manifests[1]
    assert (split_out / "metrics.json").read_bytes() == (whole_out / "metrics.json").read_bytes()
    assert manifests[1]["totals"]["units"] == 16


@pytest.mark.parametrize("bytes_per_part", [2**10, 8 * 2**10])
def test_one_job_does_not_depend_on_how_a_log_is_split(logs, tmp_path, monkeypatch, bytes_per_part):
    """score --input_format on the logs read whole and in parts: metrics.json, the run's
    inputs and import sections, and every scored and unscored row, its provenance (the
    log, its sample's position among the log's) included, are equal."""
    from litmus_score.importers import inspect

    def one_job(name: str) -> Path:
        out = tmp_path / name
        assert main(["score", "--input_format", "inspect", "--input", str(logs["folder"]), "--output", str(out),
                     "--policy", str(logs["policy"]), *RUNNER]) == 4  # the damaged sample
        return out

    monkeypatch.setattr(inspect, "BYTES_PER_PART", 2**40)
    whole = one_job("whole")
    monkeypatch.setattr(inspect, "BYTES_PER_PART", bytes_per_part)
    split = one_job("split")
    assert (split / "metrics.json").read_bytes() == (whole / "metrics.json").read_bytes()
    manifests = [load_json(out / "manifest.json") for out in (whole, split)]
    for key in ("inputs", "import"):
        assert manifests[0][key] == manifests[1][key], key
    for folder, key in (("scored", "call_id"), ("trajectories", "trajectory_id"), ("unscored", "trajectory_id"),
                        ("unmapped", "position")):
        rows = _rows(split / folder, key)
        assert rows == _rows(whole / folder, key) and (rows or folder == "unscored"), folder
    positions = [(row["source_file"], row["source_row"]) for row in read_rows(whole / "trajectories")]
    assert len(set(positions)) == len(positions)


def test_parts_of_a_log_are_one_report(logs):
    """ImportLogs reads a log in many parts and gives one report per file."""
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from transforms.imports import ImportLogs

    transform = ImportLogs("inspect", [str(logs["folder"])], principal="agent", bytes_per_part=2**10)
    assert len(transform.parts) > 2 * len(transform.files)
    with TestPipeline(argv=RUNNER) as pipeline:
        reports = pipeline | transform
        counts = reports["reports"] | beam.Map(
            lambda r: (Path(r["file"]).name, r["units_declared"], r["units"], r["trajectories"], r["error"]))
        assert_that(counts, equal_to([("damaged.eval", 9, 9, 8, None), (logs["replayed"].name, 7, 7, 7, None)]))


def _data_end(info: zipfile.ZipInfo) -> int:
    return info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) + info.compress_size


def _cuts(log: Path) -> dict:
    """Where to cut the log: inside a sample's data, inside a sample's local header,
    where the central directory begins, and inside it."""
    with zipfile.ZipFile(log) as archive:
        members = archive.infolist()
    samples = [info for info in members if info.filename.startswith("samples/")]
    directory = max(_data_end(info) for info in members)
    return {"inside a sample's data": (samples[2].header_offset + _data_end(samples[2])) // 2,
            "inside a sample's header": samples[4].header_offset + 10,
            "at the directory": directory,
            "inside the directory": (directory + log.stat().st_size) // 2}


@pytest.mark.parametrize("where", ["inside a sample's data", "inside a sample's header", "at the directory",
                                   "inside the directory"])
def test_a_cut_log_imports_the_samples_before_the_cut(tmp_path, where):
    """A log cut short has no zip directory: its members are found by their local
    headers. Every sample whose record lies whole before the cut is imported; the one
    the cut runs through is sample_truncated; those after it are sample_not_in_log;
    and the units reconcile with the samples the log's header (or its journal's start) lists."""
    log = inspect_logs.many_samples_log(tmp_path / "logs", 6)
    cut = _cuts(log)[where]
    with zipfile.ZipFile(log) as archive:
        samples = [info for info in archive.infolist() if info.filename.startswith("samples/")]
    whole = sorted(info.filename.split("/")[1].split("_")[0] for info in samples if _data_end(info) <= cut)
    truncated = [info.filename.split("/")[1].split("_")[0] for info in samples
                 if info.header_offset + 30 + len(info.filename) <= cut < _data_end(info)]
    damaged = tmp_path / "cut.eval"
    damaged.write_bytes(log.read_bytes()[:cut])

    code = run_import("inspect", [damaged], tmp_path / "shards")
    assert code == (0 if len(whole) == 6 else 4)
    assert sorted(row["task_id"] for row in read_rows(tmp_path / "shards" / "trajectories")) == whole
    reasons = {entry["position"]: entry["reason"] for entry in read_rows(tmp_path / "shards" / "unmapped")}
    assert {position for position, reason in reasons.items() if reason == "sample_truncated"} == {
        f"sample {sample!r} epoch 1" for sample in truncated}
    assert len(reasons) == 6 - len(whole) and set(reasons.values()) <= {"sample_truncated", "sample_not_in_log"}
    [report] = check_accounting(tmp_path / "shards")["files"]
    assert (report["error"], report["units_declared"], report["units"]) == (None, 6, 6)
    assert report["facts"]["zip_directory_unreadable"].startswith("BadZipFile")
    assert report["facts"]["status"] == ("success" if where.endswith("directory") else "started")


def test_a_damaged_directory_is_read_past(tmp_path):
    """Every entry signature of the central directory overwritten: the members are
    found by their local headers and every sample is imported."""
    log = inspect_logs.many_samples_log(tmp_path / "logs", 4)
    data = log.read_bytes()
    (tmp_path / "damaged.eval").write_bytes(data.replace(b"PK\x01\x02", b"XX\x01\x02"))
    assert run_import("inspect", [tmp_path / "damaged.eval"], tmp_path / "shards") == 0
    assert len(read_rows(tmp_path / "shards" / "trajectories")) == 4
    [report] = check_accounting(tmp_path / "shards")["files"]
    assert report["facts"]["zip_directory_unreadable"]


def _tiny_samples_log(source: Path, samples: int, path: Path) -> Path:
    """`source`'s header listing `samples` samples, each member a few bytes that are no
    sample record (stored, as a hostile writer may)."""
    import orjson

    with zipfile.ZipFile(source) as original:
        header = orjson.loads(original.read("header.json"))
    ids = [f"t{i}" for i in range(samples)]
    header["eval"]["dataset"]["sample_ids"] = ids
    header["eval"]["dataset"]["samples"] = samples
    header.pop("results", None)
    with zipfile.ZipFile(path, "w") as archive:
        for sample_id in ids:
            archive.writestr(f"samples/{sample_id}_epoch_1.json", b"[]")
        archive.writestr("header.json", orjson.dumps(header))
    return path


def test_many_tiny_samples_each_cost_their_own_unit_in_bounded_memory(tmp_path):
    """Thousands of samples that are no record: each is one unmapped unit, the plan
    holds less than the documented 800 bytes a sample, and reading the parts holds
    no more for a log ten times the size (one part at a time)."""
    import tracemalloc
    from collections import Counter

    from litmus_score.importers.inspect import plan_log, read_range

    source = inspect_logs.many_samples_log(tmp_path / "logs", 1)

    def peaks(samples: int) -> tuple:
        """(the plan's peak, what reading every part adds at its peak), traced bytes."""
        log = _tiny_samples_log(source, samples, tmp_path / f"tiny-{samples}.eval")
        with open(log, "rb") as handle:
            tracemalloc.start()
            plan = plan_log(handle)
            plan_peak, planned = tracemalloc.get_traced_memory()[1], tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            reasons = Counter(item.reason for start in range(0, log.stat().st_size, 2**20)
                              for item in read_range(handle, str(log), plan, start, start + 2**20, "agent")
                              if hasattr(item, "reason"))
            read_peak = tracemalloc.get_traced_memory()[1] - planned
            tracemalloc.stop()
        assert reasons == {"sample_unreadable": samples}
        return plan_peak, read_peak

    small_plan, small_read = peaks(2_000)
    large_plan, large_read = peaks(20_000)
    assert small_plan / 2_000 < 800 and large_plan / 20_000 < 800
    assert large_read < small_read + 2**20  # one part's work, whatever the log's size


@pytest.mark.engine
def test_a_log_in_ranges_on_dask_imports_what_one_runner_does(logs, tmp_path, monkeypatch):
    """On a two-worker Dask cluster the ranges of one log are spread over the workers:
    a worker that reads some plans the log once, not once a range, and the import
    equals FnApiRunner's."""
    dask_distributed = pytest.importorskip("dask.distributed")
    from litmus_score.importers import inspect

    monkeypatch.setattr(inspect, "BYTES_PER_PART", 2**10)
    log = [logs["damaged"]]
    assert run_import("inspect", log, tmp_path / "fnapi") == 4
    with dask_distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address=None) as cluster, dask_distributed.Client(cluster) as client:
        assert main(["import", "inspect", str(logs["damaged"]), "--output", str(tmp_path / "dask"), "--runner",
                     "dask", "--dask_client_address", client.scheduler.address]) == 4
        from transforms import imports

        plans = client.run(lambda: [path for path, _ in imports._PLANS])
    assert all(plan in ([], [str(logs["damaged"])]) for plan in plans.values()) and any(plans.values())
    assert _rows(tmp_path / "dask" / "trajectories", "trajectory_id") == _rows(
        tmp_path / "fnapi" / "trajectories", "trajectory_id")
    manifests = [check_accounting(tmp_path / name) for name in ("fnapi", "dask")]
    for manifest in manifests:
        manifest.pop("outputs")
    assert manifests[0] == manifests[1]
