"""Across runs: the run is the unit of replication.

Every run of a configuration gives one figure, its log throughput (log of sum(work) / sum(wall)
over its timed blocks); the configuration's throughput is the geometric mean over runs with a
Student t interval on R - 1 degrees of freedom (Kalibera & Jones, ISMM 2013). Runs differ by more
than their steps do (a new process, allocator state, core placement, a neighbour's job), and a
run's own steps, however many, say nothing about that; as each run is one number, the interval
holds whatever the serial correlation inside the runs. A speed-up is compared on the log scale: a
paired t on the per-round log ratios when the sweep ran in rounds (repeats=R) and each round holds
one run of each, Welch's t otherwise. One run on a side gives no run-level interval at all: the
comparison says so instead of a verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .verdict import NO_VERDICT, NOISE, NS, claim_pvalues, judge, repeats_to_decide
from .within import t_quantile


def time_saved(speedup: float | None) -> float | None:
    """The share of the old time a change saves when it runs `speedup` times as fast (1.25x saves
    20%); None for no ratio or a non-positive one."""
    return None if speedup is None or speedup <= 0 else 1 - 1 / speedup


def log_rate(walls, units) -> float:
    w = np.asarray(walls, dtype=float).ravel()
    u = np.asarray(units, dtype=float).ravel()
    if w.size == 0 or w.shape != u.shape or (w <= 0).any() or (u <= 0).any():
        raise ValueError(
            "each run needs one positive wall time and one positive work count per block"
        )
    return float(math.log(u.sum() / w.sum()))


def run_level(logs, level: float = 0.95) -> dict:
    """exp(mean of per-run logs) with a t(R-1) interval; {value, ci_lo, ci_hi, log_mean, log_se, df,
    n_runs, run_values, method}. One run: no interval."""
    x = np.asarray(logs, dtype=float).ravel()
    if x.size == 0:
        raise ValueError("no runs")
    out = {
        "value": float(math.exp(x.mean())),
        "ci_lo": None,
        "ci_hi": None,
        "log_mean": float(x.mean()),
        "log_se": None,
        "df": None,
        "n_runs": int(x.size),
        "run_values": [float(math.exp(v)) for v in x],
    }
    if x.size < 2:
        out["method"] = "one run: no run-level interval (the spread between runs is unknown)"
        return out
    se = float(x.std(ddof=1) / math.sqrt(x.size))
    h = t_quantile(0.5 + level / 2, x.size - 1) * se
    out.update(
        ci_lo=math.exp(x.mean() - h),
        ci_hi=math.exp(x.mean() + h),
        log_se=se,
        df=x.size - 1,
        method=f"geometric mean over {x.size} runs, t interval on the runs' log values (df "
        f"{x.size - 1}; the "
        "run is the unit, Kalibera & Jones 2013)",
    )
    return out


def _paired(base_rounds, cand_rounds, nb: int, nc: int) -> bool:
    if base_rounds is None or cand_rounds is None or nb != nc or nb < 2:
        return False
    b, c = list(base_rounds), list(cand_rounds)
    return None not in b and len(set(b)) == nb and set(b) == set(c)


@dataclass
class Speedup:
    """A comparison of two configurations, run level. ratio = candidate / baseline throughput."""

    ratio: float
    ci_lo: float | None = None
    ci_hi: float | None = None
    log_ratio: float = 0.0
    log_se: float | None = None
    df: float | None = None
    paired: bool = False
    n_baseline: int = 0
    n_candidate: int = 0
    pvalues: dict = field(default_factory=dict)
    verdict: str = NS  # unadjusted (compare.verdict's rule on this interval)
    repeats_needed: int | None = None
    method: str = ""

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def compare_runs(
    base_logs,
    cand_logs,
    base_rounds=None,
    cand_rounds=None,
    level: float = 0.95,
    noise: float = NOISE,
    floor: float | None = None,
) -> Speedup:
    """Speed-up of the candidate over the baseline from per-run log throughputs (or log samples/s).
    Rounds are any hashable labels (a sweep and its repeat index): runs pair when both sides hold
    one run of every round. `floor`: a larger bar for faster / slower (the noise sentinel's machine
    spread); equivalence stays within +-noise."""
    b = np.asarray(base_logs, dtype=float).ravel()
    c = np.asarray(cand_logs, dtype=float).ravel()
    if b.size == 0 or c.size == 0:
        raise ValueError("both sides need at least one run")
    out = Speedup(
        ratio=float(math.exp(c.mean() - b.mean())),
        log_ratio=float(c.mean() - b.mean()),
        n_baseline=int(b.size),
        n_candidate=int(c.size),
    )
    if _paired(base_rounds, cand_rounds, b.size, c.size):
        by_round = dict(zip(base_rounds, b))
        d = np.array([v - by_round[r] for r, v in zip(cand_rounds, c)])
        out.paired, out.df = True, float(d.size - 1)
        out.log_se = float(d.std(ddof=1) / math.sqrt(d.size))
        out.method = (
            f"paired t on the per-round log ratios ({d.size} rounds, df {d.size - 1}): each round "
            "ran both, "
            "so a round's machine state cancels"
        )
    elif b.size >= 2 and c.size >= 2:
        vb, vc = b.var(ddof=1) / b.size, c.var(ddof=1) / c.size
        out.log_se = float(math.sqrt(vb + vc))
        out.df = (
            float((vb + vc) ** 2 / (vb**2 / (b.size - 1) + vc**2 / (c.size - 1)))
            if vb + vc > 0
            else float(b.size + c.size - 2)
        )
        out.method = f"Welch t on the runs' log values ({b.size} vs {c.size} runs, df {out.df:.1f})"
    else:
        out.verdict = NO_VERDICT
        out.method = (
            f"no run-level interval: {min(b.size, c.size)} run on a side; the spread between runs "
            "is "
            "unknown, so no verdict (repeats=3 or more)"
        )
        return out
    if out.log_se == 0:  # identical runs: a degenerate interval, no claim
        out.log_se = 1e-12
    h = t_quantile(0.5 + level / 2, out.df) * out.log_se
    out.ci_lo, out.ci_hi = math.exp(out.log_ratio - h), math.exp(out.log_ratio + h)
    out.pvalues = claim_pvalues(out.log_ratio, out.log_se, out.df, noise, floor)
    out.verdict = judge(out.ci_lo, out.ci_hi, noise, floor)
    if out.verdict == NS:
        out.repeats_needed = repeats_to_decide(
            out.log_ratio, out.log_se, out.df, min(b.size, c.size), noise, level, out.paired
        )
    return out


CROSSOVER_MIN_ROUNDS = 5  # df >= 3: below, the df lost widens the interval more than it gains


def block_ab(base_walls, fix_walls, steps_per_block: int = 1, level: float = 0.95) -> Speedup:
    """The in-job check's comparison (tasks/train/verify.py): round r timed one block of each
    setting back to back, base first when r is even, so the pair shares the machine's state of
    that moment. One function for the check and its calibration (stats.calibrate_verify), so the
    table checks the interval the record prints.

    From CROSSOVER_MIN_ROUNDS rounds on, the AB/BA crossover analysis (Senn, Cross-over Trials in
    Clinical Research, 2002, ch. 3): the saving is the mean of the two orders' mean log ratios, its
    variance from the spread inside each order (df n - 2). Why: the committed checks show a
    period effect, the first block of a round slower than the second by 10-40% (a shaped link's
    token bucket refilled across the round's barrier), which a plain paired t carries into its
    variance, an interval 170 points wide on the slow link, and into its mean when the rounds are
    odd. Fewer rounds: the plain paired t (a period effect then widens it, never narrows it; the
    crossover's df 2 at 4 rounds widened the committed checks' intervals by up to 35 points)."""
    n = len(base_walls)
    if n != len(fix_walls):
        raise ValueError("every round times one block of each setting")
    b = [math.log(steps_per_block / w) for w in base_walls]
    f = [math.log(steps_per_block / w) for w in fix_walls]
    out = compare_runs(b, f, list(range(n)), list(range(n)), level=level)
    if n < CROSSOVER_MIN_ROUNDS:
        return out
    d = np.asarray(f) - np.asarray(b)
    ab, ba = d[0::2], d[1::2]
    resid = np.concatenate([ab - ab.mean(), ba - ba.mean()])
    var = float(resid @ resid) / (n - 2)
    out.log_ratio = float((ab.mean() + ba.mean()) / 2)
    out.ratio = math.exp(out.log_ratio)
    out.df = float(n - 2)
    out.log_se = max(math.sqrt(var / 4 * (1 / ab.size + 1 / ba.size)), 1e-12)
    out.method = (
        f"AB/BA crossover on the per-round log ratios ({n} rounds, df {n - 2}): each round ran "
        "both, so its machine state cancels, and the mean of the two orders' means removes "
        "which block came first"
    )
    h = t_quantile(0.5 + level / 2, out.df) * out.log_se
    out.ci_lo, out.ci_hi = math.exp(out.log_ratio - h), math.exp(out.log_ratio + h)
    out.pvalues = claim_pvalues(out.log_ratio, out.log_se, out.df, NOISE, None)
    out.verdict = judge(out.ci_lo, out.ci_hi, NOISE, None)
    out.repeats_needed = None
    return out


NARROW_MIN_ROUNDS = 6  # the in-job check stops on a narrow interval from here on, not before: at
# 3-5 rounds (df 1-3) a sample variance that came out small by chance would end the check on an
# interval that holds the truth less often than stated (stats.calibrate_verify's adaptive rows)


def saving_width(s: Speedup) -> float | None:
    """The width of a comparison's interval on the time saved (points of the old time / 100)."""
    if s.ci_lo is None or s.ci_hi is None:
        return None
    lo, hi = time_saved(s.ci_lo), time_saved(s.ci_hi)
    return None if lo is None or hi is None else hi - lo


def narrow_enough(s: Speedup, rounds: int, width: float) -> bool:
    """The in-job check's stopping rule (tasks/train/verify.py, diagnose.verify_width), one
    function for the check and its calibration: at least NARROW_MIN_ROUNDS rounds and an interval
    on the saving at most `width` wide. It stops on the interval's width, never on its value, so
    the saving it reports is not chosen by where it happened to be."""
    w = saving_width(s)
    return rounds >= NARROW_MIN_ROUNDS and w is not None and w <= width


def plan_repeats(
    logs, within_se=None, rel_ci: float = 0.02, level: float = 0.95, cap: int = 100
) -> dict:
    """How many runs give a run-level interval of +-rel_ci, from the measured spread (Kalibera &
    Jones 2013, sec. 3): the variance of a run's figure is the between-run variance plus its own
    within-run variance (batch means); more steps shrink only the second, more runs shrink both.
    {runs_sd, between_sd, within_sd, repeats, target}."""
    x = np.asarray(logs, dtype=float).ravel()
    out = {
        "target": rel_ci,
        "runs_sd": None,
        "between_sd": None,
        "within_sd": None,
        "repeats": None,
    }
    if x.size < 2:
        return out
    s2 = float(x.var(ddof=1))
    w2 = [v * v for v in (within_se or []) if v is not None]
    within = float(np.mean(w2)) if w2 and len(w2) == x.size else None
    out["runs_sd"] = math.sqrt(s2)
    if within is not None:
        out["within_sd"] = math.sqrt(within)
        out["between_sd"] = math.sqrt(max(0.0, s2 - within))
    goal = math.log1p(rel_ci)
    for r in range(2, cap + 1):
        if t_quantile(0.5 + level / 2, r - 1) * math.sqrt(s2 / r) <= goal:
            out["repeats"] = r
            break
    return out
