"""The one verdict code: what the sweep table, the report, the W&B summary, the scaling table, the
harness-cost check and autotune's conclusion all call a comparison.

A comparison is a speed-up ratio r (candidate throughput / baseline throughput) with a two-sided
interval at `level` and a noise floor `noise` (compare.noise, default 2%): faster when the whole
interval lies above 1 + noise, slower when it lies below 1 - noise, equivalent when it lies inside
[1 - noise, 1 + noise] (two one-sided tests, Schuirmann 1987), else no significant difference, with
the repeats that would decide it. The minimum-effect rule is criterion.rs's. Each claim has a
p-value on the interval's scale (a claim holds at level L exactly when p <= 1 - L), so a family of
comparisons can be adjusted (stats.family). docs/methods.md "Comparisons and verdicts".
"""

from __future__ import annotations

import math

FASTER, SLOWER, EQUIVALENT, NS = "faster", "slower", "equivalent", "no significant difference"
NO_VERDICT = "no verdict"  # the design cannot give one (one run per side): the reason goes with it
CLAIMS = (FASTER, SLOWER, EQUIVALENT)
NOISE = 0.02


def judge(
    lo: float | None, hi: float | None, noise: float = NOISE, floor: float | None = None
) -> str:
    """The verdict of an interval of the speed-up ratio, unadjusted. `floor` (the noise sentinel's
    machine spread) raises the bar for faster / slower only; equivalence stays judged against the
    user's band, +-noise."""
    if lo is None or hi is None:
        return NS
    bar = max(noise, floor or 0.0)
    if lo > 1 + bar:
        return FASTER
    if hi < 1 - bar:
        return SLOWER
    if noise > 0 and lo >= 1 - noise and hi <= 1 + noise:
        return EQUIVALENT
    return NS


def verdict(ratio: float | None, lo: float | None, hi: float | None, noise: float = NOISE) -> str:
    """judge() with the ratio passed along (callers print it beside); the interval alone decides."""
    return judge(lo, hi, noise)


def claim_pvalues(
    log_ratio: float, se: float, df: float, noise: float = NOISE, floor: float | None = None
) -> dict[str, float]:
    """p-value of each claim on the interval's scale (a claim is made at level L iff p <= 1 - L).

    faster: H0 r <= 1 + noise, one-sided t, doubled; slower likewise; equivalent: the larger of the
    two one-sided tests' p-values, doubled (TOST at (1 - L) / 2 per side, which is the printed L
    interval inside the band)."""
    from scipy.special import stdtr  # the t CDF: P(T <= x) = stdtr(df, x), P(T > x) = stdtr(df, -x)

    # scipy.stats.t.cdf/.sf call exactly these (t_gen._cdf, ._sf), bit for bit, after ~60 us of
    # argument checks per scalar call; the calibration suite calls this tens of thousands of times
    if se <= 0 or not math.isfinite(se):
        return {FASTER: 1.0, SLOWER: 1.0, EQUIVALENT: 1.0}
    bar = max(noise, floor or 0.0)
    p_up = float(stdtr(df, -(log_ratio - math.log1p(bar)) / se))  # small when clearly above 1 + bar
    p_down = float(stdtr(df, (log_ratio - math.log1p(-min(bar, 0.999))) / se))  # ... below 1 - bar
    up, down = math.log1p(noise), math.log1p(-noise) if noise < 1 else -math.inf
    equiv = max(float(stdtr(df, -(log_ratio - down) / se)), float(stdtr(df, (log_ratio - up) / se)))
    return {
        FASTER: min(1.0, 2 * p_up),
        SLOWER: min(1.0, 2 * p_down),
        EQUIVALENT: min(1.0, 2 * equiv) if noise > 0 else 1.0,
    }


def best_claim(pvalues: dict[str, float]) -> tuple[str, float]:
    claim = min(CLAIMS, key=lambda c: pvalues[c])
    return claim, pvalues[claim]


def adjust(pvalues: list[float], alpha: float, method: str = "holm") -> list[bool]:
    """Which of a family's claims stand. 'holm': Holm's step-down (family-wise error <= alpha): sort
    the p-values, the j-th smallest (from 0) must be <= alpha / (m - j), and the first that is not
    stops the rest. 'fdr_bh': Benjamini-Hochberg (false discovery rate <= alpha),
    scipy.stats.false_discovery_control's adjusted p-values. (statsmodels' multipletests does the
    same, but runs a full garbage collection per call: 65 ms, too slow for the calibration suite,
    which must run this very code thousands of times.)"""
    import numpy as np

    p = np.asarray(pvalues, dtype=float)
    if p.size == 0:
        return []
    if method == "fdr_bh":
        from scipy import stats as st

        return [bool(x) for x in st.false_discovery_control(p, method="bh") <= alpha]
    if method != "holm":
        raise ValueError(f"unknown family method {method!r}: holm or fdr_bh")
    keep = np.zeros(p.size, dtype=bool)
    for j, i in enumerate(np.argsort(p, kind="stable")):
        if p[i] > alpha / (p.size - j):
            break
        keep[i] = True
    return [bool(x) for x in keep]


FAMILY_METHODS = {
    "holm": "Holm's step-down (family-wise error)",
    "fdr_bh": "Benjamini-Hochberg (false discovery rate)",
}


def repeats_to_decide(
    log_ratio: float,
    se: float,
    df: float,
    runs: int,
    noise: float = NOISE,
    level: float = 0.95,
    paired: bool = False,
    cap: int = 100,
) -> int | None:
    """Runs per side that would turn an inconclusive comparison into a verdict if the point estimate
    and the run-to-run spread stayed as measured (Kalibera & Jones 2013's planning, on the run
    level): the standard error shrinks as 1/sqrt(R). None when no number up to `cap` would (the
    estimate sits on a bound of the noise band)."""
    import numpy as np
    from scipy.special import stdtrit  # the t quantile, as scipy.stats.t.ppf computes it

    if se <= 0 or runs < 1:
        return None
    up, down = math.log1p(noise), math.log1p(-noise)
    r = np.arange(max(runs + 1, 2), cap + 1)
    s = se * np.sqrt(runs / r)
    d = (r - 1.0) if paired else np.maximum(1.0, df * (r - 1.0) / max(runs - 1, 1))
    h = stdtrit(d, 0.5 + level / 2) * s
    ok = (
        (log_ratio - h > up)
        | (log_ratio + h < down)
        | ((noise > 0) & (log_ratio - h >= down) & (log_ratio + h <= up))
    )
    return int(r[ok.argmax()]) if ok.any() else None
