"""Files of a run written through Beam's FileSystems (local, gs://, ...):
JSON documents in their one byte form, files written whole or not at all,
and a file handle that counts and hashes what passes through it.

The stages (transforms.write), the importer's writer and the launcher's
publishing (pipeline.publish) all write with these, so every document of a
run has the same bytes for the same content.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import uuid

from apache_beam.io.filesystems import FileSystems
from apache_beam.io.localfilesystem import LocalFileSystem

from litmus_score.scoring.layout import PARTIAL_PREFIX


def to_json(document) -> str:
    """The text of a JSON document as litmus-score writes it: sorted keys, indented, UTF-8, a final newline."""
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def is_local(path: str) -> bool:
    return isinstance(FileSystems.get_filesystem(path), LocalFileSystem)


def literal_pattern(path: str) -> str:
    """A Beam match pattern that matches `path` alone: Beam reads *, ? and [
    as globs and has no escape, but a one-character class holds each."""
    return re.sub(r"([*?\[])", r"[\1]", path)


def delete_exactly(paths) -> None:
    """Deletes each of `paths` (a local folder whole) and nothing else: a
    path is never a pattern (Beam's delete matches its paths as globs, so
    `out/o[ab]` would delete `out/oa` and `out/ob`). In order, one at a time."""
    for path in paths:
        if not is_local(path):
            FileSystems.delete([literal_pattern(path)])
        elif os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def rename_exactly(sources: list, destinations: list) -> None:
    """Beam's rename, with each source taken literally: on an object store a
    rename is a copy then a delete, and Beam's delete matches patterns."""
    if all(is_local(path) for path in sources):
        FileSystems.rename(sources, destinations)
        return
    FileSystems.copy(sources, destinations)
    delete_exactly(sources)


def objects_under(folder: str) -> list:
    """Every object under an object store's `folder` (its name taken literally)."""
    pattern = FileSystems.join(literal_pattern(folder), "**")
    return [found.path for found in FileSystems.match([pattern])[0].metadata_list]


def write_text(path: str, text: str) -> None:
    with FileSystems.create(path) as handle:
        handle.write(text.encode("utf-8"))


class DigestingFile:
    """A file being written that counts and hashes the bytes passing through."""

    def __init__(self, handle):
        self._handle = handle
        self._sha256 = hashlib.sha256()
        self.size = 0
        self._abandoned = False

    def write(self, data) -> int:
        view = memoryview(data)
        if self._abandoned:
            return view.nbytes
        self._sha256.update(view)
        self.size += view.nbytes
        return self._handle.write(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._handle.flush()

    @property
    def closed(self) -> bool:
        return self._handle.closed

    def close(self) -> None:
        if not self._abandoned:
            self._handle.close()

    def abandon(self) -> None:
        """After a write failed: closes the file as it is, and takes whatever
        is written to it from now on without writing it (a writer wrapping it
        can still be closed)."""
        self._abandoned = True
        with contextlib.suppress(OSError):  # closing flushes into the disk that failed
            self._handle.close()

    def entry(self, path: str, rows) -> dict:
        """The manifest's record of this file."""
        return {"path": path, "rows": rows, "bytes": self.size, "sha256": self._sha256.hexdigest()}


def write_whole(folder: str, name: str, data: bytes) -> dict:
    """Writes folder/name whole or not at all (a temporary name, then a
    rename, which replaces an earlier file); returns its manifest entry."""
    partial = FileSystems.join(folder, f"{PARTIAL_PREFIX}{uuid.uuid4().hex}-{name}")
    with FileSystems.create(partial) as handle:
        digesting = DigestingFile(handle)
        digesting.write(data)
    rename_exactly([partial], [FileSystems.join(folder, name)])
    return digesting.entry(name, None)
