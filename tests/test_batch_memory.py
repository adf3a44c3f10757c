"""What a batch's stages allocate is freed when they are done with it, not by
the garbage collector: a reference cycle would keep a batch's columns, tens of
MiB, until a collection, which may come many batches later; and they do not
copy it where a slice will do (docs/performance.md)."""

import gc
from contextlib import contextmanager

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest

from litmus_score.scoring import contract as c
from tests import builders as b
from tests.strategies import SMALL_BOUNDS
from transforms import jsontext
from transforms.completeness import CheckCompletenessFn
from transforms.conform import conform_batch, failing
from transforms.policy import ArgumentTexts


@contextmanager
def no_cycles():
    """Fails if the block leaves anything only the garbage collector can free."""
    gc.collect()
    gc.disable()
    try:
        yield
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_failing_finds_each_bad_value_and_leaves_no_cycle():
    values = ["1", "x", *map(str, range(40)), "y", "7", "z"]
    array = pa.array(values)

    def attempt(part):
        part.cast(pa.int64())

    with no_cycles():
        bad = failing(array, attempt)
    assert np.flatnonzero(bad).tolist() == [i for i, value in enumerate(values) if not value.isdigit()]


@pytest.mark.skipif(not jsontext.native(), reason="the policy reads texts with the compiled routines only")
def test_argument_texts_leave_no_cycle():
    texts = pa.array(['{"a": 1, "b": "x"}', '{"a": 18446744073709551617}', '{"b": [1]}'], pa.string())
    with jsontext.implementation(True), no_cycles():
        arguments = ArgumentTexts(texts, np.arange(len(texts)))
        columns = arguments.columns({("a",): np.ones(3, bool), ("b",): np.ones(3, bool)})
        # What no column holds is read on demand, from the text.
        assert columns[("a",)][0].value(1) == 2 ** 64 + 1
        assert columns[("b",)][0].value(2) == [1]
        del arguments, columns


def test_rows_between_too_large_ones_go_on_as_slices_of_the_batch():
    over = [b.call(f"c{i}", i) for i in range(SMALL_BOUNDS.max_calls_per_trajectory + 1)]
    rows = [b.trajectory("t0", [b.call()]), b.trajectory("t1", over), b.trajectory("t2", [b.call()]),
            b.trajectory("t3", [b.call()], episode_outcome=c.TRUNCATED_OUTCOME), b.trajectory("t4", over),
            b.trajectory("t5", over), b.trajectory("t6", [b.call()])]
    batch, _ = conform_batch(b.table(rows).combine_chunks().to_batches()[0], "memory", 0)
    outputs = list(CheckCompletenessFn(SMALL_BOUNDS).process(batch))
    checked = [out for out in outputs if not isinstance(out, beam.pvalue.TaggedOutput)]
    assert [(item.batch.column("trajectory_id").to_pylist(), item.complete.tolist()) for item in checked] == [
        (["t0"], [True]), (["t2", "t3"], [True, False]), (["t6"], [True])]
    # Slices share the batch's buffers: nothing is copied.
    texts = batch.column("calls").flatten().field("arguments").buffers()[2].address
    assert all(item.batch.column("calls").flatten().field("arguments").buffers()[2].address == texts
               for item in checked)
