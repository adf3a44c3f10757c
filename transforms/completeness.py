"""Stage 2: completeness. Incomplete trajectories leave as UNSCORED data.

The vectorized check only decides which rows to look at; those rows (a small
minority) are judged by the reference rules in scoring.trajectory, which also
write their reasons and detail. A false alarm here costs time, never a score.
"""

from __future__ import annotations

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
    check_completeness,
)
from transforms import NAMESPACE
from transforms.columnar import FlatCalls, equals, is_null
from transforms.records import FAILED, UNSCORED, unscored_table


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


def incomplete_rows(batch: pa.RecordBatch) -> np.ndarray:
    """Rows that may break a completeness rule (a superset of those that do)."""
    suspect = np.zeros(batch.num_rows, bool)
    for name in REQUIRED_COLUMNS:
        suspect |= is_null(batch.column(name))
    version = batch.column("schema_version")
    suspect |= ~equals(version, c.SCHEMA_VERSION)
    suspect |= equals(batch.column("episode_outcome"), c.TRUNCATED_OUTCOME)
    lengths = pc.list_value_length(batch.column("calls"))
    suspect |= ~np.asarray(pc.fill_null(pc.equal(pc.cast(lengths, pa.int64()), batch.column("call_count")), True), bool)

    flat = FlatCalls.of(batch)
    present = ~is_null(flat.calls)
    missing = ~present
    for name in REQUIRED_CALL_FIELDS:
        missing |= is_null(flat.field(name))
    for name in REQUIRED_CONTEXT_FIELDS:
        missing |= present & is_null(flat.field(f"proposal.{name}")) & ~is_null(flat.field("proposal"))
    has_commit = ~is_null(flat.field("commit"))
    for name in REQUIRED_COMMIT_FIELDS:
        missing |= has_commit & is_null(flat.field(f"commit.{name}"))
    suspect |= flat.any_per_row(missing)
    suspect |= _duplicate_ids(flat, present)
    suspect |= _steps_out_of_order(flat, present)
    return suspect


class CheckCompletenessFn(beam.DoFn):
    def __init__(self):
        self._unscored = Metrics.counter(NAMESPACE, "trajectories_incomplete")

    def process(self, batch: pa.RecordBatch):
        suspect = incomplete_rows(batch)
        if not suspect.any():
            yield batch
            return
        rows = batch.filter(pa.array(suspect)).to_pylist()
        verdicts = [check_completeness(row) for row in rows]
        incomplete = np.array([bool(reasons) for reasons, _ in verdicts])
        complete = ~suspect
        complete[suspect] = ~incomplete
        if complete.any():
            yield batch.filter(pa.array(complete))
        if incomplete.any():
            self._unscored.inc(int(incomplete.sum()))
            kept = [(row, verdict) for row, verdict, bad in zip(rows, verdicts, incomplete) if bad]
            yield beam.pvalue.TaggedOutput(
                UNSCORED,
                unscored_table(
                    [row for row, _ in kept],
                    [c.order_reasons(reasons) for (_, (reasons, _)) in kept],
                    [detail for (_, (_, detail)) in kept],
                ),
            )


class CheckCompleteness(beam.PTransform):
    """Batches -> complete batches (main), UNSCORED tables (`unscored`) and,
    should a batch raise unexpectedly, the batch and its error (`failed`)."""

    def expand(self, batches):
        return batches | "Check completeness" >> beam.ParDo(CheckCompletenessFn()).with_outputs(
            UNSCORED, main="complete"
        ).with_exception_handling(dead_letter_tag=FAILED)
