"""stats/within.py (issue 36: a module the mutation run covers), where the targeted tests leave a
change unseen: the block rate's input check, its serial statistics and interval on blocks whose
every rate is the same (u = 2 w, whatever w), and the method texts with their degrees of freedom,
each written out from the docstrings' rules."""

from __future__ import annotations

import math

import pytest

from stats.within import batch_median, batch_rate


def test_batch_rate_needs_positive_counts():
    with pytest.raises(
        ValueError, match="^need one positive wall time and one positive work count"
    ):
        batch_rate([0.1] * 10, [0] + [1] * 9)


def test_batch_rate_of_blocks_at_one_rate():
    """Walls differ from batch to batch (20 blocks of 1 s, 20 of 2 s, 20 of 4 s), each block does
    twice its wall in work: every batch's rate is 2 exactly, so the three batch rates have no
    spread and the interval is the point."""
    walls = [1.0] * 20 + [2.0] * 20 + [4.0] * 20
    b = batch_rate(walls, [2 * w for w in walls])
    assert b["rate"] == 2.0 and b["log_se"] == 0.0 and b["df"] == 2 and b["batches"] == 3
    assert b["ci_lo"] == pytest.approx(2.0) and b["ci_hi"] == pytest.approx(2.0)
    assert b["method"] == (
        "batch means: 3 consecutive batches of the timed blocks, t interval on their log rates "
        "(df 2; Schmeiser 1982)"
    )


def test_batch_rate_serial_statistics_are_of_the_rates():
    """lag1 and n_eff describe the blocks' log rates, log(units / wall): the estimator written out
    here (lag-1 autocovariance over variance, mean removed; Kendall's correction, n (1 - r) /
    (1 + r)) on walls of period 2 and work of period 3, whose rates and products differ."""
    walls = [1.0, 2.0] * 30
    units = [1.0, 3.0, 9.0] * 20
    logs = [math.log(u / w) for u, w in zip(units, walls)]
    mean = sum(logs) / 60
    d = [v - mean for v in logs]
    r = sum(a * b for a, b in zip(d[1:], d[:-1])) / sum(v * v for v in d)
    rc = min(max((60 * r + 1) / 57, 0.0), 0.99)
    b = batch_rate(walls, units)
    assert b["lag1"] == pytest.approx(r) and b["n_eff"] == pytest.approx(60 * (1 - rc) / (1 + rc))


def test_batch_median_texts_and_fields():
    with pytest.raises(ValueError, match="^no values$"):
        batch_median([])
    short = batch_median([1.0, 2.0])
    assert {k: v for k, v in short.items() if k != "method"} == {
        "median": 1.5,
        "ci_lo": None,
        "ci_hi": None,
        "se": None,
        "df": None,
    }
    full = batch_median([float(i % 7) for i in range(20)], count=5)
    assert full["df"] == 4
    assert (
        full["method"] == "batch medians: 5 consecutive batches, t interval on their medians (df 4)"
    )


def test_lag1_of_a_constant_series_is_zero_not_its_rounding_residue():
    # 0.1 ten times: the mean differs from each value by one rounding step, the same sign every
    # time, which the plain estimator reads as r = 0.9 (a run of equal block rates, n_eff 0.3)
    from stats.within import effective_size, lag1

    assert lag1([0.1] * 10) == 0.0
    assert lag1([1 / 3] * 7) == 0.0
    assert effective_size([0.1] * 10) == pytest.approx(10 * (6 / 7) / (8 / 7))
