"""stats/power.py's figures by another route: the detectable difference checked by its defining
property (scipy's noncentral t gives the stated power at it), the paired half-width and the
two-way analysis of a pilot written out, a plan's seconds and interval recomputed from its own
runs x steps. The mutation run's targeted tests for the module, with tests/test_power.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from stats import power


def _t(q, df):
    return float(st.t.ppf(q, df))


def _power_at(d, log_se, df, family=1, noise=0.02, level=0.95, floor=None):
    """P(the design calls `d` faster): the noncentral t's tail past the critical value, at the
    noncentrality the true ratio 1 + d gives above the bar."""
    crit = _t(1 - (1 - level) / max(1, family) / 2, df)
    bar = math.log1p(max(noise, floor or 0.0))
    return float(st.nct.sf(crit, df, (math.log1p(d) - bar) / log_se))


def test_detectable_gives_the_stated_power():
    for log_se, df, family, noise, floor in (
        (0.01, 4, 1, 0.02, None),
        (0.02, 9, 3, 0.02, None),
        (0.01, 4, 1, 0.02, 0.05),
        (0.005, 2, 1, 0.0, None),
    ):
        d = power.detectable(log_se, df, family, noise, floor=floor)
        assert _power_at(d, log_se, df, family, noise, floor=floor) == pytest.approx(0.8, abs=1e-4)
    d90 = power.detectable(0.01, 4, power=0.9)
    assert _power_at(d90, 0.01, 4) == pytest.approx(0.9, abs=1e-4)
    d99 = power.detectable(0.01, 4, level=0.99)
    assert _power_at(d99, 0.01, 4, level=0.99) == pytest.approx(0.8, abs=1e-4)
    for se, df in ((None, 3), (0.01, None), (0.0, 3), (float("inf"), 3), (0.01, 0), (-0.01, 3)):
        assert power.detectable(se, df) is None
    assert power.detectable(0.01, 4, family=0) == power.detectable(0.01, 4, family=1)


def test_runs_to_detect_is_the_first_r_whose_detectable_is_small_enough():
    sd, effect = 0.03, 0.05

    def ok(r):
        return power.detectable(sd / math.sqrt(r), r - 1) <= effect

    want = next(r for r in range(2, 201) if ok(r))
    assert power.runs_to_detect(sd, effect) == max(want, power.MIN_RUNS) == want
    assert not ok(want - 1)
    assert power.runs_to_detect(sd, 0.02) is None  # inside the noise band
    assert power.runs_to_detect(sd, 0.019) is None
    assert power.runs_to_detect(0.0, 0.05) == power.MIN_RUNS
    assert power.runs_to_detect(1e-6, 0.05) == power.MIN_RUNS  # tiny spread: the fewest allowed
    assert power.runs_to_detect(sd, 0.021, cap=5) is None
    fam = power.runs_to_detect(sd, effect, family=5)
    assert fam == next(
        r for r in range(2, 201) if power.detectable(sd / math.sqrt(r), r - 1, 5) <= effect
    )


def test_half_width_written_out():
    assert power.half_width(0.03, 5) == pytest.approx(
        math.expm1(_t(0.975, 4) * 0.03 / math.sqrt(5))
    )
    assert power.half_width(0.03, 2, level=0.9) == pytest.approx(
        math.expm1(_t(0.95, 1) * 0.03 / math.sqrt(2))
    )
    assert power.half_width(0.03, 1) is None
    assert power.half_width(0.03, 0) is None


def test_runs_for_half_width_is_the_first_r_from_the_minimum():
    sd, target = 0.03, 0.02
    want = next(
        r
        for r in range(power.MIN_RUNS, 201)
        if math.expm1(_t(0.975, r - 1) * sd / math.sqrt(r)) <= target
    )
    assert power.runs_for_half_width(sd, target) == want
    assert power.runs_for_half_width(0.0, 0.02) == power.MIN_RUNS
    assert power.runs_for_half_width(sd, target, cap=want - 1) is None
    assert power.runs_for_half_width(sd, target, cap=want) == want
    w90 = power.runs_for_half_width(sd, target, level=0.9)
    assert w90 == next(
        r
        for r in range(power.MIN_RUNS, 201)
        if math.expm1(_t(0.95, r - 1) * sd / math.sqrt(r)) <= target
    )


def test_pilot_components_are_the_two_way_residual_and_the_within_part():
    logs = [[0.0, 0.1, 0.05], [0.2, 0.25, 0.3], [0.1, 0.1, 0.2]]
    within = [[0.01, 0.02, 0.01], [0.02, 0.02, 0.01], [0.01, 0.01, 0.03]]
    p = power.Pilot(logs, within, steps=20, startup_s=5.0, step_s=0.1)
    c = p.components()
    x = np.array(logs)
    resid = x - x.mean(1)[:, None] - x.mean(0)[None, :] + x.mean()
    residual = (resid**2).sum() / 4  # (3 - 1)(3 - 1)
    w = np.mean(np.array(within) ** 2)
    assert c["df"] == 4 and c["residual_var"] == pytest.approx(residual)
    assert c["per_step_var"] == pytest.approx(w * 20)
    assert c["between_var"] == pytest.approx(residual - w)
    big = power.Pilot(logs, [[1.0] * 3] * 3, 20, 5.0, 0.1).components()
    assert big["between_var"] == 0.0 and big["per_step_var"] == pytest.approx(residual * 20)
    none = power.Pilot(logs, [[float("nan")] * 3] * 3, 20, 5.0, 0.1).components()
    assert none["per_step_var"] == 0.0 and none["between_var"] == pytest.approx(residual)
    for bad in ([[0.0, 0.1]], [[0.0], [0.1]], [[0.0, float("nan")], [0.1, 0.2]]):
        with pytest.raises(ValueError):
            power.Pilot(bad, bad, 20, 5.0, 0.1).components()


def _pilot():
    logs = [[0.0, 0.02, -0.01], [0.05, 0.06, 0.03], [0.01, 0.04, 0.0]]
    within = [[0.004] * 3] * 3
    return power.Pilot(logs, within, steps=20, startup_s=4.0, step_s=0.05)


def _most_runs(budget, configs, per):
    """The definition, counted up: the most rounds whose stated cost (configs x r x per) fits."""
    r = 0
    while configs * (r + 1) * per <= budget:
        r += 1
    return r


def _diff_sd(plan_out, n):
    c = plan_out["components"]
    return math.sqrt(2 * (c["between_var"] + c["per_step_var"] / n))


def test_plan_scales_the_pilot_to_its_upper_confidence_limit():
    p = _pilot()
    out = power.plan(p, rows=2, target=0.05)
    raw = p.components()
    scale = raw["df"] / st.chi2.ppf(0.3, raw["df"])
    c = out["components"]
    assert c["scale"] == pytest.approx(scale)
    assert c["between_var"] == pytest.approx(raw["between_var"] * scale)
    assert c["per_step_var"] == pytest.approx(raw["per_step_var"] * scale)
    flat = power.plan(p, rows=2, target=0.05, confidence=0.5)
    assert flat["components"]["scale"] == 1.0


def test_a_plan_that_reaches_its_target_states_its_own_cost_and_interval():
    p = _pilot()
    out = power.plan(p, rows=2, target=0.05)
    r, n = out["runs"], out["steps"]
    assert out["reached"] == "target" and r >= power.MIN_RUNS and n >= 10
    assert out["seconds"] == pytest.approx(3 * r * (4.0 + n * 0.05))
    sd = _diff_sd(out, n)
    assert out["half_width"] == pytest.approx(math.expm1(_t(0.975, r - 1) * sd / math.sqrt(r)))
    assert _power_at(out["detectable"], sd / math.sqrt(r), r - 1, family=2) == pytest.approx(
        0.8, abs=1e-4
    )
    assert out["detectable"] <= 0.05
    assert (
        out["reason"]
        == f"{r} runs x {n} steps per configuration detect 5% (80% power, Holm over 2)"
    )
    assert (out["target"], out["rows"], out["goal"], out["budget_s"]) == (0.05, 2, "detect", None)
    hw = power.plan(p, rows=2, target=0.03, goal="half_width")
    assert hw["reached"] == "target" and hw["half_width"] <= 0.03
    assert hw["runs"] == power.runs_for_half_width(_diff_sd(hw, hw["steps"]), 0.03)
    assert hw["reason"].endswith("reach +-3% on every row's speed-up")


def test_a_budget_that_binds_gives_the_least_detectable_it_affords():
    p = _pilot()
    free = power.plan(p, rows=2, target=0.03)
    budget = free["seconds"] / 2
    out = power.plan(p, rows=2, target=0.03, budget_s=budget)
    r, n = out["runs"], out["steps"]
    assert out["reached"] == "budget" and out["seconds"] <= budget
    assert r == min(power.MAX_RUNS, _most_runs(budget, 3, 4.0 + n * 0.05))
    sd = _diff_sd(out, n)
    assert _power_at(out["detectable"], sd / math.sqrt(r), r - 1, family=2) == pytest.approx(
        0.8, abs=1e-4
    )
    assert (out["target_runs"], out["target_steps"]) == (free["runs"], free["steps"])
    assert out["target_seconds"] == pytest.approx(free["seconds"])
    assert out["reason"].startswith(f"stopped at compare.budget_s={budget:g}: {r} runs x {n} steps")
    tiny = power.plan(p, rows=2, target=0.03, budget_s=1.0)
    assert tiny["reached"] == "budget" and tiny["runs"] == power.MIN_RUNS
    assert tiny["steps"] == 20 and tiny["seconds"] == pytest.approx(3 * 3 * (4.0 + 20 * 0.05))
    assert "affords fewer than 3 runs" in tiny["reason"]


def test_detectable_at_welchs_fractional_df():
    # Welch's df is fractional: the design at df 2.4 is not the one at df 2 (which would give this
    # difference 89% power, not 80%)
    d = power.detectable(0.01, 2.4)
    assert _power_at(d, 0.01, 2.4) == pytest.approx(0.8, abs=1e-4)
    assert _power_at(d, 0.01, 2.4) - _power_at(d, 0.01, 2.0) > 0.01


def test_a_plan_s_default_target_is_5_percent_and_its_power_is_the_one_asked():
    p = _pilot()
    assert power.plan(p, rows=2)["target"] == 0.05
    out = power.plan(p, rows=2, target=0.05, power=0.9)
    r, n = out["runs"], out["steps"]
    sd = _diff_sd(out, n)
    # the runs are enough for 90% power at 5%, not merely 80%
    assert out["detectable"] <= 0.05
    assert _power_at(0.05, sd / math.sqrt(r), r - 1, family=2) >= 0.9 - 1e-4


def test_a_budget_that_binds_a_half_width_plan_gives_the_narrowest_it_affords():
    p = _pilot()
    free = power.plan(p, rows=2, target=0.005, goal="half_width")
    budget = free["seconds"] / 2
    out = power.plan(p, rows=2, target=0.005, goal="half_width", budget_s=budget)
    r, n = out["runs"], out["steps"]
    assert out["reached"] == "budget" and r >= power.MIN_RUNS and out["seconds"] <= budget
    hw = math.expm1(_t(0.975, r - 1) * _diff_sd(out, n) / math.sqrt(r))
    assert out["half_width"] == pytest.approx(hw) and hw > 0.005
    assert out["reason"].startswith(
        f"stopped at compare.budget_s={budget:g}: {r} runs x {n} steps reach +-{hw:.1%}, not "
        "+-0.5%; +-0.5% would take"
    )


def test_a_target_inside_the_noise_band_plans_the_cap():
    # 2% is the noise band itself: no run count detects it, so the plan is the cap's best
    out = power.plan(_pilot(), rows=2, target=0.02)
    assert out["reached"] == "cap" and out["runs"] == power.MAX_RUNS
    assert out["target_runs"] is None
    assert out["reason"].endswith("not 2%; 2% would take more than 200 runs")


def test_a_binding_budget_picks_the_steps_that_detect_the_least():
    p = _pilot()
    budget = power.plan(p, rows=2, target=0.03)["seconds"] / 2
    out = power.plan(p, rows=2, target=0.03, budget_s=budget)
    c = out["components"]
    # the steps the plan tries: 25 points from 10 to 4x the pilot's 20 steps, and the pilot's own
    tried = sorted({int(round(v)) for v in np.geomspace(10, 80, 25)} | {20})
    assert out["steps"] in tried

    def least(n):
        r = min(power.MAX_RUNS, _most_runs(budget, 3, 4.0 + n * 0.05))
        sd = math.sqrt(2 * (c["between_var"] + c["per_step_var"] / n))
        return power.detectable(sd / math.sqrt(r), r - 1, 2) if r >= power.MIN_RUNS else None

    seen = {n: least(n) for n in tried}
    best = min((d, n) for n, d in seen.items() if d is not None)
    assert out["steps"] == best[1] and out["detectable"] == pytest.approx(best[0])


def test_a_budget_exactly_the_target_s_cost_reaches_the_target():
    p = _pilot()
    free = power.plan(p, rows=2, target=0.03)
    exact = power.plan(p, rows=2, target=0.03, budget_s=free["seconds"])
    assert exact["reached"] == "target"
    assert (exact["runs"], exact["steps"]) == (free["runs"], free["steps"])


def test_a_reached_plan_states_its_detectable_and_half_width_at_the_power_and_level_asked():
    out = power.plan(_pilot(), rows=2, target=0.05, power=0.9, level=0.9)
    r, n = out["runs"], out["steps"]
    sd = _diff_sd(out, n)
    assert _power_at(out["detectable"], sd / math.sqrt(r), r - 1, family=2, level=0.9) == (
        pytest.approx(0.9, abs=1e-4)
    )
    assert out["half_width"] == pytest.approx(math.expm1(_t(0.95, r - 1) * sd / math.sqrt(r)))


def test_a_budget_that_affords_exactly_three_runs_plans_them():
    # 3 configurations x 3 runs x (4 s + 10 x 0.05 s) = 40.5 s: three runs of 10 steps, the least
    # a plan allows, not the refusal
    out = power.plan(_pilot(), rows=2, target=0.03, budget_s=40.5)
    assert out["reached"] == "budget" and out["runs"] == power.MIN_RUNS
    assert out["steps"] < 20 and out["reason"].startswith(
        "stopped at compare.budget_s=40.5: 3 runs"
    )


def test_the_plans_a_budget_stops_state_their_figures():
    p = _pilot()
    free = power.plan(p, rows=2, target=0.03)
    budget = free["seconds"] / 2
    out = power.plan(p, rows=2, target=0.03, budget_s=budget)
    r, n = out["runs"], out["steps"]
    sd = _diff_sd(out, n)
    assert out["half_width"] == pytest.approx(math.expm1(_t(0.975, r - 1) * sd / math.sqrt(r)))
    minutes = 3 * free["runs"] * (4.0 + free["steps"] * 0.05) / 60
    assert out["reason"] == (
        f"stopped at compare.budget_s={budget:g}: {r} runs x {n} steps detect "
        f"{out['detectable']:.1%}, not 3%; 3% would take {free['runs']} runs x {free['steps']} "
        f"steps, about {minutes:.0f} min"
    )
    # a budget below three runs of the pilot's steps: three runs of them, and what they see
    tiny = power.plan(p, rows=2, target=0.03, budget_s=1.0)
    sd20 = _diff_sd(tiny, 20)
    assert _power_at(tiny["detectable"], sd20 / math.sqrt(3), 2, family=2) == pytest.approx(
        0.8, abs=1e-4
    )
    assert tiny["half_width"] == pytest.approx(math.expm1(_t(0.975, 2) * sd20 / math.sqrt(3)))
    assert tiny["reason"] == "compare.budget_s=1 affords fewer than 3 runs per configuration"


def test_a_plan_tries_ten_steps_by_default():
    # at 6% the cheapest design is 4 runs of the fewest steps the plan tries, 10 by default
    assert power.plan(_pilot(), rows=2, target=0.06)["steps"] == 10


def test_runs_within_counts_the_rounds_an_exact_budget_affords():
    # budgets exactly r rounds' stated cost, where budget // cost counts r - 1 in floating point
    # (4.65 s runs: 41.85 // 13.95 is 2.0), and a hair under (r - 1 rounds)
    for per, r in ((4.65, 3), (4.65, 5), (4.6, 15), (4.55, 19), (4.5, 3), (1.0, 7), (0.1, 10)):
        budget = 3 * r * per
        assert power.runs_within(budget, 3, per) == _most_runs(budget, 3, per) == r
        assert power.runs_within(budget * (1 - 1e-12), 3, per) == r - 1
        assert power.runs_within(budget * (1 + 1e-9), 3, per) == r
    assert power.runs_within(4.65 * 3 * 3, 3, 4.65) == 3 and 41.85 // (3 * 4.65) == 2.0
    assert power.runs_within(1.0, 1, 0.1) == 10  # 1 // 0.1 is 9.0
    assert power.runs_within(0.0, 3, 4.5) == 0 and power.runs_within(13.4, 3, 4.5) == 0
    assert power.runs_within(1000.0, 2, 5.0) == 100 and power.runs_within(999.99, 2, 5.0) == 99


def test_a_budget_exactly_three_runs_of_thirteen_steps_plans_them():
    # 3 x 3 x (4 + 13 x 0.05) = 41.85 s buys three runs of 13 steps, the most steps three runs
    # afford (14 steps: 3 x 3 x 4.7 = 42.3 s), and more steps at three runs detect less
    budget = 3 * 3 * (4.0 + 13 * 0.05)
    out = power.plan(_pilot(), rows=2, target=0.03, budget_s=budget)
    assert (out["runs"], out["steps"]) == (3, 13) and out["reached"] == "budget"
    assert out["seconds"] == budget


def test_detectable_reads_the_degrees_of_freedom_to_three_decimals():
    # df is rounded to 3 decimals (the noncentrality's cache key and the critical value alike):
    # 2.0004 is the design at 2.0, 2.0006 the one at 2.001
    assert power.detectable(0.01, 2.0004) == power.detectable(0.01, 2.0)
    assert power.detectable(0.01, 2.0006) == power.detectable(0.01, 2.001)
    assert power.detectable(0.01, 9.9996) == power.detectable(0.01, 10)


def _grid_choice(out, budget, criterion):
    """The step count of the plan's grid (10 to 80, and the pilot's 20) whose affordable runs give
    the least criterion(sd, runs): the choice a binding budget makes, recomputed here."""
    c = out["components"]
    tried = sorted({int(round(v)) for v in np.geomspace(10, 80, 25)} | {20})
    seen = []
    for n in tried:
        r = _most_runs(budget, 3, 4.0 + n * 0.05)
        if r >= power.MIN_RUNS:
            sd = math.sqrt(2 * (c["between_var"] + c["per_step_var"] / n))
            seen.append((criterion(sd, r), n, r))
    return min(seen)[1:]


def test_a_binding_budget_weighs_steps_against_runs_by_the_goal_level_and_power_asked():
    # each budget below sits where the criterion decides between fewer runs of more steps and
    # more runs of fewer: the half-width (at the level asked), or the detectable difference (at
    # the power asked, on runs - 1 degrees of freedom); another criterion picks other steps
    def hw(level):
        return lambda sd, r: math.expm1(_t(0.5 + level / 2, r - 1) * sd / math.sqrt(r))

    def det(pw):
        return lambda sd, r: power.detectable(sd / math.sqrt(r), r - 1, 2, power=pw)

    for budget, kw, criterion, want in (
        (231.5, {"goal": "half_width", "target": 0.005}, hw(0.95), (48, 12)),
        (93.0, {"goal": "half_width", "target": 0.005, "level": 0.9}, hw(0.9), (44, 5)),
        (105.0, {"target": 0.03, "power": 0.9}, det(0.9), (20, 7)),
        (105.0, {"target": 0.03}, det(0.8), (34, 6)),
        (69.0, {"target": 0.03}, det(0.8), (34, 4)),
    ):
        out = power.plan(_pilot(), rows=2, budget_s=budget, **kw)
        assert out["reached"] == "budget"
        assert (out["steps"], out["runs"]) == _grid_choice(out, budget, criterion) == want


def test_the_three_run_fallback_states_its_detectable_at_the_power_asked():
    tiny = power.plan(_pilot(), rows=2, target=0.03, budget_s=1.0, power=0.9)
    sd20 = _diff_sd(tiny, 20)
    assert tiny["runs"] == power.MIN_RUNS and tiny["steps"] == 20
    assert _power_at(tiny["detectable"], sd20 / math.sqrt(3), 2, family=2) == pytest.approx(
        0.9, abs=1e-4
    )


def test_the_plans_a_budget_stops_state_their_figures_at_the_level_and_power_asked():
    p = _pilot()
    # the binding budget's design: its detectable at 90% power, its half-width at 90% level
    out = power.plan(p, rows=2, target=0.03, budget_s=90.0, power=0.9, level=0.9)
    r, n = out["runs"], out["steps"]
    sd = _diff_sd(out, n)
    assert out["reached"] == "budget"
    assert _power_at(out["detectable"], sd / math.sqrt(r), r - 1, family=2, level=0.9) == (
        pytest.approx(0.9, abs=1e-4)
    )
    assert out["half_width"] == pytest.approx(math.expm1(_t(0.95, r - 1) * sd / math.sqrt(r)))
    # the three-run fallback's half-width at the level asked
    tiny = power.plan(p, rows=2, target=0.03, budget_s=1.0, level=0.9)
    sd20 = _diff_sd(tiny, 20)
    assert tiny["half_width"] == pytest.approx(math.expm1(_t(0.95, 2) * sd20 / math.sqrt(3)))


def test_a_stopped_plan_states_the_target_design_s_minutes():
    # 2.5% takes 29 runs x 52 steps: 3 x 29 x (4 + 52 x 0.05) = 574.2 s, 9.57 min: "about 10 min"
    out = power.plan(_pilot(), rows=2, target=0.025, budget_s=100.0)
    assert (out["target_runs"], out["target_steps"]) == (29, 52)
    assert out["target_seconds"] == pytest.approx(574.2)
    assert out["reason"].endswith("; 2.5% would take 29 runs x 52 steps, about 10 min")


def _cheapest_by_hand(p, target, hi, goal="detect", level=0.95):
    """The cheapest (runs, steps) over the grid of 25 step counts from 10 to hi (and the pilot's
    own), the runs each needs found by counting up; the pilot's variance scaled as plan does."""
    c = p.components()
    scale = c["df"] / st.chi2.ppf(0.3, c["df"])
    grid = sorted({int(round(v)) for v in np.geomspace(10, hi, 25)} | {p.steps})
    best = None
    for n in (n for n in grid if 10 <= n <= hi):
        sd = math.sqrt(2 * scale * (c["between_var"] + c["per_step_var"] / n))
        for r in range(power.MIN_RUNS, 201):
            if goal == "half_width":
                ok = math.expm1(_t(0.5 + level / 2, r - 1) * sd / math.sqrt(r)) <= target
            else:
                ok = power.detectable(sd / math.sqrt(r), r - 1, 2) <= target
            if ok:
                cost = 3 * r * (p.startup_s + n * p.step_s)
                if best is None or cost < best[0]:
                    best = (cost, r, n)
                break
    return best[1:]


def test_the_steps_a_plan_tries_reach_four_times_the_pilot_or_the_start_up_s_worth():
    # all of the pilot's spread within runs (per step): more steps narrow it, and a target just
    # above the noise band takes the most steps the plan tries
    logs = [[0.0, 0.02, -0.01], [0.05, 0.06, 0.03], [0.01, 0.04, 0.0]]
    within = [[1.0] * 3] * 3
    # start-up 4 s against 0.02 s steps: up to 200 steps (4 / 0.02), more than 4 x 20
    cheap = power.Pilot(logs, within, steps=20, startup_s=4.0, step_s=0.02)
    out = power.plan(cheap, rows=2, target=0.025)
    assert (out["runs"], out["steps"]) == _cheapest_by_hand(cheap, 0.025, 200)
    assert out["steps"] == 200
    # 0.1 s steps: start-up worth 40 of them, so 4 x 20 = 80 bounds the grid
    slow = power.Pilot(logs, within, steps=20, startup_s=4.0, step_s=0.1)
    out = power.plan(slow, rows=2, target=0.025)
    assert (out["runs"], out["steps"]) == _cheapest_by_hand(slow, 0.025, 80)
    assert out["steps"] == 80
    # a start-up of 100 s against 1 ms steps: capped at 5000 steps
    capped = power.Pilot(logs, within, steps=20, startup_s=100.0, step_s=0.001)
    assert power.plan(capped, rows=2, target=0.022)["steps"] == 5000
    # a 2-step pilot of cheap start-up: the grid is the 10 steps of min_steps alone
    tiny = power.Pilot(logs, [[0.004] * 3] * 3, steps=2, startup_s=0.1, step_s=0.05)
    assert power.plan(tiny, rows=2, target=0.04)["steps"] == 10


def test_a_half_width_plan_counts_its_runs_at_the_level_asked():
    p = _pilot()
    out = power.plan(p, rows=2, target=0.03, goal="half_width", level=0.9)
    assert (out["runs"], out["steps"]) == _cheapest_by_hand(p, 0.03, 80, "half_width", 0.9)


def test_the_run_counts_hold_their_boundaries():
    # a target exactly the half-width (or the detectable) of r runs is reached by r runs
    for sd, r in ((0.03, 5), (0.01, 3), (0.05, 17)):
        assert power.runs_for_half_width(sd, power.half_width(sd, r)) == r
        d = power.detectable(sd / math.sqrt(r), r - 1)
        assert power.runs_to_detect(sd, d) == r
    # an effect at the noise band is not detectable, even with no spread at all
    assert power.runs_to_detect(0.0, 0.02) is None
    # the bisection finds the first run count enough, every time
    # (where stopping the bisection one step early returns one run too many)
    for sd, effect in ((0.004, 0.045), (0.011, 0.08), (0.035, 0.08), (0.02, 0.03)):
        first = next(
            r for r in range(2, 201) if power.detectable(sd / math.sqrt(r), r - 1) <= effect
        )
        assert power.runs_to_detect(sd, effect) == max(first, power.MIN_RUNS)


def test_runs_within_steps_back_from_a_quotient_that_rounds_up():
    # 2 configurations of 0.1 s runs: 17 rounds cost 2 x 17 x 0.1 = 3.4000000000000004 s in
    # floating point, over a 3.4 s budget, though 3.4 / 0.2 is 17.0: 16 rounds fit
    assert 2 * 17 * 0.1 > 3.4 >= 2 * 16 * 0.1 and int(3.4 / (2 * 0.1)) == 17
    assert power.runs_within(3.4, 2, 0.1) == _most_runs(3.4, 2, 0.1) == 16
    assert power.runs_within(11.399999999999999, 2, 0.3) == 18  # 19 rounds: 11.4 s
    assert power.runs_within(-1.0, 3, 4.5) == 0  # no budget: no round, never fewer


def test_a_pilot_of_two_rows_in_two_rounds_and_its_refusals():
    p = power.Pilot([[0.0, 0.1], [0.2, 0.4]], [[0.01] * 2] * 2, 20, 5.0, 0.1)
    c = p.components()
    # the interaction contrast: (0.0 - 0.1 - 0.2 + 0.4) / 4 = 0.025 in each cell, on 1 df
    assert c["df"] == 1 and c["residual_var"] == pytest.approx(4 * 0.025**2)
    # a missing value (None as NaN) is refused by name; a missing within-run error is skipped
    with pytest.raises(
        ValueError,
        match=r"^the pilot needs every configuration in every round, two rounds and two rows at "
        r"least$",
    ):
        power.Pilot([[0.0, None], [0.2, 0.4]], [[0.01] * 2] * 2, 20, 5.0, 0.1).components()
    gap = power.Pilot([[0.0, 0.1], [0.2, 0.4]], [[0.01, None], [0.01, 0.01]], 20, 5.0, 0.1)
    assert gap.components()["per_step_var"] == pytest.approx(0.01**2 * 20)
