"""Interval estimates for rates."""

from __future__ import annotations

import math
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
