"""Seeded percentile bootstrap helpers shared by the one-sample and comparison statistics.

Resampling is chunked so that a long series (tens of thousands of steps) never builds a
resamples x n index matrix larger than a few million cells. Every draw comes from one
numpy Generator passed in by the caller, so a fixed seed gives the same interval every time.
"""
from __future__ import annotations

import math

import numpy as np

_MAX_CELLS = 1 << 21

EXPANDED = ("expanded percentile (Hesterberg 2015: the percentiles widened as a t interval is for n, "
            "n the effective sample size)")


def percentile_interval(samples: np.ndarray, level: float) -> tuple[float, float]:
    lo, hi = np.percentile(samples, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def _t_quantile(p: float, df: float) -> float:
    """Student t quantile for p > 0.5 by bisection on the density's integral (numpy only; df may be fractional)."""
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:
        t = np.linspace(0.0, x, 4001)
        f = np.exp(log_c - (df + 1) / 2 * np.log1p(t * t / df))
        return 0.5 + float(((f[1:] + f[:-1]) / 2).sum() * (t[1] - t[0]))

    lo, hi = 0.0, 1.0
    while cdf(hi) < p and hi < 1e6:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def expanded_level(level: float, n: float) -> float:
    """The percentile level that makes a bootstrap interval as wide as a t interval would be for n samples.

    A plain percentile bootstrap is too narrow at small n: simulated here, 95% intervals over 6 blocks
    covered 85% and over 10 blocks 89-92%. Hesterberg's expanded percentile interval (2015, "What teachers
    should know about the bootstrap", sec. 5) uses the percentiles at Phi(+-sqrt(n/(n-1)) t_{n-1}), which
    brought the same simulations to 93-96%. n <= 1 gives the widest possible interval (level 1)."""
    if n <= 1:
        return 1.0
    z = math.sqrt(n / (n - 1)) * _t_quantile(0.5 + level / 2, n - 1)
    return min(1.0, math.erf(z / math.sqrt(2)))


def effective_n(groups: list) -> float:
    """Kish's effective sample size of samples grouped in runs: N / (1 + (k - 1) ICC), at least the number of runs.

    The intraclass correlation comes from a one-way ANOVA of the samples (log scale, as the caller passes them).
    Runs that differ more than their own samples do (another node, another allocator state) count as about one
    sample each; runs that agree count as all their samples. One run: its sample count."""
    x = [np.asarray(g, dtype=float).ravel() for g in groups]
    m, k = len(x), np.array([g.size for g in x])
    total = int(k.sum())
    if m == 1:
        return float(total)
    grand = np.concatenate(x).mean()
    ms_between = sum(g.size * (g.mean() - grand) ** 2 for g in x) / (m - 1)
    ms_within = sum(((g - g.mean()) ** 2).sum() for g in x) / (total - m) if total > m else 0.0
    k0 = (total - (k ** 2).sum() / total) / (m - 1)
    var_between = max(0.0, (ms_between - ms_within) / k0) if k0 > 0 else ms_between
    icc = var_between / (var_between + ms_within) if var_between + ms_within > 0 else 0.0
    cluster = float((k ** 2).sum() / total)   # the design effect's cluster size for unequal runs (sum n_i^2 / N)
    return float(max(m, total / (1 + (cluster - 1) * icc)))


def boot_medians(rng: np.random.Generator, x: np.ndarray, count: int) -> np.ndarray:
    """Medians of `count` with-replacement resamples of x."""
    x = np.asarray(x, dtype=float)
    out = np.empty(count)
    chunk = max(1, _MAX_CELLS // x.size)
    for start in range(0, count, chunk):
        m = min(chunk, count - start)
        out[start:start + m] = np.median(x[rng.integers(0, x.size, size=(m, x.size))], axis=1)
    return out


def boot_ratio_of_sums(rng: np.random.Generator, blocks: np.ndarray, count: int) -> np.ndarray:
    """sum(units) / sum(walls) of `count` with-replacement resamples of a run's blocks.
    blocks: shape (2, n), row 0 the work done in each block (steps or samples), row 1 its wall clock."""
    units, walls = np.asarray(blocks, dtype=float)
    out = np.empty(count)
    chunk = max(1, _MAX_CELLS // units.size)
    for start in range(0, count, chunk):
        m = min(chunk, count - start)
        idx = rng.integers(0, units.size, size=(m, units.size))
        out[start:start + m] = units[idx].sum(1) / walls[idx].sum(1)
    return out


def two_level(rng: np.random.Generator, runs: list, resamples: int, within=boot_medians) -> np.ndarray:
    """Bootstrap distribution of the median over runs of a per-run statistic.

    Resampling runs first and then the samples inside each picked run (`within`: count resampled
    statistics of one run) keeps run-to-run spread (a different process, allocator state, or
    neighbour on the machine) in the interval; bootstrapping pooled samples would pretend all of
    them are independent and understate it. A run picked twice in one resample gets two
    independent within-run resamples. With a single run this reduces to the plain bootstrap.
    """
    picks = rng.integers(0, len(runs), size=(resamples, len(runs)))
    stats = np.empty(picks.shape)
    for r, x in enumerate(runs):
        mask = picks == r
        stats[mask] = within(rng, x, int(mask.sum()))
    return np.median(stats, axis=1)


def two_level_medians(rng: np.random.Generator, runs: list, resamples: int) -> np.ndarray:
    """Median of run medians (see two_level)."""
    return two_level(rng, runs, resamples, boot_medians)
