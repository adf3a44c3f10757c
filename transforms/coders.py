"""Coders for the Arrow elements that travel between stages.

Beam samples element sizes for its metrics by encoding the first elements of
every output, and with batches as elements nearly every element is among the
first. The default coder would pickle a whole batch just to measure it; these
coders report Arrow's own byte count instead and encode as Arrow IPC.

The coders of pa.RecordBatch and pa.Table are registered here; a stage that
defines an element type of its own defines its coder beside it and registers
it with `registered`, so importing the stage is enough to use it.
"""

from __future__ import annotations

import apache_beam as beam
import pyarrow as pa


def to_ipc(table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(data).read_all()


def batch_from_ipc(data: bytes) -> pa.RecordBatch:
    return pa.ipc.open_stream(data).read_next_batch()


def join(*parts: bytes) -> bytes:
    """Encoded parts as one, each but the last preceded by its length."""
    return b"".join(len(part).to_bytes(8, "little") + part for part in parts[:-1]) + parts[-1]


def split(encoded: bytes, count: int) -> list:
    """The `count` parts that `join` made."""
    parts, start = [], 0
    for _ in range(count - 1):
        end = start + 8 + int.from_bytes(encoded[start:start + 8], "little")
        parts.append(encoded[start + 8:end])
        start = end
    return parts + [encoded[start:]]


class ArrowCoder(beam.coders.Coder):
    """Base of the Arrow element coders; subclasses set `element_type`."""

    element_type: type

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self):
        return self.element_type

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


def registered(coder: type[ArrowCoder]) -> type[ArrowCoder]:
    """Class decorator: `coder` becomes the coder of its element type."""
    beam.coders.registry.register_coder(coder.element_type, coder)
    return coder


@registered
class TableCoder(ArrowCoder):
    element_type = pa.Table

    def encode(self, value) -> bytes:
        return to_ipc(value)

    def decode(self, encoded: bytes) -> pa.Table:
        return from_ipc(encoded)

    def estimate_size(self, value) -> int:
        return value.nbytes


@registered
class RecordBatchCoder(TableCoder):
    element_type = pa.RecordBatch

    def decode(self, encoded: bytes) -> pa.RecordBatch:
        return batch_from_ipc(encoded)
