"""Seeded percentile bootstrap helpers shared by the one-sample and comparison statistics.

Resampling is chunked so that a long series (tens of thousands of steps) never builds a
resamples x n index matrix larger than a few million cells. Every draw comes from one
numpy Generator passed in by the caller, so a fixed seed gives the same interval every time.
"""
from __future__ import annotations

import numpy as np

_MAX_CELLS = 1 << 21


def percentile_interval(samples: np.ndarray, level: float) -> tuple[float, float]:
    lo, hi = np.percentile(samples, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def boot_medians(rng: np.random.Generator, x: np.ndarray, count: int) -> np.ndarray:
    """Medians of `count` with-replacement resamples of x."""
    x = np.asarray(x, dtype=float)
    out = np.empty(count)
    chunk = max(1, _MAX_CELLS // x.size)
    for start in range(0, count, chunk):
        m = min(chunk, count - start)
        out[start:start + m] = np.median(x[rng.integers(0, x.size, size=(m, x.size))], axis=1)
    return out


def two_level_medians(rng: np.random.Generator, runs: list, resamples: int) -> np.ndarray:
    """Bootstrap distribution of the median of run medians.

    Resampling runs first and then steps inside each picked run keeps run-to-run spread
    (a different process, allocator state, or neighbour on the machine) in the interval;
    bootstrapping pooled steps would pretend all steps are independent and understate it.
    A run picked twice in one resample gets two independent within-run resamples.
    With a single run this reduces to the plain step-level bootstrap.
    """
    picks = rng.integers(0, len(runs), size=(resamples, len(runs)))
    meds = np.empty(picks.shape)
    for r, x in enumerate(runs):
        mask = picks == r
        meds[mask] = boot_medians(rng, x, int(mask.sum()))
    return np.median(meds, axis=1)
