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


def boot_ratio_of_sums(rng: np.random.Generator, blocks: np.ndarray, count: int) -> np.ndarray:
    """sum(units) / sum(walls) of `count` with-replacement resamples of a run's blocks.
    blocks: shape (2, n), row 0 the work done in each block (steps or samples), row 1 its wall clock."""
    units, walls = np.asarray(blocks, dtype=float)
    out = np.empty(count)
    chunk = max(1, _MAX_CELLS // units.size)
    for start in range(0, count, chunk):
        m = min(chunk, count - start)
        idx = rng.integers(0, units.size, size=(m, units.size))
        out[start:start + m] = units[idx].sum(1) / walls[idx].sum(1)
    return out


def two_level(rng: np.random.Generator, runs: list, resamples: int, within=boot_medians) -> np.ndarray:
    """Bootstrap distribution of the median over runs of a per-run statistic.

    Resampling runs first and then the samples inside each picked run (`within`: count resampled
    statistics of one run) keeps run-to-run spread (a different process, allocator state, or
    neighbour on the machine) in the interval; bootstrapping pooled samples would pretend all of
    them are independent and understate it. A run picked twice in one resample gets two
    independent within-run resamples. With a single run this reduces to the plain bootstrap.
    """
    picks = rng.integers(0, len(runs), size=(resamples, len(runs)))
    stats = np.empty(picks.shape)
    for r, x in enumerate(runs):
        mask = picks == r
        stats[mask] = within(rng, x, int(mask.sum()))
    return np.median(stats, axis=1)


def two_level_medians(rng: np.random.Generator, runs: list, resamples: int) -> np.ndarray:
    """Median of run medians (see two_level)."""
    return two_level(rng, runs, resamples, boot_medians)
