"""The run-level statistics (stats/runs.py) written out by hand: geometric means, t intervals from
scipy's own quantile, Welch's degrees of freedom, the paired and the AB/BA crossover estimators,
the repeats plan's smallest R, on hand-made logs. The mutation run's targeted tests for the module
(docs/testing.md "Mutation testing")."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from stats import runs
from stats.verdict import NO_VERDICT


def _t(df, level=0.95):
    return float(st.t.ppf(0.5 + level / 2, df))


def test_time_saved_is_one_minus_the_inverse_speedup():
    assert runs.time_saved(1.25) == pytest.approx(0.2)
    assert runs.time_saved(0.5) == pytest.approx(-1.0)
    assert runs.time_saved(None) is None and runs.time_saved(0) is None
    assert runs.time_saved(-2.0) is None
    assert runs.time_saved(1e-9) == pytest.approx(1 - 1e9)  # tiny but positive: a number


def test_log_rate_is_the_log_of_total_work_over_total_wall():
    assert runs.log_rate([0.5, 1.5], [2, 6]) == pytest.approx(math.log(8 / 2.0))
    for walls, units in (([], []), ([1.0], [1, 2]), ([0.0, 1.0], [1, 1]), ([1.0], [0])):
        with pytest.raises(ValueError):
            runs.log_rate(walls, units)
    assert runs.log_rate([2.0], [1]) == pytest.approx(math.log(0.5))


def test_run_level_is_the_geometric_mean_with_a_t_interval():
    logs = [math.log(10.0), math.log(12.0), math.log(11.0)]
    r = runs.run_level(logs)
    x = np.array(logs)
    se = x.std(ddof=1) / math.sqrt(3)
    h = _t(2) * se
    assert r["value"] == pytest.approx((10 * 12 * 11) ** (1 / 3))
    assert r["ci_lo"] == pytest.approx(math.exp(x.mean() - h))
    assert r["ci_hi"] == pytest.approx(math.exp(x.mean() + h))
    assert r["log_mean"] == pytest.approx(x.mean()) and r["log_se"] == pytest.approx(se)
    assert r["df"] == 2 and r["n_runs"] == 3
    assert r["run_values"] == pytest.approx([10.0, 12.0, 11.0])
    assert r["method"].startswith("geometric mean over 3 runs") and "df 2" in r["method"]
    r90 = runs.run_level(logs, level=0.90)
    assert r90["ci_hi"] == pytest.approx(math.exp(x.mean() + _t(2, 0.90) * se))
    one = runs.run_level([math.log(5.0)])
    assert (one["value"], one["ci_lo"], one["ci_hi"], one["log_se"], one["df"]) == (
        pytest.approx(5.0),
        None,
        None,
        None,
        None,
    )
    assert one["n_runs"] == 1 and one["method"].startswith("one run")
    two = runs.run_level([0.0, 0.2])
    assert two["df"] == 1 and two["ci_lo"] == pytest.approx(math.exp(0.1 - _t(1) * 0.1))
    with pytest.raises(ValueError):
        runs.run_level([])


def test_paired_only_with_one_run_of_each_round_on_both_sides():
    assert runs._paired([0, 1], [1, 0], 2, 2) is True
    assert runs._paired([0, 1], [0, 1], 2, 3) is False
    assert runs._paired([0], [0], 1, 1) is False
    assert runs._paired(None, [0, 1], 2, 2) is False and runs._paired([0, 1], None, 2, 2) is False
    assert runs._paired([0, 0], [0, 0], 2, 2) is False  # a round twice
    assert runs._paired([0, None], [0, None], 2, 2) is False
    assert runs._paired([0, 1], [0, 2], 2, 2) is False


def test_paired_speedup_is_the_mean_per_round_log_ratio():
    b = [0.0, 0.1, 0.3]
    c = [0.2, 0.29, 0.51]  # ratios 0.2, 0.19, 0.21 by round
    sp = runs.compare_runs(b, c, [0, 1, 2], [0, 1, 2])
    d = np.array([0.2, 0.19, 0.21])
    se = d.std(ddof=1) / math.sqrt(3)
    assert sp.paired is True and sp.df == 2.0 and sp.log_se == pytest.approx(se)
    assert sp.log_ratio == pytest.approx(0.2) and sp.ratio == pytest.approx(math.exp(0.2))
    assert sp.ci_lo == pytest.approx(math.exp(0.2 - _t(2) * se))
    assert sp.ci_hi == pytest.approx(math.exp(0.2 + _t(2) * se))
    assert (sp.n_baseline, sp.n_candidate) == (3, 3)
    assert sp.verdict == "faster" and sp.repeats_needed is None
    assert "paired t" in sp.method and "3 rounds" in sp.method
    # rounds listed in another order pair by round, not by position
    shuffled = runs.compare_runs(b, [0.51, 0.2, 0.29], [0, 1, 2], [2, 0, 1])
    assert shuffled.log_se == pytest.approx(se)


def test_welch_speedup_uses_welchs_degrees_of_freedom():
    b = np.array([0.0, 0.1, 0.05, 0.02])
    c = np.array([0.3, 0.5, 0.4])
    sp = runs.compare_runs(b, c)
    vb, vc = b.var(ddof=1) / 4, c.var(ddof=1) / 3
    df = (vb + vc) ** 2 / (vb**2 / 3 + vc**2 / 2)
    assert sp.paired is False and sp.df == pytest.approx(df)
    assert sp.log_se == pytest.approx(math.sqrt(vb + vc))
    lr = c.mean() - b.mean()
    assert sp.ci_lo == pytest.approx(math.exp(lr - _t(df) * math.sqrt(vb + vc)))
    assert sp.ci_hi == pytest.approx(math.exp(lr + _t(df) * math.sqrt(vb + vc)))
    assert "Welch" in sp.method and "4 vs 3 runs" in sp.method
    flat = runs.compare_runs([0.0, 0.0], [0.0, 0.0, 0.0])
    assert flat.df == 3.0 and flat.log_se == 1e-12  # identical runs: no spread, no claim
    assert flat.verdict == "equivalent"


def test_one_run_on_a_side_gives_no_interval_and_no_verdict():
    sp = runs.compare_runs([0.0], [0.1, 0.2])
    assert sp.verdict == NO_VERDICT and sp.ci_lo is None and sp.ci_hi is None
    assert sp.ratio == pytest.approx(math.exp(0.15)) and "1 run on a side" in sp.method
    with pytest.raises(ValueError):
        runs.compare_runs([], [0.1])
    with pytest.raises(ValueError):
        runs.compare_runs([0.1], [])


def test_an_undecided_comparison_says_how_many_repeats_would_decide():
    sp = runs.compare_runs([0.0, 0.0, 0.0], [0.05, 0.0, 0.1], [0, 1, 2], [0, 1, 2])
    assert sp.verdict not in ("faster", "slower", "equivalent")
    assert sp.repeats_needed is not None and sp.repeats_needed >= 3


def test_block_ab_under_five_rounds_is_the_plain_paired_t():
    base, fix = [0.2, 0.21, 0.19, 0.2], [0.1, 0.11, 0.1, 0.12]
    sp = runs.block_ab(base, fix, steps_per_block=2)
    d = np.log(np.array(base) / np.array(fix))
    assert sp.paired and sp.df == 3.0 and sp.log_ratio == pytest.approx(d.mean())
    assert sp.log_se == pytest.approx(d.std(ddof=1) / 2)
    with pytest.raises(ValueError):
        runs.block_ab([0.1, 0.2], [0.1])


def test_block_ab_from_five_rounds_is_the_crossover_estimate():
    base = [0.20, 0.22, 0.21, 0.25, 0.20, 0.23]
    fix = [0.10, 0.14, 0.11, 0.15, 0.12, 0.13]
    sp = runs.block_ab(base, fix, steps_per_block=3)
    d = np.log(np.array(base) / np.array(fix))  # log(fix rate / base rate)
    ab, ba = d[0::2], d[1::2]
    lr = (ab.mean() + ba.mean()) / 2
    resid = np.concatenate([ab - ab.mean(), ba - ba.mean()])
    var = resid @ resid / 4
    se = math.sqrt(var / 4 * (1 / 3 + 1 / 3))
    assert sp.log_ratio == pytest.approx(lr) and sp.ratio == pytest.approx(math.exp(lr))
    assert sp.df == 4.0 and sp.log_se == pytest.approx(se)
    assert sp.ci_lo == pytest.approx(math.exp(lr - _t(4) * se))
    assert sp.ci_hi == pytest.approx(math.exp(lr + _t(4) * se))
    assert sp.verdict == "faster" and sp.repeats_needed is None
    assert "AB/BA crossover" in sp.method and "6 rounds, df 4" in sp.method
    # the odd round count: 5 rounds, 3 AB and 2 BA
    five = runs.block_ab(base[:5], fix[:5])
    d5 = d[:5]
    ab5, ba5 = d5[0::2], d5[1::2]
    r5 = np.concatenate([ab5 - ab5.mean(), ba5 - ba5.mean()])
    se5 = math.sqrt((r5 @ r5 / 3) / 4 * (1 / 3 + 1 / 2))
    assert five.df == 3.0 and five.log_se == pytest.approx(se5)
    assert five.log_ratio == pytest.approx((ab5.mean() + ba5.mean()) / 2)


def test_plan_repeats_is_the_smallest_r_whose_t_interval_meets_the_target():
    logs = [0.0, 0.03, -0.02, 0.01]
    s2 = np.var(logs, ddof=1)
    plan = runs.plan_repeats(logs, [0.01, 0.02, 0.01, 0.02], rel_ci=0.02)
    want = next(r for r in range(2, 101) if _t(r - 1) * math.sqrt(s2 / r) <= math.log1p(0.02))
    assert plan["repeats"] == want and plan["target"] == 0.02
    assert plan["runs_sd"] == pytest.approx(math.sqrt(s2))
    w = (0.01**2 + 0.02**2) / 2
    assert plan["within_sd"] == pytest.approx(math.sqrt(w))
    assert plan["between_sd"] == pytest.approx(math.sqrt(max(0.0, s2 - w)))
    # within larger than the whole spread: no between-run part left
    big = runs.plan_repeats(logs, [0.1] * 4)
    assert big["between_sd"] == 0.0 and big["within_sd"] == pytest.approx(0.1)
    # within errors missing for a run: not used
    part = runs.plan_repeats(logs, [0.01, None, 0.01, 0.01])
    assert part["within_sd"] is None and part["between_sd"] is None
    assert runs.plan_repeats(logs)["within_sd"] is None
    # a spread no cap meets: no plan
    wide = runs.plan_repeats([0.0, 1.0], rel_ci=0.01, cap=10)
    assert wide["repeats"] is None and wide["runs_sd"] == pytest.approx(math.sqrt(0.5))
    exact = runs.plan_repeats([0.0, 0.0, 0.0])
    assert exact["repeats"] == 2  # no spread: the smallest R
    one = runs.plan_repeats([0.1], rel_ci=0.05)
    assert one == {
        "target": 0.05,
        "runs_sd": None,
        "between_sd": None,
        "within_sd": None,
        "repeats": None,
    }
    # the level and the cap are used: 90% needs no more runs than 95%
    p90 = runs.plan_repeats(logs, level=0.90)["repeats"]
    assert p90 == next(
        r for r in range(2, 101) if _t(r - 1, 0.90) * math.sqrt(s2 / r) <= math.log1p(0.02)
    )
    capped = runs.plan_repeats(logs, cap=want - 1)
    assert capped["repeats"] is None


def _p_faster(lr, se, df, bar):
    # a faster claim's p-value written out: one-sided t against log(1 + bar), doubled
    return min(1.0, 2 * float(st.t.sf((lr - math.log1p(bar)) / se, df)))


def test_a_floor_raises_the_bar_for_faster_in_the_verdict_and_its_p_value():
    b = [0.0, 0.01, -0.01]
    c = [0.14, 0.16, 0.14]  # per-round log ratios 0.14, 0.15, 0.15: about 16% faster, tight
    plain = runs.compare_runs(b, c, [0, 1, 2], [0, 1, 2])
    floored = runs.compare_runs(b, c, [0, 1, 2], [0, 1, 2], floor=0.2)
    d = np.array([0.14, 0.15, 0.15])
    lr, se = d.mean(), d.std(ddof=1) / math.sqrt(3)
    # faster than the 2% band, but its interval reaches below a 20% floor
    assert math.exp(lr - _t(2) * se) > 1.02 and math.exp(lr + _t(2) * se) < 1.2
    assert plain.verdict == "faster" and floored.verdict == "no significant difference"
    assert plain.pvalues["faster"] == pytest.approx(_p_faster(lr, se, 2, 0.02))
    assert floored.pvalues["faster"] == pytest.approx(_p_faster(lr, se, 2, 0.2))
    assert plain.pvalues["faster"] < 0.05 < floored.pvalues["faster"]


def test_refusals_name_the_problem():
    with pytest.raises(ValueError, match=r"^both sides need at least one run$"):
        runs.compare_runs([], [0.1])
    with pytest.raises(ValueError, match=r"^every round times one block of each setting$"):
        runs.block_ab([0.1, 0.2], [0.1])


def test_the_methods_in_full():
    one = runs.compare_runs([0.0], [0.1, 0.2])
    assert one.method == (
        "no run-level interval: 1 run on a side; the spread between runs is unknown, so no "
        "verdict (repeats=3 or more)"
    )
    base = [0.20, 0.22, 0.21, 0.25, 0.20, 0.23]
    fix = [0.10, 0.14, 0.11, 0.15, 0.12, 0.13]
    assert runs.block_ab(base, fix).method == (
        "AB/BA crossover on the per-round log ratios (6 rounds, df 4): each round ran both, so "
        "its machine state cancels, and the mean of the two orders' means removes which block "
        "came first"
    )


def test_block_ab_at_another_level_and_its_crossover_p_values():
    base, fix = [0.2, 0.21, 0.19, 0.2], [0.1, 0.11, 0.1, 0.12]
    d = np.log(np.array(base) / np.array(fix))
    se = d.std(ddof=1) / 2
    sp = runs.block_ab(base, fix, level=0.9)
    assert sp.ci_lo == pytest.approx(math.exp(d.mean() - _t(3, 0.9) * se))
    assert sp.ci_hi == pytest.approx(math.exp(d.mean() + _t(3, 0.9) * se))
    base6 = [0.20, 0.22, 0.21, 0.25, 0.20, 0.23]
    fix6 = [0.19, 0.20, 0.20, 0.23, 0.19, 0.22]
    cross = runs.block_ab(base6, fix6)
    p = _p_faster(cross.log_ratio, cross.log_se, 4.0, 0.02)
    assert 0.0 < p < 1.0 and cross.pvalues["faster"] == pytest.approx(p)


def test_an_undecided_welch_comparison_plans_its_repeats_on_welchs_df():
    b = np.array([0.0, 0.05, -0.04])
    c = np.array([0.06, 0.0, 0.1, 0.03])
    sp = runs.compare_runs(b, c)
    assert sp.verdict == "no significant difference" and not sp.paired
    vb, vc = b.var(ddof=1) / 3, c.var(ddof=1) / 4
    se = math.sqrt(vb + vc)
    df = (vb + vc) ** 2 / (vb**2 / 2 + vc**2 / 3)
    lr = c.mean() - b.mean()
    up, down = math.log1p(0.02), math.log1p(-0.02)
    want = None
    for r in range(4, 101):  # runs per side beyond the smaller side's 3
        h = _t(max(1.0, df * (r - 1) / 2)) * se * math.sqrt(3 / r)
        if lr - h > up or lr + h < down or (lr - h >= down and lr + h <= up):
            want = r
            break
    assert want is not None and sp.repeats_needed == want


def test_the_saving_interval_width_and_the_stopping_rule():
    # ratio interval [1.25, 2]: the time saved runs from 1 - 1/1.25 = 20% to 1 - 1/2 = 50%
    s = runs.Speedup(ratio=1.5, ci_lo=1.25, ci_hi=2.0)
    width = 0.5 - 0.2
    assert runs.saving_width(s) == pytest.approx(width)
    assert runs.saving_width(runs.Speedup(ratio=1.5, ci_hi=2.0)) is None
    assert runs.saving_width(runs.Speedup(ratio=1.5, ci_lo=1.25)) is None
    # a ratio end at 0 has no time saved: no width
    assert runs.saving_width(runs.Speedup(ratio=1.0, ci_lo=0.0, ci_hi=2.0)) is None
    assert runs.saving_width(runs.Speedup(ratio=1.0, ci_lo=1.25, ci_hi=-1.0)) is None
    w = runs.saving_width(s)
    # at least 6 rounds and a width at most the bar (equal to it included)
    assert runs.narrow_enough(s, 6, w) is True
    assert runs.narrow_enough(s, 7, 0.31) is True
    assert runs.narrow_enough(s, 5, 0.31) is False
    assert runs.narrow_enough(s, 6, 0.29) is False
    assert runs.narrow_enough(runs.Speedup(ratio=1.5), 6, 0.31) is False
    assert runs.narrow_enough(runs.Speedup(ratio=1.5), 6, 1e9) is False


def test_a_speedup_as_a_dict_is_its_fields():
    s = runs.Speedup(ratio=1.5, ci_lo=1.25, ci_hi=2.0, paired=True, method="m")
    d = s.as_dict()
    assert d["ratio"] == 1.5 and d["ci_lo"] == 1.25 and d["paired"] is True and d["method"] == "m"
    assert set(d) == {
        "ratio", "ci_lo", "ci_hi", "log_ratio", "log_se", "df", "paired", "n_baseline",
        "n_candidate", "pvalues", "verdict", "repeats_needed", "method",
    }  # fmt: skip


def test_welch_needs_two_runs_a_side_and_the_paired_method_names_its_df():
    sp = runs.compare_runs([0.0, 0.1, 0.05], [0.3, 0.5])
    assert not sp.paired and sp.ci_lo is not None and "Welch" in sp.method
    paired = runs.compare_runs([0.0, 0.1, 0.3], [0.2, 0.29, 0.51], [0, 1, 2], [0, 1, 2])
    assert paired.method == (
        "paired t on the per-round log ratios (3 rounds, df 2): each round ran both, so a "
        "round's machine state cancels"
    )


def test_log_rate_and_run_level_refusals():
    assert runs.log_rate([1.0, 3.0], [2, 6]) == pytest.approx(math.log(2.0))
    msg = r"^each run needs one positive wall time and one positive work count per block$"
    with pytest.raises(ValueError, match=msg):
        runs.log_rate([1.0, 1.0], [0.0, 2.0])
    with pytest.raises(ValueError, match=r"^no runs$"):
        runs.run_level([])


def test_plan_repeats_up_to_its_cap_and_no_further():
    # a spread where 101 runs are the first to reach +-2%: t(0.975, 100) sqrt(s2 / 101) = goal
    goal = math.log1p(0.02)
    s2 = (goal / _t(100)) ** 2 * 101 * (1 - 1e-9)
    logs = [0.0, math.sqrt(2 * s2)]  # two runs: sample variance d^2 / 2 = s2
    assert _t(99) * math.sqrt(s2 / 100) > goal
    assert runs.plan_repeats(logs)["repeats"] is None  # the default cap, 100
    assert runs.plan_repeats(logs, cap=101)["repeats"] == 101
