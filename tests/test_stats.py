import math

import numpy as np
import pytest

from stats import (adaptive_should_stop, aggregate_repeats, block_throughput, compare_repeats, describe, fmt_ci,
                   fmt_ratio, mann_whitney_u, median_ci, median_ranks, noise_sentinel, ratio_ci, sig_digits,
                   steady_state, verdict)


def _coverage(n, j):
    """P(j <= B <= n - j) for B ~ Binomial(n, 1/2), exact."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(j)) / 2**n


@pytest.mark.parametrize("n,j,k,cov", [(10, 2, 9, 0.978515625), (20, 6, 15, 0.9586105346679688)])
def test_median_ranks_match_binomial(n, j, k, cov):
    assert _coverage(n, j) == pytest.approx(cov) and _coverage(n, j) >= 0.95 > _coverage(n, j + 1)
    assert median_ranks(n) == (j, k, pytest.approx(cov, abs=1e-12))
    x = np.random.default_rng(0).permutation(np.arange(1.0, n + 1))  # order must not matter
    assert median_ci(x) == (float(j), float(k), pytest.approx(cov, abs=1e-12))


def test_median_ci_small_n_returns_range_with_true_coverage():
    assert median_ci([3.0, 1.0, 2.0, 5.0, 4.0]) == (1.0, 5.0, pytest.approx(1 - 2 * 0.5**5))
    assert median_ranks(6)[:2] == (1, 6)  # n = 6 is the first to reach 95%
    assert median_ci([7.0]) == (7.0, 7.0, 0.0)
    with pytest.raises(ValueError):
        median_ci([])


def test_median_ranks_exact_for_many_n():
    for n in range(6, 60):
        j, k, cov = median_ranks(n)
        assert k == n + 1 - j and cov == pytest.approx(_coverage(n, j), abs=1e-12)
        assert cov >= 0.95 > _coverage(n, j + 1)


def test_describe_quartiles_and_tukey_outliers():
    d = describe([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 30, -20])
    # sorted: -20, 1..10, 30; q1 at position 2.75 -> 2.75, q3 at 8.25 -> 8.25; fences -5.5 and 16.5
    assert (d["q1"], d["q3"], d["iqr"]) == (2.75, 8.25, 5.5)
    assert (d["outliers_low"], d["outliers_high"]) == (1, 1)
    assert d["n"] == 12 and d["median"] == 5.5 and (d["min"], d["max"]) == (-20, 30)
    assert (d["ci_lo"], d["ci_hi"]) == (2.0, 9.0)  # n = 12 -> ranks 3 and 10
    assert d["ci_level"] == pytest.approx(_coverage(12, 3))
    assert d["rel_ci_halfwidth"] == pytest.approx(3.5 / 5.5)
    assert describe([0.0, 0.0, 0.0])["rel_ci_halfwidth"] is None


def test_mann_whitney_hand_computed():
    # a > b in 6 of the 20 pairs; sigma^2 = 4*5*10/12; z = (|6 - 10| - 0.5) / sigma
    u, p = mann_whitney_u([1, 3, 5, 7], [2, 4, 6, 8, 9])
    assert u == 6 and p == pytest.approx(math.erfc(3.5 / math.sqrt(200 / 12) / math.sqrt(2)))
    assert p == pytest.approx(0.3913, abs=1e-4)
    # ties: the three 2s share midrank 3; U_a = 1 + 3 + 3 - 6 = 1; variance 9/12 * (7 - 24/30)
    u, p = mann_whitney_u([1, 2, 2], [2, 3, 4])
    assert u == 1 and p == pytest.approx(math.erfc(3 / math.sqrt(0.75 * 6.2) / math.sqrt(2)))
    assert mann_whitney_u([1, 1], [1, 1]) == (2.0, 1.0)


def test_steady_state():
    rng = np.random.default_rng(1)
    i = np.arange(60)
    warmup = 1 + 0.3 * np.exp(-i / 12) + rng.normal(0, 0.02, 60)
    s = steady_state(warmup)
    assert s["steady"] is False and s["drift"] < -0.02 and s["p_value"] < 0.05
    assert steady_state(rng.normal(1, 0.05, 60))["steady"] is True
    tiny = np.r_[np.full(30, 1.0), np.full(30, 1.01)] + rng.normal(0, 0.001, 60)
    s = steady_state(tiny)  # significant, but a 1% shift is not a warm-up problem
    assert s["steady"] is True and s["p_value"] < 0.05 and 0 < s["drift"] < 0.02
    s = steady_state(warmup[:11])
    assert s["steady"] is None and s["reason"] == "too few steps to test"


def test_block_throughput():
    walls, steps = [1.0, 1.1, 0.9, 1.05, 0.95, 1.0], [10] * 6
    b = block_throughput(walls, steps)
    assert b["steps_per_s"] == pytest.approx(60 / 6.0) and b["n_blocks"] == 6
    # every resample's rate lies between the slowest and the fastest block's
    assert 10 / 1.1 <= b["ci_lo"] < b["steps_per_s"] < b["ci_hi"] <= 10 / 0.9
    assert block_throughput(walls, steps) == b and block_throughput(walls, steps, seed=1) != b
    for short in (block_throughput([1.0, 2.0], [5, 5]), block_throughput(walls[:5], steps[:5])):
        assert short["ci_lo"] is None and short["ci_hi"] is None and "at least 6" in short["method"]
    assert block_throughput([1.0, 2.0], [5, 5])["steps_per_s"] == pytest.approx(10 / 3)


@pytest.mark.parametrize("df,q", [(1, 12.7062), (2, 4.3027), (5, 2.5706), (30, 2.0423)])
def test_t_quantile_matches_tables(df, q):
    from stats.bootstrap import _t_quantile
    assert _t_quantile(0.975, df) == pytest.approx(q, abs=1e-3)


def test_expanded_level_by_hand():
    from stats.bootstrap import expanded_level
    # n = 6: Phi(sqrt(6/5) * t_{0.975, 5}) = Phi(2.8159) -> two-sided 0.99514
    assert expanded_level(0.95, 6) == pytest.approx(0.99514, abs=2e-5)
    assert expanded_level(0.95, 1e6) == pytest.approx(0.95, abs=1e-4) and expanded_level(0.95, 1) == 1.0
    assert expanded_level(0.95, 3) > expanded_level(0.95, 10) > expanded_level(0.95, 100) > 0.95


def test_effective_n_counts_agreeing_runs_fully_and_disagreeing_runs_once():
    from stats.bootstrap import effective_n
    rng = np.random.default_rng(0)
    agree = [rng.normal(0, 0.1, 20) for _ in range(3)]
    apart = [rng.normal(mu, 0.001, 20) for mu in (0.0, 1.0, 2.0)]
    assert effective_n(agree) > 25 and effective_n(apart) == pytest.approx(3, abs=0.1)
    assert effective_n([np.ones(7)]) == 7


def test_block_interval_covers_95_percent_at_small_n():
    """The reason for the expansion: a plain percentile bootstrap over 6-10 blocks covered 85-92%."""
    rng = np.random.default_rng(1)
    for n in (6, 10):
        hits = 0
        for t in range(300):
            walls = np.exp(rng.normal(0, 0.2, n))
            b = block_throughput(walls, np.ones(n), seed=t)
            hits += b["ci_lo"] <= np.exp(-0.02) <= b["ci_hi"]   # true rate 1 / E[wall] = exp(-sigma^2 / 2)
        assert hits / 300 >= 0.91, (n, hits / 300)


def test_ratio_ci_covers_injected_speedup_and_is_seeded():
    rng = np.random.default_rng(2)
    base, cand = rng.normal(1.2, 0.05, 200), rng.normal(1.0, 0.05, 200)
    r = ratio_ci(base, cand)
    assert r[1] < 1.2 < r[2] and r[1] < r[0] < r[2]
    assert verdict(*r) == "faster" and verdict(*ratio_ci(cand, base)) == "slower"
    assert ratio_ci(base, cand, seed=5) == ratio_ci(base, cand, seed=5) != ratio_ci(base, cand, seed=6)
    same = ratio_ci(rng.normal(1, 0.05, 200), rng.normal(1, 0.05, 200))
    assert same[1] < 1 < same[2] and verdict(*same) == "no significant difference"


def test_repeats_interval_includes_run_to_run_spread():
    rng = np.random.default_rng(3)
    shifts = (1.0, 1.06, 0.95, 1.03, 0.98)
    runs = [rng.normal(1, 0.01, 50) * s for s in shifts]
    a = aggregate_repeats(runs)
    assert a["n_runs"] == 5 and a["median"] == pytest.approx(np.median([np.median(r) for r in runs]))
    assert a["ci_lo"] < a["median"] < a["ci_hi"]
    pooled = aggregate_repeats([np.concatenate(runs)])  # pretends all steps are independent
    assert a["ci_hi"] - a["ci_lo"] > 2 * (pooled["ci_hi"] - pooled["ci_lo"])
    assert "one run" in pooled["method"] and "two-level" in a["method"]
    assert aggregate_repeats(runs) == a

    c = compare_repeats([r * 1.2 for r in runs], runs)
    assert c["ratio"] == pytest.approx(1.2) and c["ci_lo"] < 1.2 < c["ci_hi"]
    single = compare_repeats([runs[0] * 1.2], [runs[0]])
    assert (single["ratio"], single["ci_lo"], single["ci_hi"]) == ratio_ci(runs[0] * 1.2, runs[0])


@pytest.mark.parametrize("args,expected", [
    ((1.10, 1.05, 1.15), "faster"),
    ((1.02, 1.01, 1.03), "no significant difference"),  # significant but within the 2% noise floor
    ((1.10, 1.00, 1.20), "no significant difference"),  # lo touching 1 is not > 1
    ((0.90, 0.85, 0.95), "slower"),
    ((0.985, 0.98, 0.99), "no significant difference"),
    ((1.10, None, None), "no significant difference"),
])
def test_verdict_edges(args, expected):
    assert verdict(*args) == expected


def test_verdict_custom_noise():
    assert verdict(1.02, 1.01, 1.03, noise=0.01) == "faster"
    assert verdict(0.97, 0.96, 0.98, noise=0.05) == "no significant difference"


def test_digit_trimming():
    assert fmt_ci(1.83456, 1.2, 2.5) == "1.8 [1.2, 2.5]"
    assert fmt_ci(1.03456, 1.0301, 1.0389) == "1.0346 [1.0301, 1.0389]"
    assert fmt_ci(1234.5, 1100, 1400, "ms") == "1230 [1100, 1400] ms"
    assert fmt_ci(1.23456, None, None) == "1.235"
    assert sig_digits(1.83456, 1.2, 2.5) == 1 and sig_digits(1.0, 1.0, 1.0) is None
    assert fmt_ratio(1.2534, 1.18, 1.31, "faster") == "1.25x [1.18, 1.31]"
    assert fmt_ratio(1.0012, 0.93, 1.07, "no significant difference") == "~1 (0.93-1.07, n.s.)"
    assert fmt_ratio(1.3, None, None, "no significant difference") == "~1 (n.s.)"


def test_noise_sentinel():
    rng = np.random.default_rng(4)
    rows = {"a": rng.normal(1.0, 0.01, 30), "b": rng.normal(1.38, 0.01, 30), "c": rng.normal(1.01, 0.01, 30),
            "few": [5.0, 6.0]}  # too few samples to count as evidence
    s = noise_sentinel(rows)
    assert (s["low_row"], s["high_row"]) == ("a", "b") and s["significant"] is True
    assert s["spread"] == pytest.approx(np.median(rows["b"]) / np.median(rows["a"]) - 1)
    assert noise_sentinel({"a": rng.normal(1, 0.01, 30), "b": rng.normal(1, 0.01, 30)}) is None


def test_adaptive_should_stop():
    tight = list(np.random.default_rng(5).normal(1, 0.001, 40))
    assert adaptive_should_stop(tight, 0.01, 10, 1000, 1.0, 60.0) == (True, "target reached")
    assert adaptive_should_stop(tight[:5], 0.01, 1, 1000, 1.0, 60.0) == (False, "continue")  # n=5 can't reach 95%
    assert adaptive_should_stop(tight, 0.01, 100, 1000, 1.0, 60.0) == (False, "continue")
    assert adaptive_should_stop(tight, 1e-9, 10, 40, 1.0, 60.0) == (True, "max_steps reached")
    assert adaptive_should_stop(tight, 1e-9, 10, 1000, 61.0, 60.0) == (True, "max_s reached")
