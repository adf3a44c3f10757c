"""Stage 2: completeness. Incomplete trajectories leave as UNSCORED data.

Each completeness rule of scoring.trajectory.check_completeness is computed
here on whole columns; tests/test_agreement.py proves the reasons equal the
reference's on random trajectories.
"""

from __future__ import annotations

from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.metrics import Metrics

from scoring import contract as c
from scoring.trajectory import (
    REQUIRED_CALL_FIELDS,
    REQUIRED_COLUMNS,
    REQUIRED_COMMIT_FIELDS,
    REQUIRED_CONTEXT_FIELDS,
)
from transforms import NAMESPACE
from transforms.coders import ArrowCoder, batch_from_ipc, join, registered, split, to_ipc
from transforms.columnar import FlatCalls, equals, is_null
from transforms.records import FAILED, UNSCORED, unscored_table


@dataclass(frozen=True)
class Checked:
    """A read batch and which of its rows are complete.

    The batch travels whole: filtering would copy every call's strings, and
    the incomplete rows have already left as UNSCORED records.
    """

    batch: pa.RecordBatch
    complete: np.ndarray  # bool per row, some True


@registered
class CheckedCoder(ArrowCoder):
    element_type = Checked

    def encode(self, value: Checked) -> bytes:
        return join(to_ipc(value.batch), np.packbits(value.complete).tobytes())

    def decode(self, encoded: bytes) -> Checked:
        batch, mask = split(encoded, 2)
        batch = batch_from_ipc(batch)
        complete = np.unpackbits(np.frombuffer(mask, np.uint8), count=batch.num_rows).astype(bool)
        return Checked(batch, complete)

    def estimate_size(self, value: Checked) -> int:
        return value.batch.nbytes + value.complete.nbytes


def _duplicate_ids(flat: FlatCalls, present: np.ndarray) -> np.ndarray:
    """Rows in which some call_id occurs twice."""
    call_ids = flat.field("call_id")
    codes = pc.fill_null(pc.dictionary_encode(call_ids).indices, 0).to_numpy().astype(np.int64)
    keep = present & ~is_null(call_ids)
    width = int(codes.max(initial=0)) + 1
    keys = np.sort(flat.row[keep] * width + codes[keep])
    return np.bincount(keys[1:][keys[1:] == keys[:-1]] // width, minlength=flat.num_rows) > 0


def _steps_out_of_order(flat: FlatCalls, present: np.ndarray) -> np.ndarray:
    """Rows where a call's step is not above the previous call's (nulls skipped)."""
    steps = flat.field("step")
    keep = present & ~is_null(steps)
    rows = flat.row[keep]
    values = steps.to_numpy(zero_copy_only=False)[keep].astype(np.int64)
    bad = (rows[1:] == rows[:-1]) & (values[1:] <= values[:-1])
    return np.bincount(rows[1:][bad], minlength=flat.num_rows) > 0


def missing_paths(batch: pa.RecordBatch, flat: FlatCalls) -> dict:
    """Required column or call field -> rows where it is null or absent."""
    missing = {name: is_null(batch.column(name)) for name in REQUIRED_COLUMNS}
    present = ~is_null(flat.calls)
    missing["calls[]"] = flat.any_per_row(~present)
    for name in REQUIRED_CALL_FIELDS:
        missing[f"calls[].{name}"] = flat.any_per_row(present & is_null(flat.field(name)))
    has_proposal = ~is_null(flat.field("proposal"))
    for name in REQUIRED_CONTEXT_FIELDS:
        missing[f"calls[].proposal.{name}"] = flat.any_per_row(has_proposal & is_null(flat.field(f"proposal.{name}")))
    has_commit = ~is_null(flat.field("commit"))
    for name in REQUIRED_COMMIT_FIELDS:
        missing[f"calls[].commit.{name}"] = flat.any_per_row(has_commit & is_null(flat.field(f"commit.{name}")))
    return missing


def completeness_reasons(batch: pa.RecordBatch):
    """(reason -> rows that break it, missing path -> rows), reasons in canonical order."""
    flat = FlatCalls.of(batch)
    present = ~is_null(flat.calls)
    missing = missing_paths(batch, flat)
    lengths = pc.cast(pc.list_value_length(batch.column("calls")), pa.int64())
    reasons = {
        c.SCHEMA_VERSION_UNSUPPORTED: ~is_null(batch.column("schema_version"))
        & ~equals(batch.column("schema_version"), c.SCHEMA_VERSION),
        c.MISSING_FIELD: np.logical_or.reduce(list(missing.values())),
        # Null on either side is missing_field, not a mismatch.
        c.CALL_COUNT_MISMATCH: equals(pc.not_equal(lengths, batch.column("call_count")), True),
        c.DUPLICATE_CALL_ID: _duplicate_ids(flat, present),
        c.STEPS_OUT_OF_ORDER: _steps_out_of_order(flat, present),
        c.TRUNCATED: equals(batch.column("episode_outcome"), c.TRUNCATED_OUTCOME),
    }
    return reasons, missing


def _detail(i: int, reasons: dict, missing: dict, batch: pa.RecordBatch) -> str:
    parts = []
    if reasons[c.MISSING_FIELD][i]:
        parts.append("missing: " + ", ".join(path for path, rows in missing.items() if rows[i]))
    if reasons[c.CALL_COUNT_MISMATCH][i]:
        count = batch.column("call_count")[i].as_py()
        parts.append(f"call_count {count} != {len(batch.column('calls')[i])} calls")
    if reasons[c.DUPLICATE_CALL_ID][i]:
        parts.append("a call_id repeats")
    if reasons[c.STEPS_OUT_OF_ORDER][i]:
        parts.append("steps do not increase")
    if reasons[c.TRUNCATED][i]:
        parts.append("episode_outcome truncated")
    return "; ".join(parts)


class CheckCompletenessFn(beam.DoFn):
    def __init__(self):
        self._unscored = Metrics.counter(NAMESPACE, "trajectories_incomplete")

    def process(self, batch: pa.RecordBatch):
        reasons, missing = completeness_reasons(batch)
        incomplete = np.logical_or.reduce(list(reasons.values()))
        if not incomplete.all():
            yield Checked(batch, ~incomplete)
        if not incomplete.any():
            return
        rows = np.flatnonzero(incomplete)
        self._unscored.inc(len(rows))
        yield beam.pvalue.TaggedOutput(
            UNSCORED,
            unscored_table(
                batch.filter(pa.array(incomplete)),
                [[reason for reason, mask in reasons.items() if mask[i]] for i in rows],
                [_detail(i, reasons, missing, batch) for i in rows],
            ),
        )


class CheckCompleteness(beam.PTransform):
    """Batches -> Checked batches with some complete row (main), UNSCORED tables
    (`unscored`) and, should a batch raise unexpectedly, the batch and its
    error (`failed`)."""

    def expand(self, batches):
        return batches | "Check completeness" >> beam.ParDo(CheckCompletenessFn()).with_output_types(
            Checked, **{UNSCORED: pa.Table}
        ).with_outputs(UNSCORED, main="complete").with_exception_handling(dead_letter_tag=FAILED)
