"""The Arrow element coders: what they encode decodes to the same element."""

import numpy as np
import pyarrow as pa
import pytest

from litmus_score.scoring import contract as c
from tests import builders as b
from transforms.coders import RecordBatchCoder, TableCoder
from transforms.conform import conform_batch
from transforms.elements import Checked, CheckedCoder, Resolved, ResolvedCoder
from transforms.resolve import ResolveContextsFn


@pytest.fixture
def batch():
    rows = [b.trajectory(f"t{i}", b.calls_of(("allow", b.commit()), ("deny", None))) for i in range(11)]
    conformed, _ = conform_batch(b.table(rows).to_batches()[0], "memory", 0)
    return conformed


def test_record_batches_and_tables_round_trip(batch):
    assert RecordBatchCoder().decode(RecordBatchCoder().encode(batch)).equals(batch)
    table = pa.Table.from_batches([batch])
    assert TableCoder().decode(TableCoder().encode(table)).equals(table)
    assert RecordBatchCoder().estimate_size(batch) == batch.nbytes


def test_checked_batches_keep_their_complete_rows(batch):
    complete = np.arange(batch.num_rows) % 3 != 1  # 11 rows: not a whole number of bytes
    decoded = CheckedCoder().decode(CheckedCoder().encode(Checked(batch, complete)))
    assert decoded.batch.equals(batch)
    assert decoded.complete.dtype == bool and decoded.complete.tolist() == complete.tolist()


def test_resolved_round_trips(batch):
    checked = Checked(batch, np.ones(batch.num_rows, bool))
    (resolved,) = [out for out in ResolveContextsFn(c.COMMIT).process(checked) if isinstance(out, Resolved)]
    assert resolved.calls.num_rows == 22
    decoded = ResolvedCoder().decode(ResolvedCoder().encode(resolved))
    assert decoded.trajectories.equals(resolved.trajectories) and decoded.calls.equals(resolved.calls)
    assert decoded.inputs.equals(resolved.inputs) and decoded.inputs.num_rows == 22
