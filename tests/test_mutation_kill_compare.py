"""stats/compare.py, the throughput of a configuration, the speed-up between two and the ratio of
two runs' medians (issue 36: a module the mutation run covers), each worked out by hand: geometric
means, t intervals from the printed table, Welch's degrees of freedom in the cases where they reduce
to a count."""

from __future__ import annotations

import math

import pytest

from stats.compare import compare_throughput, ratio_ci, throughput
from stats.within import batch_rate

T975_DF1 = (
    12.706204736174705  # Student t, 0.975 quantile, 1 degree of freedom (printed tables: 12.706)
)
T975_DF2 = 4.302652729911275  # ... 2 degrees of freedom (4.303)
T975_DF4 = 2.7764451051977987  # ... 4 degrees of freedom (2.776)
T975_DF8 = 2.3060041352041662  # ... 8 degrees of freedom (2.306)
T95_DF2 = 2.919985580355516  # 0.95 quantile, 2 degrees of freedom (2.920)


def test_throughput_of_two_runs_is_their_geometric_mean():
    """Runs of 20 units in 2 s and 80 in 2 s: 10 and 40 per s, geometric mean 20; two log values ln
    4 apart have a standard error of half that, ln 2, and t(1) = 12.706."""
    t = throughput([([1.0, 1.0], [10, 10]), ([1.0, 1.0], [40, 40])])
    h = T975_DF1 * math.log(2)
    assert t["rate"] == pytest.approx(20.0) and t["run_rates"] == [pytest.approx(10.0), 40.0]
    assert t["ci_lo"] == pytest.approx(20 * math.exp(-h)) and t["ci_hi"] == pytest.approx(
        20 * math.exp(h)
    )
    assert (
        t["n_runs"] == 2 and t["within_run"] is False and t["log_se"] == pytest.approx(math.log(2))
    )
    assert t["method"].startswith("geometric mean over 2 runs")


def test_throughput_of_one_run_is_its_own_interval_and_says_so():
    walls = [0.1 + 0.001 * (i % 7) for i in range(120)]
    units = [32] * 120
    t, b = throughput([(walls, units)]), batch_rate(walls, units)
    assert t["rate"] == pytest.approx(32 * 120 / sum(walls))
    assert t == {
        "rate": b["rate"],
        "ci_lo": b["ci_lo"],
        "ci_hi": b["ci_hi"],
        "n_runs": 1,
        "run_rates": [b["rate"]],
        "method": b["method"] + " (one run: the noise inside it, not the spread between runs)",
        "within_run": True,
        "log_se": b["log_se"],
    }
    assert t["ci_lo"] < t["rate"] < t["ci_hi"]


def test_compare_throughput_paired_by_hand():
    """Three rounds, each running both: ratios 2, 1.5, 2.5; their geometric mean 7.5^(1/3) = 1.957;
    the log ratios 0.693, 0.405, 0.916 have a standard deviation of 0.2561, se 0.1479, times t(2)
    4.303: 0.636; the interval [1.036, 3.698] lies above 1.02: faster."""
    base = [([1.0], [10]), ([1.0], [40]), ([1.0], [20])]
    cand = [([1.0], [20]), ([1.0], [60]), ([1.0], [50])]
    r = compare_throughput(base, cand, paired=True)
    logs = [math.log(2), math.log(1.5), math.log(2.5)]
    mean = sum(logs) / 3
    se = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2 / 3)
    assert r["ratio"] == pytest.approx(7.5 ** (1 / 3))
    assert r["ci_lo"] == pytest.approx(math.exp(mean - T975_DF2 * se))
    assert r["ci_hi"] == pytest.approx(math.exp(mean + T975_DF2 * se))
    assert r["ci_lo"] == pytest.approx(1.036, abs=5e-4) and r["ci_hi"] == pytest.approx(
        3.698, abs=5e-4
    )
    assert r["verdict"] == "faster" and r["paired"] is True and r["repeats_needed"] is None
    assert r["n_runs_baseline"] == 3 and r["n_runs_candidate"] == 3
    assert r["method"].startswith("paired t") and r["speedup"].ratio == r["ratio"]


def test_compare_throughput_unpaired_by_hand():
    """2 runs against 3, not paired: geometric means 20 and (20 x 60 x 100)^(1/3) = 49.3: 2.47x,
    Welch."""
    base = [([1.0, 1.0], [10, 10]), ([1.0, 1.0], [40, 40])]
    cand = [([1.0], [20]), ([1.0], [60]), ([0.5], [50])]
    r = compare_throughput(base, cand)
    assert r["ratio"] == pytest.approx(120000 ** (1 / 3) / 20)
    assert r["paired"] is False and r["n_runs_baseline"] == 2 and r["n_runs_candidate"] == 3
    assert "2 vs 3 runs" in r["method"] and r["verdict"] == "no significant difference"
    assert r["ci_lo"] < 1 < r["ci_hi"] and r["repeats_needed"] > 3


def test_ratio_ci_of_independent_blocks_by_hand():
    """Blocks 1, 2, 4 s against 1, 1, 1 s: geometric means 2 and 1, ratio 2; the candidate has no
    spread, so Welch's degrees of freedom are the baseline's, 2, and the standard error its own: ln
    2 / sqrt(3). Both sides spread alike (1, 2, 4 against 2, 4, 8): 4 degrees of freedom, the
    standard error sqrt(2) times."""
    se = math.log(2) / math.sqrt(3)
    ratio, lo, hi = ratio_ci([1, 2, 4], [1, 1, 1], independent=True)
    assert ratio == pytest.approx(2.0)
    assert lo == pytest.approx(2 * math.exp(-T975_DF2 * se))
    assert hi == pytest.approx(2 * math.exp(T975_DF2 * se))
    _, lo, hi = ratio_ci([1, 2, 4], [1, 1, 1], level=0.90, independent=True)
    assert lo == pytest.approx(2 * math.exp(-T95_DF2 * se)) and hi == pytest.approx(
        2 * math.exp(T95_DF2 * se)
    )
    ratio, lo, hi = ratio_ci([1, 2, 4], [2, 4, 8], independent=True)
    h = T975_DF4 * math.sqrt(2) * se
    assert ratio == pytest.approx(0.5) and lo == pytest.approx(0.5 * math.exp(-h))
    assert hi == pytest.approx(0.5 * math.exp(h))
    # fewer than 3 blocks a side: the ratio alone; no spread on either side: an interval of no width
    assert ratio_ci([1, 4], [1, 1, 1], independent=True) == (pytest.approx(2.0), None, None)
    assert ratio_ci([1, 1, 1], [1, 4], independent=True) == (pytest.approx(0.5), None, None)
    assert ratio_ci([2, 2, 2], [1, 1, 1], independent=True) == (2.0, 2.0, 2.0)


def test_ratio_ci_of_two_step_series_by_hand():
    """Steps e^1..e^10 against e^2..e^11: log medians 5.5 and 6.5 (ratio e^-1), each with the batch
    medians' standard error sqrt(10)/sqrt(5) = sqrt(2) on 4 degrees of freedom
    (test_mutation_reach's log_median); Welch: se^2 = 4, df = 16 / (4/4 + 4/4) = 8. Under 10 steps:
    no interval."""
    base = [math.exp(v) for v in range(1, 11)]
    cand = [math.exp(v + 1) for v in range(1, 11)]
    ratio, lo, hi = ratio_ci(base, cand)
    h = T975_DF8 * 2
    assert ratio == pytest.approx(math.exp(-1))
    assert lo == pytest.approx(math.exp(-1 - h)) and hi == pytest.approx(math.exp(-1 + h))
    ratio, lo, hi = ratio_ci(base[:9], cand[:9])
    assert lo is None and hi is None and ratio == pytest.approx(math.exp(-1))


T95_DF1 = 6.313751514675043  # Student t, 0.95 quantile, 1 degree of freedom (printed tables: 6.314)


def test_the_level_and_the_band_reach_every_interval_and_verdict():
    """A 90% interval takes t's 0.95 quantile: 6.314 for two runs, 2.920 for three paired rounds; a
    band of 50% turns the paired speed-up of test_compare_throughput_paired_by_hand, [1.036, 3.698],
    into no verdict."""
    t = throughput([([1.0, 1.0], [10, 10]), ([1.0, 1.0], [40, 40])], level=0.90)
    assert t["ci_lo"] == pytest.approx(20 * math.exp(-T95_DF1 * math.log(2)))
    walls, units = [0.1 + 0.001 * (i % 7) for i in range(120)], [32] * 120
    one = throughput([(walls, units)], level=0.90)
    assert (
        one["ci_lo"]
        == batch_rate(walls, units, level=0.90)["ci_lo"]
        > throughput([(walls, units)])["ci_lo"]
    )
    base = [([1.0], [10]), ([1.0], [40]), ([1.0], [20])]
    cand = [([1.0], [20]), ([1.0], [60]), ([1.0], [50])]
    logs = [math.log(2), math.log(1.5), math.log(2.5)]
    mean = sum(logs) / 3
    se = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2 / 3)
    r = compare_throughput(base, cand, level=0.90, paired=True)
    assert r["ci_lo"] == pytest.approx(math.exp(mean - T95_DF2 * se))
    assert compare_throughput(base, cand, paired=True, noise=0.5)["verdict"] == (
        "no significant difference"
    )
    # not paired unless asked: the same three rounds compared by Welch
    r = compare_throughput(base, cand)
    assert r["paired"] is False and r["method"].startswith("Welch")


def test_ratio_ci_takes_each_sides_degrees_of_freedom():
    """1, 2, 4 s (2 degrees of freedom) against four 1 s blocks (3, but no spread): Welch's df is
    the baseline's, 2. One series under 10 steps: no interval, whichever side."""
    se = math.log(2) / math.sqrt(3)
    _, lo, hi = ratio_ci([1, 2, 4], [1, 1, 1, 1], independent=True)
    assert lo == pytest.approx(2 * math.exp(-T975_DF2 * se))
    base = [math.exp(v) for v in range(1, 11)]
    assert ratio_ci(base[:9], base)[1:] == (None, None) and ratio_ci(base, base[:9])[1:] == (
        None,
        None,
    )
