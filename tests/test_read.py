"""ReadShards: batches sized per row group, provenance, reports for every shard, and
only shards read, as they were matched."""

import logging
import os

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from litmus_score.scoring import layout
from pipeline.graph import ScoreTrajectories
from tests import builders as b
from tests import memfs
from transforms import schema as s
from transforms.duplicates import FingerprintCandidatesFn, HashKeysFn, key_index
from transforms.elements import Tag
from transforms.read import ReadShards, even_batch_rows, match_shards
from transforms.write import FILE_SETS, FileSet


@pytest.mark.parametrize("rows, target, size", [
    (20_161, 16_384, 20_161),  # one batch, not 16,384 and a sliver of 3,777
    (100_000, 16_384, 16_667),  # six equal batches
    (32_767, 16_384, 32_767),
    (32_768, 16_384, 16_384),
    (3, 4, 3),  # a row group smaller than a batch is one batch
    (0, 4, 1),
])
def test_row_groups_are_cut_into_equal_batches_under_twice_the_target(rows, target, size):
    assert even_batch_rows(rows, target) == size
    assert rows == 0 or size < 2 * target or rows < target


def test_batches_carry_provenance_and_every_shard_reports(tmp_path):
    rows = [b.trajectory(f"t{i}", b.calls_of(("allow", b.commit()))) for i in range(13)]
    b.write_shard(tmp_path / "a.parquet", rows, row_group_size=5)  # row groups of 5, 5, 3
    (tmp_path / "b.parquet").write_bytes(b"PAR1 not parquet PAR1")
    with TestPipeline(runner="FnApiRunner") as p:
        read = p | ReadShards([str(tmp_path / "*.parquet")], batch_rows=2)
        sizes = read.batches | "Sizes" >> beam.Map(lambda batch: batch.num_rows)
        provenance = read.batches | "Provenance" >> beam.FlatMap(
            lambda batch: zip(batch.column(s.SOURCE_FILE).to_pylist(), batch.column(s.SOURCE_ROW).to_pylist(),
                              batch.column("trajectory_id").to_pylist()))
        reports = read[Tag.SHARD_REPORTS] | "Reports" >> beam.Map(
            lambda r: (r["file"].rsplit("/", 1)[1], r["rows_declared"], r["rows_read"], r["row_groups"],
                       r["error"] is None))
        assert_that(sizes, equal_to([2, 3, 2, 3, 3]), label="batch sizes")
        assert_that(provenance, equal_to([(str(tmp_path / "a.parquet"), i, f"t{i}") for i in range(13)]),
                    label="provenance")
        assert_that(reports, equal_to([("a.parquet", 13, 13, 3, True), ("b.parquet", None, 0, None, False)]),
                    label="reports")


# Reports by test, filled by the pipeline's workers: FnApiRunner runs them in this process.
_REPORTS: dict = {}


def _keep_report(report: dict, test: str) -> None:
    _REPORTS.setdefault(test, {})[report["file"].rsplit("/", 1)[1]] = (
        report["rows_read"], report["rows_declared"], report["error"])


def read_reports(patterns, change=None):
    """{file name: (rows read, rows declared, error)} of reading `patterns`;
    `change()` runs after the patterns are matched and before anything is read."""
    read, test = ReadShards(patterns), os.environ["PYTEST_CURRENT_TEST"]
    if change is not None:
        change()
    with TestPipeline(runner="FnApiRunner") as p:
        _ = (p | read)[Tag.SHARD_REPORTS] | beam.Map(_keep_report, test)
    return _REPORTS.pop(test)


def write_with(files: FileSet, path, table: pa.Table) -> None:
    with open(path, "wb") as handle, files.writer(handle) as writer:
        writer.write_table(table)


def test_outputs_say_what_they_are_and_only_an_imports_shards_are_read(tmp_path):
    rows = b.table([b.trajectory(f"t{i}", b.calls_of(("allow", b.commit()))) for i in range(3)])
    write_with(FileSet("trajectories", "part", s.TRAJECTORY, kind=layout.SHARD_KIND), tmp_path / "imported.parquet",
               rows)
    write_with(FileSet("unmapped", "part", pa.schema([pa.field("reason", pa.string())])),
               tmp_path / "unmapped.parquet", pa.table({"reason": ["x"]}))
    # An earlier run's outputs, even those holding whole input rows, are no shards.
    write_with(FILE_SETS["scored"], tmp_path / "scored.parquet", pa.Table.from_pylist([], s.SCORED))
    unscored = FileSet(layout.UNSCORED_DIR, layout.INCOMPLETE, s.UNSCORED)
    write_with(unscored, tmp_path / "unscored.parquet", pa.Table.from_pylist([{"run_id": "r"}], s.UNSCORED))
    # A shard with every contract column, its metadata copied from an output.
    sneaky = rows.replace_schema_metadata(pq.read_schema(tmp_path / "unscored.parquet").metadata)
    pq.write_table(sneaky, tmp_path / "sneaky.parquet")
    # An import's shard counts once its import wrote its manifest (its last step) beside its folder.
    finished = tmp_path / "import" / "trajectories"
    finished.mkdir(parents=True)
    write_with(FileSet("trajectories", "part", s.TRAJECTORY, kind=layout.SHARD_KIND), finished / "part.parquet",
               b.table([b.trajectory(f"u{i}", b.calls_of(("allow", b.commit()))) for i in range(3)]))
    (tmp_path / "import" / layout.IMPORT_MANIFEST_FILE).write_text("{}")
    reports = read_reports([str(tmp_path / "*.parquet"), str(finished / "*.parquet")])
    assert reports["part.parquet"] == (3, 3, None)
    rows_read, _, error = reports["imported.parquet"]
    assert rows_read == 0 and error.startswith("a shard of an import that did not finish")
    for name, kind in [("unmapped", "unmapped"), ("scored", "scored"), ("unscored", "unscored"),
                       ("sneaky", "unscored")]:
        rows_read, _, error = reports[f"{name}.parquet"]
        assert rows_read == 0
        assert error == f"an output of litmus-score ({kind}), not a trajectory shard; refused as input"


def replace_file(path, rows) -> None:
    """Writes a new version under a temporary name and renames it over `path`."""
    b.write_shard(f"{path}.tmp", rows)
    os.replace(f"{path}.tmp", path)


def rows_of(*ids):
    return [b.trajectory(i, b.calls_of(("allow", b.commit()))) for i in ids]


def touch(path) -> None:
    found = os.stat(path)
    os.utime(path, ns=(found.st_atime_ns, found.st_mtime_ns + 10**9))


def flip_a_value_keeping_size_and_footer(path) -> None:
    """Rewrites one byte of a data page in place: same size, same footer."""
    data = bytearray(open(path, "rb").read())
    at = data.index(b"t1-original")
    data[at + 2] = ord("X")
    with open(path, "r+b") as handle:
        handle.write(bytes(data))


@pytest.mark.parametrize("change, found", [
    (lambda path: replace_file(path, rows_of("n1", "n2", "n3")), "size"),
    (touch, "modified since"),
    (flip_a_value_keeping_size_and_footer, "modified since"),
])
def test_a_shard_that_changed_after_matching_is_not_read(tmp_path, change, found):
    b.write_shard(tmp_path / "a.parquet", rows_of("t1-original", "t2"))
    b.write_shard(tmp_path / "b.parquet", rows_of("t3"))
    reports = read_reports([str(tmp_path / "*.parquet")], lambda: change(tmp_path / "a.parquet"))
    rows_read, declared, error = reports["a.parquet"]
    # Its rows as matched are declared and not read; the other file is read whole.
    assert (rows_read, declared) == (0, 2) and "changed after the run matched it" in error and found in error
    assert reports["b.parquet"] == (1, 1, None)


def test_a_shard_changed_after_matching_is_not_indexed_for_duplicates(tmp_path):
    b.write_shard(tmp_path / "a.parquet", rows_of("t1", "t2"))
    (shard,) = match_shards([str(tmp_path / "a.parquet")])
    assert len(key_index(shard).rows) == 2
    replace_file(tmp_path / "a.parquet", rows_of("t1", "t2", "t3"))
    assert key_index(shard) is None and not list(HashKeysFn().process(shard))
    assert not list(FingerprintCandidatesFn(1000).process(shard, [key_index(match_shards([shard.path])[0]).hashes]))


def test_an_object_replaced_after_matching_is_not_read(tmp_path):
    root = f"{memfs.SCHEME}://bucket/replaced-{tmp_path.name}"
    for name, ids in (("a", ("t1", "t2")), ("b", ("t3",))):
        with FileSystems.create(f"{root}/{name}.parquet") as handle:
            pq.write_table(b.table(rows_of(*ids)), handle)

    def replace_object():
        with FileSystems.create(f"{root}/a.parquet") as handle:
            pq.write_table(b.table(rows_of("n1", "n2", "n3", "n4")), handle)

    reports = read_reports([f"{root}/*.parquet"], replace_object)
    rows_read, declared, error = reports["a.parquet"]
    assert (rows_read, declared) == (0, 2) and "changed after the run matched it (size" in error
    assert reports["b.parquet"] == (1, 1, None)


def test_building_the_job_logs_no_warning_about_yield_and_return(tmp_path, caplog):
    b.write_shard(tmp_path / "a.parquet", rows_of("t1"))
    with caplog.at_level(logging.WARNING):
        beam.Pipeline(runner="FnApiRunner") | ScoreTrajectories([str(tmp_path / "a.parquet")])
    assert not [record for record in caplog.records if "yield and return" in record.getMessage()]
