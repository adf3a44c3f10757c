"""Stage 2: completeness. Incomplete trajectories leave as UNSCORED data.

Each completeness rule of litmus_score.scoring.trajectory.check_completeness is computed
here on whole columns; tests/test_agreement.py proves the reasons equal the
reference's on random trajectories.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.metrics import Metrics

from litmus_score.scoring import contract as c
from litmus_score.scoring.trajectory import (
    DEFAULT_BOUNDS,
    JSON_FIELDS,
    REQUIRED_CALL_FIELDS,
    REQUIRED_COLUMNS,
    REQUIRED_COMMIT_FIELDS,
    REQUIRED_CONTEXT_FIELDS,
    Bounds,
)
from transforms import NAMESPACE
from transforms import schema as s
from transforms.columnar import FlatCalls, equals, is_null
from transforms.elements import Checked, Tag
from transforms.jsontext import too_deep
from transforms.records import unscored_table


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


def large_paths(batch: pa.RecordBatch, flat: FlatCalls, bounds: Bounds) -> dict:
    """What exceeds a bound -> rows: calls per trajectory, texts the reader flagged, JSON depth."""
    lengths = pc.fill_null(pc.list_value_length(batch.column("calls")), 0).to_numpy()
    large = {f"over {bounds.max_calls_per_trajectory} calls": lengths > bounds.max_calls_per_trajectory,
             "texts over the size bound": ~is_null(batch.column(s.TOO_LARGE))}
    for path in JSON_FIELDS:
        large[f"calls[].{path} nested too deep"] = flat.any_per_row(too_deep(flat.field(path), bounds.max_json_depth))
    return large


def completeness_reasons(batch: pa.RecordBatch, bounds: Bounds = DEFAULT_BOUNDS):
    """(reason -> rows that break it, missing path -> rows, too-large part -> rows),
    reasons in canonical order."""
    flat = FlatCalls.of(batch)
    present = ~is_null(flat.calls)
    missing = missing_paths(batch, flat)
    large = large_paths(batch, flat, bounds)
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
        c.TOO_LARGE: np.logical_or.reduce(list(large.values())),
        c.INVALID_TEXT: ~is_null(batch.column(s.INVALID_TEXT)),
    }
    return reasons, missing, large


def _detail(i: int, reasons: dict, missing: dict, large: dict, batch: pa.RecordBatch) -> str:
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
    if reasons[c.TOO_LARGE][i]:
        texts = batch.column(s.TOO_LARGE)[i].as_py()
        parts.append("too large: " + ", ".join(texts if part == "texts over the size bound" else part
                                               for part, rows in large.items() if rows[i]))
    if reasons[c.INVALID_TEXT][i]:
        parts.append("not UTF-8: " + batch.column(s.INVALID_TEXT)[i].as_py())
    return "; ".join(parts)


def _runs(mask: np.ndarray) -> list:
    """(start, stop) of each run of True in `mask`."""
    edges = np.flatnonzero(np.diff(np.concatenate(([False], mask, [False])).astype(np.int8)))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


class CheckCompletenessFn(beam.DoFn):
    def __init__(self, bounds: Bounds = DEFAULT_BOUNDS):
        self._bounds = bounds
        self._unscored = Metrics.counter(NAMESPACE, "trajectories_incomplete")

    def process(self, batch: pa.RecordBatch):
        reasons, missing, large = completeness_reasons(batch, self._bounds)
        incomplete = np.logical_or.reduce(list(reasons.values()))
        # Too large rows go no further (resolution scans every text of the batch); the
        # rows between them go on as slices of the batch, not as a copy of it.
        for start, stop in _runs(~reasons[c.TOO_LARGE]):
            if not incomplete[start:stop].all():
                yield Checked(batch.slice(start, stop - start), ~incomplete[start:stop])
        if not incomplete.any():
            return
        rows = np.flatnonzero(incomplete)
        self._unscored.inc(len(rows))
        yield beam.pvalue.TaggedOutput(
            Tag.UNSCORED,
            unscored_table(
                batch.filter(pa.array(incomplete)),
                [[reason for reason, mask in reasons.items() if mask[i]] for i in rows.tolist()],
                [_detail(i, reasons, missing, large, batch) for i in rows.tolist()],
            ),
        )


@beam.typehints.with_input_types(pa.RecordBatch)
class CheckCompleteness(beam.PTransform):
    """Batches -> Checked batches with some complete row (main), UNSCORED tables
    (`unscored`) and, should a batch raise unexpectedly, the batch and its
    error (`failed`). Beyond any of `bounds` a trajectory is too_large."""

    def __init__(self, bounds: Bounds = DEFAULT_BOUNDS):
        super().__init__()
        self._bounds = bounds

    def expand(self, batches):
        return batches | "Check completeness" >> beam.ParDo(CheckCompletenessFn(self._bounds)).with_output_types(
            Checked, **{Tag.UNSCORED: pa.Table}
        ).with_outputs(Tag.UNSCORED, main="complete").with_exception_handling(dead_letter_tag=Tag.FAILED)
