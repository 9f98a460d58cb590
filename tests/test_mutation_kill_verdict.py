"""stats/verdict.py, the verdicts every sweep table and comparison prints (issue 36: a module the
mutation run covers), checked against values worked out apart from the code: the rule's bounds met
exactly with binary-exact numbers, Student's t from the printed tables (2.776 for 4 degrees of
freedom at 0.975), Holm's and Benjamini and Hochberg's procedures stepped through by hand."""

from __future__ import annotations

import math

import pytest

from stats.verdict import (
    EQUIVALENT,
    FASTER,
    NS,
    SLOWER,
    adjust,
    best_claim,
    claim_pvalues,
    judge,
    repeats_to_decide,
    verdict,
)

T975_DF4 = (
    2.7764451051977987  # Student t, 0.975 quantile, 4 degrees of freedom (printed tables: 2.776)
)


def test_judge_at_its_bounds():
    """A band of +-0.25 (exact in binary): faster needs lo above 1.25, slower hi below 0.75,
    equivalent both ends inside [0.75, 1.25], ends included."""
    assert judge(1.25, 2.0, 0.25) == NS and judge(1.2500001, 2.0, 0.25) == FASTER
    assert judge(0.5, 0.75, 0.25) == NS and judge(0.5, 0.7499999, 0.25) == SLOWER
    assert judge(0.75, 1.25, 0.25) == EQUIVALENT
    assert judge(0.7499999, 1.25, 0.25) == NS and judge(0.75, 1.2500001, 0.25) == NS
    assert judge(None, 2.0) == NS and judge(2.0, None) == NS
    # no band: nothing is equivalent, and any interval clear of 1 is a verdict
    assert judge(1.0, 1.0, 0.0) == NS and judge(1.0000001, 1.1, 0.0) == FASTER
    # the default band is 2%
    assert (
        judge(1.0201, 1.1) == FASTER
        and judge(1.0199, 1.1) == NS
        and judge(0.98, 1.02) == EQUIVALENT
    )


def test_judge_floor_raises_the_bar_for_wins_only():
    """The machine's spread (floor 0.5) above the 0.25 band: lo 1.3 is no longer faster, hi 0.7 no
    longer slower; equivalence is still judged against the band; a floor below the band changes
    nothing."""
    assert (
        judge(1.3, 2.0, 0.25, floor=0.5) == NS and judge(1.5000001, 2.0, 0.25, floor=0.5) == FASTER
    )
    assert (
        judge(0.1, 0.7, 0.25, floor=0.5) == NS and judge(0.1, 0.4999999, 0.25, floor=0.5) == SLOWER
    )
    assert judge(0.75, 1.25, 0.25, floor=0.5) == EQUIVALENT
    assert (
        judge(1.3, 2.0, 0.25, floor=0.125) == FASTER and judge(1.3, 2.0, 0.25, floor=None) == FASTER
    )


def test_verdict_is_the_intervals():
    assert verdict(5.0, 0.75, 1.25, 0.25) == EQUIVALENT and verdict(None, 1.3, 2.0, 0.25) == FASTER
    assert verdict(1.0, 0.98, 1.02) == EQUIVALENT and verdict(1.0, 0.97, 1.02) == NS


def test_claim_pvalues_from_the_t_table():
    """log ratio = log(1 + bar) + 2.776 se with 4 degrees of freedom: the one-sided tail is 0.025,
    doubled 0.05; at log(1 + bar) itself, half the distribution is above: 1.0. The mirror for
    slower. Equivalence at ratio 1 with the upper bound 2.776 se away: 0.05 (the nearer bound
    decides: log 1.02 < -log 0.98)."""
    se = 0.01
    p = claim_pvalues(math.log1p(0.02) + T975_DF4 * se, se, 4)
    assert p[FASTER] == pytest.approx(0.05, rel=1e-9) and p[SLOWER] == pytest.approx(1.0)
    p = claim_pvalues(math.log1p(-0.02) - T975_DF4 * se, se, 4)
    assert p[SLOWER] == pytest.approx(0.05, rel=1e-9) and p[FASTER] == pytest.approx(1.0)
    assert claim_pvalues(math.log1p(0.02), se, 4)[FASTER] == pytest.approx(1.0)
    assert claim_pvalues(math.log1p(-0.02), se, 4)[SLOWER] == pytest.approx(1.0)
    se_eq = math.log1p(0.02) / T975_DF4
    assert claim_pvalues(0.0, se_eq, 4)[EQUIVALENT] == pytest.approx(0.05, rel=1e-9)
    # the floor moves faster's and slower's bar, not equivalence's band
    p = claim_pvalues(math.log1p(0.1) + T975_DF4 * se, se, 4, noise=0.02, floor=0.1)
    assert p[FASTER] == pytest.approx(0.05, rel=1e-9)
    p = claim_pvalues(math.log1p(-0.1) - T975_DF4 * se, se, 4, noise=0.02, floor=0.1)
    assert p[SLOWER] == pytest.approx(0.05, rel=1e-9)
    assert claim_pvalues(0.0, se_eq, 4, floor=0.1)[EQUIVALENT] == pytest.approx(0.05, rel=1e-9)
    # no band: no equivalence claim; no spread: no claim at all
    assert claim_pvalues(0.0, se, 4, noise=0.0)[EQUIVALENT] == 1.0
    for bad in (0.0, -1.0, math.inf, math.nan):
        assert claim_pvalues(0.5, bad, 4) == {FASTER: 1.0, SLOWER: 1.0, EQUIVALENT: 1.0}
    # a floor of 1 or more: slower's bar stops short of ratio 0 (log 0.001)
    p = claim_pvalues(math.log(0.001) - T975_DF4 * se, se, 4, noise=0.02, floor=2.0)
    assert p[SLOWER] == pytest.approx(0.05, rel=1e-9)


def test_best_claim_is_the_smallest_p():
    assert best_claim({FASTER: 0.3, SLOWER: 0.01, EQUIVALENT: 0.2}) == (SLOWER, 0.01)
    assert best_claim({FASTER: 0.3, SLOWER: 0.5, EQUIVALENT: 0.2}) == (EQUIVALENT, 0.2)
    assert best_claim({FASTER: 0.1, SLOWER: 0.1, EQUIVALENT: 0.1}) == (FASTER, 0.1)


def test_holm_and_bh_by_hand():
    """Holm at 0.05 over three: the smallest against 0.05/3, the next against 0.05/2, the last
    against 0.05, each bound met exactly kept, the first miss stopping the rest. Benjamini-Hochberg
    over 0.01, 0.04, 0.03, 0.2: 0.01 <= 1/4 * 0.05, 0.03 > 2/4 * 0.05, 0.04 > 3/4 * 0.05, 0.2 >
    0.05: only the first."""
    assert adjust([0.01, 0.04, 0.03], 0.05) == [True, False, False]
    assert adjust([0.01, 0.02, 0.04], 0.05) == [True, True, True]
    assert adjust([0.05, 0.025], 0.05) == [True, True]
    assert adjust([0.04, 0.02, 0.03], 0.05, "holm") == [False, False, False]
    assert adjust([0.01, 0.04, 0.03, 0.2], 0.05, "fdr_bh") == [True, False, False, False]
    assert adjust([0.01, 0.02, 0.03, 0.04], 0.05, "fdr_bh") == [True, True, True, True]
    assert adjust([0.05], 0.05, "fdr_bh") == [True] and adjust([0.025, 0.05], 0.05, "fdr_bh") == [
        True,
        True,
    ]
    assert adjust([], 0.05) == [] and adjust([], 0.05, "fdr_bh") == []
    with pytest.raises(ValueError, match="unknown family method 'bonferroni': holm or fdr_bh"):
        adjust([0.01], 0.05, "bonferroni")


def test_claim_pvalues_at_the_ends_of_the_band():
    """Equivalence decided by the lower bound (ratio 0.98 x e^(2.776 se)): 0.05; outside the band,
    the one-sided p-value passes 0.5 and the claim's is capped at 1.0; a band of 100% has no lower
    bound (log 0 is minus infinity), so the upper one decides."""
    se = 0.001
    assert claim_pvalues(math.log1p(-0.02) + T975_DF4 * se, se, 4)[EQUIVALENT] == pytest.approx(
        0.05, rel=1e-9
    )
    assert claim_pvalues(math.log(2.0), se, 4)[EQUIVALENT] == 1.0
    p = claim_pvalues(math.log(2.0) - T975_DF4 * se, se, 4, noise=1.0)
    assert p[EQUIVALENT] == pytest.approx(0.05, rel=1e-9) and p[FASTER] == 1.0


def test_repeats_to_decide_from_the_t_table():
    """The first R whose interval, with the spread shrunk by sqrt(runs / R), clears the band; t
    quantiles from the printed table. Paired, 2 runs, ratio 1.10 (log 0.0953), se 0.05, band 2% (log
    1.02 = 0.0198): the interval's half must be under 0.0755, t(R-1) sqrt(2/R) under 1.510: R=3:
    4.303 x 0.816 = 3.51; 4: 3.182 x 0.707 = 2.25; 5: 2.776 x 0.632 = 1.76; 6: 2.571 x 0.577 = 1.48:
    6. At 90%: 5: 2.132 x 0.632 = 1.35."""
    assert repeats_to_decide(math.log(1.10), 0.05, 1, 2, paired=True) == 6
    assert repeats_to_decide(math.log(1.10), 0.05, 1, 2, paired=True, level=0.90) == 5
    # unpaired, 1 run (df 1 -> R-1): 1/sqrt(R): 4: 3.182 x 0.5 = 1.59; 5: 2.776 x 0.447 = 1.24: 5
    assert repeats_to_decide(math.log(1.10), 0.05, 1, 1) == 5
    # slower, unpaired, 3 runs, df 4 (-> 2(R-1)): ratio 0.9 (log -0.1054), se 0.04, down log 0.98 =
    # -0.0202: t sqrt(3/R) under 2.129: R=4: t(6) 2.447 x 0.866 = 2.119: 4 (the first R tried is
    # runs + 1)
    assert repeats_to_decide(math.log(0.9), 0.04, 4, 3) == 4
    # equivalent, paired, 2 runs, ratio 1, se 0.02: t(R-1) sqrt(2/R) at most 0.990 (the nearer
    # bound, log 1.02): 10: 2.262 x 0.447 = 1.01; 11: 2.228 x 0.426 = 0.95: 11; capped at 10: none
    assert repeats_to_decide(0.0, 0.02, 1, 2, paired=True) == 11
    assert repeats_to_decide(0.0, 0.02, 1, 2, paired=True, cap=10) is None
    assert repeats_to_decide(0.0, 0.02, 1, 2, paired=True, cap=11) == 11
    # on a bound of the band: no R decides; no spread or no run: nothing to plan
    assert repeats_to_decide(math.log1p(0.02), 0.01, 4, 3) is None
    assert repeats_to_decide(0.5, 0.0, 4, 3) is None and repeats_to_decide(0.5, 0.1, 4, 0) is None
    # ratio 0.99 (log -0.01005), se 0.0095, paired: never slower (0.99 is inside the band);
    # equivalent once the interval's half is at most log 0.99 - log 0.98 = 0.01015: t sqrt(2/R) x
    # 0.0095: 9: 2.306 x 0.471 = 1.087 -> 0.0103; 10: 1.012 -> 0.0096: 10
    assert repeats_to_decide(math.log(0.99), 0.0095, 1, 2, paired=True) == 10
    # 100 runs at most by default: se 0.0708 at ratio 1 needs t sqrt(2/R) <= 0.280: 100: t(99)
    # 1.9842 x 0.1414 = 0.2806; 101: t(100) 1.9840 x 0.1407 = 0.2792
    assert repeats_to_decide(0.0, 0.0708, 1, 2, paired=True) is None
    assert repeats_to_decide(0.0, 0.0708, 1, 2, paired=True, cap=101) == 101


def test_repeats_to_decide_plans_more_runs_and_their_degrees_of_freedom():
    """A plan is for more runs than the comparison has (runs + 1 at least, 2 at least), even where
    the first tried already decides (ratio 2, se 0.01). Paired: R-1 degrees of freedom whatever df
    says. Unpaired, 1 run, df 1: R-1, never under 1: ratio 1.10, se 0.015: R=2: t(1) 12.706 x 0.707
    x 0.015 = 0.135 > 0.0755; R=3: t(2) 4.303 x 0.577 x 0.015 = 0.037: 3. Unpaired, 3 runs, df 4: 4
    (R-1) / 2: ratio 0.9, se 0.044, the gap to the band 0.0852 = 1.936 se: R=4: t(6) 2.447 x 0.866 =
    2.119 > 1.936; R=5: t(8) 2.306 x 0.775 = 1.786: 5."""
    assert repeats_to_decide(math.log(2.0), 0.01, 4, 3) == 4
    assert repeats_to_decide(math.log(2.0), 0.01, 1, 1) == 2
    assert repeats_to_decide(math.log(1.10), 0.05, 5, 2, paired=True) == 6
    assert repeats_to_decide(math.log(1.10), 0.015, 1, 1) == 3
    assert repeats_to_decide(math.log(0.9), 0.044, 4, 3) == 5


def test_repeats_to_decide_at_the_bands_ends():
    """A 0% interval (level 0: Student's median is 0, so no half-width) puts the estimate itself
    against the band: on its upper or lower end, equivalent (ends included) at the first R; with no
    band, ratio 1 is neither faster, slower nor equivalent: no plan."""
    assert repeats_to_decide(math.log1p(0.02), 0.01, 4, 3, level=0.0) == 4
    assert repeats_to_decide(math.log1p(-0.02), 0.01, 4, 3, level=0.0) == 4
    assert repeats_to_decide(0.0, 0.01, 4, 3, noise=0.0, level=0.0) is None
