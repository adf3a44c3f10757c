"""Coders for the Arrow elements that travel between stages.

Beam samples element sizes for its metrics by encoding the first elements of
every output, and with batches as elements nearly every element is among the
first. The default coder would pickle a whole batch just to measure it; these
coders report Arrow's own byte count instead and encode as Arrow IPC.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa

from transforms.completeness import Checked
from transforms.resolve import Resolved


def _to_ipc(table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(data).read_all()


def _batch_from_ipc(data: bytes) -> pa.RecordBatch:
    return pa.ipc.open_stream(data).read_next_batch()


def _join(first: bytes, second: bytes) -> bytes:
    """Two encoded parts as one, the first's length in front."""
    return len(first).to_bytes(8, "little") + first + second


def _split(encoded: bytes) -> tuple:
    end = 8 + int.from_bytes(encoded[:8], "little")
    return encoded[8:end], encoded[end:]


class _ArrowCoder(beam.coders.Coder):
    def is_deterministic(self) -> bool:
        return False

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


class RecordBatchCoder(_ArrowCoder):
    def encode(self, value: pa.RecordBatch) -> bytes:
        return _to_ipc(value)

    def decode(self, encoded: bytes) -> pa.RecordBatch:
        return _batch_from_ipc(encoded)

    def estimate_size(self, value: pa.RecordBatch) -> int:
        return value.nbytes

    def to_type_hint(self):
        return pa.RecordBatch


class TableCoder(_ArrowCoder):
    def encode(self, value: pa.Table) -> bytes:
        return _to_ipc(value)

    def decode(self, encoded: bytes) -> pa.Table:
        return _from_ipc(encoded)

    def estimate_size(self, value: pa.Table) -> int:
        return value.nbytes

    def to_type_hint(self):
        return pa.Table


class CheckedCoder(_ArrowCoder):
    def encode(self, value: Checked) -> bytes:
        return _join(_to_ipc(value.batch), np.packbits(value.complete).tobytes())

    def decode(self, encoded: bytes) -> Checked:
        batch, mask = _split(encoded)
        batch = _batch_from_ipc(batch)
        complete = np.unpackbits(np.frombuffer(mask, np.uint8), count=batch.num_rows).astype(bool)
        return Checked(batch, complete)

    def estimate_size(self, value: Checked) -> int:
        return value.batch.nbytes + value.complete.nbytes

    def to_type_hint(self):
        return Checked


class ResolvedCoder(_ArrowCoder):
    def encode(self, value: Resolved) -> bytes:
        return _join(_to_ipc(value.trajectories), _to_ipc(value.calls))

    def decode(self, encoded: bytes) -> Resolved:
        trajectories, calls = _split(encoded)
        return Resolved(_from_ipc(trajectories), _from_ipc(calls))

    def estimate_size(self, value: Resolved) -> int:
        return value.trajectories.nbytes + value.calls.nbytes

    def to_type_hint(self):
        return Resolved


beam.coders.registry.register_coder(pa.RecordBatch, RecordBatchCoder)
beam.coders.registry.register_coder(pa.Table, TableCoder)
beam.coders.registry.register_coder(Checked, CheckedCoder)
beam.coders.registry.register_coder(Resolved, ResolvedCoder)
