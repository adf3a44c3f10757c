"""Small vectorized helpers over a batch of trajectories and its flattened calls."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class FlatCalls:
    """The calls of a batch, one entry per call, with the row each belongs to."""

    calls: pa.StructArray
    row: np.ndarray  # int64 row index of each call in the batch
    num_rows: int

    @classmethod
    def of(cls, batch: pa.RecordBatch) -> FlatCalls:
        column = batch.column("calls")
        return cls(column.flatten(), pc.list_parent_indices(column).to_numpy(), batch.num_rows)

    def field(self, path: str) -> pa.Array:
        """A (possibly nested, dotted) call field; null wherever a parent is null."""
        return struct_field(self.calls, path)

    def any_per_row(self, mask) -> np.ndarray:
        """For each row: does any of its calls have `mask` set?"""
        return np.bincount(self.row[np.asarray(mask, bool)], minlength=self.num_rows) > 0


def struct_field(array, path: str):
    """A (possibly nested, dotted) field of a struct array; null wherever a parent is null."""
    for name in path.split("."):
        array = pc.struct_field(array, name)
    return array


def is_null(array) -> np.ndarray:
    return np.asarray(array.is_null(), bool)


def equals(array, value) -> np.ndarray:
    """Element-wise array == value, with null as False."""
    return np.asarray(pc.fill_null(pc.equal(array, value), False), bool)


def encode(array: pa.Array):
    """(int64 code per element, distinct values); null is a value of its own."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    encoded = pc.dictionary_encode(array, null_encoding="encode")
    return encoded.indices.to_numpy().astype(np.int64), encoded.dictionary.to_pylist()


def group_codes(run_id: pa.Array, agent: pa.Array):
    """(group code per row, group key per code) for (run_id, agent) pairs."""
    runs, run_values = encode(run_id)
    agents, agent_values = encode(agent)
    keys = [(run, agent) for run in run_values for agent in agent_values]
    return runs * len(agent_values) + agents, keys
