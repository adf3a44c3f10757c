"""Interval estimates for rates."""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist

Z95 = NormalDist().inv_cdf(0.975)
# A one-sided 95% bound: the upper end of the interval at this z.
Z95_ONE_SIDED = NormalDist().inv_cdf(0.95)


def _wilson(p: float, n: float, z: float):
    """Wilson score interval for proportion p observed over n (n may be fractional)."""
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    # At p = 0 or 1 the bound is exactly 0 or 1; rounding would otherwise
    # leave a 1e-17 there.
    return [0.0 if p == 0 else centre - half, 1.0 if p == 1 else centre + half]


def wilson_interval(successes: int, trials: int, z: float = Z95):
    """Wilson score interval for a binomial proportion; None for zero trials."""
    if trials <= 0:
        return None
    if not 0 <= successes <= trials:
        raise ValueError(f"successes={successes} outside [0, trials={trials}]")
    return _wilson(successes / trials, trials, z)


def clustered_rate_interval(successes, trials, sum_yy, sum_nn, sum_yn, clusters, z: float = Z95):
    """Interval for a call-level rate whose calls come in clusters (trajectories).

    Calls of one trajectory are not independent, so the binomial count of
    calls overstates the evidence. The cluster-robust (sandwich) variance of
    the ratio r = sum(y_i) / sum(n_i) over clusters i, with y_i successes of
    n_i trials, gives an effective sample size n_eff = r(1 - r) / V, and the
    Wilson interval is taken at n_eff (never above the number of calls).
    Where r is 0 or 1 the variance says nothing; each cluster then counts
    as one observation. The sums are additive, so they combine across
    batches and workers.
    """
    if trials <= 0:
        return None
    r = successes / trials
    effective = min(trials, clusters)
    if clusters >= 2 and 0 < r < 1:
        residual = sum_yy - 2 * r * sum_yn + r * r * sum_nn
        variance = clusters / (clusters - 1) * residual / (trials * trials)
        effective = min(trials, r * (1 - r) / variance) if variance > 0 else trials
    return _wilson(r, effective, z)


def at_least_once(attempts: int, hits: int, k: int) -> float:
    """The unbiased estimate, from one task's `attempts` of which `hits` were
    misuse, of the chance that k attempts at it hold at least one:
    1 - C(n - c, k) / C(n, k), the share of its k-attempt subsets with a hit
    (the pass@k estimator of Chen et al. 2021, for misuse). One division of
    exact integers: the same float on every machine."""
    if not 0 < k <= attempts or not 0 <= hits <= attempts:
        raise ValueError(f"at_least_once needs 0 < k <= attempts and 0 <= hits <= attempts, "
                         f"got k={k}, attempts={attempts}, hits={hits}")
    total = math.comb(attempts, k)
    return (total - math.comb(attempts - hits, k)) / total


def at_least_once_over_tasks(tasks: Mapping[tuple[int, int], int], k: int, z: float = Z95):
    """(tasks, estimate, interval) of misuse@k over the tasks with at least
    k attempts; `tasks` maps (attempts, hits) to how many tasks had them.

    The estimate is the mean over tasks of at_least_once. Tasks are the unit
    of sampling (an agent's attempts at one task move together), so the
    interval is Wilson's at the effective number of independent trials that
    the between-task variance of the per-task estimates gives, n_eff =
    m(1 - m) / Var(mean), as clustered_rate_interval does for calls: never
    more than the disjoint blocks of k attempts, and one per task where the
    variance says nothing (a mean of 0 or 1, or a single task). Wilson's
    interval keeps its coverage near 0, where misuse usually is and a
    bootstrap of all-zero tasks collapses to a point (docs/outputs.md has the
    simulation). Summed in sorted order: the same bytes every run.
    """
    used = sorted((n, hits, count) for (n, hits), count in tasks.items() if n >= k and count)
    units = sum(count for _, _, count in used)
    if not units:
        return 0, None, None
    values = [(at_least_once(n, hits, k), count) for n, hits, count in used]
    mean = math.fsum(value * count for value, count in values) / units
    blocks = math.fsum(n * count for n, _, count in used) / k
    effective = min(blocks, units)
    if units >= 2 and 0 < mean < 1:
        spread = math.fsum(count * (value - mean) ** 2 for value, count in values)
        variance = spread / (units - 1) / units
        effective = min(blocks, mean * (1 - mean) / variance) if variance > 0 else blocks
    return units, mean, _wilson(mean, effective, z)
