"""The noise sentinel: did the machine, not the knobs, move the rows of a sweep?

Some phases cannot be changed by the knobs a sweep compares (forward time under bucket or
compression knobs). Each run gives one figure of such a phase, its log median; rows are compared
with a one-way random-effects ANOVA on those run figures (the run is the unit, as for the
throughput). The F test (at 2.5%, so that quiet sweeps raise it at most 5% of the time) asks whether
rows differ by more than their runs do; the between-row spread tau (standard deviation of the row
effects, relative) comes with an interval from the F distribution (Searle, Casella & McCulloch 1992,
"Variance Components", sec. 3.5: the interval of the variance ratio, here with the balanced formula
at the average runs per row). A spread that is significant means the machine's state differed
between rows: verdicts whose intervals do not clear it are downgraded by the caller, so the warning
and the verdicts under it never contradict each other."""

from __future__ import annotations

import math

import numpy as np

Z95 = 1.959963984540054
# the F test's level: a 5% test fires on 5% of quiet sweeps by construction; 2.5% keeps false
ALPHA = 0.025
# alarms <= 5%


def sentinel(run_logs_by_row: dict, level: float = 0.95, alpha: float = ALPHA) -> dict | None:
    """run_logs_by_row = {row: [log median of the phase, one per run]}; rows with fewer than 2 runs
    are left out. None when fewer than 2 rows have 2 runs. {p_value, significant, tau, tau_lo,
    tau_hi, spread, floor, rows, runs, low_row, high_row, method}; spread = exp(tau) - 1; floor =
    exp(1.96 sqrt(2) tau) - 1, the difference two rows can show from the machine alone (95%)."""
    from scipy import special as sc, stats as st

    groups = {k: np.asarray(v, dtype=float) for k, v in run_logs_by_row.items() if len(v) >= 2}
    if len(groups) < 2:
        return None
    xs = list(groups.values())
    k, n = len(xs), sum(x.size for x in xs)
    # f_oneway's own function under its axis / nan-policy wrapper, which for these 1-D groups only
    # passes them through (~0.6 of its ~0.9 ms a call), and f.ppf as the special function it
    # calls (3 us, not 86): the same numbers bit for bit, checked on 20 000 random sweeps of 2-8
    # rows (issue 36: the fast calibration calls this 1500 times a scenario)
    f, p = getattr(st.f_oneway, "__wrapped__", st.f_oneway)(*xs)
    f = float(f) if math.isfinite(f) else 0.0
    p = float(p) if math.isfinite(p) else 1.0
    grand = np.concatenate(xs).mean()
    msb = sum(x.size * (x.mean() - grand) ** 2 for x in xs) / (k - 1)
    msw = sum(((x - x.mean()) ** 2).sum() for x in xs) / (n - k)
    n0 = (n - sum(x.size**2 for x in xs) / n) / (k - 1)
    tau = math.sqrt(max(0.0, (msb - msw) / n0))
    a = (1 - level) / 2
    lo_q, hi_q = sc.fdtri(k - 1, n - k, 1 - a), sc.fdtri(k - 1, n - k, a)  # st.f.ppf
    ratio_lo = max(0.0, (f / lo_q - 1) / n0) if msw > 0 else 0.0
    ratio_hi = max(0.0, (f / hi_q - 1) / n0) if msw > 0 else 0.0
    means = {row: float(x.mean()) for row, x in groups.items()}
    low, high = min(means, key=means.get), max(means, key=means.get)
    return {
        "p_value": p,
        "significant": p < alpha,
        "tau": tau,
        "tau_lo": math.sqrt(ratio_lo * msw),
        "tau_hi": math.sqrt(ratio_hi * msw),
        "spread": math.expm1(tau),
        "floor": math.expm1(Z95 * math.sqrt(2) * tau),
        "rows": k,
        "runs": n,
        "low_row": low,
        "high_row": high,
        "low_median": math.exp(means[low]),
        "high_median": math.exp(means[high]),
        "method": f"one-way random-effects ANOVA of the runs' log medians across {k} rows (F test "
        f"at {alpha:.1%}; "
        f"between-row SD with its {level:.0%} interval from the F distribution)",
    }
