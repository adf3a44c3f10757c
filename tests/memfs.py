"""An object store in memory, registered with Beam as `memtest://`: no
folders, objects listed by prefix, a rename is a copy then a delete, and a
delete matches its paths as patterns (as on GCS and S3). Importing this module registers it."""

import io
import threading

from apache_beam.io.filesystem import BeamIOError, FileMetadata, FileSystem

SCHEME = "memtest"
_objects: dict = {}
_guard = threading.Lock()


class _Upload(io.BytesIO):
    """An object appears whole when its upload closes."""

    def __init__(self, path: str):
        super().__init__()
        self._path = path

    def close(self):
        if not self.closed:
            with _guard:
                _objects[self._path] = self.getvalue()
        super().close()


class MemoryFileSystem(FileSystem):
    @classmethod
    def scheme(cls):
        return SCHEME

    def join(self, basepath, *paths):
        return "/".join([basepath.rstrip("/"), *(path.strip("/") for path in paths)])

    def split(self, path):
        head, _, tail = path.rpartition("/")
        return head, tail

    def mkdirs(self, path):
        pass

    def has_dirs(self):
        return False

    def _list(self, dir_or_prefix):
        with _guard:
            found = [(path, len(data)) for path, data in _objects.items() if path.startswith(dir_or_prefix)]
        for path, size in found:
            yield FileMetadata(path, size, 0.0)

    def create(self, path, mime_type=None, compression_type=None):
        return _Upload(path)

    def open(self, path, mime_type=None, compression_type=None):
        with _guard:
            if path not in _objects:
                raise BeamIOError(f"no object {path}", {path: FileNotFoundError(path)})
            return io.BytesIO(_objects[path])

    def copy(self, source_file_names, destination_file_names):
        with _guard:
            for source, destination in zip(source_file_names, destination_file_names):
                _objects[destination] = _objects[source]

    def rename(self, source_file_names, destination_file_names):
        self.copy(source_file_names, destination_file_names)
        self.delete(source_file_names)

    def exists(self, path):
        return path in _objects

    def size(self, path):
        return len(_objects[path])

    def last_updated(self, path):
        return 0.0

    def checksum(self, path):
        return str(len(_objects[path]))

    def metadata(self, path):
        return FileMetadata(path, self.size(path), 0.0)

    def delete(self, paths):
        # As GCS's and S3's delete do: each path is matched as a glob pattern, a folder's prefix deleted whole.
        for path in paths:
            prefix = path.rstrip("/") + "/"
            with _guard:
                under = [name for name in _objects if name.startswith(prefix)]
            matched = [found.path for found in self.match([path])[0].metadata_list]
            with _guard:
                for name in matched + under:
                    _objects.pop(name, None)


def objects(prefix: str) -> dict:
    """path -> bytes of every object under `prefix`."""
    with _guard:
        return {path: data for path, data in _objects.items() if path.startswith(prefix)}
