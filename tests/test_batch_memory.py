"""What a batch's stages allocate is freed when they are done with it, not by
the garbage collector: a reference cycle would keep a batch's columns, tens of
MiB, until a collection, which may come many batches later (docs/performance.md)."""

import gc
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pytest

from transforms import jsontext
from transforms.conform import failing
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

