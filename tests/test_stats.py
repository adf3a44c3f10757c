"""Wilson score interval against published values (Newcombe 1998, Table I, method 3)."""

import pytest

from scoring.stats import wilson_interval


@pytest.mark.parametrize(
    "successes, trials, low, high",
    [
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0000, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_published_values(successes, trials, low, high):
    assert wilson_interval(successes, trials) == pytest.approx([low, high], abs=5e-5)


def test_symmetric_and_bounded():
    low, high = wilson_interval(5, 10)
    assert low == pytest.approx(1 - high)
    assert wilson_interval(10, 10)[1] == 1.0 and wilson_interval(0, 10)[0] == 0.0


def test_zero_trials_has_no_interval():
    assert wilson_interval(0, 0) is None


def test_impossible_counts_are_rejected():
    with pytest.raises(ValueError):
        wilson_interval(11, 10)
