"""Records shared by the stages: the UNSCORED record and the safety net's dead letters."""

from __future__ import annotations

import base64
import datetime
import decimal
import json

import pyarrow as pa
import pyarrow.compute as pc

from litmus_score.scoring.contract import PIPELINE_ERROR
from litmus_score.scoring.trajectory import decoded
from transforms import schema as s

# Bounds on what one record may say, so a hostile trajectory cannot bloat
# the outputs through the detail text.
MAX_DETAIL_CHARS = 2000


def _json_default(value):
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, decimal.Decimal):
        return str(value)
    return repr(value)


def with_binary_text(data_type: pa.DataType) -> pa.DataType:
    """`data_type` with every string type inside it made the binary type of
    the same layout (so an array can be viewed as either)."""
    if pa.types.is_string(data_type):
        return pa.binary()
    if pa.types.is_large_string(data_type):
        return pa.large_binary()
    if pa.types.is_struct(data_type):
        return pa.struct([f.with_type(with_binary_text(f.type)) for f in data_type])
    if pa.types.is_list(data_type):
        return pa.list_(with_binary_text(data_type.value_type))
    if pa.types.is_large_list(data_type):
        return pa.large_list(with_binary_text(data_type.value_type))
    return data_type


def _python_rows(table: pa.Table) -> list:
    """The rows as Python values; text that is not UTF-8 decoded with U+FFFD
    (extra columns are data, never a reason to fail)."""
    try:
        return table.to_pylist()
    except UnicodeDecodeError:
        schema = pa.schema([f.with_type(with_binary_text(f.type)) for f in table.schema])
        return decoded(table.cast(schema).to_pylist())


def extra_columns_json(rows: pa.RecordBatch) -> list:
    """Per row, the input columns outside the contract as JSON text (None if none)."""
    extras = [name for name in rows.schema.names if name not in s.READ_COLUMNS]
    if not extras:
        return [None] * rows.num_rows
    return [
        json.dumps({name.removeprefix(s.RAW_PREFIX): value for name, value in row.items()},
                   sort_keys=True, default=_json_default, ensure_ascii=False)
        for row in _python_rows(pa.Table.from_batches([rows.select(extras)]))
    ]


def bound_detail(detail: str) -> str:
    if len(detail) <= MAX_DETAIL_CHARS:
        return detail
    return detail[: MAX_DETAIL_CHARS - 1] + "…"


def unscored_table(rows: pa.RecordBatch, reasons, details) -> pa.Table:
    """UNSCORED records for rows of a read batch, with their reasons and details."""
    calls = rows.column("calls")
    return pa.table(
        {
            "run_id": rows.column("run_id"),
            "agent": rows.column("agent"),
            "trajectory_id": rows.column("trajectory_id"),
            "reasons": pa.array([list(r) for r in reasons], pa.list_(pa.string())),
            "detail": pa.array([bound_detail(d) for d in details], pa.string()),
            "source_file": rows.column(s.SOURCE_FILE),
            "source_row": rows.column(s.SOURCE_ROW),
            "input_calls": pc.cast(pc.fill_null(pc.list_value_length(calls), 0), pa.int64()),
            "input_row": pa.StructArray.from_arrays(
                [rows.column(name) for name in s.TRAJECTORY.names], fields=list(s.TRAJECTORY)
            ),
            "extra_columns": pa.array(extra_columns_json(rows), pa.string()),
        },
        schema=s.UNSCORED,
    )


def failed_batch_to_unscored(failure) -> pa.Table:
    """A batch that raised unexpectedly (the safety net's dead letter) as UNSCORED.

    Every row it holds is kept under reason pipeline_error, with the error
    named in the detail, so the run still accounts for it. A dead letter of
    context resolution holds only its complete rows: the others are already
    UNSCORED.
    """
    element, (error_type, error_repr, _traceback) = failure
    batch = element if isinstance(element, pa.RecordBatch) else element.batch.filter(pa.array(element.complete))
    detail = f"unexpected {getattr(error_type, '__name__', error_type)}: {error_repr}"
    return unscored_table(batch, [[PIPELINE_ERROR]] * batch.num_rows, [detail] * batch.num_rows)
