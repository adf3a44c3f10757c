"""The input files of a run: what the patterns match, what each file is, and
opening it again as the same file.

Matching happens once, on the launcher, when the job is built:

    patterns   paths, globs and folders; a folder stands for the .parquet
               files under it at any depth, hidden names (. or _) left out
    files      one per real path, however often and however spelled
    identity   per file: size, modification time and the sha256 of its
               Parquet footer (and the rows that footer declares)
    copies     files whose size and footer agree are hashed whole; a file
               whose bytes equal another's is read once, under the first path

Every later open (the duplicate-key pass, the main read, the re-read of
repeated keys) goes through `opened`, which compares the file with the
identity recorded at matching: a file replaced or rewritten since then is
not read (ShardChanged), so one run never mixes two versions of a file.
What makes a file a shard at all is `not_a_shard`.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import stat
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems

from litmus_score.importers.sniff import suggestion
from litmus_score.scoring.layout import IMPORT_MANIFEST_FILE, OUTPUT_KIND_KEY, SHARD_KIND
from litmus_score.scoring.trajectory import REQUIRED_COLUMNS
from transforms.conform import UNREADABLE
from transforms.elements import FileIdentity, Shard

SHARD_SUFFIX = ".parquet"
# Below a folder, names starting so are not shards: hidden files, and what
# Spark, Hadoop and litmus-score keep while writing (_temporary/, _SUCCESS, .temp-*).
HIDDEN_PREFIXES = (".", "_")
_MAGIC = b"PAR1"
# Files identified (or hashed) at once on the launcher: object stores answer
# in tens of milliseconds, so thousands of shards are matched in parallel.
_MATCH_THREADS = 16
_HASH_CHUNK = 1 << 20


class NoMatchingShards(ValueError):
    """An input path, glob or folder that matches no file."""


class ShardChanged(OSError):
    """A file that is not the one the run matched: it changed since."""


def _is_local(path: str) -> bool:
    return FileSystems.get_scheme(path) is None


def open_file(path: str):
    """A seekable binary file: Arrow's own for local paths (fastest), Beam's elsewhere."""
    if _is_local(path):
        return pa.OSFile(path, "rb")
    return FileSystems.open(path, compression_type="uncompressed")


def _size_and_mtime(path: str, handle) -> tuple:
    """Of the open file itself where the OS can say (a local file renamed
    over after opening is still the one read), else of the object now."""
    if _is_local(path):
        found = os.fstat(handle.fileno())
        return found.st_size, found.st_mtime_ns
    metadata = FileSystems.get_filesystem(path).metadata(path)
    return metadata.size_in_bytes, round(metadata.last_updated_in_seconds * 1e9)


def _footer(handle) -> bytes:
    """The Parquet footer with its length and magic, or the file's last 8
    bytes when they declare none (not Parquet: the read will say so)."""
    size = handle.seek(0, os.SEEK_END)
    handle.seek(max(0, size - 8))
    tail = handle.read(8)
    length = int.from_bytes(tail[:4], "little")
    if tail[4:] != _MAGIC or length > size - 12:
        return tail
    handle.seek(size - 8 - length)
    return handle.read(length) + tail


def _declared_rows(footer: bytes):
    try:
        # The footer alone parses once a leading magic stands in for the file.
        return pq.read_metadata(pa.BufferReader(_MAGIC + footer)).num_rows
    except UNREADABLE:
        return None


def _identity(path: str, handle):
    """(the open file's FileIdentity without its rows, its footer); the file is left at its start."""
    size, mtime_ns = _size_and_mtime(path, handle)
    footer = _footer(handle)
    handle.seek(0)
    return FileIdentity(size, mtime_ns, hashlib.sha256(footer).hexdigest()), footer


def identify(path: str) -> FileIdentity:
    """The identity of the file at `path` now (OSError, BeamIOError if it cannot be opened)."""
    with open_file(path) as handle:
        identity, footer = _identity(path, handle)
    return replace(identity, rows=_declared_rows(footer))


def what_changed(recorded: FileIdentity, found: FileIdentity):
    """How `found` differs from `recorded`, in words; None if it does not."""
    if found.size != recorded.size:
        return f"size {recorded.size:,} -> {found.size:,} bytes"
    if found.footer_sha256 != recorded.footer_sha256:
        return "its last bytes differ"
    if found.mtime_ns != recorded.mtime_ns:
        return "modified since"
    return None


@contextlib.contextmanager
def opened(shard: Shard):
    """`shard`'s file, open, checked to be the file the run matched (else ShardChanged)."""
    with open_file(shard.path) as handle:
        if shard.identity is not None:
            change = what_changed(shard.identity, _identity(shard.path, handle)[0])
            if change:
                raise ShardChanged(f"the file changed after the run matched it ({change}); not read")
        yield handle


def changed_while_open(shard: Shard, handle):
    """How the open file's size or modification time moved since it was matched (None: it did not)."""
    if shard.identity is None:
        return None
    size, mtime_ns = _size_and_mtime(shard.path, handle)
    return what_changed(shard.identity, FileIdentity(size, mtime_ns, shard.identity.footer_sha256))


def not_a_shard(parquet: pq.ParquetFile, path: str):
    """Why the Parquet file at `path` is no trajectory shard (None: it is
    one): an output of litmus-score says what it is in its key-value
    metadata, a shard an import wrote counts once its import finished, and a
    shard holds every required column of the contract."""
    kind = (parquet.metadata.metadata or {}).get(OUTPUT_KIND_KEY.encode())
    if kind is not None and kind != SHARD_KIND.encode():
        return (f"an output of litmus-score ({kind.decode('utf-8', 'replace')}), not a trajectory shard; "
                "refused as input")
    if kind is not None and not _import_finished(path):
        return (f"a shard of an import that did not finish (no {IMPORT_MANIFEST_FILE} beside its folder); "
                "refused as input")
    names = parquet.schema_arrow.names
    missing = [name for name in REQUIRED_COLUMNS if name not in names]
    if missing:
        return (f"not a trajectory shard: no column {', '.join(missing)} (found: "
                + ", ".join(names[:20]) + (", ..." if len(names) > 20 else "") + ")")
    return None


def _import_finished(shard_path: str) -> bool:
    """Whether the import that wrote a shard (IMPORT/trajectories/part-...) wrote its manifest, its last step."""
    import_folder = FileSystems.split(FileSystems.split(shard_path)[0])[0]
    return FileSystems.exists(FileSystems.join(import_folder, IMPORT_MANIFEST_FILE))


def _hidden(relative: str) -> bool:
    return any(part.startswith(HIDDEN_PREFIXES) for part in relative.split("/") if part)


def _local_folder(folder: str):
    """(path, error) of every shard under a local folder; linked folders are
    followed once each, and a folder that cannot be listed is named."""
    found: list[tuple[str, str | None]] = []  # (path, why it cannot be read)
    seen = set()

    def unlisted(error):
        found.append((error.filename, f"a folder that cannot be listed: {error.strerror or error}"))

    for top, folders, files in os.walk(folder, onerror=unlisted, followlinks=True):
        seen.add(os.path.realpath(top))
        folders[:] = sorted(name for name in folders if not name.startswith(HIDDEN_PREFIXES)
                            and os.path.realpath(os.path.join(top, name)) not in seen)
        found += [(os.path.join(top, name), None) for name in sorted(files)
                  if name.endswith(SHARD_SUFFIX) and not name.startswith(HIDDEN_PREFIXES)]
    return found


def _local_entry(path: str, error=None):
    """(canonical path, why it cannot be read or None, spelling) of a local path, `error` if known."""
    try:
        canonical = os.path.realpath(path, strict=True)
        mode = os.stat(canonical).st_mode
    except OSError as failure:  # a broken or looping symbolic link
        return os.path.abspath(path), error or f"cannot be opened: {failure.strerror or failure}", path
    if error is None and not stat.S_ISREG(mode):
        error = "not a regular file (a pipe, socket or device); refused"
    return canonical, error, path


def _local_entries(pattern: str) -> list:
    """Every path a local pattern names, folders expanded, including what
    Beam's match skips silently (broken links, special files)."""
    named = (sorted(glob.glob(pattern, recursive="**" in pattern)) if glob.has_magic(pattern)
             else [pattern] if os.path.lexists(pattern) else [])
    entries = []
    for path in named:
        inside = _local_folder(path) if os.path.isdir(path) else [(path, None)]
        entries += [_local_entry(found, error) for found, error in inside]
    return entries


def _match(pattern: str) -> list:
    try:
        return FileSystems.match([pattern])[0].metadata_list
    except BeamIOError:
        return []


def _remote_entries(pattern: str) -> list:
    """Objects a pattern names; one without glob characters that names no
    object (or ends in '/') is a folder: the .parquet objects under it."""
    matched = [] if pattern.endswith("/") else [found.path for found in _match(pattern)]
    if not matched and not glob.has_magic(pattern):
        folder = pattern.rstrip("/") + "/"
        matched = [found.path for found in _match(folder + "**")
                   if found.path.endswith(SHARD_SUFFIX) and not _hidden(found.path[len(folder):])]
    return [(path, None, path) for path in matched]


def _identified(shards: list) -> list:
    """The shards with their identities; one that cannot be opened gets an error instead."""
    def identified(shard: Shard) -> Shard:
        if shard.error is not None:
            return shard
        try:
            return replace(shard, identity=identify(shard.path))
        except UNREADABLE as error:  # BeamIOError is an OSError
            return replace(shard, error=f"cannot be opened: {error}")

    with ThreadPoolExecutor(_MATCH_THREADS) as pool:
        return list(pool.map(identified, shards))


def content_sha256(shard: Shard):
    """The sha256 of every byte of a shard's file (None if it cannot be read as matched)."""
    digest = hashlib.sha256()
    try:
        with opened(shard) as handle:
            while chunk := handle.read(_HASH_CHUNK):
                digest.update(chunk)
    except UNREADABLE:
        return None
    return digest.hexdigest()


def _read_once(shards: list) -> list:
    """The shards, a byte-identical copy folded into the first file (by path)
    whose bytes it repeats. Only files whose size and footer agree are
    hashed whole."""
    alike = defaultdict(list)
    for shard in shards:
        if shard.identity is not None:
            alike[shard.identity.size, shard.identity.footer_sha256].append(shard)
    candidates = [shard for group in alike.values() if len(group) > 1 for shard in group]
    if not candidates:
        return shards
    with ThreadPoolExecutor(_MATCH_THREADS) as pool:
        digests = dict(zip((shard.path for shard in candidates), pool.map(content_sha256, candidates)))
    first: dict[str, str] = {}  # digest -> the path kept
    copies = defaultdict(list)
    for shard in shards:  # sorted by path: the first of identical files is kept
        digest = digests.get(shard.path)
        if digest is None:
            continue
        if digest in first:
            copies[first[digest]].append(shard.path)
        else:
            first[digest] = shard.path
    folded = {path for paths in copies.values() for path in paths}
    return [replace(shard, copies=tuple(copies.get(shard.path, ()))) for shard in shards if shard.path not in folded]


def match_shards(patterns) -> list:
    """The Shards the patterns match, sorted by path: one per file however
    often and under whatever spellings it was matched, one per set of
    byte-identical files, each with its identity. Every pattern must match
    something (NoMatchingShards)."""
    found: dict[str, tuple[str, set[str], str | None]] = {}  # canonical path -> (path, aliases, error)
    for pattern in patterns:
        entries = _local_entries(pattern) if _is_local(pattern) else _remote_entries(pattern)
        if not entries:
            raise NoMatchingShards(
                f"the folder {pattern!r} holds no {SHARD_SUFFIX} file (hidden names left out){suggestion(pattern)}"
                if _is_local(pattern) and os.path.isdir(pattern) else f"no file matches --input {pattern!r}")
        for canonical, error, spelling in entries:
            path, aliases, first_error = found.get(canonical, (canonical, set(), error))
            if spelling != canonical:
                aliases.add(spelling)
            found[canonical] = (path, aliases, first_error)
    shards = [Shard(path, tuple(sorted(aliases)), error) for path, aliases, error in sorted(found.values())]
    return _read_once(_identified(shards))
