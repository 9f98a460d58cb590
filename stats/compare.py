"""Comparisons between configurations, for callers that hold timed blocks or step series directly
(the sweep table goes through tables.aggregate, which calls the same functions). Every ratio here is
throughput-style: > 1 means the candidate is faster. Nothing here resamples: intervals are t
intervals on runs (stats.runs) or on batches of one run (stats.within), so the same records always
give the same numbers and verdicts, whatever a seed."""

from __future__ import annotations

import math

import numpy as np

from .runs import Speedup, compare_runs, log_rate, run_level
from .verdict import EQUIVALENT, FASTER, NO_VERDICT, NOISE, NS, SLOWER, judge, verdict
from .within import BATCHES, batch_rate, log_median, t_quantile


def throughput(runs, level: float = 0.95) -> dict:
    """Throughput of one configuration from its runs = [(block walls, block work), ...]: the run
    level (geometric mean, t on the runs) for two runs or more; one run: its own batch-means
    interval, which holds its steps' noise only. {rate, ci_lo, ci_hi, n_runs, run_rates, method,
    within_run (True for one run)}."""
    if len(runs) == 1:
        b = batch_rate(*runs[0], level=level)
        return {
            "rate": b["rate"],
            "ci_lo": b["ci_lo"],
            "ci_hi": b["ci_hi"],
            "n_runs": 1,
            "run_rates": [b["rate"]],
            "method": b["method"] + " (one run: the noise inside it, not the spread between runs)",
            "within_run": True,
            "log_se": b["log_se"],
        }
    r = run_level([log_rate(w, u) for w, u in runs], level)
    return {
        "rate": r["value"],
        "ci_lo": r["ci_lo"],
        "ci_hi": r["ci_hi"],
        "n_runs": r["n_runs"],
        "run_rates": r["run_values"],
        "method": r["method"],
        "within_run": False,
        "log_se": r["log_se"],
    }


def compare_throughput(
    baseline_runs, candidate_runs, level: float = 0.95, noise: float = NOISE, paired: bool = False
) -> dict:
    """Speed-up = candidate throughput / baseline throughput from runs = [(block walls, block work),
    ...], run level (stats.runs.compare_runs). paired: the i-th runs of the two sides ran together
    (interleaved pairs)."""
    b = [log_rate(w, u) for w, u in baseline_runs]
    c = [log_rate(w, u) for w, u in candidate_runs]
    rounds = (list(range(len(b))), list(range(len(c)))) if paired else (None, None)
    s = compare_runs(b, c, *rounds, level=level, noise=noise)
    return {
        "ratio": s.ratio,
        "ci_lo": s.ci_lo,
        "ci_hi": s.ci_hi,
        "verdict": s.verdict,
        "paired": s.paired,
        "n_runs_baseline": s.n_baseline,
        "n_runs_candidate": s.n_candidate,
        "method": s.method,
        "repeats_needed": s.repeats_needed,
        "speedup": s,
    }


def ratio_ci(
    baseline, candidate, level: float = 0.95, seed: int | None = None, independent: bool = False
) -> tuple[float, float | None, float | None]:
    """Ratio of two runs' medians (baseline / candidate, so > 1 when the candidate's times are
    shorter), with a batch-medians interval on the log scale (Welch across the two runs' batches).
    (ratio, None, None) when a series has fewer than 10 values. Within runs only: it holds the two
    runs' own noise, not the spread between runs. independent: the values are independent timed
    blocks (a microbenchmark's), not consecutive steps: the ratio of their geometric means with a
    Welch t interval on the log values (>= 3 each). `seed` is accepted for old callers; nothing is
    random."""
    if independent:
        b, c = (np.log(np.asarray(v, dtype=float).ravel()) for v in (baseline, candidate))
        mb, mc = float(b.mean()), float(c.mean())
        if b.size < 3 or c.size < 3:
            return math.exp(mb - mc), None, None
        vb, vc = b.var(ddof=1) / b.size, c.var(ddof=1) / c.size
        sb, sc, dfs = math.sqrt(vb), math.sqrt(vc), (b.size - 1, c.size - 1)
    else:
        mb, sb, _ = log_median(baseline)
        mc, sc, _ = log_median(candidate)
        dfs = (BATCHES - 1, BATCHES - 1)
    ratio = math.exp(mb - mc)
    if sb is None or sc is None:
        return ratio, None, None
    se2 = sb * sb + sc * sc
    if se2 == 0:
        return ratio, ratio, ratio
    df = se2**2 / (sb**4 / dfs[0] + sc**4 / dfs[1])
    h = t_quantile(0.5 + level / 2, df) * math.sqrt(se2)
    return ratio, math.exp(mb - mc - h), math.exp(mb - mc + h)


RATIO_CI_METHOD = (
    "ratio of the two runs' medians, batch-medians interval (5 batches per run, "
    "Welch t on the log scale)"
)

__all__ = [
    "EQUIVALENT",
    "FASTER",
    "NO_VERDICT",
    "NOISE",
    "NS",
    "RATIO_CI_METHOD",
    "SLOWER",
    "Speedup",
    "compare_runs",
    "compare_throughput",
    "judge",
    "ratio_ci",
    "throughput",
    "verdict",
]
