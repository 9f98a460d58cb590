"""Within one run: intervals that honour the serial correlation of consecutive steps (or timed
blocks).

Consecutive steps of a run are not independent (a median lag-1 autocorrelation of 0.29 over 34
committed runs on the project's 2-core machine), and an interval that treats them as independent
covered 57-85% instead of 95% in simulation. So the series is cut into a few non-overlapping
batches, each batch gives one figure, and the interval is a Student t interval on those (batch
means, Schmeiser 1982); how many batches depends on the length (`batch_count`). Two estimands: the
typical step (`batch_median`), which 10 steps can bound, and the long-run rate with stalls included
(`batch_rate`), none below RATE_MIN_BLOCKS blocks, with the reason. Every run also records its
lag-1 autocorrelation and effective sample size. The coverage measured (`python -m stats.calibrate
--only within`): docs/methods.md "The unit of replication".
"""

from __future__ import annotations

import functools
import math

import numpy as np

BATCHES = 5  # the most batches per run (t on 4 degrees of freedom), from 120 values on
MIN_PER_BATCH = 2  # the fewest steps (blocks) in a batch at the most batches
MIN_SERIES = BATCHES * MIN_PER_BATCH  # 10: fewer steps (blocks) give no within-run interval
RATE_MIN_BLOCKS = 60  # the long-run rate (stalls included) gets an interval from 60 blocks on
RATE_BATCHES = 3  # ... from 3 batch means (df 2)


def batch_count(n: int) -> int:
    """How many batches a series of n values is cut into for the typical step's interval: 2 under 40
    values (batches of 5+ steps: 93-95% at phi 0.7 where 5 batches of 2 covered 75%), 3 under 120, 5
    from 120 on."""
    return 2 if n < 40 else (3 if n < 120 else BATCHES)


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """Student t quantile, cached: the same few (p, df) pairs recur in every table and simulation.
    scipy.special's stdtrit is what scipy.stats.t.ppf computes (t_gen._ppf), bit for bit, without
    importing scipy.stats: every rank computes its throughput interval here, and scipy.stats was
    ~0.5 CPU s of each rank's start-up (issue 36)."""
    from scipy.special import stdtrit

    return float(stdtrit(df, p))


def lag1(values) -> float | None:
    """Lag-1 autocorrelation of a series (the usual estimator: lag-1 autocovariance / variance, mean
    removed)."""
    x = np.asarray(values, dtype=float).ravel()
    if x.size < 3:
        return None
    if np.ptp(x) == 0:  # a constant series: its mean's rounding residue would correlate perfectly
        return 0.0
    d = x - x.mean()
    den = float((d * d).sum())
    return float((d[1:] * d[:-1]).sum() / den) if den > 0 else 0.0


def effective_size(values) -> float | None:
    """n (1 - r) / (1 + r) with r the lag-1 autocorrelation, bias-corrected for short series
    (Kendall's (n r + 1) / (n - 3)) and kept in [0, 0.99]: how many independent steps the series is
    worth under an AR(1) model."""
    x = np.asarray(values, dtype=float).ravel()
    r = lag1(x)
    if r is None or x.size < 5:
        return None
    r = min(max((x.size * r + 1) / (x.size - 3), 0.0), 0.99)
    return float(x.size * (1 - r) / (1 + r))


def serial(values) -> dict:
    """{lag1, n_eff} of a series, for the record."""
    x = np.asarray(values, dtype=float).ravel()
    return {"lag1": lag1(x), "n_eff": effective_size(x)}


def batches(n: int, count: int = BATCHES) -> list[slice]:
    """`count` consecutive batches covering all n items, sizes differing by at most one (longer ones
    last)."""
    edges = np.linspace(0, n, count + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def _t_interval(centre: float, values: np.ndarray, level: float) -> tuple[float, float, float]:
    """(lo, hi, se) of `centre` +- t_{k-1} sd(values) / sqrt(k)."""
    k = values.size
    se = float(values.std(ddof=1) / math.sqrt(k))
    h = t_quantile(0.5 + level / 2, k - 1) * se
    return centre - h, centre + h, se


def batch_rate(walls, units, level: float = 0.95) -> dict:
    """Throughput of one run, sum(units) / sum(walls): the long-run rate, stalls included, with a
    batch-means interval from RATE_MIN_BLOCKS blocks on (RATE_BATCHES batches, t on the log scale,
    exponentiated: never negative, ratios symmetric). Fewer blocks: no interval, and the reason (a
    short run may hold none of the stalls the rate includes);
    `log_se` is then still the 3-batch standard error, for planning repeats only
    (stats.runs.plan_repeats)."""
    w = np.asarray(walls, dtype=float).ravel()
    u = np.asarray(units, dtype=float).ravel()
    if w.size == 0 or w.shape != u.shape or (w <= 0).any() or (u <= 0).any():
        raise ValueError("need one positive wall time and one positive work count per block")
    rate = float(u.sum() / w.sum())
    rates = np.log(u / w)
    out = {
        "rate": rate,
        "ci_lo": None,
        "ci_hi": None,
        "log_se": None,
        "df": None,
        "n_blocks": int(w.size),
        "batches": None,
        **serial(rates),
    }
    if w.size < MIN_SERIES:
        out["method"] = (
            f"no interval: {w.size} timed block(s); an interval that honours serial correlation "
            "needs "
            f"{RATE_MIN_BLOCKS}"
        )
        return out
    logs = np.array([math.log(u[s].sum() / w[s].sum()) for s in batches(w.size, RATE_BATCHES)])
    lo, hi, se = _t_interval(math.log(rate), logs, level)
    out["log_se"] = se
    if w.size < RATE_MIN_BLOCKS:
        out["method"] = (
            f"no interval: {w.size} timed blocks; the long-run rate includes stalls a run this "
            "short may "
            f"not hold ({RATE_MIN_BLOCKS} blocks bound it, or repeats>=2 across runs)"
        )
        return out
    out.update(
        ci_lo=math.exp(lo),
        ci_hi=math.exp(hi),
        df=RATE_BATCHES - 1,
        batches=RATE_BATCHES,
        method=f"batch means: {RATE_BATCHES} consecutive batches of the timed blocks, t interval "
        "on their log "
        f"rates (df {RATE_BATCHES - 1}; Schmeiser 1982)",
    )
    return out


def batch_median(values, level: float = 0.95, count: int | None = None) -> dict:
    """Median of a serially correlated series (the typical step) with a batch-medians interval: the
    median of each of batch_count(n) consecutive batches, a t interval of their spread around the
    series' median. Needs MIN_SERIES values; {median, ci_lo, ci_hi, se (linear scale), df, method}.
    `count` fixes the batches (the adaptive window's pilot keeps its 5, which its step plan was
    calibrated with)."""
    x = np.asarray(values, dtype=float).ravel()
    if x.size == 0:
        raise ValueError("no values")
    med = float(np.median(x))
    out = {"median": med, "ci_lo": None, "ci_hi": None, "se": None, "df": None}
    if x.size < MIN_SERIES:
        out["method"] = (
            f"no interval: {x.size} value(s); an interval that honours serial correlation needs "
            f"{MIN_SERIES} ({BATCHES} batches of >= {MIN_PER_BATCH})"
        )
        return out
    k = count or batch_count(x.size)
    meds = np.array([np.median(x[s]) for s in batches(x.size, k)])
    lo, hi, se = _t_interval(med, meds, level)
    out.update(
        ci_lo=lo,
        ci_hi=hi,
        se=se,
        df=k - 1,
        method=f"batch medians: {k} consecutive batches, t interval on their medians (df {k - 1})",
    )
    return out


def log_median(values) -> tuple[float, float | None, int | None]:
    """(log median, its batch-medians standard error on the log scale or None, df) of a positive
    series: still 5 batches (the diagnosis's two-run ratio, stats.ratio_ci; its outputs are
    committed, and moving it to batch_count is left to its own change)."""
    x = np.log(np.asarray(values, dtype=float).ravel())
    med = float(np.median(x))
    if x.size < MIN_SERIES:
        return med, None, None
    meds = np.array([np.median(x[s]) for s in batches(x.size)])
    return med, float(meds.std(ddof=1) / math.sqrt(meds.size)), BATCHES - 1
