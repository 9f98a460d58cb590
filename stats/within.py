"""Within one run: intervals that honour the serial correlation of consecutive steps (or timed blocks).

Consecutive steps of a run are not independent: on the project's 2-core machine the lag-1 autocorrelation of per-step
log time had a median of 0.29 (IQR 0.19-0.51) over 34 committed runs, and an interval that treats the steps as
independent covered 57-85% instead of 95% in simulation. The method here is non-overlapping **batch means**
(Schmeiser 1982, "Batch size effects in the analysis of simulation output", Operations Research 30(3)): the series is
cut into BATCHES consecutive batches, each batch gives one figure (a throughput, a median), and the interval is a
Student t interval on those few figures with BATCHES - 1 degrees of freedom. Batches of several steps are much less
correlated than single steps, and the t quantile on 4 degrees of freedom pays for the few of them. A fixed, small
number of batches keeps the batches as long as possible, which is what makes them nearly independent; the t interval
is exact as the batches grow (fixed-b asymptotics). The calibration suite (`python -m stats.calibrate`) measures the
coverage under AR(1) noise; docs/methods.md has the table and where it falls short (phi = 0.7 needs ~120 blocks).

Also recorded for every run: the lag-1 autocorrelation of the series and its effective sample size
n (1 - r) / (1 + r) (the AR(1) approximation), so a reader can see how much a run's many steps are really worth.
"""
from __future__ import annotations

import functools
import math

import numpy as np

BATCHES = 5             # batches per run: t on 4 degrees of freedom
MIN_PER_BATCH = 2       # the fewest steps (blocks) in a batch
MIN_SERIES = BATCHES * MIN_PER_BATCH   # 10: fewer steps (blocks) give no within-run interval


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """Student t quantile (scipy), cached: the same few (p, df) pairs recur in every table and simulation."""
    from scipy import stats as st

    return float(st.t.ppf(p, df))


def lag1(values) -> float | None:
    """Lag-1 autocorrelation of a series (the usual estimator: lag-1 autocovariance / variance, mean removed)."""
    x = np.asarray(values, dtype=float).ravel()
    if x.size < 3:
        return None
    d = x - x.mean()
    den = float((d * d).sum())
    return float((d[1:] * d[:-1]).sum() / den) if den > 0 else 0.0


def effective_size(values) -> float | None:
    """n (1 - r) / (1 + r) with r the lag-1 autocorrelation, bias-corrected for short series (Kendall's (n r + 1) /
    (n - 3)) and kept in [0, 0.99]: how many independent steps the series is worth under an AR(1) model."""
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
    """`count` consecutive batches covering all n items, sizes differing by at most one (longer ones last)."""
    edges = np.linspace(0, n, count + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def _t_interval(centre: float, values: np.ndarray, level: float) -> tuple[float, float, float]:
    """(lo, hi, se) of `centre` +- t_{k-1} sd(values) / sqrt(k)."""
    k = values.size
    se = float(values.std(ddof=1) / math.sqrt(k))
    h = t_quantile(0.5 + level / 2, k - 1) * se
    return centre - h, centre + h, se


def batch_rate(walls, units, level: float = 0.95) -> dict:
    """Throughput of one run, sum(units) / sum(walls), with a batch-means interval.

    The interval is computed on the log scale: each batch's log(sum units / sum walls), a t interval around the run's
    log rate, then exponentiated (so it is never negative and ratios of runs stay symmetric). Needs MIN_SERIES blocks.
    """
    w = np.asarray(walls, dtype=float).ravel()
    u = np.asarray(units, dtype=float).ravel()
    if w.size == 0 or w.shape != u.shape or (w <= 0).any() or (u <= 0).any():
        raise ValueError("need one positive wall time and one positive work count per block")
    rate = float(u.sum() / w.sum())
    rates = np.log(u / w)
    out = {"rate": rate, "ci_lo": None, "ci_hi": None, "log_se": None, "df": None, "n_blocks": int(w.size),
           "batches": None, **serial(rates)}
    if w.size < MIN_SERIES:
        out["method"] = (f"no interval: {w.size} timed block(s); an interval that honours serial correlation needs "
                         f"{MIN_SERIES} ({BATCHES} batches of >= {MIN_PER_BATCH})")
        return out
    parts = batches(w.size)
    logs = np.array([math.log(u[s].sum() / w[s].sum()) for s in parts])
    lo, hi, se = _t_interval(math.log(rate), logs, level)
    out.update(ci_lo=math.exp(lo), ci_hi=math.exp(hi), log_se=se, df=BATCHES - 1, batches=BATCHES,
               method=f"batch means: {BATCHES} consecutive batches of the timed blocks, t interval on their log rates "
                      f"(df {BATCHES - 1}; Schmeiser 1982)")
    return out


def batch_median(values, level: float = 0.95) -> dict:
    """Median of a serially correlated series with a batch-medians interval: the median of each of BATCHES consecutive
    batches, a t interval (df BATCHES - 1) of their spread around the series' median. Needs MIN_SERIES values;
    {median, ci_lo, ci_hi, log_se (None: linear scale), df, method}."""
    x = np.asarray(values, dtype=float).ravel()
    if x.size == 0:
        raise ValueError("no values")
    med = float(np.median(x))
    out = {"median": med, "ci_lo": None, "ci_hi": None, "se": None, "df": None}
    if x.size < MIN_SERIES:
        out["method"] = (f"no interval: {x.size} value(s); an interval that honours serial correlation needs "
                         f"{MIN_SERIES} ({BATCHES} batches of >= {MIN_PER_BATCH})")
        return out
    meds = np.array([np.median(x[s]) for s in batches(x.size)])
    lo, hi, se = _t_interval(med, meds, level)
    out.update(ci_lo=lo, ci_hi=hi, se=se, df=BATCHES - 1,
               method=f"batch medians: {BATCHES} consecutive batches, t interval on their medians (df {BATCHES - 1})")
    return out


def log_median(values) -> tuple[float, float | None, int | None]:
    """(log median, its batch-medians standard error on the log scale or None, df) of a positive series."""
    x = np.log(np.asarray(values, dtype=float).ravel())
    med = float(np.median(x))
    if x.size < MIN_SERIES:
        return med, None, None
    meds = np.array([np.median(x[s]) for s in batches(x.size)])
    return med, float(meds.std(ddof=1) / math.sqrt(meds.size)), BATCHES - 1
