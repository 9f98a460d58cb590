"""stats/summary.py (issue 36: a module the mutation run covers), where test_stats.py and
test_printed_numbers.py leave a change unseen: the median's ranks at a level the binomial reaches
exactly, and the level a block throughput's interval is asked for, each from a closed form."""

from __future__ import annotations

import math

import pytest

from stats.summary import block_throughput, median_ranks


def test_median_ranks_at_a_level_the_binomial_reaches_exactly():
    """n = 6: P(B <= 1) = 7/64 for B ~ Binomial(6, 1/2), so [x_(2), x_(5)] covers the median with
    probability 1 - 2 * 7/64 = 50/64 exactly: at level 50/64 it is the narrowest interval that
    reaches the level, not (min, max)."""
    assert median_ranks(6, 50 / 64) == (2, 5, 50 / 64)
    assert median_ranks(6, 50 / 64 + 1e-6) == (1, 6, 1 - 2 / 64)


def _t2(p: float) -> float:
    """Student's t quantile on 2 degrees of freedom, closed form."""
    return (2 * p - 1) / math.sqrt(2 * p * (1 - p))


def test_block_throughput_interval_at_the_level_asked():
    """60 blocks give the batch-means interval: 3 batches, t on 2 df around the log rate, so the
    log half-width at level L is t_2((1 + L) / 2) times the same standard error: the 90% and 95%
    intervals' log half-widths stand in the ratio of those two quantiles."""
    walls = [0.1 + 0.01 * ((i * 7) % 11) for i in range(60)]
    steps = [4] * 60
    at90, at95 = block_throughput(walls, steps, 0.90), block_throughput(walls, steps)
    rate = sum(steps) / sum(walls)
    assert at90["steps_per_s"] == pytest.approx(rate)
    h90, h95 = math.log(at90["ci_hi"] / rate), math.log(at95["ci_hi"] / rate)
    assert h90 / h95 == pytest.approx(_t2(0.95) / _t2(0.975))
    assert math.log(rate / at90["ci_lo"]) == pytest.approx(h90)
