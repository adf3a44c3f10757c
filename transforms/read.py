"""Read trajectory shards into Arrow record batches with provenance.

One shard is read by one DoFn call, so a corrupt or drifted file is reported
by name instead of failing the job, and every row it holds is accounted for:
its footer's row count beside the rows read, row group by row group, so a
corrupt row group costs its own rows only. Batches, not rows, travel through
the pipeline: per-element Python work is what a Beam pipeline pays for.

Each row stands alone (transforms.conform): a value that cannot be read as
the contract's type is null in its own row only, and which batch or row
group a row travels in never matters.
"""

from __future__ import annotations

import logging
import os
import stat

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from litmus_score.scoring.trajectory import DEFAULT_BOUNDS
from transforms import NAMESPACE
from transforms import schema as s
from transforms.conform import UNREADABLE, conform_batch, open_shard, shares_contract
from transforms.elements import Shard, Tag
from transforms.progress import TALLY

# Measured on the benchmark workload (docs/performance.md): 4,096 trajectories (about
# 27,000 calls) cost no more time per call than 16,384 and half the memory; 1,024 cost more.
DEFAULT_BATCH_ROWS = 4096


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


def new_report(path: str, error=None) -> dict:
    """A shard report: rows the footer declares beside the rows read, and what went wrong."""
    return {"file": path, "aliases": [], "rows_declared": None, "rows_read": 0, "row_groups": None,
            "row_groups_unreadable": [], "issues": [], "error": error}


class ReadShardFn(beam.DoFn):
    """A matched Shard -> record batches; one report per shard on a side output."""

    def __init__(self, batch_rows: int, max_text_bytes: int = DEFAULT_BOUNDS.max_text_bytes):
        self._batch_rows = batch_rows
        self._max_text_bytes = max_text_bytes
        self._rows = Metrics.counter(NAMESPACE, "trajectories_read")
        self._unreadable = Metrics.counter(NAMESPACE, "shards_unreadable")

    def process(self, shard: Shard):
        report = new_report(shard.path, shard.error)
        report["aliases"] = list(shard.aliases)
        if shard.error is None:
            yield from self._read(shard.path, report)
        if report["error"]:
            self._unreadable.inc()
        TALLY.add(shards=1)
        yield beam.pvalue.TaggedOutput(Tag.SHARD_REPORTS, report)

    def _read(self, path: str, report: dict):
        try:
            handle = open_shard(path)
        except UNREADABLE as error:
            report["error"] = f"{type(error).__name__}: {error}"
            return
        with handle:
            try:
                shard = pq.ParquetFile(handle)
            except UNREADABLE as error:
                # Not Parquet, or its footer is corrupt: no row can be counted.
                logging.warning("unreadable shard %s: %s", path, error)
                report["error"] = f"{type(error).__name__}: {error}"
                return
            metadata = shard.metadata
            report["rows_declared"], report["row_groups"] = metadata.num_rows, metadata.num_row_groups
            if not shares_contract(shard.schema_arrow):
                report["error"] = ("no column of the trajectory contract (found: "
                                   + ", ".join(shard.schema_arrow.names[:20]) + ")")
                return
            errors, group_start = [], 0
            for group in range(metadata.num_row_groups):
                group_rows = metadata.row_group(group).num_rows
                size, position = even_batch_rows(group_rows, self._batch_rows), group_start
                group_start += group_rows
                try:
                    # One worker thread per shard: Arrow's reader threads would only compete.
                    for batch in shard.iter_batches(batch_size=size, row_groups=[group], use_threads=False):
                        # source_row is the row's position in the file, read or not.
                        conformed, issues = conform_batch(batch, path, position, self._max_text_bytes)
                        report["issues"] += [i for i in issues if i not in report["issues"]]
                        report["rows_read"] += batch.num_rows
                        position += batch.num_rows
                        self._rows.inc(batch.num_rows)
                        yield conformed
                        TALLY.add(calls=calls_in(conformed))
                except UNREADABLE as error:
                    # A corrupt row group: the rows it declares and were not
                    # read are counted, the file named, the rest read on.
                    logging.warning("unreadable row group %d of %s: %s", group, path, error)
                    report["row_groups_unreadable"].append(group)
                    errors.append(f"row group {group}: {type(error).__name__}: {error}")
            if errors:
                unread = report["rows_declared"] - report["rows_read"]
                report["error"] = f"{unread} of {report['rows_declared']} rows unreadable; " + "; ".join(errors)


class NoMatchingShards(ValueError):
    """An input path or glob that matches no file."""


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
        with open_shard(shard.path) as handle:
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


def _local_entries(pattern: str) -> list:
    """Every path a local pattern names, including what Beam's match skips
    silently (broken links, folders, special files)."""
    import glob

    if pattern.endswith(os.sep):
        pattern += "*"
    return sorted(glob.glob(pattern, recursive="**" in pattern)) if glob.has_magic(pattern) else (
        [pattern] if os.path.lexists(pattern) else [])


def _local_shard(path: str):
    """(canonical path, why it cannot be read or None) of a local path."""
    try:
        canonical = os.path.realpath(path, strict=True)
        mode = os.stat(canonical).st_mode
    except OSError as error:  # a broken or looping symbolic link
        return os.path.abspath(path), f"cannot be opened: {error.strerror or error}"
    if stat.S_ISDIR(mode):
        return canonical, "a folder, not a file (name the files inside it, e.g. 'folder/*.parquet')"
    if not stat.S_ISREG(mode):
        return canonical, "not a regular file (a pipe, socket or device); refused"
    return canonical, None


def match_shards(patterns) -> list:
    """The Shards the patterns match, one per file however often and under
    whatever spellings it was matched, sorted by path; every pattern must
    match something."""
    shards = {}
    for pattern in patterns:
        if FileSystems.get_scheme(pattern) is None:
            entries = [_local_shard(path) + (path,) for path in _local_entries(pattern)]
        else:
            try:
                matched = FileSystems.match([pattern])[0].metadata_list
            except BeamIOError:
                matched = []
            entries = [(metadata.path, None, metadata.path) for metadata in matched]
        if not entries:
            raise NoMatchingShards(f"no file matches --input {pattern!r}")
        for canonical, error, spelling in entries:
            path, aliases, _ = shards.get(canonical, (canonical, set(), error))
            if spelling != canonical:
                aliases.add(spelling)
            shards[canonical] = (path, aliases, error)
    return [Shard(path, tuple(sorted(aliases)), error) for path, aliases, error in sorted(shards.values())]


class ReadShards(beam.PTransform):
    """Paths or globs -> Arrow record batches of trajectories, and shard reports.

    The globs are matched when the transform is built, so a pattern that
    matches nothing fails before any work is launched; a path that cannot be
    read (a folder, a broken link, a pipe) gets a report saying why. Returns
    a DoOutputsTuple: the main output holds the batches, `[Tag.SHARD_REPORTS]`
    one dict per file for the manifest.
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
            .with_output_types(pa.RecordBatch, **{Tag.SHARD_REPORTS: dict})
            .with_outputs(Tag.SHARD_REPORTS, main="batches")
        )
