"""stats/drift.py, the steady-state test every record and sweep table reports (issue 36: a module
the mutation run covers), on series built so that the answer is known by hand: 16 steps in 8 batches
of 2 equal steps, whose batch means of the log times are a straight line s * t plus a pattern
orthogonal to both the constant and t, so the least-squares slope is s exactly and the residuals are
the pattern; p-values from the printed t table."""

from __future__ import annotations

import math

import pytest

from stats.drift import steady_state, trend, unsteady_runs

T975_DF6 = (
    2.4469118511449692  # Student t, 0.975 quantile, 6 degrees of freedom (printed tables: 2.447)
)
T = [-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5]  # batch positions, centred
PATTERN = [1, -1, -1, 1, 1, -1, -1, 1]  # sums to 0, and to 0 against T


def _series(slope: float, e: float) -> list[float]:
    """Two equal steps per batch: exp(slope * t + e * pattern)."""
    return [math.exp(slope * t + e * r) for t, r in zip(T, PATTERN) for _ in range(2)]


def _t_stat_se(e: float) -> float:
    """The slope's standard error: residuals +-e, s^2 = 8 e^2 / 6, se = sqrt(s^2 / sum t^2) = e
    sqrt(8 / 252)."""
    return e * math.sqrt(8 / 6 / 42)


def test_trend_of_a_straight_line_and_of_a_flat_series():
    """No residuals: the slope is certain (p 0) if it is not 0, and then the change across the
    window is e^(7 slope) - 1; a flat series has no trend at all (p 1)."""
    drift, p = trend(_series(0.01, 0.0))
    assert drift == pytest.approx(math.expm1(0.07)) and p < 1e-50  # 0 but for rounding
    assert trend([2.0] * 16) == (0.0, 1.0)
    assert trend([2.0] * 15) is None and trend([2.0] * 15 + [0.0]) is None
    assert trend([2.0] * 15 + [-1.0]) is None


def test_trend_p_value_from_the_t_table():
    """Slope 2.447 standard errors on 6 degrees of freedom: two-sided p 0.05, whichever the
    direction."""
    e = 0.01
    s = T975_DF6 * _t_stat_se(e)
    drift, p = trend(_series(s, e))
    assert drift == pytest.approx(math.expm1(7 * s)) and p == pytest.approx(0.05, rel=1e-6)
    drift, p = trend(_series(-s, e))
    assert drift == pytest.approx(math.expm1(-7 * s)) and p == pytest.approx(0.05, rel=1e-6)
    # a scale changes no trend: three times the step times, the same change and p
    drift, p = trend([3 * x for x in _series(s, e)])
    assert drift == pytest.approx(math.expm1(7 * s)) and p == pytest.approx(0.05, rel=1e-6)


def test_steady_state_in_each_of_its_four_cases():
    """Big (over 2%) and significant: not steady; big and not significant (p 0.05 > 1%): unknown;
    significant and small: steady; neither: steady. Too short: unknown, and why."""
    out = steady_state(_series(0.01, 0.0))
    assert out["steady"] is False and out["drift"] == pytest.approx(math.expm1(0.07))
    assert out["reason"].startswith("the window drifted +7.3% from its start to its end (trend p=")
    assert out["reason"].endswith("): not at steady state") and out["p_value"] < 1e-50
    e = 0.01
    s = T975_DF6 * _t_stat_se(e)  # 7 s = 3.05%: big
    out = steady_state(_series(s, e))
    assert out["steady"] is None and out["p_value"] == pytest.approx(0.05, rel=1e-6)
    assert out["reason"] == (
        "the window moved +3.1% from its start to its end, more than the 2% noise threshold, and "
        "the trend "
        "test cannot tell that from noise (p=0.05, 8 batch means): more steps can tell"
    )
    out = steady_state(_series(0.001, 0.0))  # 0.7%, certain
    assert out["steady"] is True
    assert out["reason"].startswith("significant but small drift (+0.7%, p=")
    assert out["reason"].endswith(", within 2%)") and out["p_value"] < 1e-50
    small = T975_DF6 * _t_stat_se(0.001)  # 7 x 0.000436 = 0.3%, p 0.05
    out = steady_state(_series(small, 0.001))
    assert (
        out["steady"] is True and out["reason"] == "no significant drift (+0.3%, p=0.05, within 2%)"
    )
    short = steady_state([1.0] * 15)
    assert short == {
        "steady": None,
        "drift": None,
        "p_value": None,
        "method": short["method"],
        "reason": "too few steps to test (needs 16)",
    }
    assert short["method"].startswith("trend test on 8 batch means of the log times")


def test_unsteady_runs_by_hand():
    """Benjamini-Hochberg at 1% over the 3 runs with a p-value: 0.001, 0.001, 0.5 against 1/3, 2/3
    and 3/3 of 1%: the first two discovered; of those, only the one whose drift is over 2% is
    unsteady."""
    tests = {
        "a": {"p_value": 0.001, "drift": -0.05},
        "b": {"p_value": 0.001, "drift": 0.01},
        "c": {"p_value": 0.5, "drift": 0.1},
        "d": None,
        "e": {"p_value": None, "drift": None},
    }
    assert unsteady_runs(tests) == {
        "runs": ["a"],
        "tested": 3,
        "method": "drift trend test per run, Benjamini-Hochberg over the 3 tested runs at FDR 1%",
    }
    assert unsteady_runs(tests, q=0.0001)["runs"] == []
    # Benjamini-Hochberg, not Holm: 0.008, 0.009, 0.0095 all stand (the largest is under 3/3 of 1%),
    # though Holm would keep none (0.008 > 1% / 3)
    close = {k: {"p_value": p, "drift": 0.05} for k, p in zip("xyz", (0.008, 0.009, 0.0095))}
    assert unsteady_runs(close)["runs"] == ["x", "y", "z"]
    # a drift of exactly 2% is not over it
    assert unsteady_runs({"a": {"p_value": 0.001, "drift": 0.02}})["runs"] == []


def test_a_perfect_line_is_a_certain_trend():
    """Batch means exactly on a line (each batch e times the last, two equal steps each): no
    residual at all, so the slope is 1 per batch, the fitted change e^7 - 1, and the trend is
    certain, p = 0 (a zero standard error with a slope, not a division by it)."""
    series = [math.exp(b) for b in range(8) for _ in range(2)]
    drift, p = trend(series)
    assert drift == pytest.approx(math.e**7 - 1) and p == 0.0


def test_steady_state_at_the_thresholds_themselves(monkeypatch):
    """The rule (module docstring): unsteady only when p is below 1% and the change exceeds 2%;
    at exactly p = 1% the trend is not significant, at exactly 2% the change is not big."""
    import stats.drift as drift_module

    def judged(drift, p):
        monkeypatch.setattr(drift_module, "trend", lambda values: (drift, p))
        return steady_state([1.0] * 16)["steady"]

    assert judged(0.02, 0.001) is True  # significant, not over 2%: steady
    assert judged(0.05, 0.01) is None  # over 2%, p not below 1%: the test cannot tell
    assert judged(0.05, 0.0099) is False and judged(0.0201, 0.001) is False
