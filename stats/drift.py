"""Warm-up / drift detection: is the measured window steady, or still settling (or throttling)?

A rank test is used because step times are skewed with outliers, and we only ask whether the
end of the window is systematically slower or faster than its start, not by how much in means.
"""
from __future__ import annotations

import math

import numpy as np

DRIFT_NOISE = 0.02
MWU_METHOD = "Mann-Whitney U, two-sided, normal approximation with tie and continuity correction"


def _midranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(x.size)
    ranks[order] = np.arange(1, x.size + 1)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def mann_whitney_u(a, b) -> tuple[float, float]:
    """(U of a, two-sided p). The normal approximation is adequate from ~4 values per side,
    which is all steady_state asks of it; exact enumeration is not worth its code here."""
    a = np.asarray(a, dtype=float).ravel()
    b = np.asarray(b, dtype=float).ravel()
    n1, n2 = a.size, b.size
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need values")
    pooled = np.concatenate([a, b])
    u = float(_midranks(pooled)[:n1].sum() - n1 * (n1 + 1) / 2)
    n = n1 + n2
    _, t = np.unique(pooled, return_counts=True)
    var = n1 * n2 / 12 * ((n + 1) - float((t**3 - t).sum()) / (n * (n - 1)))
    if var <= 0:
        return u, 1.0
    z = max(abs(u - n1 * n2 / 2) - 0.5, 0.0) / math.sqrt(var)
    return u, math.erfc(z / math.sqrt(2))


def steady_state(values, level: float = 0.95) -> dict:
    """First third vs last third of the window, in step order.

    steady is False only when the shift is both significant and larger than 2%: on a long window
    a 0.5% shift is significant yet irrelevant to any comparison we print.
    """
    x = np.asarray(values, dtype=float).ravel()
    k = x.size // 3
    out = {"steady": None, "drift": None, "p_value": None, "method": MWU_METHOD + ", first vs last third"}
    if k < 4:
        out["reason"] = "too few steps to test"
        return out
    first, last = x[:k], x[-k:]
    m0 = float(np.median(first))
    drift = float(np.median(last)) / m0 - 1 if m0 != 0 else None
    _, p = mann_whitney_u(first, last)
    significant = p < 1 - level
    big = drift is not None and abs(drift) > DRIFT_NOISE
    out.update(steady=not (significant and big), drift=drift, p_value=p)
    shift = "n/a" if drift is None else f"{drift:+.1%}"
    if significant and big:
        out["reason"] = f"last third {shift} vs first third (p={p:.2g}): not at steady state"
    elif significant:
        out["reason"] = f"significant but small drift ({shift}, p={p:.2g}, within {DRIFT_NOISE:.0%})"
    else:
        out["reason"] = f"no significant drift (p={p:.2g})"
    return out
