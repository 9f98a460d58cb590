"""stats.power: the detectable difference a row states, and the plan repeats=auto's pilot fixes
(issue 39)."""

import math

import numpy as np
import pytest

from stats.family import Row, family_verdicts
from stats.power import MIN_RUNS, Pilot, detectable, plan, runs_to_detect
from stats.verdict import NS


def test_detectable_difference_is_where_the_noncentral_t_passes_the_bar_with_80_percent():
    from scipy import stats as st

    se, df, m = 0.01, 9, 7
    d = detectable(se, df, m)
    crit = st.t.ppf(1 - 0.05 / m / 2, df)
    delta = (math.log(1 + d) - math.log(1.02)) / se
    assert st.nct.sf(crit, df, delta) == pytest.approx(0.80, abs=1e-4)
    assert detectable(se, df, 1) < d < detectable(se, df, 14)  # a bigger family sees less
    assert (
        detectable(se / 2, df, m) < d and detectable(se, 3, m) > d
    )  # more precision / more runs see more
    assert detectable(None, None) is None and detectable(0.0, 4) is None


def test_a_simulated_design_calls_its_detectable_difference_80_percent_of_the_time():
    rng = np.random.default_rng(5)
    runs, sd = 6, 0.03  # per-round log-difference SD: se = sd / sqrt(runs), df = runs - 1
    d = detectable(sd / math.sqrt(runs), runs - 1, 1)
    called = 0
    for _ in range(2000):
        diff = rng.normal(math.log1p(d), sd, runs)
        base = rng.normal(0, 0.001, runs)
        rows = [
            Row("b", list(base), list(range(runs))),
            Row("c", list(base + diff), list(range(runs))),
        ]
        called += family_verdicts(rows, 0)[1]["verdict"] == "faster"
    assert 0.77 <= called / 2000 <= 0.83  # 2000 tries: +-1.8% at 95%


def test_runs_to_detect_is_the_fewest_runs_that_see_the_effect():
    r = runs_to_detect(0.03, 0.05, 7)
    assert (
        detectable(0.03 / math.sqrt(r), r - 1, 7)
        <= 0.05
        < detectable(0.03 / math.sqrt(r - 1), r - 2, 7)
    )
    assert runs_to_detect(0.03, 0.015) is None  # inside the noise band: never "faster"
    assert runs_to_detect(1e-6, 0.05) == MIN_RUNS


def _pilot(between, per_step, steps=40, k=8, rounds=3, seed=0):
    rng = np.random.default_rng(seed)
    logs = rng.normal(0, math.sqrt(between + per_step / steps), (k, rounds))
    within = np.full((k, rounds), math.sqrt(per_step / steps))
    return Pilot(logs.tolist(), within.tolist(), steps, 20.0, 0.5)


def test_the_plan_reaches_the_target_cheapest_or_says_the_budget_stopped_it():
    p = plan(_pilot(0.02**2, 0.05**2 * 3), rows=7, target=0.05)
    assert p["reached"] == "target" and p["detectable"] <= 0.05 and p["runs"] >= MIN_RUNS
    assert "detect 5%" in p["reason"]
    c = p["components"]
    for n in (10, 40, 160):  # no other split of the grid that reaches the target is cheaper
        r = runs_to_detect(math.sqrt(2 * (c["between_var"] + c["per_step_var"] / n)), 0.05, 7)
        assert r is None or r * (20 + 0.5 * n) >= p["runs"] * (20 + 0.5 * p["steps"]) - 1e-9
    tight = plan(_pilot(0.02**2, 0.05**2 * 3), rows=7, target=0.05, budget_s=p["seconds"] / 3)
    assert tight["reached"] == "budget" and tight["seconds"] <= p["seconds"] / 3
    assert tight["detectable"] > 0.05 and "stopped at compare.budget_s" in tight["reason"]
    # within-run noise dominating: shorter runs are not bought when startup is dear; between-run:
    # more runs
    assert (
        plan(_pilot(0.0, 0.2**2, seed=1), 7)["steps"]
        > plan(_pilot(0.04**2, 0.01**2, seed=1), 7)["steps"]
    )


def test_the_pilot_needs_every_configuration_in_every_round():
    with pytest.raises(ValueError, match="every round"):
        Pilot([[0.0, float("nan")], [0.1, 0.2]], [[0.01] * 2] * 2, 40, 1, 1).components()


def test_an_inconclusive_row_says_what_it_could_have_seen():
    rows = [Row("b", [0.0, 0.05, -0.02], [0, 1, 2]), Row("c", [0.01, 0.02, 0.03], [0, 1, 2])]
    d = family_verdicts(rows, 0)[1]
    assert d["verdict"] == NS and d["detectable"] == pytest.approx(
        detectable(d["log_se"], d["df"], 1)
    )
    assert any(n.startswith("would have seen a difference over") for n in d["notes"])
    single = family_verdicts([Row("b", [0.0]), Row("c", [0.1])], 0)[1]
    assert single["detectable"] is None and not single["notes"]
