"""Read trajectory shards into Arrow record batches with provenance.

One shard is read by one DoFn call, so a corrupt or drifted file is reported
by name instead of failing the job, and every row it holds is accounted for.
Batches, not rows, travel through the pipeline: per-element Python work is
what a Beam pipeline pays for.
"""

from __future__ import annotations

import logging

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from transforms import NAMESPACE
from transforms import schema as s
from transforms.coders import RecordBatchCoder  # noqa: F401  (registers the coder of the batches read emits)

SHARD_REPORTS = "shard_reports"
DEFAULT_BATCH_ROWS = 16384

# Errors that mean "this file is not a readable Parquet shard".
_UNREADABLE = (pa.ArrowException, OSError, EOFError, ValueError)


class ColumnTypeError(ValueError):
    """A column (or nested field) whose type cannot be read as the contract's."""

    def __init__(self, path: str, found: pa.DataType, expected: pa.DataType):
        self.path = path
        super().__init__(f"column {path!r} has type {found}, expected {expected}")


def conform_array(array: pa.Array, target: pa.DataType, path: str) -> pa.Array:
    """`array` as `target`: fields matched by name, absent ones null, extras dropped."""
    if array.type == target:
        return array
    if pa.types.is_struct(target):
        if not pa.types.is_struct(array.type):
            raise ColumnTypeError(path, array.type, target)
        present = {array.type.field(i).name for i in range(array.type.num_fields)}
        children = [
            conform_array(array.field(f.name), f.type, f"{path}.{f.name}")
            if f.name in present
            else pa.nulls(len(array), f.type)
            for f in target
        ]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())
    if pa.types.is_list(target):
        if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
            raise ColumnTypeError(path, array.type, target)
        values = conform_array(array.values, target.value_type, path)
        offsets = pc.cast(array.offsets, pa.int32())
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=array.is_null())
    # A finer timestamp (pandas writes nanoseconds) is truncated to the
    # contract's microseconds; every other cast must be lossless.
    lossless = not (pa.types.is_timestamp(target) and pa.types.is_timestamp(array.type))
    try:
        return pc.cast(array, target, safe=lossless)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise ColumnTypeError(path, array.type, target) from None


def conform_batch(batch: pa.RecordBatch, source: str, first_row: int):
    """(batch on the contract schema plus provenance and extra columns, issues).

    A column that is absent or of an unreadable type becomes null, which the
    completeness check then reports as missing_field on every row it affects.
    Input columns not used as contract columns (extra ones, and those of an
    unreadable type) ride along for the UNSCORED record; one whose name is
    taken gets the prefix s.RAW_PREFIX.
    """
    columns, fields, issues, used = [], [], [], set()
    names = set(batch.schema.names)
    for field in s.TRAJECTORY:
        column = pa.nulls(batch.num_rows, field.type)
        if field.name not in names:
            issues.append(f"column {field.name!r} is absent")
        else:
            try:
                column = conform_array(batch.column(field.name), field.type, field.name)
                used.add(field.name)
            except ColumnTypeError as error:
                issues.append(str(error))
        columns.append(column)
        fields.append(field)
    columns.append(pa.array([source] * batch.num_rows, pa.string()))
    columns.append(pa.array(range(first_row, first_row + batch.num_rows), pa.int64()))
    fields += s.PROVENANCE
    taken = {field.name for field in fields}
    for i, field in enumerate(batch.schema):
        if field.name not in used:
            columns.append(batch.column(i))
            fields.append(field.with_name(s.RAW_PREFIX + field.name if field.name in taken else field.name))
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields)), issues


def _open(path: str):
    """A seekable binary file: Arrow's own for local paths (fastest), Beam's elsewhere."""
    if FileSystems.get_scheme(path) is None:
        return pa.OSFile(path, "rb")
    return FileSystems.open(path, compression_type="uncompressed")


def even_batch_rows(row_group_rows: int, batch_rows: int) -> int:
    """Rows per batch for one row group: as many equal batches of at least
    `batch_rows` as fit (all of a smaller row group), so each stays under
    twice `batch_rows` and no row group ends in a sliver that costs a whole
    batch's fixed work (RE2 compiles, dozens of kernel calls)."""
    batches = max(1, row_group_rows // batch_rows)
    return max(1, -(-row_group_rows // batches))


class ReadShardFn(beam.DoFn):
    """A matched file -> record batches; one report per shard on a side output."""

    def __init__(self, batch_rows: int):
        self._batch_rows = batch_rows
        self._rows = Metrics.counter(NAMESPACE, "trajectories_read")
        self._unreadable = Metrics.counter(NAMESPACE, "shards_unreadable")

    def process(self, path: str):
        report = {"file": path, "rows": None, "rows_read": 0, "row_groups": None, "issues": [], "error": None}
        try:
            with _open(path) as handle:
                shard = pq.ParquetFile(handle)
                report["rows"] = shard.metadata.num_rows
                report["row_groups"] = shard.metadata.num_row_groups
                for group in range(shard.metadata.num_row_groups):
                    size = even_batch_rows(shard.metadata.row_group(group).num_rows, self._batch_rows)
                    # One worker thread per shard: Arrow's reader threads would only compete.
                    for batch in shard.iter_batches(batch_size=size, row_groups=[group], use_threads=False):
                        conformed, issues = conform_batch(batch, path, report["rows_read"])
                        report["issues"] += [i for i in issues if i not in report["issues"]]
                        report["rows_read"] += batch.num_rows
                        self._rows.inc(batch.num_rows)
                        yield conformed
        except _UNREADABLE as error:
            # Expected failure: a corrupt or non-Parquet file. Its rows cannot
            # be scored; the report says how many were lost and why.
            logging.warning("unreadable shard %s: %s", path, error)
            self._unreadable.inc()
            report["error"] = f"{type(error).__name__}: {error}"
        yield beam.pvalue.TaggedOutput(SHARD_REPORTS, report)


class NoMatchingShards(ValueError):
    """An input path or glob that matches no file."""


def match_shards(patterns) -> list:
    """The sorted, distinct files the patterns match; every pattern must match."""
    files = set()
    for pattern in patterns:
        try:
            matched = FileSystems.match([pattern])[0].metadata_list
        except BeamIOError:
            matched = []
        if not matched:
            raise NoMatchingShards(f"no file matches --input {pattern!r}")
        files.update(metadata.path for metadata in matched)
    return sorted(files)


class ReadShards(beam.PTransform):
    """Paths or globs -> Arrow record batches of trajectories, and shard reports.

    The globs are matched when the transform is built, so a pattern that
    matches nothing fails before any work is launched. Returns a
    DoOutputsTuple: the main output holds the batches, `[SHARD_REPORTS]` one
    dict per file for the manifest.
    """

    def __init__(self, patterns, batch_rows: int = DEFAULT_BATCH_ROWS):
        super().__init__()
        if isinstance(patterns, str):
            patterns = [patterns]
        if not patterns:
            raise ValueError("ReadShards needs at least one input path or glob")
        if batch_rows < 1:
            raise ValueError(f"batch_rows must be positive, got {batch_rows}")
        self._files = match_shards(patterns)
        self._batch_rows = batch_rows

    def expand(self, pbegin):
        return (
            pbegin
            # Create's own reshuffle is off: the explicit one below does its job.
            | "Shard files" >> beam.Create(self._files, reshuffle=False)
            # Spread the files over workers: one shard is one unit of work.
            | "Spread shards" >> beam.Reshuffle()
            | "Read shard"
            >> beam.ParDo(ReadShardFn(self._batch_rows))
            .with_output_types(pa.RecordBatch, **{SHARD_REPORTS: dict})
            .with_outputs(SHARD_REPORTS, main="batches")
        )
