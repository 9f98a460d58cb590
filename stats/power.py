"""Power and planning: what a comparison could have seen, and how many runs of how many steps it
takes to see more.

A "no significant difference" alone does not say whether the difference is absent or the design
too weak to see it, so every compared row states its detectable difference: the smallest true
speed-up (or slow-down) the same design (its standard error, degrees of freedom and family, at
Holm's first step) would call with 80% probability, from the noncentral t (scipy.stats.nct), at
the spread it measured. `plan` (Kalibera & Jones, ISMM 2013) takes a pilot's two variance
components (between runs, and within a run per step) and picks the runs R and steps n that reach a
target detectable difference in the least machine time, or the smallest difference a budget can
see. The plan is fixed after the pilot and the verdicts use the planned runs only, so the pilot's
chance variance moves the design, never the coverage or the family-wise error. The formulas:
docs/methods.md "Repeats planned to a precision".
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from .verdict import NOISE
from .within import t_quantile

POWER = 0.80
MIN_RUNS = (
    3  # a plan never asks for fewer runs per configuration: t on 2 degrees of freedom at least
)
MAX_RUNS = 200
CONFIDENCE = (
    0.7  # the pilot's variance is planned at its 70% upper confidence limit (plan's docstring)
)


@functools.lru_cache(maxsize=4096)
def _noncentrality(df: float, crit: float, power: float) -> float:
    """delta with P(noncentral t(df, delta) > crit) = power."""
    from scipy import optimize, stats as st

    def f(d):
        return float(st.nct.sf(crit, df, d)) - power

    hi = crit + 10.0
    while f(hi) < 0:
        hi *= 2
    return float(optimize.brentq(f, crit - 10.0, hi, xtol=1e-6))


def detectable(
    log_se: float | None,
    df: float | None,
    family: int = 1,
    noise: float = NOISE,
    level: float = 0.95,
    power: float = POWER,
    floor: float | None = None,
) -> float | None:
    """The smallest true speed-up (as a fraction: 0.05 = 5% faster) this design calls faster with
    probability
    `power` in a family of `family` comparisons (Holm's first step); None without an interval (one
    run a side)."""
    if log_se is None or df is None or not math.isfinite(log_se) or log_se <= 0 or df <= 0:
        return None
    alpha = (1 - level) / max(1, family)
    crit = t_quantile(
        1 - alpha / 2, round(float(df), 3)
    )  # a claim's p-value is two-sided (stats.verdict)
    delta = _noncentrality(round(float(df), 3), crit, power)
    bar = math.log1p(max(noise, floor or 0.0))
    return math.expm1(bar + delta * log_se)


def runs_to_detect(
    diff_sd: float,
    effect: float,
    family: int = 1,
    noise: float = NOISE,
    level: float = 0.95,
    power: float = POWER,
    cap: int = MAX_RUNS,
) -> int | None:
    """Rounds (runs per configuration, paired) for `detectable` <= effect when one round's log
    difference has SD
    `diff_sd`; None when more than `cap` would be needed or the effect is inside the noise band."""
    if effect <= noise:
        return None

    def ok(r: int) -> bool:
        d = detectable(diff_sd / math.sqrt(r), r - 1, family, noise, level, power)
        return d is not None and d <= effect

    if diff_sd <= 0:
        return MIN_RUNS
    if not ok(cap):
        return None
    lo, hi = 1, cap  # detectable falls as runs grow: bisect for the first that is enough
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return max(hi, MIN_RUNS)


def half_width(diff_sd: float, runs: int, level: float = 0.95) -> float | None:
    """Half-width, as a fraction (0.02: +-2%), of a paired speed-up interval of `runs` rounds whose
    per-round log difference has SD diff_sd: expm1(t_{R-1} x diff_sd / sqrt(R)); None under 2
    runs."""
    if runs < 2:
        return None
    return math.expm1(t_quantile(0.5 + level / 2, runs - 1) * diff_sd / math.sqrt(runs))


def runs_for_half_width(
    diff_sd: float, target: float, level: float = 0.95, cap: int = MAX_RUNS
) -> int | None:
    """The fewest rounds (>= MIN_RUNS) whose paired speed-up interval is +-target or narrower; None
    past `cap`."""
    for r in range(MIN_RUNS, cap + 1):
        if half_width(diff_sd, r, level) <= target:
            return r
    return None


def runs_within(budget_s: float, configs: int, per_run_s: float) -> int:
    """The most rounds r whose cost, configs x r x per_run_s seconds (as plan states a design's
    seconds), is within budget_s. A quotient alone misses by one at an exact multiple in floating
    point: at 3 configurations of 4.65 s runs, 41.85 s (3 rounds' cost exactly) // 13.95 counts 2,
    and int(budget / cost) can also land one off; so the quotient is corrected against the cost."""
    r = int(budget_s / (configs * per_run_s))
    while configs * (r + 1) * per_run_s <= budget_s:
        r += 1
    while r > 0 and configs * r * per_run_s > budget_s:
        r -= 1
    return r


@dataclass
class Pilot:
    """What the pilot measured. logs[k][j]: log throughput of configuration k in round j (NaN:
    missing); within[k][j]: that run's within-run standard error of its log throughput (batch
    means), steps: the pilot's steps per run; startup_s / step_s: a run's fixed cost and its cost
    per step (seconds)."""

    logs: list
    within: list
    steps: int
    startup_s: float
    step_s: float

    def components(self) -> dict:
        """{residual_var, between_var, per_step_var, df}: a two-way (configuration x round) analysis
        of the pilot's run logs gives the residual variance of one run with round effects removed
        (what a paired difference sees), df (K - 1)(R - 1); its within-run part is the mean of the
        runs' squared batch-means standard errors (v_w = that x steps); the rest is between runs
        (Searle, Casella & McCulloch 1992, sec. 3.5; never < 0)."""
        x = np.asarray(self.logs, dtype=float)
        k, r = x.shape
        if k < 2 or r < 2 or np.isnan(x).any():
            raise ValueError(
                "the pilot needs every configuration in every round, two rounds and two rows at "
                "least"
            )
        resid = x - x.mean(1, keepdims=True) - x.mean(0, keepdims=True) + x.mean()
        df = (k - 1) * (r - 1)
        residual = float((resid**2).sum() / df)
        w = np.asarray(self.within, dtype=float)
        within_var = float(np.nanmean(w**2)) if np.isfinite(w).any() else 0.0
        within_var = min(within_var, residual)
        return {
            "residual_var": residual,
            "between_var": residual - within_var,
            "per_step_var": within_var * self.steps,
            "df": df,
        }


def plan(
    pilot: Pilot,
    rows: int,
    target: float = 0.05,
    budget_s: float | None = None,
    noise: float = NOISE,
    level: float = 0.95,
    power: float = POWER,
    min_steps: int = 10,
    max_steps: int | None = None,
    confidence: float = CONFIDENCE,
    goal: str = "detect",
) -> dict:
    """The cheapest (runs, steps) whose every row of a `rows`-comparison family detects `target`
    (80% power, Holm's first step), or, when that costs more than budget_s, the (runs, steps) within
    budget_s that detects the least. {runs, steps, detectable, seconds, reached ('target' / 'budget'
    / 'cap'), components, reason}.

    The pilot's variance is itself a chance estimate (14 degrees of freedom for 8 configurations in
    3 rounds): a plan made on it reaches 80% power only about half the time, and 75% on average in
    the calibration. So both components are scaled to the one-sided `confidence` upper limit of the
    residual variance, df / chi2_{1 - confidence, df} (Kieser & Wassmer 1996, "On the use of the
    upper confidence limit for the variance from a pilot sample for sample size determination",
    Biometrical Journal 38).

    goal="half_width" (repeats=auto's compare.target): the target is the half-width of every row's
    95% speed-up interval instead (0.02: +-2%); the result's `detectable` still says what that
    design sees at 80% power."""
    from scipy import stats as st

    c = dict(pilot.components())
    scale = c["df"] / float(st.chi2.ppf(1 - confidence, c["df"])) if confidence > 0.5 else 1.0
    c.update(
        between_var=c["between_var"] * scale, per_step_var=c["per_step_var"] * scale, scale=scale
    )
    configs = rows + 1
    # up to 4x the pilot's steps, or as many as the startup costs when that is more: where a run is
    # mostly start-up (a small model), longer windows are nearly free and may buy more than more
    # runs
    hi = max_steps or min(
        max(4 * pilot.steps, min_steps, int(pilot.startup_s / max(pilot.step_s, 1e-9))), 5000
    )
    grid = sorted({int(round(v)) for v in np.geomspace(min_steps, hi, 25)} | {pilot.steps})
    grid = [n for n in grid if min_steps <= n <= hi]

    def diff_sd(n: int) -> float:
        return math.sqrt(2 * (c["between_var"] + c["per_step_var"] / n))

    def cost(r: int, n: int) -> float:
        return configs * r * (pilot.startup_s + n * pilot.step_s)

    def needed(n: int) -> int | None:
        if goal == "half_width":
            return runs_for_half_width(diff_sd(n), target, level)
        return runs_to_detect(diff_sd(n), target, rows, noise, level, power)

    def aim(r: int, n: int) -> float | None:  # what the goal measures: smaller is better
        if goal == "half_width":
            return half_width(diff_sd(n), r, level)
        return detectable(diff_sd(n) / math.sqrt(r), r - 1, rows, noise, level, power)

    reaches = (
        f"reach +-{target * 100:g}% on every row's speed-up"
        if goal == "half_width"
        else f"detect {target * 100:g}% (80% power, Holm over {rows})"
    )
    best = None
    for n in grid:
        r = needed(n)
        if r is not None and (best is None or cost(r, n) < cost(*best)):
            best = (r, n)
    out = {"components": c, "target": target, "budget_s": budget_s, "rows": rows, "goal": goal}
    if best is not None and (budget_s is None or cost(*best) <= budget_s):
        r, n = best
        out.update(
            runs=r,
            steps=n,
            reached="target",
            seconds=cost(r, n),
            detectable=detectable(diff_sd(n) / math.sqrt(r), r - 1, rows, noise, level, power),
            half_width=half_width(diff_sd(n), r, level),
            reason=f"{r} runs x {n} steps per configuration {reaches}",
        )
        return out
    # the budget (or the cap) binds: the (runs, steps) it affords that detect the least
    choice = None
    for n in grid:
        per = pilot.startup_s + n * pilot.step_s
        r = min(MAX_RUNS, runs_within(budget_s, configs, per)) if budget_s is not None else MAX_RUNS
        if r < MIN_RUNS:
            continue
        d = aim(r, n)
        if d is not None and (choice is None or d < choice[2]):
            choice = (r, n, d)
    if (
        choice is None
    ):  # the fewest rounds that give an interval, at the steps the pilot ran (the user's)
        n = max(min_steps, pilot.steps)
        out.update(
            runs=MIN_RUNS,
            steps=n,
            reached="budget",
            detectable=detectable(
                diff_sd(n) / math.sqrt(MIN_RUNS), MIN_RUNS - 1, rows, noise, level, power
            ),
            half_width=half_width(diff_sd(n), MIN_RUNS, level),
            seconds=cost(MIN_RUNS, n),
            reason=f"compare.budget_s={budget_s:g} affords fewer than {MIN_RUNS} runs per "
            "configuration",
        )
        return out
    r, n, got = choice
    d = detectable(diff_sd(n) / math.sqrt(r), r - 1, rows, noise, level, power)
    hw = half_width(diff_sd(n), r, level)
    got_words = f"reach +-{hw:.1%}" if goal == "half_width" else f"detect {d:.1%}"
    want = f"+-{target * 100:g}%" if goal == "half_width" else f"{target * 100:g}%"
    why = "budget" if budget_s is not None else "cap"
    needs = (
        f"; {want} would take {best[0]} runs x {best[1]} steps, about {cost(*best) / 60:.0f} min"
        if best is not None
        else f"; {want} would take more than {MAX_RUNS} runs"
    )
    out.update(
        runs=r,
        steps=n,
        reached=why,
        detectable=d,
        half_width=hw,
        seconds=cost(r, n),
        target_runs=best[0] if best else None,
        target_steps=best[1] if best else None,
        target_seconds=cost(*best) if best else None,
        reason=(
            f"stopped at compare.budget_s={budget_s:g}: {r} runs x {n} steps {got_words}, not "
            f"{want}"
            if why == "budget"
            else f"{MAX_RUNS} runs {got_words}, not {want}"
        )
        + needs,
    )
    return out
