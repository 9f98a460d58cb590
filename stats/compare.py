"""Comparisons between configurations: speed-up intervals, verdicts, and a machine-noise sentinel.

Convention: every ratio here is throughput-style, baseline time / candidate time, so > 1 means the
candidate is faster (as in Google Benchmark's compare.py, with the sign flipped to read as speed-up).
Intervals are seeded percentile bootstraps so a rerun of the report prints the same numbers.
"""
from __future__ import annotations

from itertools import permutations

import numpy as np

from .bootstrap import percentile_interval, two_level_medians
from .summary import median_ci

NOISE = 0.02
FASTER, SLOWER, NS = "faster", "slower", "no significant difference"


def _runs(runs) -> list[np.ndarray]:
    out = [np.asarray(r, dtype=float).ravel() for r in runs]
    if not out or any(r.size == 0 for r in out):
        raise ValueError("need at least one run, each with at least one sample")
    return out


def _method(*sides: list, resamples: int, seed: int) -> str:
    how = ("two-level percentile bootstrap (runs, then steps within each run)"
           if any(len(s) > 1 for s in sides) else "percentile bootstrap over steps (one run per side)")
    return f"{how}, {resamples} resamples, seed {seed}"


def aggregate_repeats(runs, level: float = 0.95, seed: int = 0, resamples: int = 2000) -> dict:
    """Median of run medians, with an interval that includes run-to-run spread, not just step noise."""
    runs = _runs(runs)
    run_medians = [float(np.median(r)) for r in runs]
    boot = two_level_medians(np.random.default_rng(seed), runs, resamples)
    lo, hi = percentile_interval(boot, level)
    return {"median": float(np.median(run_medians)), "ci_lo": lo, "ci_hi": hi, "n_runs": len(runs),
            "run_medians": run_medians, "method": _method(runs, resamples=resamples, seed=seed)}


def compare_repeats(baseline_runs, candidate_runs, level: float = 0.95, seed: int = 0,
                    resamples: int = 2000) -> dict:
    """Speed-up of candidate over baseline from repeated runs of each; the two sides are resampled
    independently, each with the two-level bootstrap of aggregate_repeats."""
    base, cand = _runs(baseline_runs), _runs(candidate_runs)
    rng = np.random.default_rng(seed)
    boot = two_level_medians(rng, base, resamples) / two_level_medians(rng, cand, resamples)
    lo, hi = percentile_interval(boot, level)
    ratio = float(np.median([np.median(r) for r in base]) / np.median([np.median(r) for r in cand]))
    return {"ratio": ratio, "ci_lo": lo, "ci_hi": hi, "n_runs_baseline": len(base),
            "n_runs_candidate": len(cand), "method": _method(base, cand, resamples=resamples, seed=seed)}


def ratio_ci(baseline, candidate, level: float = 0.95, seed: int = 0,
             resamples: int = 2000) -> tuple[float, float, float]:
    """Single-run speed-up: the step-level special case of compare_repeats."""
    r = compare_repeats([baseline], [candidate], level, seed, resamples)
    return r["ratio"], r["ci_lo"], r["ci_hi"]


def verdict(ratio: float, lo: float | None, hi: float | None, noise: float = NOISE) -> str:
    """A difference must be both outside the interval and larger than `noise`: a significant 0.5%
    is real but not something a knob should be chosen on. No interval means no claim."""
    if lo is None or hi is None:
        return NS
    if lo > 1 and ratio > 1 + noise:
        return FASTER
    if hi < 1 and ratio < 1 - noise:
        return SLOWER
    return NS


def noise_sentinel(phase_samples_by_row: dict, level: float = 0.95) -> dict | None:
    """Largest significant spread of a phase the compared knobs cannot change (e.g. forward time).

    Any such spread is the machine, not the knobs, so differences smaller than it elsewhere in the
    table are not attributable. "Significant" means the two rows' median intervals do not overlap
    (conservative); rows whose few samples cannot reach `level` coverage are not evidence and are skipped.
    """
    cis = {}
    for row, samples in phase_samples_by_row.items():
        if len(samples) == 0:
            continue
        lo, hi, achieved = median_ci(samples, level)
        med = float(np.median(samples))
        if achieved >= level and med > 0:
            cis[row] = (med, lo, hi)
    best = None
    for a, b in permutations(cis, 2):
        (ma, _, hi_a), (mb, lo_b, _) = cis[a], cis[b]
        if hi_a < lo_b and (best is None or mb / ma - 1 > best["spread"]):
            best = {"spread": mb / ma - 1, "low_row": a, "high_row": b, "low_median": ma,
                    "high_median": mb, "significant": True,
                    "method": f"largest ratio - 1 between row medians whose {level:.0%} order-statistic CIs do not overlap"}
    return best
