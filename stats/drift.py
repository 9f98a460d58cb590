"""Warm-up / drift detection: is the measured window steady, or still settling (or throttling)?

A trend test on batch means: the window's log step times (or per-block times) are cut into
DRIFT_BATCHES consecutive batches, and the least-squares slope of the batch means against their
position is tested with a t test on DRIFT_BATCHES - 2 degrees of freedom at DRIFT_ALPHA. Batch
means of several steps are nearly independent, so serial correlation between steps does not turn
noise into a "trend". Unsteady: the trend is significant and the fitted change across the window
exceeds DRIFT_NOISE (2%); steady: the change is within DRIFT_NOISE and not significant; anything
else is "unknown" (steady None, with the drift and p kept), never "steady". A sweep summarises its
runs' p-values with Benjamini-Hochberg (unsteady_runs). Why 8 batches at 1%, and the false-alarm
rates: docs/methods.md "Steady state and the noise sentinel".
"""

from __future__ import annotations

import math

import numpy as np

from .within import batches

DRIFT_NOISE = 0.02
DRIFT_BATCHES = 8
DRIFT_ALPHA = 0.01
MIN_DRIFT = 2 * DRIFT_BATCHES  # 16 steps: batches of at least 2
METHOD = (
    f"trend test on {DRIFT_BATCHES} batch means of the log times: least-squares slope, t test (df "
    f"{DRIFT_BATCHES - 2}) at {DRIFT_ALPHA:.0%}, serial correlation absorbed by the batches"
)


def trend(values) -> tuple[float, float] | None:
    """(fitted relative change from the first batch to the last, two-sided p) of a positive series;
    None if too short."""
    x = np.asarray(values, dtype=float).ravel()
    if x.size < MIN_DRIFT or (x <= 0).any():
        return None
    # stdtr(df, -x) is scipy.stats.t.sf(x, df) (t_gen._sf), bit for bit, without importing
    # scipy.stats in the rank that tests its steady state (~0.5 CPU s, issue 36)
    from scipy.special import stdtr

    means = np.array([np.log(x[s]).mean() for s in batches(x.size, DRIFT_BATCHES)])
    t = np.arange(DRIFT_BATCHES) - (DRIFT_BATCHES - 1) / 2
    slope = float((means * t).sum() / (t * t).sum())
    resid = means - means.mean() - slope * t
    s2 = float((resid**2).sum() / (DRIFT_BATCHES - 2))
    se = math.sqrt(s2 / float((t * t).sum()))
    p = (
        1.0
        if se == 0 and slope == 0
        else (0.0 if se == 0 else float(2 * stdtr(DRIFT_BATCHES - 2, -abs(slope) / se)))
    )
    return math.expm1(slope * (DRIFT_BATCHES - 1)), p


def steady_state(values, level: float | None = None) -> dict:
    """{steady (True / False / None: too short, or a change over DRIFT_NOISE the test cannot call),
    drift (fitted change across the window), p_value, method, reason}.
    `level` is accepted for old callers; the test's own level is DRIFT_ALPHA."""
    out = {"steady": None, "drift": None, "p_value": None, "method": METHOD}
    found = trend(values)
    if found is None:
        out["reason"] = f"too few steps to test (needs {MIN_DRIFT})"
        return out
    drift, p = found
    significant, big = p < DRIFT_ALPHA, abs(drift) > DRIFT_NOISE
    out.update(steady=None if big and not significant else not big, drift=drift, p_value=p)
    if significant and big:
        out["reason"] = (
            f"the window drifted {drift:+.1%} from its start to its end (trend p={p:.2g}): not at "
            "steady state"
        )
    elif significant:
        out["reason"] = (
            f"significant but small drift ({drift:+.1%}, p={p:.2g}, within {DRIFT_NOISE:.0%})"
        )
    elif big:
        out["reason"] = (
            f"the window moved {drift:+.1%} from its start to its end, more than the "
            f"{DRIFT_NOISE:.0%} "
            f"noise threshold, and the trend test cannot tell that from noise (p={p:.2g}, "
            f"{DRIFT_BATCHES} batch means): more steps can tell"
        )
    else:
        out["reason"] = f"no significant drift ({drift:+.1%}, p={p:.2g}, within {DRIFT_NOISE:.0%})"
    return out


def unsteady_runs(tests: dict, q: float = DRIFT_ALPHA) -> dict:
    """Benjamini-Hochberg over a sweep's runs: tests = {run: steady_state(...)}; the runs whose
    drift is both
        discovered at false discovery rate q (the per-run test's own level, so a run alone is judged
        as its record
    says) and larger than DRIFT_NOISE. {runs: [...], tested, method}."""
    from .verdict import adjust

    judged = {k: v for k, v in tests.items() if v and v.get("p_value") is not None}
    keys = list(judged)
    found = adjust([judged[k]["p_value"] for k in keys], q, "fdr_bh")
    runs = [k for k, hit in zip(keys, found) if hit and abs(judged[k]["drift"]) > DRIFT_NOISE]
    return {
        "runs": runs,
        "tested": len(keys),
        "method": f"drift trend test per run, Benjamini-Hochberg over the {len(keys)} tested runs "
        f"at FDR {q:.0%}",
    }
