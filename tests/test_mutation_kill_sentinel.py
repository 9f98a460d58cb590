"""stats/sentinel.py, the noise sentinel a sweep table warns with (issue 36: a module the mutation
run covers), on two rows of two runs, where every figure has a closed form: the ANOVA's mean squares
by hand, and F(1, 2) is the square of Student's t on 2 degrees of freedom, whose tail and quantiles
are elementary: sf(t) = (1 - t / sqrt(t^2 + 2)) / 2 and t_p = (2p - 1) / sqrt(2 p (1 - p))."""

from __future__ import annotations

import math
import warnings

import pytest

from stats.sentinel import sentinel


def _t2_quantile(p: float) -> float:
    return (2 * p - 1) / math.sqrt(2 * p * (1 - p))


def test_sentinel_of_two_rows_by_hand():
    """Rows A = (0, 0.2), B = (1.0, 1.2): grand mean 0.6; between rows 2 (0.5^2) x 2 = 1.0 on 1 df;
    within 4 x 0.1^2 / 2 = 0.02; F = 50, t = sqrt(50): p = 1 - 7.071 / sqrt(52) = 0.0194 < 2.5%;
    runs per row 2, so tau = sqrt((1.0 - 0.02) / 2) = 0.7; its interval from F's 0.975 and 0.025
    quantiles (t at 0.9875 and 0.5125)."""
    s = sentinel({"A": [0.0, 0.2], "B": [1.0, 1.2]})
    t = math.sqrt(50)
    assert s["p_value"] == pytest.approx(1 - t / math.sqrt(52)) and s["significant"] is True
    assert s["tau"] == pytest.approx(0.7)
    lo_q, hi_q = _t2_quantile(0.9875) ** 2, _t2_quantile(0.5125) ** 2
    assert s["tau_lo"] == pytest.approx(math.sqrt((50 / lo_q - 1) / 2 * 0.02))
    assert s["tau_hi"] == pytest.approx(math.sqrt((50 / hi_q - 1) / 2 * 0.02))
    assert s["spread"] == pytest.approx(math.expm1(0.7))
    assert s["floor"] == pytest.approx(math.expm1(1.959963984540054 * math.sqrt(2) * 0.7))
    assert (s["rows"], s["runs"], s["low_row"], s["high_row"]) == (2, 4, "A", "B")
    assert s["low_median"] == pytest.approx(math.exp(0.1))
    assert s["high_median"] == pytest.approx(math.exp(1.1))
    assert s["method"] == (
        "one-way random-effects ANOVA of the runs' log medians across 2 rows (F test at 2.5%; "
        "between-row SD "
        "with its 95% interval from the F distribution)"
    )
    # rows named by their medians, not by their names' order
    s2 = sentinel({"a": [1.0, 1.2], "b": [0.0, 0.2]})
    assert (s2["low_row"], s2["high_row"]) == ("b", "a")


def test_sentinel_level_alpha_and_the_rows_it_counts():
    """A 1% test does not call p = 0.0194; a 90% interval takes F's 0.95 and 0.05 quantiles (t at
    0.975 and 0.525); a row of one run is left out; under two rows of two runs, no sentinel."""
    rows = {"A": [0.0, 0.2], "B": [1.0, 1.2]}
    s = sentinel(rows, alpha=0.01)
    assert s["significant"] is False and "F test at 1.0%" in s["method"]
    s = sentinel(rows, level=0.90)
    lo_q, hi_q = _t2_quantile(0.975) ** 2, _t2_quantile(0.525) ** 2
    assert s["tau_lo"] == pytest.approx(math.sqrt((50 / lo_q - 1) / 2 * 0.02))
    assert s["tau_hi"] == pytest.approx(math.sqrt((50 / hi_q - 1) / 2 * 0.02))
    assert "its 90% interval" in s["method"]
    assert sentinel({**rows, "C": [5.0]}) == sentinel(rows)
    assert sentinel({"A": [0.0, 0.2], "C": [5.0]}) is None and sentinel({}) is None
    # three rows of unequal runs: n0 = (7 - (4 + 9 + 4) / 7) / 2 = 16/7, the average runs per row
    three = sentinel({"A": [0.0, 0.2], "B": [1.0, 1.2, 1.1], "C": [0.5, 0.7]})
    xs = [[0.0, 0.2], [1.0, 1.2, 1.1], [0.5, 0.7]]
    grand = sum(map(sum, xs)) / 7
    msb = sum(len(x) * (sum(x) / len(x) - grand) ** 2 for x in xs) / 2
    msw = sum(sum((v - sum(x) / len(x)) ** 2 for v in x) for x in xs) / 4
    assert three["tau"] == pytest.approx(math.sqrt((msb - msw) / (16 / 7)))
    assert (three["rows"], three["runs"]) == (3, 7)


def test_sentinel_without_spread_within_or_between_rows():
    """Identical runs within each row: F is infinite, read as 0 for the interval, which is then 0
    wide; rows with the same runs: no spread, p 1, not significant."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = sentinel({"A": [0.0, 0.0], "B": [1.0, 1.0]})
        same = sentinel({"A": [0.0, 0.2], "B": [0.2, 0.0]})
    assert s["tau"] == pytest.approx(math.sqrt(0.5)) and s["tau_lo"] == 0.0 and s["tau_hi"] == 0.0
    assert same["p_value"] == 1.0 and same["significant"] is False and same["tau"] == 0.0
    assert same["spread"] == 0.0 and same["floor"] == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flat = sentinel({"A": [1.0, 1.0], "B": [1.0, 1.0]})  # F is 0 / 0: no evidence, p 1
    assert flat["p_value"] == 1.0 and flat["significant"] is False


def test_sentinel_interval_upper_end_at_its_floor():
    """Rows 0.005 apart: between rows 2 x 0.0025^2 x 2 = 0.000025, F = 0.00125, which is F's 0.025
    quantile (t at 0.5125, squared) to 3 digits: the ratio (F / q - 1) / 2 is about 0, so the upper
    end of tau is near 0, not lifted to a ratio of 1 (sqrt(0.02) = 0.141)."""
    s = sentinel({"A": [0.0, 0.2], "B": [0.005, 0.205]})
    hi_q = _t2_quantile(0.5125) ** 2
    f = 0.000025 / 0.02
    assert s["tau_hi"] == pytest.approx(math.sqrt(max(0.0, (f / hi_q - 1) / 2) * 0.02), abs=1e-9)
    assert s["tau_hi"] < 0.02


def test_sentinel_significant_only_below_its_level():
    """Significant means p strictly below the F test's level: at a level equal to the p-value the
    spread is not significant, just above it, it is."""
    rows = {"A": [0.0, 0.2], "B": [1.0, 1.2]}
    p = sentinel(rows)["p_value"]
    assert sentinel(rows, alpha=p)["significant"] is False
    assert sentinel(rows, alpha=p * 1.0001)["significant"] is True
