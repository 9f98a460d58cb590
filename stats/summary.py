"""One-sample summaries: how precisely a single configuration's step time or throughput is known.

Step times are skewed and carry rare slow outliers (GC, page faults, a neighbour's job), so the
median is the location estimate. For a series of consecutive steps (serially correlated) its
interval comes from batch medians (stats.within); for samples that are independent by construction
(timed blocks of a microbenchmark) from order statistics: distribution-free and exact in coverage
for independent values (as in pyperf)."""

from __future__ import annotations

import math

import numpy as np

from .within import BATCHES, MIN_SERIES, batch_median, batch_rate, serial

# Fewest timed blocks a lone run's throughput interval is computed from: 5 batches of at least 2
# (stats.within).
MIN_BLOCKS = MIN_SERIES

CI_METHOD = "order statistics (binomial), distribution-free"
PILOT = (
    2 * MIN_SERIES
)  # the adaptive window's pilot: 20 steps (batches of 4) at least, so the plan is not made on
# batches of 2 steps, whose spread serial correlation hides
SERIAL_CI_METHOD = "batch medians (5 consecutive batches, t interval): honours serial correlation"


def rel_halfwidth(median: float | None, lo: float | None, hi: float | None) -> float | None:
    """An interval's half-width relative to its median (+-2% is 0.02); None without an interval or a
    median."""
    if lo is None or hi is None or not median:
        return None
    return (hi - lo) / 2 / median


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
    """(lo, hi, achieved_level); achieved_level is below `level` for n <= 5 at 95%, so callers can
    say so."""
    x = np.sort(_as_array(values))
    j, k, achieved = median_ranks(x.size, level)
    return float(x[j - 1]), float(x[k - 1]), achieved


def describe(values, level: float = 0.95, serial_series: bool = False) -> dict:
    """Everything a results row needs about one sample; quartiles and p90 use numpy's default
    linear interpolation, so they can fall between observed values.

    serial_series: the values are consecutive steps of one run (serially correlated): the median's
    interval is the batch-medians one over 5 batches (None below 10 values) and the lag-1
    autocorrelation and effective sample size are added. The record keeps 5 batches although 2 cover
    better at 10 steps and phi 0.7 (stats.within.batch_count, issue 39): the diagnosis reads this
    interval as its noise floor, and the 2-batch one (t on 1 df) is about +-100% at 10 steps, which
    hid an 87% straggler in tests/test_diagnosis_runs. The table's one-run step median uses the
    honest count. Otherwise the values are independent samples and the interval comes from order
    statistics."""
    x = _as_array(values)
    med = float(np.median(x))
    if serial_series:
        b = batch_median(
            x, level, count=BATCHES
        )  # the record's (and the diagnosis's noise floor's): see below
        lo, hi, achieved, method = (
            b["ci_lo"],
            b["ci_hi"],
            (level if b["ci_lo"] is not None else None),
            (SERIAL_CI_METHOD if b["ci_lo"] is not None else b["method"]),
        )
    else:
        lo, hi, achieved = median_ci(x, level)
        method = CI_METHOD
    q1, q3, p90 = (float(v) for v in np.percentile(x, [25, 75, 90]))
    iqr = q3 - q1
    out = {
        "n": int(x.size),
        "median": med,
        "ci_lo": lo,
        "ci_hi": hi,
        "ci_level": achieved,
        "ci_method": method,
        "mean": float(x.mean()),
        "min": float(x.min()),
        "max": float(x.max()),
        "p90": p90,
        "q1": q1,
        "q3": q3,
        "iqr": iqr,
        "outliers_low": int((x < q1 - 1.5 * iqr).sum()),
        "outliers_high": int((x > q3 + 1.5 * iqr).sum()),
        "rel_ci_halfwidth": rel_halfwidth(med, lo, hi),
    }
    if serial_series:
        out.update(serial(np.log(x) if (x > 0).all() else x))
    return out


def block_throughput(
    block_walls_s, block_steps, level: float = 0.95, seed: int | None = None
) -> dict:
    """Throughput of a window split into timed blocks: total steps / total wall (not a mean of
    per-block rates, which would overweight short blocks), with the batch-means interval of
    stats.within.batch_rate (>= 10 blocks), and the lag-1 autocorrelation and effective sample size
    of the blocks' log rates. `seed` is accepted for old callers."""
    b = batch_rate(block_walls_s, block_steps, level)
    return {
        "steps_per_s": b["rate"],
        "ci_lo": b["ci_lo"],
        "ci_hi": b["ci_hi"],
        "n_blocks": b["n_blocks"],
        "method": b["method"],
        "lag1": b["lag1"],
        "n_eff": b["n_eff"],
        "log_se": b["log_se"],
        "batches": b["batches"],
    }


def planned_steps(
    pilot, rel_ci_target: float, min_steps: int, max_steps: int | None, level: float = 0.95
) -> int:
    """Stein's two-stage rule (Stein 1945, "A two-sample test for a linear hypothesis whose power is
    independent of the variance", Ann. Math. Statist. 16): the first `min_steps` steps (the pilot)
    fix how many steps the window needs for a median known to +-rel_ci_target, n = pilot size x
    (pilot half-width / target)^2; the window then measures exactly that many (the caller caps it at
    max_steps). Deciding once, from the pilot, keeps the final interval honest: a rule that stops
    whenever the running interval first looks narrow stops on the runs whose spread was
    underestimated, and its intervals covered 77% instead of 95% in the calibration suite."""
    b = batch_median(pilot, level, count=BATCHES)
    if b["ci_lo"] is None or b["median"] <= 0:
        return max(min_steps, len(pilot))
    half = rel_halfwidth(b["median"], b["ci_lo"], b["ci_hi"])
    need = (
        math.ceil(len(pilot) * (half / rel_ci_target) ** 2)
        if rel_ci_target > 0
        else max_steps or len(pilot)
    )
    return max(min_steps, need)


def adaptive_should_stop(
    step_times,
    rel_ci_target: float,
    min_steps: int,
    max_steps: int | None,
    elapsed_s: float,
    max_s: float | None,
    level: float = 0.95,
) -> tuple[bool, str]:
    """measure.policy=adaptive: stop once the window holds the steps Stein's two-stage rule planned
    from its first
    `min_steps` (planned_steps), or a cap hits. "target reached" = the planned steps are measured;
    the record says how precise the median then was. The calibration suite runs this rule."""
    n = len(step_times)
    pilot = max(min_steps, PILOT)
    if n >= pilot and n >= planned_steps(
        list(step_times)[:pilot], rel_ci_target, pilot, max_steps, level
    ):
        return True, "target reached"
    if max_steps is not None and n >= max_steps:
        return True, "max_steps reached"
    if max_s is not None and elapsed_s >= max_s:
        return True, "max_s reached"
    return False, "continue"
