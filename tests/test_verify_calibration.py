"""The in-job check's interval (diagnose.verify) holds the true saving ~95% of the time: the fast
subset of python -m stats.calibrate_verify, simulated checks through the check's own statistics
(stats.block_ab); the full table is results/verify_calibration/table.md."""

from __future__ import annotations

import pytest

from stats import block_ab, narrow_enough, time_saved
from stats import calibrate_verify as cv


def test_fast_rows_meet_the_bound():
    results = cv.run(sims=800, fast=True)
    assert len(results) >= 5
    misses = [r.row() for r in results if r.ok is False]
    assert not misses, "\n".join(misses)


def test_a_period_effect_leaves_the_crossover_calibrated_and_narrow():
    """The first block of every round 30% slower: the crossover removes it from the interval
    (width), where the plain paired t carries it."""
    case = cv.Case("period", 12, phi=0.5, switch=0.3)
    r = cv.coverage(cv.np.random.default_rng(1), case, 600)
    assert r.ok, r.row()
    assert float(r.note.split("median ")[1].split(" ")[0]) < 12, r.row()


def test_the_check_prints_what_the_calibration_judges():
    """An exact 25% saving with no noise: 25%, a point-sized interval; 4 rounds: plain paired t,
    6: crossover (a constant period effect cancels)."""
    s = block_ab([1.0, 1.0, 1.0, 1.0], [0.75, 0.75, 0.75, 0.75])
    assert time_saved(s.ratio) == pytest.approx(0.25) and "paired t" in s.method
    base = [1.2 if r % 2 == 0 else 1.0 for r in range(6)]  # the first block of a round: +20%
    fix = [0.75 if r % 2 == 0 else 0.75 * 1.2 for r in range(6)]
    s = block_ab(base, fix)
    assert "crossover" in s.method and time_saved(s.ratio) == pytest.approx(0.25)
    assert time_saved(s.ci_hi) - time_saved(s.ci_lo) < 1e-6


def test_the_stopping_rule_needs_six_rounds_and_an_interval_within_the_width():
    """stats.narrow_enough, the check's rule (diagnose.verify_width): a noiseless 25% saving has
    a point-sized interval, yet 5 rounds never stop it; 6 do; a noisy one wider than the width
    does not."""
    base, fix = [1.0] * 6, [0.75] * 6
    assert not narrow_enough(block_ab(base[:5], fix[:5]), 5, 0.1)
    assert narrow_enough(block_ab(base, fix), 6, 0.1)
    noisy = block_ab(base, [0.5, 0.9, 0.6, 1.0, 0.55, 0.95])
    assert time_saved(noisy.ci_hi) - time_saved(noisy.ci_lo) > 0.1
    assert not narrow_enough(noisy, 6, 0.1)
