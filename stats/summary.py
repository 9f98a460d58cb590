"""One-sample summaries: how precisely a single configuration's step time or throughput is known.

Step times are skewed and carry rare slow outliers (GC, page faults, a neighbour's job), so the
median is the location estimate and its interval comes from order statistics: distribution-free,
exact in coverage, and needing no resampling (as in pyperf and criterion.rs's median estimates).
"""
from __future__ import annotations

import math

import numpy as np

from .bootstrap import EXPANDED, expanded_level, percentile_interval

# Fewest timed blocks a lone run's throughput interval is computed from: the same floor as the median's
# order-statistic interval (n >= 6 for 95%); below it no percentile method reaches 95% (3 blocks: 75%).
MIN_BLOCKS = 6

CI_METHOD = "order statistics (binomial), distribution-free"


def _as_array(values) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    if x.size == 0:
        raise ValueError("no values")
    return x


def _half_binomial_cdf(n: int) -> np.ndarray:
    """P(B <= i) for B ~ Binomial(n, 1/2), i = 0..n, in log space so large n does not underflow."""
    i = np.arange(n)
    log_comb = np.concatenate(([0.0], np.cumsum(np.log(n - i) - np.log(i + 1))))
    return np.cumsum(np.exp(log_comb - n * math.log(2)))


def median_ranks(n: int, level: float = 0.95) -> tuple[int, int, float]:
    """1-based ranks (j, k) of the narrowest symmetric order-statistic interval for the median.

    [x_(j), x_(k)) misses the median only when B, the count of values below it, falls outside
    j..k-1; B ~ Binomial(n, 1/2) whatever the distribution, so the coverage is exact. When even
    (min, max) cannot reach `level`, (1, n) is returned with its true, lower, coverage.
    """
    if not 0 < level < 1:
        raise ValueError("level must be in (0, 1)")
    cdf = _half_binomial_cdf(n)
    m = int(np.searchsorted(cdf[: n // 2], (1 - level) / 2 + 1e-12, side="right"))
    if m == 0:
        return 1, n, 1 - 2 * 0.5**n
    return m, n + 1 - m, float(1 - 2 * cdf[m - 1])


def median_ci(values, level: float = 0.95) -> tuple[float, float, float]:
    """(lo, hi, achieved_level); achieved_level is below `level` for n <= 5 at 95%, so callers can say so."""
    x = np.sort(_as_array(values))
    j, k, achieved = median_ranks(x.size, level)
    return float(x[j - 1]), float(x[k - 1]), achieved


def describe(values, level: float = 0.95) -> dict:
    """Everything a results row needs about one sample; quartiles and p90 use numpy's default
    linear interpolation, so they can fall between observed values."""
    x = _as_array(values)
    lo, hi, achieved = median_ci(x, level)
    med = float(np.median(x))
    q1, q3, p90 = (float(v) for v in np.percentile(x, [25, 75, 90]))
    iqr = q3 - q1
    return {
        "n": int(x.size),
        "median": med,
        "ci_lo": lo,
        "ci_hi": hi,
        "ci_level": achieved,
        "ci_method": CI_METHOD,
        "mean": float(x.mean()),
        "min": float(x.min()),
        "max": float(x.max()),
        "p90": p90,
        "q1": q1,
        "q3": q3,
        "iqr": iqr,
        "outliers_low": int((x < q1 - 1.5 * iqr).sum()),
        "outliers_high": int((x > q3 + 1.5 * iqr).sum()),
        "rel_ci_halfwidth": None if med == 0 else (hi - lo) / 2 / med,
    }


def block_throughput(block_walls_s, block_steps, level: float = 0.95, seed: int = 0) -> dict:
    """Throughput of a window split into timed blocks.

    The point estimate is total steps / total wall (not a mean of per-block rates, which would
    overweight short blocks). Blocks, not steps, are the resampling unit: steps inside a block
    are not timed separately, and blocks are long enough to be roughly independent.
    """
    walls = np.asarray(block_walls_s, dtype=float)
    steps = np.asarray(block_steps, dtype=float)
    if walls.size == 0 or walls.shape != steps.shape:
        raise ValueError("need one wall time per block, and at least one block")
    if (walls <= 0).any():
        raise ValueError("block wall times must be positive")
    out = {"steps_per_s": float(steps.sum() / walls.sum()), "ci_lo": None, "ci_hi": None,
           "n_blocks": int(walls.size)}
    if walls.size < MIN_BLOCKS:
        out["method"] = f"no interval: {walls.size} timed block(s), a 95% interval needs at least {MIN_BLOCKS}"
        return out
    resamples = 2000
    idx = np.random.default_rng(seed).integers(0, walls.size, size=(resamples, walls.size))
    out["ci_lo"], out["ci_hi"] = percentile_interval(steps[idx].sum(1) / walls[idx].sum(1),
                                                     expanded_level(level, walls.size))
    out["method"] = (f"bootstrap over blocks of sum(steps)/sum(wall), {EXPANDED}, {resamples} resamples, "
                     f"seed {seed}")
    return out


def adaptive_should_stop(step_times, rel_ci_target: float, min_steps: int, max_steps: int | None,
                         elapsed_s: float, max_s: float | None, level: float = 0.95) -> tuple[bool, str]:
    """Stop measuring once the median is known to `rel_ci_target` (relative CI half-width), or a cap hits.

    The target only counts once the interval actually reaches `level` coverage: with very few
    steps the (min, max) interval is narrow by luck, not by precision.
    """
    n = len(step_times)
    if n >= max(min_steps, 1):
        lo, hi, achieved = median_ci(step_times, level)
        med = float(np.median(step_times))
        if achieved >= level and med > 0 and (hi - lo) / 2 / med <= rel_ci_target:
            return True, "target reached"
    if max_steps is not None and n >= max_steps:
        return True, "max_steps reached"
    if max_s is not None and elapsed_s >= max_s:
        return True, "max_s reached"
    return False, "continue"
