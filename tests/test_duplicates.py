"""The duplicate check's key index: what crosses the shuffle finds every repeated hash."""

from collections import Counter

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from transforms.duplicates import INDEXED_BITS, _repeated, by_bucket, indexed

EDGES = st.sampled_from([0, 1, 2**64 - 1, 2**63, 2**58 - 1, 2**58])
HASHES = st.lists(st.one_of(EDGES, st.integers(0, 2**64 - 1)), max_size=60)


def grouped(shards) -> set:
    """The indexed hashes found repeated, as the pipeline finds them: per shard by bucket, grouped, then counted."""
    buckets = {}
    for hashes in shards:
        for bucket, part in by_bucket(np.array(hashes, np.uint64)):
            buckets.setdefault(bucket, []).append(part)
    return {int(value) for bucket, parts in buckets.items() for value in _repeated((bucket, parts))}


@given(st.lists(HASHES, max_size=6), st.data())
def test_every_repeated_hash_is_found_in_one_shard_or_across_shards(shards, data):
    # A hash seen twice, within a shard or in two, whatever the shards hold besides.
    every = [h for hashes in shards for h in hashes]
    if every:
        again = data.draw(st.sampled_from(every))
        shards = shards + [[again]]
    counts = Counter(int(v) for hashes in shards for v in indexed(np.array(hashes, np.uint64)))
    assert grouped(shards) == {value for value, n in counts.items() if n > 1}


def test_hashes_that_differ_only_in_the_bits_not_indexed_are_candidates():
    unindexed = 2 ** (64 - INDEXED_BITS)  # the lowest indexed bit
    assert grouped([[2**63], [2**63 + unindexed - 1]]) == {int(indexed(np.array([2**63], np.uint64))[0])}
    assert grouped([[2**63], [2**63 + unindexed]]) == set()
