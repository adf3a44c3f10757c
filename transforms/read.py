"""Read trajectory shards into Arrow record batches with provenance.

One shard is read by one DoFn call, so a corrupt or drifted file is reported
by name instead of failing the job, and every row it holds is accounted for:
its footer's row count beside the rows read, row group by row group, so a
corrupt row group costs its own rows only. Batches, not rows, travel through
the pipeline: per-element Python work is what a Beam pipeline pays for.

Each row stands alone (transforms.conform): a value that cannot be read as
the contract's type is null in its own row only, and which batch or row
group a row travels in never matters.

A file is opened as the file the patterns matched (transforms.shardfiles):
one replaced or rewritten since is not read, and one that is not a
trajectory shard (an earlier run's output, a file without the contract's
required columns) is named and not read; both count as unreadable.
"""

from __future__ import annotations

import logging

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.metrics import Metrics

from litmus_score.scoring.trajectory import DEFAULT_BOUNDS
from transforms import NAMESPACE
from transforms import schema as s
from transforms.conform import UNREADABLE, conform_batch
from transforms.elements import Shard, Tag
from transforms.progress import TALLY
from transforms.shardfiles import NoMatchingShards as NoMatchingShards  # what ReadShards raises, for its callers
from transforms.shardfiles import changed_while_open, match_shards, not_a_shard, opened

# Measured on the benchmark workload (docs/performance.md): 3,072 trajectories (batches of
# about 21,000 calls there) keep a 10M-call run with the policy under 600 MB, where 4,096 does
# not, for about 6% more CPU (each batch's fixed work, done more often); 2,048 cost a fifth more.
DEFAULT_BATCH_ROWS = 3072
# Bytes read at a time from each column chunk of a shard (docs/performance.md).
READ_BUFFER_BYTES = 1 << 20


def calls_in(batch: pa.RecordBatch) -> int:
    """The tool calls a batch holds, counted as metrics.json's calls.input counts them."""
    return pc.sum(pc.list_value_length(batch.column("calls"))).as_py() or 0


def even_batch_rows(row_group_rows: int, batch_rows: int) -> int:
    """Rows per batch for one row group: as many equal batches of at least
    `batch_rows` as fit (all of a smaller row group), so each stays under
    twice `batch_rows` and no row group ends in a sliver that costs a whole
    batch's fixed work (RE2 compiles, dozens of kernel calls)."""
    batches = max(1, row_group_rows // batch_rows)
    return max(1, -(-row_group_rows // batches))


def new_report(shard: Shard) -> dict:
    """A shard report: rows the footer declares beside the rows read, and what went wrong."""
    return {"file": shard.path, "aliases": list(shard.aliases), "copies": list(shard.copies), "rows_declared": None,
            "rows_read": 0, "row_groups": None, "row_groups_unreadable": [],
            "issues": [f"{copy} holds the same bytes: read once, here" for copy in shard.copies],
            "error": shard.error}


class ReadShardFn(beam.DoFn):
    """A matched Shard -> record batches; one report per shard on a side output."""

    def __init__(self, batch_rows: int, max_text_bytes: int = DEFAULT_BOUNDS.max_text_bytes):
        self._batch_rows = batch_rows
        self._max_text_bytes = max_text_bytes
        self._rows = Metrics.counter(NAMESPACE, "trajectories_read")
        self._unreadable = Metrics.counter(NAMESPACE, "shards_unreadable")

    def process(self, shard: Shard):
        report = new_report(shard)
        if shard.error is None:
            yield from self._read(shard, report)
        if report["error"]:
            self._unreadable.inc()
        TALLY.add(shards=1)
        yield beam.pvalue.TaggedOutput(Tag.SHARD_REPORTS, report)

    def _read(self, shard: Shard, report: dict):
        try:
            with opened(shard) as handle:
                yield from self._read_open(shard, handle, report)
        except UNREADABLE as error:
            # Not the file matched, or not Parquet, or its footer is corrupt: no row can be counted.
            logging.warning("unreadable shard %s: %s", shard.path, error)
            # A file changed since it was matched still declared its rows then.
            report["rows_declared"] = shard.identity.rows if shard.identity else None
            report["error"] = f"{type(error).__name__}: {error}"

    def _read_open(self, shard: Shard, handle, report: dict):
        path = shard.path
        # Pages streamed through a small buffer: pre-buffering (pyarrow's default) holds a row group's
        # every column chunk (a whole shard of the benchmark's, 36 MB) in each worker thread while it is read.
        parquet = pq.ParquetFile(handle, pre_buffer=False, buffer_size=READ_BUFFER_BYTES)
        metadata = parquet.metadata
        report["rows_declared"], report["row_groups"] = metadata.num_rows, metadata.num_row_groups
        report["error"] = not_a_shard(parquet, path)
        if report["error"]:
            return
        errors, group_start = [], 0
        for group in range(metadata.num_row_groups):
            group_rows = metadata.row_group(group).num_rows
            size, position = even_batch_rows(group_rows, self._batch_rows), group_start
            group_start += group_rows
            try:
                # One worker thread per shard: Arrow's reader threads would only compete.
                for batch in parquet.iter_batches(batch_size=size, row_groups=[group], use_threads=False):
                    # source_row is the row's position in the file, read or not.
                    conformed, issues = conform_batch(batch, path, position, self._max_text_bytes)
                    report["issues"] += [i for i in issues if i not in report["issues"]]
                    report["rows_read"] += batch.num_rows
                    position += batch.num_rows
                    self._rows.inc(batch.num_rows)
                    yield conformed
                    TALLY.add(rows=conformed.num_rows, calls=calls_in(conformed))
            except UNREADABLE as error:
                # A corrupt row group: the rows it declares and were not
                # read are counted, the file named, the rest read on.
                logging.warning("unreadable row group %d of %s: %s", group, path, error)
                report["row_groups_unreadable"].append(group)
                errors.append(f"row group {group}: {type(error).__name__}: {error}")
        if errors:
            unread = report["rows_declared"] - report["rows_read"]
            errors.insert(0, f"{unread} of {report['rows_declared']} rows unreadable")
        change = changed_while_open(shard, handle)
        if change:
            # Written to in place while being read: what was read may mix two versions.
            errors.append(f"the file changed while it was read ({change}); its rows may mix two versions")
        report["error"] = "; ".join(errors) or None


class NoVerdictSource(ValueError):
    """Shards that record no policy verdict, and no policy to give them one."""

    def __init__(self, paths):
        self.paths = list(paths)
        super().__init__(f"{len(self.paths)} input(s) record no policy verdict (agent logs; first "
                         f"{self.paths[0]!r}): give --policy FILE to decide their calls, or --accept_no_verdict "
                         "to score every call of theirs as no_verdict")


# Footers read at once when looking for shards without verdicts (network round trips, mostly).
_FOOTER_READERS = 16


def _records_no_verdicts(shard: Shard) -> bool:
    if shard.error is not None:
        return False
    try:
        with opened(shard) as handle:
            metadata = pq.read_schema(handle).metadata or {}
    except UNREADABLE:
        return False  # the read stage reports it
    return metadata.get(s.VERDICTS) == s.NO_VERDICTS


def shards_without_verdicts(shards) -> list:
    """The paths of the shards whose footer says they record no policy verdict
    (schema.VERDICTS); one footer read per shard, several at a time."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(_FOOTER_READERS) as pool:
        marked = list(pool.map(_records_no_verdicts, shards))
    return [shard.path for shard, no_verdicts in zip(shards, marked) if no_verdicts]


class ReadShards(beam.PTransform):
    """Paths, globs or folders -> Arrow record batches of trajectories, and shard reports.

    The patterns are matched when the transform is built (NoMatchingShards
    if one matches nothing), so no work is launched for nothing, and each
    file's identity is recorded then; a path that cannot be read (a broken
    link, a pipe) gets a report saying why. Returns a DoOutputsTuple: the
    main output holds the batches, `[Tag.SHARD_REPORTS]` one dict per file
    for the manifest.
    """

    def __init__(self, patterns, batch_rows: int = DEFAULT_BATCH_ROWS,
                 max_text_bytes: int = DEFAULT_BOUNDS.max_text_bytes):
        super().__init__()
        if isinstance(patterns, str):
            patterns = [patterns]
        if not patterns:
            raise ValueError("ReadShards needs at least one input path or glob")
        if batch_rows < 1:
            raise ValueError(f"batch_rows must be positive, got {batch_rows}")
        self.shards = match_shards(patterns)
        self._batch_rows = batch_rows
        self._max_text_bytes = max_text_bytes

    def expand(self, pbegin):
        return (
            pbegin
            # Create's own reshuffle is off: the explicit one below does its job.
            | "Shard files" >> beam.Create(self.shards, reshuffle=False)
            # Spread the files over workers: one shard is one unit of work.
            | "Spread shards" >> beam.Reshuffle()
            | "Read shard"
            >> beam.ParDo(ReadShardFn(self._batch_rows, self._max_text_bytes))
            .with_input_types(Shard)
            .with_output_types(pa.RecordBatch, **{Tag.SHARD_REPORTS: dict})
            .with_outputs(Tag.SHARD_REPORTS, main="batches")
        )
