"""The log files an import reads: what its patterns match, which of them are
opened, the work items they are cut into, and a local copy for the formats'
libraries, which open paths."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import stat
import tempfile

from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems

from transforms.conform import UNREADABLE
from transforms.shardfiles import identify


class NoMatchingLogs(ValueError):
    """A LOGS argument that matches no log file."""


class SkippedLog(OSError):
    """A matched path that is not opened (not_a_file says why)."""


def _match(pattern: str) -> list:
    try:
        return [m.path for m in FileSystems.match([pattern])[0].metadata_list]
    except BeamIOError:
        return []


def _is_local(path: str) -> bool:
    return FileSystems.get_scheme(path) is None


def _local_folder(folder: str, suffixes) -> list:
    """The paths under a local folder, at any depth, whose names end in one
    of `suffixes`, hidden names left out (as a glob leaves them). Linked
    folders are followed once each, so a link looping back ends there; a
    broken or looping link with a log's name is listed, for the import to
    name it."""
    found, seen = [], set()
    for top, folders, files in os.walk(folder, followlinks=True):
        seen.add(os.path.realpath(top))
        folders[:] = sorted(name for name in folders if not name.startswith(".")
                            and os.path.realpath(os.path.join(top, name)) not in seen)
        found += [os.path.join(top, name) for name in sorted(files)
                  if name.endswith(suffixes) and not name.startswith(".")]
    return found


def _local_logs(pattern: str, suffixes) -> list:
    """Every path a local pattern names, folders expanded, including the
    broken links and special files Beam's match skips or opens blindly."""
    if glob.has_magic(pattern):
        named = sorted(glob.glob(pattern, recursive="**" in pattern))
    else:
        named = [pattern] if os.path.lexists(pattern) else []
    return [log for path in named
            for log in (_local_folder(path, suffixes) if os.path.isdir(path) else [path])]


def _remote_logs(pattern: str, suffixes) -> list:
    matched = [] if pattern.endswith("/") else _match(pattern)
    if not matched:
        folder = pattern.rstrip("/")
        matched = [path for path in _match(FileSystems.join(folder, "**")) if path.endswith(suffixes)]
    return matched


def match_logs(patterns, suffixes) -> list:
    """The sorted, distinct files the patterns match. A folder stands for the
    files under it, at any depth, whose names end in one of `suffixes`.
    Local paths that are no regular file (a pipe, a broken or looping link)
    are kept: ImportLogFn names them and does not open them."""
    files = set()
    for pattern in patterns:
        matched = _local_logs(pattern, suffixes) if _is_local(pattern) else _remote_logs(pattern, suffixes)
        if not matched:
            raise NoMatchingLogs(f"no log file matches {pattern!r}")
        files.update(matched)
    return sorted(files)


def not_a_file(path: str) -> str | None:
    """Why a local path is not opened (None: it is a regular file, or not
    local): a pipe or device would hang or never end, a link may lead
    nowhere. Decided by stat alone, without opening it."""
    if not _is_local(path):
        return None
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        kind = "a broken or looping link" if os.path.islink(path) else "cannot be read"
        return f"skipped: {kind} ({error.strerror or error})"
    if not stat.S_ISREG(mode):
        return "skipped: not a regular file (a pipe, socket or device); not opened"
    return None


def _size(path: str) -> int | None:
    """A file's size in bytes without opening it; None where it is no regular file or cannot be had."""
    if not_a_file(path):
        return None
    try:
        if _is_local(path):
            return os.stat(path).st_size
        matched = FileSystems.match([path])[0].metadata_list
    except (OSError, BeamIOError):
        return None  # the import names the fault when it opens the file
    return matched[0].size_in_bytes if len(matched) == 1 else None


def plan_parts(files, splits, bytes_per_part: int | None) -> list:
    """The work items of `files`, (path, (start, stop) or None for the whole
    file): a file whose name ends in one of `splits` is cut into ranges of
    `bytes_per_part` bytes, known from its size alone, so that each is created
    as an element of its own (a runner spreads those, one big log over its
    workers); every other file is one item."""
    parts: list = []
    for path in files:
        size = _size(path) if bytes_per_part and path.endswith(tuple(splits)) else None
        if not size or not bytes_per_part:
            parts.append((path, None))
            continue
        # The last range runs to the end (None): whatever the file holds when it is read.
        parts += [(path, (start, start + bytes_per_part if start + bytes_per_part < size else None))
                  for start in range(0, size, bytes_per_part)]
    return parts


@contextlib.contextmanager
def local_copy(path: str):
    """A local path for `path`: itself when local, else a temporary copy (the
    formats' libraries open paths, not Beam's file objects)."""
    if FileSystems.get_scheme(path) is None:
        yield path
        return
    suffix = os.path.splitext(path)[1]
    with tempfile.NamedTemporaryFile(suffix=suffix) as copy:
        with FileSystems.open(path, compression_type="uncompressed") as source:
            shutil.copyfileobj(source, copy, 1 << 20)
        copy.flush()
        yield copy.name


def log_identities(paths) -> list:
    """(path, FileIdentity) of each log (transforms.shardfiles.identify: size,
    modification time, the sha256 of its last bytes where it is no Parquet
    file); None where it was never opened, or cannot be (the import names why)."""
    identities = []
    for path in paths:
        identity = None
        if not_a_file(path) is None:
            try:
                identity = identify(path)
            except UNREADABLE:
                pass
        identities.append((path, identity))
    return identities
