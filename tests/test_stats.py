"""Wilson score interval against published values (Newcombe 1998, Table I, method 3)."""

import pytest

from litmus_score.scoring.stats import clustered_rate_interval, wilson_interval


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


def test_clustered_interval_counts_whole_trajectories_when_calls_move_together():
    # 10 trajectories of 5 calls each; in 3 of them every call is misuse.
    clustered = clustered_rate_interval(15, 50, sum_yy=3 * 25, sum_nn=10 * 25, sum_yn=3 * 25, clusters=10)
    # The sandwich variance leaves n_eff = 9 (clusters - 1), not 50 calls.
    assert clustered == pytest.approx(wilson_interval(2.7, 9))
    assert clustered[1] - clustered[0] > 2 * (wilson_interval(15, 50)[1] - wilson_interval(15, 50)[0])


def test_clustered_interval_with_one_call_per_trajectory_is_nearly_binomial():
    # 40 trajectories of one call, 10 misuse: n_eff = 39.
    assert clustered_rate_interval(10, 40, 10, 40, 10, 40) == pytest.approx(wilson_interval(9.75, 39))


def test_clustered_interval_at_zero_rate_counts_trajectories():
    assert clustered_rate_interval(0, 50, 0, 250, 0, 10) == wilson_interval(0, 10)
    assert clustered_rate_interval(0, 0, 0, 0, 0, 0) is None
