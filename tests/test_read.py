"""ReadShards: batches sized per row group, provenance, and reports for every shard."""

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests import builders as b
from transforms import schema as s
from transforms.elements import Tag
from transforms.read import ReadShards, even_batch_rows


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
            lambda r: (r["file"].rsplit("/", 1)[1], r["rows_declared"], r["rows_read"], r["row_groups"], r["error"] is None))
        assert_that(sizes, equal_to([2, 3, 2, 3, 3]), label="batch sizes")
        assert_that(provenance, equal_to([(str(tmp_path / "a.parquet"), i, f"t{i}") for i in range(13)]),
                    label="provenance")
        assert_that(reports, equal_to([("a.parquet", 13, 13, 3, True), ("b.parquet", None, 0, None, False)]),
                    label="reports")
