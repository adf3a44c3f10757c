"""Wilson score interval against published values (Newcombe 1998, Table I, method 3); misuse@k
against enumeration, and its interval over tasks by simulation."""

import itertools
import math
import random
from collections import Counter
from fractions import Fraction

import pytest

from litmus_score.scoring.stats import at_least_once, at_least_once_over_tasks, clustered_rate_interval, wilson_interval


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


@pytest.mark.parametrize("attempts", range(1, 9))
def test_at_least_once_is_the_share_of_k_subsets_with_a_misuse(attempts):
    for hits in range(attempts + 1):
        misuse = set(range(hits))
        for k in range(1, attempts + 1):
            subsets = list(itertools.combinations(range(attempts), k))
            share = Fraction(sum(bool(misuse & set(subset)) for subset in subsets), len(subsets))
            assert at_least_once(attempts, hits, k) == float(share)


@pytest.mark.parametrize("attempts, k", [(1, 1), (5, 1), (5, 3), (8, 8), (10, 4)])
def test_at_least_once_is_unbiased(attempts, k):
    # Over every outcome of `attempts` Bernoulli(p) attempts, weighted by its probability.
    for p in (Fraction(1, 50), Fraction(1, 3), Fraction(9, 10)):
        expected = sum(math.comb(attempts, hits) * p ** hits * (1 - p) ** (attempts - hits)
                       * at_least_once(attempts, hits, k) for hits in range(attempts + 1))
        assert float(expected) == pytest.approx(float(1 - (1 - p) ** k), abs=1e-12)


def test_at_least_once_refuses_impossible_counts():
    for attempts, hits, k in [(3, 4, 1), (3, 1, 4), (3, 1, 0), (3, -1, 1)]:
        with pytest.raises(ValueError, match="at_least_once"):
            at_least_once(attempts, hits, k)


def test_over_tasks_uses_the_tasks_with_k_attempts_or_more():
    tasks = Counter({(2, 1): 3, (4, 0): 1, (4, 4): 2})
    units, estimate, interval = at_least_once_over_tasks(tasks, 3)
    assert units == 3 and estimate == pytest.approx(2 / 3)
    assert interval[0] < estimate < interval[1]
    units, estimate, _ = at_least_once_over_tasks(tasks, 1)
    assert units == 6 and estimate == pytest.approx((3 * 0.5 + 0 + 2 * 1) / 6)
    assert at_least_once_over_tasks(tasks, 5) == (0, None, None)


def test_over_tasks_without_misuse_has_one_trial_per_task():
    # Nothing to estimate a variance from: each task counts once, as a trajectory of calls does.
    assert at_least_once_over_tasks(Counter({(6, 0): 20}), 2) == (20, 0.0, wilson_interval(0, 20))


def _beta_survival(a, b, k):
    """E[(1 - p)^k] for p ~ Beta(a, b): B(a, b + k) / B(a, b)."""
    return math.exp(math.lgamma(b + k) + math.lgamma(a + b) - math.lgamma(b) - math.lgamma(a + b + k))


def _simulated_group(rng):
    """A group's tasks as a histogram of (attempts, misuse), and its true misuse@k.

    20 to 200 tasks whose misuse probabilities come from two Beta components:
    most tasks near 0, the rest anywhere from rare to frequent; every task
    attempted 3 to 10 times, the same number of times in half the groups
    (epochs) and a number of its own in the other half."""
    tasks = rng.randint(20, 200)
    safe = rng.uniform(0.3, 0.95)
    low = (0.5, rng.uniform(20, 200))
    mean, concentration = rng.uniform(0.05, 0.6), rng.uniform(1, 10)
    high = (mean * concentration, (1 - mean) * concentration)
    epochs = rng.randint(3, 10) if rng.random() < 0.5 else None
    histogram: Counter = Counter()
    for _ in range(tasks):
        p = rng.betavariate(*(low if rng.random() < safe else high))
        attempts = epochs or rng.randint(3, 10)
        histogram[attempts, sum(rng.random() < p for _ in range(attempts))] += 1

    def truth(k):
        return 1 - safe * _beta_survival(*low, k) - (1 - safe) * _beta_survival(*high, k)

    return histogram, truth


def test_interval_over_tasks_covers_the_true_misuse_at_k():
    rng = random.Random(36)
    covered: Counter = Counter()
    groups = 1000
    for _ in range(groups):
        histogram, truth = _simulated_group(rng)
        largest = max(attempts for attempts, _ in histogram)
        for name, k in (("1", 1), ("3", 3), ("K", largest)):
            _, _, (low, high) = at_least_once_over_tasks(histogram, k)
            covered[name] += low <= truth(k) <= high
    # At least 93% (the bar), and not so wide that it covers everything.
    assert all(0.93 <= covered[name] / groups <= 0.99 for name in ("1", "3", "K")), covered
