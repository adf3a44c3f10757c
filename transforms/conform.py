"""A shard's columns as the contract's, value by value: each row stands alone.

A value that cannot be read as the contract's type (`"many"` as call_count,
2^40 as int32) is read as null in its own row only, and a string that is not
UTF-8 or longer than the bound is flagged in its own row (the
`_invalid_text` and `_too_large` columns, which completeness turns into
reasons). Which batch or row group a row travels in never matters. Used by
the read stage and by the duplicate index, which reads the key columns alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from litmus_score.scoring import contract as c
from litmus_score.scoring.trajectory import DEFAULT_BOUNDS
from transforms import schema as s

# Errors that mean "this file (or row group) is not readable Parquet".
UNREADABLE = (pa.ArrowException, OSError, EOFError, ValueError)
# Casts that fail on some values; a cast that is not implemented at all is a
# column of the wrong type.
_CAST_FAILED = (pa.ArrowInvalid,)
# Below this many elements, failing values are found one by one.
_BISECT_LEAF = 16


class ColumnTypeError(ValueError):
    """A column (or nested field) whose type cannot be read as the contract's."""

    def __init__(self, path: str, found: pa.DataType, expected: pa.DataType):
        self.path = path
        super().__init__(f"column {path!r} has type {found}, expected {expected}")


def failing(array: pa.Array, attempt) -> np.ndarray:
    """Which elements `attempt` (a function of a slice) fails on.

    Found by halving, so k failing values among n cost about k log n
    attempts, and a clean array costs one.
    """
    bad = np.zeros(len(array), bool)
    # A stack, not a recursive closure: that would hold itself, and `array`, in
    # a cycle, which keeps the batch's column until the garbage collector runs.
    pending = [(0, len(array))]
    while pending:
        start, length = pending.pop()
        if length == 0:
            continue
        try:
            attempt(array.slice(start, length))
            continue
        except _CAST_FAILED:
            pass
        if length <= _BISECT_LEAF:
            for i in range(start, start + length):
                try:
                    attempt(array.slice(i, 1))
                except _CAST_FAILED:
                    bad[i] = True
            continue
        half = length // 2
        pending += [(start + half, length - half), (start, half)]
    return bad


@dataclass
class Conformed:
    """An array on the contract's type, and what reading it found per element.

    `flags` maps (reason, dotted path) to the elements the reason applies to
    (invalid_text, too_large); `unread` says, per path, how many values
    could not be read as the contract's type and became null.
    """

    array: pa.Array
    flags: dict = field(default_factory=dict)
    unread: dict = field(default_factory=dict)


def _viewless_type(data_type: pa.DataType) -> pa.DataType:
    """`data_type` with each string_view or binary_view inside it made the
    large (64-bit offset) type: Arrow's take and filter have no kernel for
    view types, and polars writes them."""
    if pa.types.is_string_view(data_type):
        return pa.large_string()
    if pa.types.is_binary_view(data_type):
        return pa.large_binary()
    if pa.types.is_struct(data_type):
        return pa.struct([f.with_type(_viewless_type(f.type)) for f in data_type])
    if pa.types.is_list(data_type):
        return pa.list_(data_type.value_field.with_type(_viewless_type(data_type.value_type)))
    if pa.types.is_large_list(data_type):
        return pa.large_list(data_type.value_field.with_type(_viewless_type(data_type.value_type)))
    if pa.types.is_fixed_size_list(data_type):
        return pa.list_(data_type.value_field.with_type(_viewless_type(data_type.value_type)), data_type.list_size)
    if pa.types.is_map(data_type):
        return pa.map_(data_type.key_field.with_type(_viewless_type(data_type.key_type)),
                       data_type.item_field.with_type(_viewless_type(data_type.item_type)), data_type.keys_sorted)
    if pa.types.is_dictionary(data_type):
        return pa.dictionary(data_type.index_type, _viewless_type(data_type.value_type), data_type.ordered)
    return data_type


def without_views(array: pa.Array) -> pa.Array:
    """`array` with its view types cast to the large ones (same values; the
    cast does not validate UTF-8, which conforming then checks row by row)."""
    target = _viewless_type(array.type)
    return array if target == array.type else array.cast(target)


def _as_binary(array: pa.Array) -> pa.Array:
    """The bytes of a string-like array, without validating them."""
    if pa.types.is_dictionary(array.type):
        array = array.dictionary.take(array.indices) if len(array.dictionary) else pa.nulls(len(array), pa.string())
    if pa.types.is_string(array.type):
        return array.view(pa.binary())
    if pa.types.is_large_string(array.type):
        return array.view(pa.large_binary())
    return array


def _conform_text(array: pa.Array, path: str, max_bytes: int) -> Conformed:
    """A string column: invalid UTF-8 replaced by U+FFFD and flagged, over-long texts flagged."""
    raw = _as_binary(array)
    if not (pa.types.is_binary(raw.type) or pa.types.is_large_binary(raw.type)):
        return _conform_value(array, pa.string(), path)
    flags, lengths = {}, np.zeros(0, np.int64)
    if len(raw):
        offsets = np.frombuffer(raw.buffers()[1], np.int64 if pa.types.is_large_binary(raw.type) else np.int32)
        lengths = np.diff(offsets[raw.offset:raw.offset + len(raw) + 1])
    if len(lengths) and lengths.max() > max_bytes:
        # A null's slot may span bytes: only values count.
        flags[(c.TOO_LARGE, path)] = (lengths > max_bytes) & ~np.asarray(raw.is_null(), bool)
    invalid = failing(raw, lambda part: part.cast(pa.string()))
    if invalid.any():
        flags[(c.INVALID_TEXT, path)] = invalid
        at = np.flatnonzero(invalid)
        repaired = [value.decode("utf-8", "replace") for value in raw.take(pa.array(at)).to_pylist()]
        raw = pc.replace_with_mask(raw, pa.array(invalid), pa.array(repaired, pa.string()).cast(raw.type))
    # Valid UTF-8 now: a view, not a second validating cast.
    text = raw.view(pa.string() if pa.types.is_binary(raw.type) else pa.large_string())
    return Conformed(text.cast(pa.string()), flags)


def _conform_value(array: pa.Array, target: pa.DataType, path: str) -> Conformed:
    """A scalar column cast to `target`; values the cast fails on are null in their own row."""
    if array.type == target:
        return Conformed(array)
    # A finer timestamp (pandas writes nanoseconds) is truncated to the
    # contract's microseconds; every other cast must be lossless.
    lossless = not (pa.types.is_timestamp(target) and pa.types.is_timestamp(array.type))
    cast = lambda part: pc.cast(part, target, safe=lossless)  # noqa: E731
    try:
        cast(array.slice(0, 0))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise ColumnTypeError(path, array.type, target) from None
    try:
        return Conformed(cast(array))
    except _CAST_FAILED:
        pass
    bad = failing(array, cast)
    unread = {path: f"{int(bad.sum())} {array.type} value(s) cannot be read as {target}"}
    return Conformed(cast(pc.if_else(pa.array(bad), pa.scalar(None, array.type), array)), unread=unread)


def _lift(flags: dict, into: dict, per_parent, parent_valid: np.ndarray) -> None:
    for key, mask in flags.items():
        lifted = per_parent(mask) & parent_valid
        if lifted.any():
            into[key] = into[key] | lifted if key in into else lifted


def conform_array(array: pa.Array, target: pa.DataType, path: str,
                  max_text_bytes: int = DEFAULT_BOUNDS.max_text_bytes) -> Conformed:
    """`array` as `target`: fields matched by name, absent ones null, extras dropped.

    Every string inside is checked for UTF-8 and its length; the flags of
    nested values are lifted to the elements of `array` that hold them.
    """
    array = without_views(array)
    if pa.types.is_struct(target):
        if not pa.types.is_struct(array.type):
            raise ColumnTypeError(path, array.type, target)
        present = {array.type.field(i).name for i in range(array.type.num_fields)}
        valid = ~np.asarray(array.is_null(), bool)
        children: list[pa.Array] = []
        flags: dict[tuple[str, str], np.ndarray] = {}
        unread: dict[str, str] = {}
        for f in target:
            if f.name not in present:
                children.append(pa.nulls(len(array), f.type))
                continue
            child = conform_array(array.field(f.name), f.type, f"{path}.{f.name}", max_text_bytes)
            children.append(child.array)
            _lift(child.flags, flags, lambda mask: mask, valid)
            unread.update(child.unread)
        return Conformed(pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null()), flags, unread)
    if pa.types.is_list(target):
        if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
            raise ColumnTypeError(path, array.type, target)
        # Only the values this (maybe sliced) list array holds, from offset 0.
        offsets = array.offsets.to_numpy().astype(np.int64)
        first, offsets = offsets[0], offsets - offsets[0]
        values = conform_array(array.values.slice(first, offsets[-1]), target.value_type, f"{path}[]", max_text_bytes)

        def per_list(mask):
            counts = np.concatenate([[0], np.cumsum(mask)])
            return counts[offsets[1:]] > counts[offsets[:-1]]

        flags = {}
        _lift(values.flags, flags, per_list, ~np.asarray(array.is_null(), bool))
        lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values.array, type=target,
                                         mask=array.is_null())
        return Conformed(lists, flags, values.unread)
    if pa.types.is_string(target):
        return _conform_text(array, path, max_text_bytes)
    return _conform_value(array, target, path)


def _flag_column(flags: dict, reason: str, num_rows: int) -> pa.Array:
    """Per row, the paths flagged with `reason` (comma-separated), null where none."""
    paths = [(path, mask) for (flagged, path), mask in flags.items() if flagged == reason]
    if not paths:
        return pa.nulls(num_rows, pa.string())
    rows = np.logical_or.reduce([mask for _, mask in paths])
    values = np.full(num_rows, None, object)
    for i in np.flatnonzero(rows):
        values[i] = ", ".join(path for path, mask in paths if mask[i])
    return pa.array(values, pa.string())


def conform_batch(batch: pa.RecordBatch, source: str, first_row: int | Sequence[int],
                  max_text_bytes: int = DEFAULT_BOUNDS.max_text_bytes):
    """(batch on the contract schema plus provenance, flags and extra columns, issues).

    The provenance is `source` and each row's position in it: from
    `first_row` on, or, where the rows are not consecutive, one per row.

    A column that is absent or of an unreadable type becomes null, which the
    completeness check then reports as missing_field on every row it affects;
    a value that cannot be read becomes null in its own row. Input columns
    not used as contract columns (extra ones, and those of an unreadable
    type) ride along for the UNSCORED record, view types cast to the large
    ones so later stages can take and filter them; one whose name is taken
    gets the prefix s.RAW_PREFIX.
    """
    columns, fields, issues, used, flags = [], [], [], set(), {}
    names = set(batch.schema.names)
    for f in s.TRAJECTORY:
        column = pa.nulls(batch.num_rows, f.type)
        if f.name not in names:
            issues.append(f"column {f.name!r} is absent")
        else:
            try:
                conformed = conform_array(batch.column(f.name), f.type, f.name, max_text_bytes)
                column = conformed.array
                flags.update(conformed.flags)
                issues += [f"column {path!r}: {what}; read as null" for path, what in conformed.unread.items()]
                used.add(f.name)
            except ColumnTypeError as error:
                issues.append(str(error))
        columns.append(column)
        fields.append(f)
    # Made in Arrow and numpy, not from Python objects (a millisecond a batch).
    columns.append(pa.repeat(pa.scalar(source, pa.string()), batch.num_rows))
    rows = np.arange(first_row, first_row + batch.num_rows) if isinstance(first_row, int) else first_row
    columns.append(pa.array(rows, pa.int64()))
    columns.append(_flag_column(flags, c.INVALID_TEXT, batch.num_rows))
    columns.append(_flag_column(flags, c.TOO_LARGE, batch.num_rows))
    fields += s.PROVENANCE + s.READ_FLAGS
    taken = {f.name for f in fields}
    for i, f in enumerate(batch.schema):
        if f.name not in used:
            column = without_views(batch.column(i))
            columns.append(column)
            fields.append(f.with_name(s.RAW_PREFIX + f.name if f.name in taken else f.name).with_type(column.type))
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields)), issues

