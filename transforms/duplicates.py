"""Stage 1b: duplicates. A (run_id, trajectory_id) is one trajectory, whatever
file it came from (litmus_score.scoring.trajectory.resolve_duplicates is the rule).

Found without shuffling whole rows:

    key index        every shard's (run_id, trajectory_id) columns only, as
                     64-bit hashes per row, of which 46 bits are grouped
    candidates       those 46 bits seen more than once, found per bucket
    fingerprints     only if some hash repeats: the key columns are read
                     again to find its rows, which are read whole, and their
                     contract columns fingerprinted (sha256)
    decisions        per exact key: identical copies keep the first (by
                     file and row) and drop the others; differing copies
                     are all in conflict

Trajectories imported in the same job are no file's rows: the same pass
runs on their read batches (FindDuplicatesInBatches), each row's origin
the log and its position there.

The decisions reach the main read as a side input (usually empty), where
`SetAsideDuplicates` drops the extra copies, counting them per group, and
turns conflicting ones into UNSCORED records (duplicate_trajectory). A hash
collision costs only a needless look at a row: decisions compare exact keys.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.metrics import Metrics

from litmus_score.scoring import contract as c
from litmus_score.scoring import metrics as m
from litmus_score.scoring.trajectory import CONFLICT, DROP, resolve_duplicates
from transforms import NAMESPACE
from transforms import schema as s
from transforms.columnar import group_codes
from transforms.conform import UNREADABLE, conform_array, conform_batch
from transforms.elements import Shard, Tag
from transforms.progress import TALLY
from transforms.records import unscored_table
from transforms.shardfiles import not_a_shard, opened

KEY_COLUMNS = ("run_id", "trajectory_id")
# The bits of a key hash the duplicate check groups: 6 name one of 64 buckets
# and 40 travel (5 bytes a trajectory, where the local runner's grouping costs
# several times the bytes grouped). A false candidate costs reading its row
# group again: at 6M trajectories (40M calls) n^2 / 2^47 expects a quarter of one.
_BUCKET_BITS = 6
_TRAVEL_BYTES = 5
INDEXED_BITS = _BUCKET_BITS + 8 * _TRAVEL_BYTES
# Copies named in a conflict's detail; the rest are counted.
MAX_COPIES_SHOWN = 5

_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def _mixed(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: every input bit reaches every output bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * _MIX[0]
    x = x ^ (x >> np.uint64(27))
    x = x * _MIX[1]
    return x ^ (x >> np.uint64(31))


def text_hashes(texts: pa.Array) -> np.ndarray:
    """A 64-bit hash of each string's bytes (nulls hash like empty strings).

    Polynomial over the bytes, from prefix sums of the whole data buffer, so
    it is computed on whole columns. It is a bucketing hash, not a
    cryptographic one: equal hashes are only candidates.
    """
    texts = pc.fill_null(texts, "").cast(pa.large_binary())
    offsets = np.frombuffer(texts.buffers()[1], np.int64)[texts.offset:texts.offset + len(texts) + 1]
    data = texts.buffers()[2]
    data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    powers, undo = _powers(len(data))
    with np.errstate(over="ignore"):
        prefix = np.concatenate([[np.uint64(0)], np.cumsum(data.astype(np.uint64) * powers[1:len(data) + 1],
                                                           dtype=np.uint64)])
        start, end = offsets[:-1], offsets[1:]
        hashes = (prefix[end] - prefix[start]) * undo[start]
        return _mixed(hashes ^ _mixed((end - start).astype(np.uint64)))


_BASE, _INVERSE = np.uint64(0x100000001B3), np.uint64(0xCE965057AFF6957B)  # odd, and its inverse mod 2^64
_powers_cache = (np.ones(1, np.uint64), np.ones(1, np.uint64))


def _powers(n: int):
    """(base^i, base^-i) for i up to at least n, mod 2^64; kept and grown by
    doubling, since numpy's cumprod is the slow part of hashing. Each caller
    keeps the pair it got, so threads that grow it never disturb another."""
    global _powers_cache
    cache = _powers_cache
    if len(cache[0]) <= n:
        size = max(n + 1, 2 * len(cache[0]))
        with np.errstate(over="ignore"):
            base, inverse = (np.concatenate([[np.uint64(1)], np.cumprod(np.full(size - 1, factor, np.uint64))])
                             for factor in (_BASE, _INVERSE))
            cache = (base, inverse)
        _powers_cache = cache
    return cache


def key_hashes(run_id: pa.Array, trajectory_id: pa.Array) -> np.ndarray:
    with np.errstate(over="ignore"):
        return _mixed(text_hashes(run_id) * np.uint64(31) + text_hashes(trajectory_id))


@dataclass(frozen=True)
class KeyIndex:
    """One shard's key hashes, for the rows whose key has no null."""

    path: str
    rows: np.ndarray  # int64 row positions in the file
    hashes: np.ndarray  # uint64


def _key_index(path: str, parquet: pq.ParquetFile):
    """An open shard's KeyIndex, reading the two key columns only (None: nothing to index)."""
    if not_a_shard(parquet, path) is not None:
        return None
    TALLY.declare(path, parquet.metadata.num_rows)  # the progress line's total (transforms.progress)
    rows, hashes, start = [], [], 0
    for group in range(parquet.metadata.num_row_groups):
        size = parquet.metadata.row_group(group).num_rows
        try:
            table = parquet.read_row_group(group, columns=list(KEY_COLUMNS), use_threads=False)
            keys = [conform_array(table[name].combine_chunks(), pa.string(), name).array for name in KEY_COLUMNS]
        except UNREADABLE:
            keys = None  # the main read reports this row group
        if keys is not None:
            present = ~np.asarray(pc.or_(keys[0].is_null(), keys[1].is_null()), bool)
            rows.append(start + np.flatnonzero(present))
            hashes.append(key_hashes(*keys)[present])
        start += size
    return KeyIndex(path, np.concatenate(rows), np.concatenate(hashes)) if rows else None


def key_index(shard: Shard):
    """A Shard's KeyIndex (None: nothing to index, or not the file the run matched)."""
    if shard.error is not None:
        return None
    try:
        with opened(shard) as handle:
            return _key_index(shard.path, pq.ParquetFile(handle))
    except UNREADABLE:
        return None  # the main read reports the file


class HashKeysFn(beam.DoFn):
    """A Shard -> (bucket, its key hashes in that bucket) for each bucket it fills.

    Only the hashes travel (5 bytes a trajectory): a runner may keep what
    crosses a stage in memory until the run ends, and the rows are found
    again from the few repeated hashes."""

    def process(self, shard: Shard):
        index = key_index(shard)
        if index is not None:
            yield from by_bucket(index.hashes)


def indexed(hashes: np.ndarray) -> np.ndarray:
    """The INDEXED_BITS of key hashes the duplicate check compares."""
    return hashes >> np.uint64(64 - INDEXED_BITS)


def by_bucket(hashes: np.ndarray):
    """(bucket, the rest of the indexed hashes in it, 5 bytes each) for each bucket the
    hashes fill: bytes cross the shuffle as they are, where numpy arrays would be pickled."""
    short = np.sort(indexed(hashes))  # by bucket, the top bits
    buckets, starts = np.unique(short >> np.uint64(8 * _TRAVEL_BYTES), return_index=True)
    rest = short.astype("<u8", copy=False).view(np.uint8).reshape(-1, 8)[:, :_TRAVEL_BYTES]
    for b, start, end in zip(buckets.tolist(), starts.tolist(), starts[1:].tolist() + [len(short)]):
        yield b, rest[start:end].tobytes()


def batch_key_hashes(batch: pa.RecordBatch) -> tuple:
    """(the rows of a read batch whose key has no null, their key hashes)."""
    keys = [batch.column(name) for name in KEY_COLUMNS]
    present = np.flatnonzero(~np.asarray(pc.or_(keys[0].is_null(), keys[1].is_null()), bool))
    return present, key_hashes(*keys)[present]


class HashBatchKeysFn(beam.DoFn):
    """A read batch -> (bucket, its key hashes in that bucket), as HashKeysFn for a shard."""

    def process(self, batch: pa.RecordBatch):
        yield from by_bucket(batch_key_hashes(batch)[1])


def _repeated(bucket_hashes) -> np.ndarray:
    """(bucket, its parts) -> the indexed hashes seen more than once."""
    bucket, parts = bucket_hashes
    rest = np.frombuffer(b"".join(parts), np.uint8).reshape(-1, _TRAVEL_BYTES)
    widened = np.zeros((len(rest), 8), np.uint8)
    widened[:, :_TRAVEL_BYTES] = rest
    values, counts = np.unique(widened.view("<u8").ravel(), return_counts=True)
    return (np.uint64(bucket) << np.uint64(8 * _TRAVEL_BYTES)) | values[counts > 1].astype(np.uint64)


@dataclass(frozen=True)
class Copy:
    """A row whose key hash is shared, identified by where it is, with its fingerprint."""

    origin: tuple  # (file, row)
    fingerprint: str


def fingerprint(row: dict) -> str:
    """sha256 of a row's contract columns (and what reading found), as canonical JSON."""
    text = json.dumps(row, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_FINGERPRINTED = tuple(s.TRAJECTORY.names) + (s.INVALID_TEXT, s.TOO_LARGE)


def _candidate_copies(path: str, parquet: pq.ParquetFile, candidates: np.ndarray, max_text_bytes: int):
    """(exact key, Copy) of each row of an open shard whose indexed key hash is among `candidates`."""
    index = _key_index(path, parquet)
    wanted = index.rows[np.isin(indexed(index.hashes), candidates)] if index is not None else ()
    if not len(wanted):
        return
    ends = np.cumsum([parquet.metadata.row_group(g).num_rows for g in range(parquet.metadata.num_row_groups)])
    groups = np.searchsorted(ends, wanted, side="right")
    for group in np.unique(groups).tolist():
        start = int(ends[group - 1]) if group else 0
        try:
            table = parquet.read_row_group(group, use_threads=False)
        except UNREADABLE:
            continue  # unread rows are not part of the run
        local = wanted[groups == group] - start
        batch = table.take(pa.array(local)).combine_chunks().to_batches()[0]
        conformed, _ = conform_batch(batch, path, 0, max_text_bytes)
        for position, row in zip(local.tolist(), conformed.select(list(_FINGERPRINTED)).to_pylist()):
            yield (row["run_id"], row["trajectory_id"]), Copy((path, start + position), fingerprint(row))


def _candidates(repeated) -> np.ndarray:
    """The repeated indexed hashes of every bucket (the side input), as one array."""
    return np.concatenate(list(repeated)) if repeated else np.zeros(0, np.uint64)


class FingerprintCandidatesFn(beam.DoFn):
    """A Shard and the repeated hashes -> (exact key, Copy) of each row whose key hash repeats."""

    def __init__(self, max_text_bytes: int):
        self._max_text_bytes = max_text_bytes

    def process(self, shard: Shard, repeated):
        candidates = _candidates(repeated)
        # When no hash repeats anywhere, no shard is read again.
        if len(candidates) and shard.error is None:
            try:
                with opened(shard) as handle:
                    yield from _candidate_copies(shard.path, pq.ParquetFile(handle), candidates, self._max_text_bytes)
            except UNREADABLE:
                # Not the file the run matched, or not readable: the main read reports it.
                pass


class FingerprintBatchCandidatesFn(beam.DoFn):
    """A read batch and the repeated hashes -> (exact key, Copy) of each row whose key hash repeats."""

    def process(self, batch: pa.RecordBatch, repeated):
        candidates = _candidates(repeated)
        if not len(candidates):
            return
        present, hashes = batch_key_hashes(batch)
        wanted = present[np.isin(indexed(hashes), candidates)]
        if not len(wanted):
            return
        rows = batch.take(pa.array(wanted))
        origins = zip(rows.column(s.SOURCE_FILE).to_pylist(), rows.column(s.SOURCE_ROW).to_pylist())
        for origin, row in zip(origins, rows.select(list(_FINGERPRINTED)).to_pylist()):
            yield (row["run_id"], row["trajectory_id"]), Copy(origin, fingerprint(row))


@dataclass(frozen=True)
class Decision:
    """What happens to one row: DROP (an identical copy is kept) or CONFLICT."""

    row: int
    action: str
    detail: str = ""


def decide(keyed_copies):
    """(key, Copies) -> (file, Decision) for every copy but the kept one.

    The rule is litmus_score.scoring.trajectory.resolve_duplicates, on fingerprints."""
    (run_id, trajectory_id), copies = keyed_copies
    copies = sorted(copies, key=lambda copy: copy.origin)
    # A single copy was a hash collision: resolve_duplicates decides nothing.
    decisions = resolve_duplicates((copy.origin, (run_id, trajectory_id), copy.fingerprint) for copy in copies)
    shown = ", ".join(f"{path} row {row}" for path, row in (copy.origin for copy in copies[:MAX_COPIES_SHOWN]))
    more = f" and {len(copies) - MAX_COPIES_SHOWN} more" if len(copies) > MAX_COPIES_SHOWN else ""
    for copy in copies:
        action = decisions.get(copy.origin)
        if action == DROP:
            yield copy.origin[0], Decision(copy.origin[1], DROP)
        elif action == CONFLICT:
            yield copy.origin[0], Decision(copy.origin[1], CONFLICT, f"{len(copies)} copies differ: {shown}{more}")


DECISIONS = tuple[str, list[Decision]]


def _decided(copies: beam.PCollection) -> beam.PCollection:
    """(exact key, Copy) of every row whose key hash repeats -> (file, [Decision])."""
    return (
        copies
        | "Group copies by key" >> beam.GroupByKey()
        | "Decide copies" >> beam.FlatMap(decide)
        | "Group decisions by file" >> beam.GroupByKey()
        | "Index decisions" >> beam.MapTuple(lambda path, decisions: (path, sorted(decisions, key=lambda d: d.row)))
        .with_output_types(DECISIONS)
    )


@beam.typehints.with_input_types(Shard)
@beam.typehints.with_output_types(DECISIONS)
class FindDuplicates(beam.PTransform):
    """Shards -> (file, [Decision]) for every file holding a dropped or conflicting copy."""

    def __init__(self, max_text_bytes: int):
        super().__init__()
        self._max_text_bytes = max_text_bytes

    def expand(self, shards):
        repeated = (
            shards
            | "Hash keys" >> beam.ParDo(HashKeysFn())
            | "Group buckets" >> beam.GroupByKey()
            | "Find repeated hashes" >> beam.Map(_repeated)
        )
        return _decided(
            shards
            | "Fingerprint candidates" >> beam.ParDo(FingerprintCandidatesFn(self._max_text_bytes),
                                                     beam.pvalue.AsList(repeated)))


@beam.typehints.with_input_types(pa.RecordBatch)
@beam.typehints.with_output_types(DECISIONS)
class FindDuplicatesInBatches(beam.PTransform):
    """Read batches -> (file, [Decision]), as FindDuplicates finds them in shards, for
    trajectories that are no files' rows (imported in the same job): the batches are
    the ones read again, so a runner keeps them until the decisions are made."""

    def expand(self, batches):
        repeated = (
            batches
            | "Hash keys" >> beam.ParDo(HashBatchKeysFn())
            | "Group buckets" >> beam.GroupByKey()
            | "Find repeated hashes" >> beam.Map(_repeated)
        )
        return _decided(
            batches
            | "Fingerprint candidates" >> beam.ParDo(FingerprintBatchCandidatesFn(), beam.pvalue.AsList(repeated)))


def return_free_memory() -> None:
    """Gives the pages glibc's allocator holds free back to the system (malloc_trim; nothing elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc


class SetAsideDuplicatesFn(beam.DoFn):
    """Batches -> batches without the dropped and conflicting copies (main),
    UNSCORED records of conflicting ones, and the dropped copies' counts (`stats`)."""

    def __init__(self):
        self._dropped = Metrics.counter(NAMESPACE, "duplicates_dropped")
        self._conflicting = Metrics.counter(NAMESPACE, "duplicates_conflicting")

    def setup(self):
        # The stage starts once every key hash was grouped for the decisions: memory that
        # grows with the input (a few copies of 5 bytes a trajectory), freed, but which
        # glibc keeps resident in its arenas under the scoring stage's own (docs/performance.md).
        return_free_memory()

    def process(self, batch: pa.RecordBatch, decisions: dict):
        mine = decisions.get(batch.column(s.SOURCE_FILE)[0].as_py()) if decisions and batch.num_rows else None
        decided = {d.row: d for d in mine or ()}
        positions = batch.column(s.SOURCE_ROW).to_numpy()
        at = np.flatnonzero(np.isin(positions, np.fromiter(decided, np.int64, len(decided)))) if decided else ()
        if len(at):
            yield from self._set_aside(batch, positions, decided, at)
        else:
            yield batch

    def _set_aside(self, batch, positions, decided, at):
        actions = [decided[row] for row in positions[at].tolist()]
        dropped = at[[d.action == DROP for d in actions]]
        conflicting = at[[d.action == CONFLICT for d in actions]]
        if len(dropped):
            self._dropped.inc(len(dropped))
            yield beam.pvalue.TaggedOutput(Tag.STATS, dropped_statistics(batch.take(pa.array(dropped))))
        if len(conflicting):
            self._conflicting.inc(len(conflicting))
            details = [decided[row].detail for row in positions[conflicting].tolist()]
            yield beam.pvalue.TaggedOutput(Tag.UNSCORED, unscored_table(
                batch.take(pa.array(conflicting)), [[c.DUPLICATE_TRAJECTORY]] * len(conflicting), details))
        keep = np.ones(batch.num_rows, bool)
        keep[at] = False
        if keep.any():
            yield batch.filter(pa.array(keep))


def dropped_statistics(rows: pa.RecordBatch) -> dict:
    """Per-group statistics of dropped copies: they count in duplicates_dropped only."""
    group, keys = group_codes(rows.column("run_id"), rows.column("agent"))
    counts = np.bincount(group, minlength=len(keys))
    return {keys[g]: m.merge(m.new_group(), {"counts": {"duplicates_dropped": int(n)}})
            for g, n in enumerate(counts.tolist()) if n}


@beam.typehints.with_input_types(pa.RecordBatch)
class SetAsideDuplicates(beam.PTransform):
    """Batches and the decisions of FindDuplicates -> batches (main), `unscored`, `stats`."""

    def __init__(self, decisions):
        super().__init__()
        self._decisions = decisions

    def expand(self, batches):
        return batches | "Set aside duplicates" >> beam.ParDo(
            SetAsideDuplicatesFn(), beam.pvalue.AsDict(self._decisions)
        ).with_output_types(pa.RecordBatch, **{Tag.UNSCORED: pa.Table, Tag.STATS: dict}).with_outputs(
            Tag.UNSCORED, Tag.STATS, main="batches")
