"""Comparisons between configurations: speed-up intervals, verdicts, and a machine-noise sentinel.

Convention: every ratio here is throughput-style, baseline time / candidate time, so > 1 means the
candidate is faster (as in Google Benchmark's compare.py, with the sign flipped to read as speed-up).
Intervals are seeded percentile bootstraps so a rerun of the report prints the same numbers.
"""
from __future__ import annotations

from itertools import permutations

import numpy as np

from .bootstrap import (EXPANDED, boot_ratio_of_sums, effective_n, expanded_level, percentile_interval, two_level,
                        two_level_medians)
from .summary import MIN_BLOCKS, block_throughput, median_ci

NOISE = 0.02
FASTER, SLOWER, NS = "faster", "slower", "no significant difference"


def _runs(runs) -> list[np.ndarray]:
    out = [np.asarray(r, dtype=float).ravel() for r in runs]
    if not out or any(r.size == 0 for r in out):
        raise ValueError("need at least one run, each with at least one sample")
    return out


def _method(*sides: list, resamples: int, seed: int) -> str:
    how = ("two-level bootstrap (runs, then steps within each run)"
           if any(len(s) > 1 for s in sides) else "bootstrap over steps (one run per side)")
    return f"{how}, {EXPANDED}, {resamples} resamples, seed {seed}"


def _n_eff(runs: list[np.ndarray]) -> float:
    """Effective sample size of step times grouped by run (log scale when all positive)."""
    return effective_n([np.log(r) if (r > 0).all() else r for r in runs])


def aggregate_repeats(runs, level: float = 0.95, seed: int = 0, resamples: int = 2000) -> dict:
    """Median of run medians, with an interval that includes run-to-run spread, not just step noise."""
    runs = _runs(runs)
    run_medians = [float(np.median(r)) for r in runs]
    boot = two_level_medians(np.random.default_rng(seed), runs, resamples)
    n_eff = _n_eff(runs)
    lo, hi = percentile_interval(boot, expanded_level(level, n_eff))
    return {"median": float(np.median(run_medians)), "ci_lo": lo, "ci_hi": hi, "n_runs": len(runs), "n_eff": n_eff,
            "run_medians": run_medians, "method": _method(runs, resamples=resamples, seed=seed)}


def compare_repeats(baseline_runs, candidate_runs, level: float = 0.95, seed: int = 0,
                    resamples: int = 2000) -> dict:
    """Speed-up of candidate over baseline from repeated runs of each; the two sides are resampled
    independently, each with the two-level bootstrap of aggregate_repeats."""
    base, cand = _runs(baseline_runs), _runs(candidate_runs)
    rng = np.random.default_rng(seed)
    boot = two_level_medians(rng, base, resamples) / two_level_medians(rng, cand, resamples)
    n_eff = min(_n_eff(base), _n_eff(cand))
    lo, hi = percentile_interval(boot, expanded_level(level, n_eff))
    ratio = float(np.median([np.median(r) for r in base]) / np.median([np.median(r) for r in cand]))
    return {"ratio": ratio, "ci_lo": lo, "ci_hi": hi, "n_eff": n_eff, "n_runs_baseline": len(base),
            "n_runs_candidate": len(cand), "method": _method(base, cand, resamples=resamples, seed=seed)}


def _block_runs(runs) -> list[np.ndarray]:
    """Each run as a (2, n_blocks) array: work done per block (steps or samples), wall clock per block."""
    out = []
    for walls, units in runs:
        w, u = np.asarray(walls, dtype=float).ravel(), np.asarray(units, dtype=float).ravel()
        if w.size == 0 or w.shape != u.shape or (w <= 0).any():
            raise ValueError("each run needs one positive wall time per block, and as many work counts")
        out.append(np.vstack([u, w]))
    return out


def _has_interval(runs: list[np.ndarray]) -> bool:
    """An interval needs >= MIN_BLOCKS blocks in a lone run (fewer cannot reach 95% by any percentile method:
    3 blocks covered 75% in simulation), or >= 2 runs (run-to-run spread, widened by the expansion)."""
    return len(runs) >= 2 or runs[0].shape[1] >= MIN_BLOCKS


def _blocks_n_eff(runs: list[np.ndarray]) -> float:
    """Effective sample size of blocked runs, from the per-block log rates."""
    return effective_n([np.log(r[0] / r[1]) for r in runs])


def _throughput_method(n_runs: int, resamples: int, seed: int) -> str:
    if n_runs > 1:
        how = ("two-level bootstrap (runs, then blocks within each run) of the median over runs of "
               "sum(work)/sum(wall)")
    else:
        how = "bootstrap over blocks of sum(work)/sum(wall)"
    return f"{how}, {EXPANDED}, {resamples} resamples, seed {seed}"


def aggregate_throughput(runs, level: float = 0.95, seed: int = 0, resamples: int = 2000) -> dict:
    """Throughput of repeated runs, each measured in timed blocks: runs = [(block_walls_s, block_work), ...].

    Per run the rate is sum(work) / sum(wall), as in block_throughput; across runs the median of those
    rates, so one disturbed repeat cannot drag the row. A lone run gives exactly block_throughput's figures.
    """
    blocks = _block_runs(runs)
    if len(blocks) == 1:
        b = block_throughput(blocks[0][1], blocks[0][0], level, seed)
        return {"rate": b["steps_per_s"], "ci_lo": b["ci_lo"], "ci_hi": b["ci_hi"], "n_runs": 1,
                "run_rates": [b["steps_per_s"]], "method": b["method"]}
    rates = [float(b[0].sum() / b[1].sum()) for b in blocks]
    boot = two_level(np.random.default_rng(seed), blocks, resamples, boot_ratio_of_sums)
    n_eff = _blocks_n_eff(blocks)
    lo, hi = percentile_interval(boot, expanded_level(level, n_eff))
    return {"rate": float(np.median(rates)), "ci_lo": lo, "ci_hi": hi, "n_runs": len(blocks), "n_eff": n_eff,
            "run_rates": rates, "method": _throughput_method(len(blocks), resamples, seed)}


def compare_throughput(baseline_runs, candidate_runs, level: float = 0.95, seed: int = 0,
                       resamples: int = 2000) -> dict:
    """Speed-up = candidate throughput / baseline throughput (each as in aggregate_throughput), with a CI from
    independent bootstraps of the two sides. No interval (None) when either side cannot have one."""
    base, cand = _block_runs(baseline_runs), _block_runs(candidate_runs)

    def rate(runs):
        return float(np.median([r[0].sum() / r[1].sum() for r in runs]))

    out = {"ratio": rate(cand) / rate(base), "ci_lo": None, "ci_hi": None, "n_runs_baseline": len(base),
           "n_runs_candidate": len(cand), "method": _throughput_method(max(len(base), len(cand)), resamples, seed)}
    if _has_interval(base) and _has_interval(cand):
        rng = np.random.default_rng(seed)
        boot = (two_level(rng, cand, resamples, boot_ratio_of_sums)
                / two_level(rng, base, resamples, boot_ratio_of_sums))
        out["n_eff"] = min(_blocks_n_eff(base), _blocks_n_eff(cand))
        out["ci_lo"], out["ci_hi"] = percentile_interval(boot, expanded_level(level, out["n_eff"]))
    else:
        out["method"] = f"no interval: a side has a single run of fewer than {MIN_BLOCKS} timed blocks"
    return out


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
