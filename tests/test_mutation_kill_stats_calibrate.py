"""stats/calibrate.py (issue 36: a module the mutation run covers; the file is named for its
package, as whatif/calibrate.py shares its stem): the calibration table's simulation and the
figures each row prints, checked by another route: the AR(1) series' marginal spread, lag-1
correlation, stalls and drift measured back on a large seeded sample; a run's log throughput and
the long-run rate in closed form; the Clopper-Pearson interval from beta quantiles; the typical
step of the stall mixture from its distribution function; the row's words by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from stats import calibrate as cal


def test_the_series_has_the_stated_spread_and_correlation():
    rng = np.random.default_rng(1)
    x = cal.series(rng, (4000,), 30, 0.6, sigma=0.05)
    assert x.shape == (4000, 30)
    assert np.std(x[:, 0]) == pytest.approx(0.05, rel=0.05)  # the first step: N(0, sigma)
    assert np.std(x[:, -1]) == pytest.approx(0.05, rel=0.05)  # stationary
    r = np.corrcoef(x[:, 10], x[:, 11])[0, 1]
    assert r == pytest.approx(0.6, abs=0.04)
    assert abs(x.mean()) < 0.003
    iid = cal.series(np.random.default_rng(2), (4000,), 30, 0.0, sigma=0.1)
    assert np.std(iid) == pytest.approx(0.1, rel=0.03)
    assert abs(np.corrcoef(iid[:, 5], iid[:, 6])[0, 1]) < 0.05


def test_stalls_double_a_step_and_drift_climbs_linearly():
    base = cal.series(np.random.default_rng(3), (2000,), 20, 0.0, sigma=0.01)
    stalled = cal.series(np.random.default_rng(3), (2000,), 20, 0.0, sigma=0.01, stall=0.2)
    jump = stalled - base  # the same normal draws: the stalls alone, log 2 or 0
    assert set(np.round(np.unique(jump), 9)) == {0.0, round(math.log(2), 9)}
    assert (jump > 0).mean() == pytest.approx(0.2, abs=0.02)
    drifted = cal.series(np.random.default_rng(3), (2000,), 20, 0.0, sigma=0.01, drift=0.1)
    ramp = drifted - base
    assert ramp[0, 0] == pytest.approx(0.0, abs=1e-12)
    assert ramp[0, -1] == pytest.approx(math.log(1.1))
    assert ramp[0, 10] == pytest.approx(math.log(1.1) * 10 / 19)


def test_a_runs_log_throughput_is_steps_over_their_total_time():
    x = np.log(np.array([[0.1, 0.2, 0.3, 0.4], [1.0, 1.0, 1.0, 1.0]]))
    assert cal.run_logs(x) == pytest.approx([math.log(4 / 1.0), math.log(4 / 4.0)])


def test_the_long_run_rate_in_closed_form():
    # E[exp(N(0, s))] = exp(s^2 / 2); a stall doubles a step with probability p: x (1 + p)
    assert cal.long_run_log_rate(0.1) == pytest.approx(-0.005)
    assert cal.long_run_log_rate(0.1, 0.2) == pytest.approx(-0.005 - math.log(1.2))
    assert cal.long_run_log_rate() == pytest.approx(-(0.05**2) / 2)


def test_the_true_rate_of_iid_steps_by_monte_carlo_is_near_its_closed_form():
    # one step per run: log(1 / exp(x)) = -x, mean 0; many steps: -log E[exp x] = -s^2 / 2
    assert cal.true_log_rate(0.0, 1, sigma=0.1, sims=20000) == pytest.approx(0.0, abs=0.003)
    long = cal.true_log_rate(0.0, 400, sigma=0.1, sims=2000)
    assert long == pytest.approx(-0.005, abs=0.0015)


def test_the_typical_step_of_the_stall_mixture():
    assert cal.typical_log_time(0.05, 0.0) == 0.0
    m = cal.typical_log_time(0.05, 0.2)
    cdf = 0.8 * st.norm.cdf(m, 0, 0.05) + 0.2 * st.norm.cdf(m, math.log(2), 0.05)
    assert cdf == pytest.approx(0.5, abs=1e-9)
    assert 0 < m < 0.05


def test_a_results_rate_interval_and_status():
    r = cal.Result("s", "m", 3, 40, (0.93, 0.97), "95%")
    assert r.rate == 3 / 40
    lo, hi = r.interval()
    # Clopper-Pearson: beta quantiles
    assert lo == pytest.approx(st.beta.ppf(0.025, 3, 38), rel=1e-6)
    assert hi == pytest.approx(st.beta.ppf(0.975, 4, 37), rel=1e-6)
    assert r.ok is False
    assert cal.Result("s", "m", 38, 40, (0.93, 0.97)).ok is True
    assert cal.Result("s", "m", 37, 40, (0.93, 0.97)).ok is False  # 92.5%
    assert cal.Result("s", "m", 2, 40, (None, 0.05)).ok is True  # 5% at the bound
    assert cal.Result("s", "m", 3, 40, (None, 0.05)).ok is False
    assert cal.Result("s", "m", 8, 40, (0.20, None)).ok is True
    assert cal.Result("s", "m", 7, 40, (0.20, None)).ok is False
    assert cal.Result("s", "m", 7, 40, None).ok is None
    assert cal.Result("s", "m", 7, 40, (0.2, None), refused=True).ok is None
    empty = cal.Result("s", "m", 0, 0, (0.2, None))
    assert empty.ok is None and math.isnan(empty.rate) and all(map(math.isnan, empty.interval()))


def test_a_results_row_in_words():
    r = cal.Result("scn", "covers", 38, 40, (0.93, 0.97), "95%")
    lo, hi = r.interval()
    assert r.row() == (
        f"| scn | covers | 95% | 95.0% [{lo:.1%}, {hi:.1%}] | 40 | [93%, 97%] | ok |"
    )
    assert (
        cal.Result("a", "b", 3, 40, (None, 0.05), "<= 5%").row().endswith("| 40 | <= 5% | MISS |")
    )
    assert cal.Result("a", "b", 9, 40, (0.2, None)).row().endswith("| 40 | >= 20% | ok |")
    assert cal.Result("a", "b", 9, 40, None, note="why").row().endswith("|  | report | why")
    refused = cal.Result("a", "b", 0, 0, (0.9, 1.0), refused=True)
    assert refused.row() == "| a | b |  | – | 0 | [90%, 100%] | refused |"


def test_the_adaptive_window_stops_at_its_pilot_on_a_flat_series():
    from stats.summary import PILOT

    flat = np.zeros(60)  # every step 1 s: no spread, the pilot already reaches the target
    assert cal.adaptive_steps(flat, 0.05, 10, 50) == max(10, PILOT)
    assert cal.adaptive_steps(flat, 0.05, max(10, PILOT) + 3, 50) == max(10, PILOT) + 3


def _v(*verdicts):
    return [{"verdict": v} for v in verdicts]


def test_false_verdicts_count_rows_and_sweeps(monkeypatch):
    # three sweeps of two identical rows: row verdicts faster+equivalent, ns+ns, slower+faster:
    # 3 false per row (of 6), 2 sweeps with one (of 3)
    calls = []

    def sweep(*args):
        calls.append(args)
        return [_v("faster", "equivalent"), _v("no significant difference", "equivalent"),
                _v("slower", "faster")]  # fmt: skip

    monkeypatch.setattr(cal, "sweep", sweep)
    per_row, per_sweep = cal.false_verdicts("rng", 3, 2, 4, 0.03, 0.4, 0.05, 0.02)
    assert calls == [("rng", 3, 2, 4, 0.03, 0.4, 0.0, 0.02, 0.05)]
    label = "2 identical row(s), R=4, offsets 3%, phi=0.4, 5% stalls, round effects 2%"
    assert (per_row.name, per_row.measure, per_row.hits, per_row.total) == (
        label, "false faster/slower per row", 3, 6,
    )  # fmt: skip
    assert (per_row.bound, per_row.nominal, per_row.note, per_row.refused) == (
        (None, 0.05), "<= 5%", "", False,
    )  # fmt: skip
    assert (per_sweep.name, per_sweep.measure, per_sweep.hits, per_sweep.total) == (
        label, "false faster/slower per sweep (Holm)", 2, 3,
    )  # fmt: skip
    assert (per_sweep.bound, per_sweep.nominal, per_sweep.refused) == ((None, 0.05), "<= 5%", False)
    # one row: no per-sweep result; one run per side: no verdict anywhere, refused with the reason
    monkeypatch.setattr(cal, "sweep", lambda *a: [_v("no verdict"), _v("no verdict")])
    (only,) = cal.false_verdicts("rng", 2, 1, 1, 0.0)
    assert only.name == "1 identical row(s), R=1, offsets 0%, phi=0.5"
    assert (only.hits, only.total, only.refused) == (0, 2, True)
    assert only.note == "no verdict printed: one run per side cannot see the spread between runs"
    monkeypatch.setattr(cal, "sweep", lambda *a: [_v("no verdict"), _v("faster")])
    (mixed,) = cal.false_verdicts("rng", 2, 1, 1, 0.0)
    assert (mixed.hits, mixed.refused, mixed.note) == (1, False, "")


def test_truth_verdicts_inside_and_outside_the_noise_band(monkeypatch):
    calls = []

    def sweep(*args):
        calls.append(args)
        return [_v(v) for v in ("faster", "equivalent", "equivalent", "slower", "no verdict")]

    monkeypatch.setattr(cal, "sweep", sweep)
    false, power = cal.truth_verdicts("rng", 5, 3, 0.04, 0.01, 0.3)
    assert calls == [("rng", 5, 1, 3, 0.04, 0.3, 0.01)]
    label = "true +1.0%, R=3, offsets 4%, phi=0.3"
    assert (false.name, false.measure, false.hits, false.total) == (
        label, "false faster/slower (change inside ±2%)", 2, 5,
    )  # fmt: skip
    assert (false.bound, false.nominal) == ((None, 0.05), "<= 5%")
    assert (power.measure, power.hits, power.total, power.bound, power.nominal) == (
        "called equivalent (power)", 2, 5, None, "–",
    )  # fmt: skip
    # +10% with R=3 at 4% offsets: the README's claim, called faster in >= 20%
    wrong, called = cal.truth_verdicts("rng", 5, 3, 0.04, 0.10)
    assert wrong.name == "true +10.0%, R=3, offsets 4%, phi=0.5"
    assert (wrong.measure, wrong.hits, wrong.total, wrong.bound, wrong.nominal) == (
        "wrong verdict (opposite or equivalent)", 3, 5, (None, 0.05), "<= 5%",
    )  # fmt: skip
    assert (called.measure, called.hits, called.bound, called.nominal) == (
        "called faster (power)", 1, (0.2, None), ">= 20%",
    )  # fmt: skip
    for runs, offset, effect in ((4, 0.04, 0.10), (3, 0.05, 0.10), (3, 0.04, 0.2)):
        other = cal.truth_verdicts("rng", 5, runs, offset, effect)[1]
        assert (other.bound, other.nominal) == (None, "–")
    slower_wrong, slower = cal.truth_verdicts("rng", 5, 3, 0.04, -0.05)
    assert slower.measure == "called slower (power)" and slower.hits == 1
    assert slower_wrong.hits == 3  # faster, equivalent, equivalent
    # exactly the noise band (2%): outside it, a verdict is right or wrong
    assert cal.truth_verdicts("rng", 5, 3, 0.04, 0.02)[0].measure.startswith("wrong verdict")


def test_a_sweep_s_rows_as_the_table_judges_them(monkeypatch):
    # steps all 1 s and no offsets: every run's log throughput is 0, a candidate's log(1 + effect)
    seen = []
    monkeypatch.setattr(cal, "series", lambda rng, shape, n, phi, stall=0.0: np.zeros((*shape, n)))

    def family(table, base, noise):
        seen.append((table, base, noise))
        return [{"verdict": str(i)} for i in range(len(table))]

    monkeypatch.setattr(cal, "family_verdicts", family)
    out = cal.sweep(np.random.default_rng(0), 2, 2, 3, 0.0, effect=0.1)
    assert out == [[{"verdict": "1"}, {"verdict": "2"}]] * 2
    table, base, noise = seen[0]
    assert (base, noise) == (0, 0.02) and len(seen) == 2
    assert [r.label for r in table] == ["0", "1", "2"]
    assert table[0].logs == pytest.approx([0.0] * 3, abs=1e-12)
    assert table[2].logs == pytest.approx([math.log(1.1)] * 3)
    assert table[1].rounds == [0, 1, 2]
    cal.sweep(np.random.default_rng(0), 1, 1, 1, 0.0)
    assert seen[-1][0][1].rounds is None  # one run: no rounds to pair


# every scenario of the table: its name, the call it makes (the simulation's arguments after rng and
# sims), whether pytest's fast subset runs it, and its sims multiplier; written out from the design
# (issues 22, 39; docs/methods.md "Calibration"): intervals of one run at 10-120 blocks, the rate's
# from RATE_MIN_BLOCKS = 60 on (and one short stalled case, refused), repeats, false verdicts,
# families, power, drift, plans and repeats=auto
SCENARIOS = """
within n=10 phi=0.0 typical | within_coverage(0.0, 10, 0.0) {'typical': True}
within n=10 phi=0.3 typical | within_coverage(0.3, 10, 0.0) {'typical': True}
within n=10 phi=0.5 typical | within_coverage(0.5, 10, 0.0) {'typical': True}
within n=10 phi=0.7 typical | within_coverage(0.7, 10, 0.0) {'typical': True} | fast
within n=10 phi=0.3 stalls typical | within_coverage(0.3, 10, 0.05) {'typical': True} | fast
within n=10 phi=0.3 stalls rate | within_coverage(0.3, 10, 0.05)
within n=10 phi=0.5 stalls typical | within_coverage(0.5, 10, 0.05) {'typical': True}
within n=20 phi=0.0 typical | within_coverage(0.0, 20, 0.0) {'typical': True}
within n=20 phi=0.3 typical | within_coverage(0.3, 20, 0.0) {'typical': True}
within n=20 phi=0.5 typical | within_coverage(0.5, 20, 0.0) {'typical': True}
within n=20 phi=0.7 typical | within_coverage(0.7, 20, 0.0) {'typical': True}
within n=20 phi=0.3 stalls typical | within_coverage(0.3, 20, 0.05) {'typical': True}
within n=20 phi=0.3 stalls rate | within_coverage(0.3, 20, 0.05)
within n=20 phi=0.5 stalls typical | within_coverage(0.5, 20, 0.05) {'typical': True}
within n=40 phi=0.0 typical | within_coverage(0.0, 40, 0.0) {'typical': True}
within n=40 phi=0.3 typical | within_coverage(0.3, 40, 0.0) {'typical': True}
within n=40 phi=0.5 typical | within_coverage(0.5, 40, 0.0) {'typical': True}
within n=40 phi=0.7 typical | within_coverage(0.7, 40, 0.0) {'typical': True}
within n=40 phi=0.3 stalls typical | within_coverage(0.3, 40, 0.05) {'typical': True}
within n=40 phi=0.3 stalls rate | within_coverage(0.3, 40, 0.05)
within n=40 phi=0.5 stalls typical | within_coverage(0.5, 40, 0.05) {'typical': True}
within n=60 phi=0.0 typical | within_coverage(0.0, 60, 0.0) {'typical': True}
within n=60 phi=0.0 rate | within_coverage(0.0, 60, 0.0)
within n=60 phi=0.3 typical | within_coverage(0.3, 60, 0.0) {'typical': True}
within n=60 phi=0.3 rate | within_coverage(0.3, 60, 0.0)
within n=60 phi=0.5 typical | within_coverage(0.5, 60, 0.0) {'typical': True}
within n=60 phi=0.5 rate | within_coverage(0.5, 60, 0.0)
within n=60 phi=0.7 typical | within_coverage(0.7, 60, 0.0) {'typical': True}
within n=60 phi=0.7 rate | within_coverage(0.7, 60, 0.0) | fast
within n=60 phi=0.3 stalls typical | within_coverage(0.3, 60, 0.05) {'typical': True}
within n=60 phi=0.3 stalls rate | within_coverage(0.3, 60, 0.05)
within n=60 phi=0.5 stalls typical | within_coverage(0.5, 60, 0.05) {'typical': True}
within n=60 phi=0.5 stalls rate | within_coverage(0.5, 60, 0.05)
within n=120 phi=0.0 typical | within_coverage(0.0, 120, 0.0) {'typical': True}
within n=120 phi=0.0 rate | within_coverage(0.0, 120, 0.0)
within n=120 phi=0.3 typical | within_coverage(0.3, 120, 0.0) {'typical': True}
within n=120 phi=0.3 rate | within_coverage(0.3, 120, 0.0)
within n=120 phi=0.5 typical | within_coverage(0.5, 120, 0.0) {'typical': True}
within n=120 phi=0.5 rate | within_coverage(0.5, 120, 0.0)
within n=120 phi=0.7 typical | within_coverage(0.7, 120, 0.0) {'typical': True}
within n=120 phi=0.7 rate | within_coverage(0.7, 120, 0.0)
within n=120 phi=0.3 stalls typical | within_coverage(0.3, 120, 0.05) {'typical': True}
within n=120 phi=0.3 stalls rate | within_coverage(0.3, 120, 0.05)
within n=120 phi=0.5 stalls typical | within_coverage(0.5, 120, 0.05) {'typical': True}
within n=120 phi=0.5 stalls rate | within_coverage(0.5, 120, 0.05)
within adaptive | within_coverage(0.5,) {'adaptive': True} | x0.5
repeats R=2 off=0.0 | repeats_coverage(2, 0.0)
repeats R=2 off=0.02 | repeats_coverage(2, 0.02)
repeats R=2 off=0.04 | repeats_coverage(2, 0.04) | fast
repeats R=2 off=0.08 | repeats_coverage(2, 0.08)
repeats R=3 off=0.0 | repeats_coverage(3, 0.0)
repeats R=3 off=0.02 | repeats_coverage(3, 0.02)
repeats R=3 off=0.04 | repeats_coverage(3, 0.04) | fast
repeats R=3 off=0.08 | repeats_coverage(3, 0.08)
repeats R=5 off=0.0 | repeats_coverage(5, 0.0)
repeats R=5 off=0.02 | repeats_coverage(5, 0.02)
repeats R=5 off=0.04 | repeats_coverage(5, 0.04)
repeats R=5 off=0.08 | repeats_coverage(5, 0.08)
repeats stalls | repeats_coverage(3, 0.02) {'stall': 0.05} | fast
false R=1 off=0.0 | false_verdicts(1, 1, 0.0)
false R=1 off=0.04 | false_verdicts(1, 1, 0.04)
false R=1 off=0.08 | false_verdicts(1, 1, 0.08) | fast
false R=2 off=0.0 | false_verdicts(1, 2, 0.0)
false R=2 off=0.04 | false_verdicts(1, 2, 0.04)
false R=2 off=0.08 | false_verdicts(1, 2, 0.08)
false R=3 off=0.0 | false_verdicts(1, 3, 0.0)
false R=3 off=0.04 | false_verdicts(1, 3, 0.04) | fast
false R=3 off=0.08 | false_verdicts(1, 3, 0.08)
false R=5 off=0.0 | false_verdicts(1, 5, 0.0)
false R=5 off=0.04 | false_verdicts(1, 5, 0.04)
false R=5 off=0.08 | false_verdicts(1, 5, 0.08)
family rows=2 | false_verdicts(2, 3, 0.04) | x0.5
family rows=4 | false_verdicts(4, 3, 0.04) | x0.5
family rows=8 | false_verdicts(8, 3, 0.04) | fast | x0.5
family rounds | false_verdicts(4, 3, 0.02) {'rounds': 0.04} | x0.5
family stalls | false_verdicts(4, 3, 0.02) {'stall': 0.05} | x0.5
inside noise | truth_verdicts(3, 0.02, 0.015) | fast
inside noise R=5 | truth_verdicts(5, 0.02, 0.015)
power R=3 off=0.02 eff=0.05 | truth_verdicts(3, 0.02, 0.05)
power R=3 off=0.02 eff=0.1 | truth_verdicts(3, 0.02, 0.1)
power R=3 off=0.04 eff=0.05 | truth_verdicts(3, 0.04, 0.05)
power R=3 off=0.04 eff=0.1 | truth_verdicts(3, 0.04, 0.1) | fast
power R=5 off=0.02 eff=0.05 | truth_verdicts(5, 0.02, 0.05)
power R=5 off=0.02 eff=0.1 | truth_verdicts(5, 0.02, 0.1)
power R=5 off=0.04 eff=0.05 | truth_verdicts(5, 0.04, 0.05)
power R=5 off=0.04 eff=0.1 | truth_verdicts(5, 0.04, 0.1)
slower R=3 | truth_verdicts(3, 0.04, -0.1)
drift phi=0.0 | drift_alarms(0.0,) {'sigma': 0.1} | x2
drift phi=0.3 | drift_alarms(0.3,) {'sigma': 0.1} | x2
drift phi=0.5 | drift_alarms(0.5,) {'sigma': 0.1} | fast | x2
drift phi=0.7 | drift_alarms(0.7,) {'sigma': 0.1} | x2
drift phi=0.5 n=16 | drift_alarms(0.5,) {'n': 16, 'sigma': 0.1} | x2
drift phi=0.7 n=16 | drift_alarms(0.7,) {'n': 16, 'sigma': 0.1} | x2
drift power 0.05 | drift_alarms(0.5,) {'drift': 0.05} | x2
drift power 0.1 | drift_alarms(0.5,) {'drift': 0.1} | x2
plan identical | plan_results(7, 0.02) | x0.5
plan power off=0.02 | plan_results(7, 0.02) {'effect': 0.05} | x0.5
plan power off=0.04 | plan_results(7, 0.04) {'effect': 0.05} | x0.5
plan power off=0.08 | plan_results(7, 0.08) {'effect': 0.05} | x0.5
plan budget | plan_results(7, 0.04) {'effect': 0.05, 'budget_s': 3600.0} | x0.5
sentinel | sentinel_alarms() | fast
sentinel iid | sentinel_alarms() {'offset': 0.0, 'phi': 0.0}
auto identical | auto_results(0.02,) | x0.5
auto power off=0.02 | auto_results(0.02,) {'effect': 0.05} | x0.5
auto power off=0.04 | auto_results(0.04,) {'effect': 0.05} | x0.5
auto power off=0.08 | auto_results(0.08,) {'effect': 0.05} | x0.5
auto budget | auto_results(0.02,) {'effect': 0.05, 'budget_s': 1200.0} | x0.5
"""


def test_the_scenarios_of_the_table(monkeypatch):
    def recorder(name):
        def call(rng, sims, *args, **kw):
            assert (rng, sims) == ("rng", 100)
            return f"{name}{args}" + (f" {kw}" if kw else "")

        return call

    for name in ("within_coverage", "repeats_coverage", "false_verdicts", "truth_verdicts",
                 "drift_alarms", "plan_results", "sentinel_alarms", "auto_results"):  # fmt: skip
        monkeypatch.setattr(cal, name, recorder(name))
    got = [
        f"{sc.name} | {sc.run('rng', 100)}"
        + (" | fast" if sc.fast else "")
        + (f" | x{sc.weight:g}" if sc.weight != 1 else "")
        for sc in cal.scenarios()
    ]
    assert got == SCENARIOS.strip().splitlines()


def test_the_suite_runs_each_scenario_on_its_own_seed(monkeypatch):
    calls = []

    def scenario(name, result, fast=False, weight=1.0):
        def run(rng, sims):
            calls.append((name, rng.integers(1 << 30), sims))
            return result

        return cal.Scenario(name, run, fast, weight)

    one, two = cal.Result("a", "m", 1, 2, None), cal.Result("b", "m", 1, 2, None)
    monkeypatch.setattr(cal, "scenarios", lambda: [
        scenario("alpha", one, fast=True), scenario("beta", [one, two], weight=0.5),
        scenario("gamma", two, weight=0.01),
    ])  # fmt: skip
    assert cal.run(300, seed=5) == [one, one, two, two]
    # seeded by (seed, the scenario's place); sims x weight, at least 50
    want = [np.random.default_rng([5, i]).integers(1 << 30) for i in range(3)]
    assert calls == [("alpha", want[0], 300), ("beta", want[1], 150), ("gamma", want[2], 50)]
    calls.clear()
    assert cal.run(300, seed=5, fast=True) == [one]
    assert cal.run(300, seed=5, only=["mm", "bet"]) == [one, two, two]  # "mm": gamma
    assert cal.run(300, seed=5, only=["gamma", "alpha"], fast=True) == [one]
    assert [c[0] for c in calls] == ["alpha", "beta", "gamma", "alpha"]


def test_the_table_and_its_command(monkeypatch, capsys):
    ok = cal.Result("a", "m", 38, 40, (0.93, 0.97), "95%")
    miss = cal.Result("b", "m", 3, 40, (None, 0.05), "<= 5%")
    seen = []
    monkeypatch.setattr(cal, "run", lambda *a: seen.append(a) or [ok])
    assert cal.table([ok, miss]) == "\n".join([cal.HEADER, ok.row(), miss.row()])
    assert cal.main(["--sims", "70", "--seed", "9", "--only", "x", "y", "--fast"]) == 0
    assert seen == [(70, 9, ["x", "y"], True)]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "Calibration: 70 simulations per scenario, seed 9; each run 40 steps, step SD 5% (log), "
        "compare.noise 2%; 95% intervals; rate [95% Clopper-Pearson interval]."
    )
    assert out[1:5] == ["", *cal.HEADER.splitlines(), ok.row()]
    assert out[5] == ""
    assert out[6].startswith("1 rows, 0 miss a bound; ")
    assert out[6].endswith(
        "command: python -m stats.calibrate --sims 70 --seed 9 --only x y --fast"
    )
    monkeypatch.setattr(cal, "run", lambda *a: seen.append(a) or [ok, miss])
    assert cal.main([]) == 1
    assert seen[-1] == (2000, 22, None, False)
    assert "2 rows, 1 miss a bound; " in capsys.readouterr().out


def _planned(reached=("target", "target", "cap", "target")):
    return {"hits": 13, "rows_judged": 14, "false": 1, "called": 3, "effect_total": 4,
            "runs": [3, 5, 9, 4], "steps": [40, 60, 40, 80], "seconds": [600, 1200, 1800, 2400],
            "reached": list(reached)}  # fmt: skip


def test_a_plan_s_results_in_words(monkeypatch):
    # runs 3 5 9 4: median 4.5, IQR 3.75-6; steps median 50; 1500 s = 25 min; 3 of 4 at target
    calls = []
    monkeypatch.setattr(cal, "planned_sweeps", lambda *a, **k: calls.append((a, k)) or _planned())
    cover, power = cal.plan_results("rng", 4, 7, 0.02, 0.4, effect=0.05)
    assert calls == [(("rng", 4, 7, 0.02, 0.4, 0.05), {"budget_s": None})]
    label = "plan for 5% (pilot 3x40), 7 rows, offsets 2%, phi=0.4, one row +5%"
    chose = ("plan: runs median 4.5 (IQR 3.75-6), steps median 50, machine time median 25 min at "
             "17 s + 1.3 s/step; reached the target in 75%")  # fmt: skip
    assert (cover.name, cover.measure, cover.hits, cover.total) == (
        label, "every row's speed-up CI covers the truth", 13, 14)  # fmt: skip
    assert (cover.bound, cover.nominal, cover.note) == ((0.93, 0.97), "95%", chose)
    assert (power.name, power.measure, power.hits, power.total) == (
        label, "the true row called faster (power)", 3, 4)  # fmt: skip
    assert (power.bound, power.nominal) == ((0.8, None), "80%")
    assert power.note == "the plan hit its cap of 200 runs in 25% of sweeps"
    # at 4% offsets the 80% is reported, not a bound; every sweep at target: no note
    monkeypatch.setattr(cal, "planned_sweeps", lambda *a, **k: _planned(["target"] * 4))
    power = cal.plan_results("rng", 4, 7, 0.04, effect=0.05)[1]
    assert (power.bound, power.note) == (None, "")
    budget = cal.plan_results("rng", 4, 7, 0.02, effect=0.05, budget_s=3600)
    assert budget[0].name.endswith(", one row +5%, budget 60 min")
    assert budget[1].bound is None
    monkeypatch.setattr(cal, "planned_sweeps", lambda *a, **k: _planned())
    assert cal.plan_results("rng", 4, 7, 0.02, effect=0.05, budget_s=3600)[1].note == ""
    same = cal.plan_results("rng", 4, 7, 0.02)[1]
    assert same.name == "plan for 5% (pilot 3x40), 7 rows, offsets 2%, phi=0.5, identical"
    assert (same.measure, same.hits, same.total, same.bound, same.nominal) == (
        "false faster/slower per sweep (Holm)", 1, 4, (None, 0.05), "<= 5%")  # fmt: skip


def test_repeats_auto_s_results_in_words(monkeypatch):
    calls = []
    monkeypatch.setattr(cal, "planned_sweeps", lambda *a, **k: calls.append((a, k)) or _planned())
    cover, power = cal.auto_results("rng", 4, 0.04, effect=0.05, budget_s=1200)
    assert calls == [(("rng", 4, 7, 0.04, 0.5, 0.05), {
        "target": 0.015, "budget_s": 1200, "goal": "half_width", "pilot_steps": 10})]  # fmt: skip
    label = (
        "repeats=auto, +-1.5% (pilot 3x10), 7 rows, offsets 4%, phi=0.5, one row +5%, budget 20 min"
    )
    assert cover.name == label and power.name == label
    assert cover.note == (
        "plan: runs median 4.5 (IQR 3.75-6), steps median 50, machine time median 25 min at 17 s "
        "+ 1.3 s/step; reached the target in 75%"
    )
    assert (cover.measure, cover.hits, cover.total, cover.bound, cover.nominal) == (
        "every row's speed-up CI covers the truth", 13, 14, (0.93, 0.97), "95%")  # fmt: skip
    assert (power.measure, power.hits, power.total, power.bound, power.nominal) == (
        "the true row called faster (power)", 3, 4, None, "80%")  # fmt: skip
    same = cal.auto_results("rng", 4, 0.02)[1]
    assert same.name == "repeats=auto, +-1.5% (pilot 3x10), 7 rows, offsets 2%, phi=0.5, identical"
    assert (same.measure, same.hits, same.total, same.bound, same.nominal) == (
        "false faster/slower per sweep (Holm)", 1, 4, (None, 0.05), "<= 5%")  # fmt: skip


def test_drift_and_sentinel_alarms_count_runs_and_sweeps(monkeypatch):
    series_calls, seen = [], []

    def series(rng, shape, n, phi, sigma=cal.SIGMA, stall=0.0, drift=0.0):
        series_calls.append((shape, n, phi, sigma, drift))
        return np.zeros((*shape, n))

    monkeypatch.setattr(cal, "series", series)
    verdicts = iter([False, None, False, True, False])
    monkeypatch.setattr(
        cal, "steady_state", lambda row: seen.append(row) or {"steady": next(verdicts)}
    )
    r = cal.drift_alarms("rng", 5, 0.3, n=16, sigma=0.1)
    assert series_calls == [((5,), 16, 0.3, 0.1, 0.0)]
    assert seen[0].tolist() == [1.0] * 16  # step times, not their logs
    # False thrice; None (no test possible) is no alarm
    assert (r.name, r.measure, r.hits, r.total, r.bound, r.nominal) == (
        "drift test, 16 steps, phi=0.3, step SD 10%", "false alarm per run", 3, 5, (None, 0.05),
        "<= 5%")  # fmt: skip
    verdicts = iter([False, False, True])
    r = cal.drift_alarms("rng", 3, 0.5, drift=0.05)
    assert series_calls[-1] == ((3,), 40, 0.5, 0.05, 0.05)
    assert (r.name, r.measure, r.hits, r.total, r.bound, r.nominal) == (
        "drift test, 40 steps, phi=0.5, linear drift +5%, step SD 5%", "flagged unsteady (power)",
        2, 3, None, "–")  # fmt: skip
    rows = []
    fired = iter([None, {"significant": True}, {"significant": False}, {"significant": True}])
    monkeypatch.setattr(cal, "sentinel", lambda d: rows.append(d) or next(fired))
    r = cal.sentinel_alarms(np.random.default_rng(0), 4, rows=2, runs=3, offset=0.0, phi=0.2)
    assert series_calls[-1] == ((4, 2, 3), 40, 0.2, 0.05, 0.0)
    assert rows[0] == {"0": [0.0, 0.0, 0.0], "1": [0.0, 0.0, 0.0]}  # each run's median log step
    assert (r.name, r.measure, r.hits, r.total, r.bound, r.nominal) == (
        "noise sentinel, 2 identical rows, R=3, offsets 0%, phi=0.2", "false alarm per sweep", 2,
        4, (None, 0.05), "<= 5%")  # fmt: skip


def _flat_series(calls):
    def series(rng, shape, n, phi, sigma=cal.SIGMA, stall=0.0, drift=0.0):
        calls.append((shape, n, phi, stall))
        return np.zeros((*shape, n))

    return series


def test_a_row_of_repeats_covers_the_configuration_s_value(monkeypatch):
    # every run's steps 1 s: log throughput 0 per run; the truth exp(log 0.9) = 0.9 falls inside
    # two of the three scripted intervals
    truths, calls, seen = [], [], []
    monkeypatch.setattr(
        cal, "true_log_rate", lambda *a, **k: truths.append((a, k)) or math.log(0.9)
    )
    monkeypatch.setattr(cal, "series", _flat_series(calls))
    intervals = iter([(0.8, 0.95), (0.91, 1.0), (0.9, 0.9)])

    def run_level(v):
        seen.append(list(v))
        lo, hi = next(intervals)
        return {"ci_lo": lo, "ci_hi": hi}

    monkeypatch.setattr(cal, "run_level", run_level)
    rng = np.random.default_rng(3)
    seed = int(np.random.default_rng(3).integers(1 << 30))
    r = cal.repeats_coverage(rng, 3, 4, 0.0, phi=0.3, stall=0.05)
    assert truths == [((0.3, 40), {"stall": 0.05, "seed": seed})]
    assert calls == [((3, 4), 40, 0.3, 0.05)]
    assert seen == [[pytest.approx(0.0, abs=1e-12)] * 4] * 3
    assert (r.name, r.measure, r.hits, r.total, r.bound, r.nominal) == (
        "row of R=4 runs, run offsets 0%, phi=0.3, 5% stalls",
        "throughput CI covers the configuration's value",
        2, 3, (0.93, 0.97), "95%",
    )  # fmt: skip
    intervals = iter([(0.0, 2.0)])
    assert cal.repeats_coverage(rng, 1, 2, 0.04).name == "row of R=2 runs, run offsets 4%, phi=0.5"


def test_one_run_s_intervals_cover_the_rate_or_the_typical_step(monkeypatch):
    calls, rates, medians = [], [], []
    monkeypatch.setattr(cal, "series", _flat_series(calls))
    truth = math.exp(-(0.05**2 / 2 + math.log1p(0.05)))  # the long-run rate with 5% stalls
    rate_cis = iter([(truth - 0.01, truth + 0.01), (None, None), (truth + 0.001, 2.0)])

    def batch_rate(times, weights):
        rates.append((times.tolist(), weights.tolist()))
        lo, hi = next(rate_cis)
        return {"ci_lo": lo, "ci_hi": hi}

    monkeypatch.setattr(cal, "batch_rate", batch_rate)
    r = cal.within_coverage("rng", 3, 0.3, n=10, stall=0.05)
    assert calls == [((3,), 10, 0.3, 0.05)]
    assert rates[0] == ([1.0] * 10, [1.0] * 10)
    assert (r.name, r.measure, r.hits, r.total, r.bound, r.nominal, r.refused) == (
        "one run, 10 blocks, AR(1) phi=0.3, 5% stalls",
        "throughput CI covers the run's own rate", 1, 2, (0.93, 0.97), "95%", False,
    )  # fmt: skip
    rate_cis = iter([(None, None)] * 2)
    refused = cal.within_coverage("rng", 2, 0.0, n=20)
    assert (refused.name, refused.hits, refused.total, refused.refused) == (
        "one run, 20 blocks, iid", 0, 0, True,
    )  # fmt: skip
    assert refused.note == (
        "no interval under 60 blocks: a short run may hold no stall; the run level bounds the rate"
    )
    # the typical step: the median of the stall mixture, exp(typical_log_time)
    step = math.exp(cal.typical_log_time(stall=0.05))
    cis = iter([(step - 0.01, step + 0.01), (step + 0.001, 2.0), (0.5, step)])

    def batch_median(times):
        medians.append(times.tolist())
        lo, hi = next(cis)
        return {"ci_lo": lo, "ci_hi": hi}

    monkeypatch.setattr(cal, "batch_median", batch_median)
    r = cal.within_coverage("rng", 3, 0.5, n=10, stall=0.05, typical=True)
    assert medians[0] == [1.0] * 10
    assert (r.name, r.measure, r.hits, r.total) == (
        "one run, 10 blocks, AR(1) phi=0.5, 5% stalls", "step-median CI covers the typical step",
        2, 3,
    )  # fmt: skip
    # the adaptive window: 60-step series, the median over the steps adaptive_steps kept
    stops = iter([20, 35])
    asked = []
    monkeypatch.setattr(cal, "adaptive_steps", lambda row, **kw: asked.append(kw) or next(stops))
    cis = iter([(0.9, 1.1), (1.01, 1.2)])
    medians.clear()
    r = cal.within_coverage("rng", 2, 0.5, stall=0.0, adaptive=True)
    assert calls[-1] == ((2,), 60, 0.5, 0.0)
    assert [len(m) for m in medians] == [20, 35]
    assert asked == [{"rel_ci": 0.02, "min_steps": 20, "max_steps": 60}] * 2
    assert (r.name, r.measure, r.hits, r.total, r.bound, r.nominal) == (
        "one run, adaptive window (20-60 steps, ±2%), AR(1) phi=0.5",
        "step-median CI covers the typical step", 1, 2, (0.93, 0.97), "95%",
    )  # fmt: skip


def test_planned_sweeps_count_what_the_plan_s_rounds_show(monkeypatch):
    # all-1 s steps, no offsets: the pilot's logs are the truth (0, log 1.1 for the one true row);
    # the plan asks 2 runs of 5 steps; the scripted verdicts: row 1 (truly +10%) faster and its
    # interval covering 1.1, row 2 (identical) slower and its interval missing 1
    calls, pilots = [], []
    monkeypatch.setattr(cal, "series", _flat_series(calls))
    monkeypatch.setattr(cal, "batch_rate", lambda times, w: {"log_se": 0.01 * len(times)})

    def plan(pilot, rows, target, budget_s, goal):
        pilots.append((pilot, rows, target, budget_s, goal))
        return {"runs": 2, "steps": 5, "seconds": 30.0, "reached": "target"}

    monkeypatch.setattr(cal, "plan", plan)
    tables = []

    def family(table, base, noise):
        tables.append(table)
        return [
            {"verdict": "baseline"},
            {"verdict": "faster", "ci_lo": 1.05, "ci_hi": 1.15},
            {"verdict": "slower", "ci_lo": 0.9, "ci_hi": 0.99},
        ]

    monkeypatch.setattr(cal, "family_verdicts", family)
    kw = dict(phi=0.4, effect=0.1, budget_s=600.0, goal="half_width", pilot_steps=8, target=0.03)
    out = cal.planned_sweeps(np.random.default_rng(0), 2, 2, 0.0, **kw)
    assert calls[:2] == [((3, 3), 8, 0.4, 0.0), ((3, 2), 5, 0.4, 0.0)]
    pilot, rows, target, budget, goal = pilots[0]
    assert (rows, target, budget, goal) == (2, 0.03, 600.0, "half_width")
    assert (pilot.steps, pilot.startup_s, pilot.step_s) == (8, 17.0, 1.3)
    assert np.allclose(pilot.logs, [[0.0] * 3, [math.log(1.1)] * 3, [0.0] * 3])
    assert pilot.within == [[0.08] * 3] * 3
    assert [r.label for r in tables[0]] == ["0", "1", "2"] and tables[0][1].rounds == [0, 1]
    assert np.allclose([r.logs for r in tables[0]], [[0.0] * 2, [math.log(1.1)] * 2, [0.0] * 2])
    assert out == {
        "hits": 2, "rows_judged": 4, "false": 2, "called": 2, "effect_total": 2,
        "runs": [2, 2], "steps": [5, 5], "seconds": [30.0, 30.0], "reached": ["target", "target"],
    }  # fmt: skip


def test_the_simulations_draw_from_the_rng_they_are_given(monkeypatch):
    # every simulation passes its own generator on, and a run's offset is added to its log steps:
    # with steps all 1 s, run r's log throughput is -offset_r (log n - log(n e^o))
    rng = np.random.default_rng(7)
    seen = []

    def series(r, shape, n, phi, sigma=cal.SIGMA, stall=0.0, drift=0.0):
        seen.append(r)
        return np.zeros((*shape, n))

    monkeypatch.setattr(cal, "series", series)
    monkeypatch.setattr(cal, "true_log_rate", lambda *a, **k: 0.0)
    levels = []
    monkeypatch.setattr(
        cal, "run_level", lambda v: levels.append(list(v)) or {"ci_lo": 0, "ci_hi": 2}
    )
    cal.repeats_coverage(rng, 2, 3, 0.05)
    replica = np.random.default_rng(7)
    replica.integers(1 << 30)
    offsets = replica.normal(0, 0.05, (2, 3, 1))[..., 0]
    assert np.allclose(levels, -offsets) and seen == [rng]
    monkeypatch.setattr(cal, "steady_state", lambda row: {"steady": True})
    cal.drift_alarms(rng, 2, 0.5)
    monkeypatch.setattr(cal, "sentinel", lambda d: None)
    cal.sentinel_alarms(rng, 2)
    monkeypatch.setattr(cal, "batch_rate", lambda t, w: {"ci_lo": 0.0, "ci_hi": 2.0, "log_se": 0.1})
    monkeypatch.setattr(cal, "batch_median", lambda t: {"ci_lo": 0.0, "ci_hi": 2.0})
    cal.within_coverage(rng, 2, 0.5, n=10)
    cal.within_coverage(rng, 2, 0.5, adaptive=True)
    monkeypatch.setattr(cal, "family_verdicts", lambda t, b, noise: [{"verdict": "x"}] * len(t))
    cal.sweep(rng, 1, 1, 2, 0.0)
    assert seen == [rng] * 6


def test_the_planned_sweeps_rounds_their_offsets_and_the_truth_at_an_edge(monkeypatch):
    # final rounds: steps all 1 s plus each run's offset: log throughput -offset; the identical
    # row's interval [1, 1] covers its truth exactly (exp 0 = 1); a faster call on the true row is
    # not a false one, a slower on the identical row is
    monkeypatch.setattr(cal, "series", lambda r, shape, n, phi: np.zeros((*shape, n)))
    monkeypatch.setattr(cal, "batch_rate", lambda t, w: {"log_se": 0.01})
    monkeypatch.setattr(cal, "plan", lambda *a, **k: {"runs": 2, "steps": 5, "seconds": 30.0,
                                                       "reached": "target"})  # fmt: skip
    tables, judged = [], []
    verdicts = iter([["faster", "equivalent"], ["faster", "slower"]])

    def family(table, base, noise):
        tables.append(table)
        judged.append((base, noise))
        a, b = next(verdicts)
        return [{"verdict": "base"}, {"verdict": a, "ci_lo": 2.0, "ci_hi": 3.0},
                {"verdict": b, "ci_lo": 1.0, "ci_hi": 1.0}]  # fmt: skip

    monkeypatch.setattr(cal, "family_verdicts", family)
    rng = np.random.default_rng(5)
    out = cal.planned_sweeps(rng, 2, 2, 0.03, effect=0.1)
    replica = np.random.default_rng(5)
    pilot = replica.normal(0, 0.03, (3, 3, 1))  # the pilot's offsets come first
    final = replica.normal(0, 0.03, (3, 2, 1))[..., 0]
    truth = np.array([0.0, math.log(1.1), 0.0])[:, None]
    assert np.allclose([r.logs for r in tables[0]], -final + truth)
    assert pilot.shape == (3, 3, 1) and judged == [(0, 0.02)] * 2
    assert (out["hits"], out["rows_judged"], out["false"], out["called"]) == (2, 4, 1, 2)


def test_the_adaptive_window_asks_the_tool_s_own_stopping_rule(monkeypatch):
    asked = []

    def should_stop(times, rel_ci, min_steps, max_steps, time_cap, extra):
        asked.append((len(times), rel_ci, min_steps, max_steps, time_cap, extra))
        return len(times) == 7, None

    monkeypatch.setattr(cal, "adaptive_should_stop", should_stop)
    assert cal.adaptive_steps(np.zeros(20), 0.03, 5, 9) == 7
    assert asked == [(5, 0.03, 5, 9, 0.0, None), (6, 0.03, 5, 9, 0.0, None),
                     (7, 0.03, 5, 9, 0.0, None)]  # fmt: skip
    asked.clear()
    monkeypatch.setattr(cal, "adaptive_should_stop", lambda t, *a: (len(t) == 9, None))
    assert cal.adaptive_steps(np.zeros(20), 0.03, 5, 9) == 9  # the last step it may take
    monkeypatch.setattr(cal, "adaptive_should_stop", lambda t, *a: (False, None))
    assert cal.adaptive_steps(np.zeros(20), 0.03, 5, 9) == 9


def test_the_command_s_help_time_and_words(monkeypatch, capsys):
    with pytest.raises(SystemExit):
        cal.main(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m stats.calibrate ")
    words = " ".join(out.split())
    for said in (
        "Calibration suite: simulated step series with a known truth, judged by the project's own "
        "functions.",
        "simulated runs or sweeps per scenario (default 2000)",
        "scenarios whose name contains one of these words",
        "the pytest subset only",
    ):
        assert said in words
    ok = cal.Result("a", "m", 38, 40, (0.93, 0.97), "95%")
    monkeypatch.setattr(cal, "run", lambda *a: [ok])
    clock = iter([1000.0, 1003.4])
    monkeypatch.setattr(cal.time, "time", lambda: next(clock))
    monkeypatch.setattr(cal.sys, "argv", ["calibrate", "--seed", "4", "--fast"])
    assert cal.main(None) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("1 rows, 0 miss a bound; 3 s on ")
    assert last.endswith("command: python -m stats.calibrate --seed 4 --fast")


def test_the_suite_s_default_sims(monkeypatch):
    sims = []
    monkeypatch.setattr(
        cal, "scenarios", lambda: [cal.Scenario("a", lambda r, n: sims.append(n) or [])]
    )
    cal.run()
    assert sims == [2000]


def test_repeats_auto_s_machine_time_in_minutes(monkeypatch):
    planned = {
        **_planned(),
        "seconds": [2940.0, 3000.0, 2940.0, 3000.0],
    }  # median 2970 s = 49.5 min
    monkeypatch.setattr(cal, "planned_sweeps", lambda *a, **k: planned)
    assert "machine time median 50 min at" in cal.auto_results("rng", 4, 0.02)[0].note
    assert "machine time median 50 min at" in cal.plan_results("rng", 4, 7, 0.02)[0].note


def test_a_sweep_of_rows_that_saw_no_verdict_at_all(monkeypatch):
    monkeypatch.setattr(cal, "sweep", lambda *a: [_v("no verdict", "no verdict")] * 2)
    per_row, per_sweep = cal.false_verdicts("rng", 2, 2, 1, 0.0)
    assert per_sweep.refused is True and per_row.refused is True
    assert (
        per_sweep.note == "no verdict printed: one run per side cannot see the spread between runs"
    )
    monkeypatch.setattr(
        cal, "sweep", lambda *a: [_v("equivalent", "equivalent"), _v("faster", "equivalent")]
    )
    assert cal.false_verdicts("rng", 2, 2, 3, 0.0)[1].hits == 1  # only the sweep with a faster


def test_the_series_is_the_ar1_recursion_of_its_draws():
    # x_0 ~ N(0, sigma), x_t = phi x_(t-1) + e_t with e ~ N(0, sigma sqrt(1 - phi^2)): the same
    # draws, the recursion written out here
    phi, sigma = 0.6, 0.05
    x = cal.series(np.random.default_rng(11), (3,), 5, phi, sigma=sigma)
    r = np.random.default_rng(11)
    e = r.normal(0.0, sigma * math.sqrt(1 - phi * phi), (3, 5))
    want = np.empty((3, 5))
    want[:, 0] = r.normal(0.0, sigma, (3,))
    for t in range(1, 5):
        want[:, t] = phi * want[:, t - 1] + e[:, t]
    assert np.allclose(x, want, rtol=0, atol=1e-15)


def test_the_true_rate_is_seeded_with_its_defaults_and_counts_stalls():
    a = cal.true_log_rate(0.5, 2, sims=500, seed=3)
    assert a == cal.true_log_rate(0.5, 2, sims=500, seed=3)  # the seed, not fresh entropy
    assert cal.true_log_rate(0.0, 1, seed=4) == cal.true_log_rate(0.0, 1, sims=40000, seed=4)
    assert cal.true_log_rate(0.0, 1, sims=100) == cal.true_log_rate(0.0, 1, sims=100, seed=0)
    # one step, no spread, a stall (twice as long) half the time: mean log rate -log(2) / 2
    stalled = cal.true_log_rate(0.0, 1, sigma=1e-9, stall=0.5, sims=20000)
    assert stalled == pytest.approx(-math.log(2) / 2, abs=0.01)


def test_the_typical_step_where_the_stalls_overlap():
    # sigma 0.5, 45% stalls: the two normals overlap; the median solves the mixture's cdf = 1/2
    m = cal.typical_log_time(0.5, 0.45)
    cdf = 0.55 * st.norm.cdf(m, 0, 0.5) + 0.45 * st.norm.cdf(m, math.log(2), 0.5)
    assert cdf == pytest.approx(0.5, abs=1e-9)
    assert 0.19 < m < math.log(2)


def test_the_sentinel_s_defaults_and_offsets(monkeypatch):
    calls, given = [], []

    def series(r, shape, n, phi):
        calls.append((r, shape, n, phi))
        return np.zeros((*shape, n))

    monkeypatch.setattr(cal, "series", series)
    monkeypatch.setattr(cal, "sentinel", lambda d: given.append(d) or None)
    rng = np.random.default_rng(2)
    r = cal.sentinel_alarms(rng, 2)
    assert calls == [(rng, (2, 6, 3), 40, 0.5)]
    assert r.name == "noise sentinel, 6 identical rows, R=3, offsets 3%, phi=0.5"
    offsets = np.random.default_rng(2).normal(0, 0.03, (2, 6, 3, 1))[..., 0]
    assert np.allclose([[g[str(i)] for i in range(6)] for g in given], offsets)


def test_a_sweep_s_defaults_offsets_and_rounds(monkeypatch):
    calls, tables = [], []

    def series(r, shape, n, phi, stall=0.0):
        calls.append((r, shape, n, phi, stall))
        return np.zeros((*shape, n))

    monkeypatch.setattr(cal, "series", series)
    monkeypatch.setattr(
        cal, "family_verdicts", lambda t, b, noise: tables.append(t) or [{}] * len(t)
    )
    rng = np.random.default_rng(8)
    cal.sweep(rng, 1, 2, 2, 0.03, rounds=0.02)
    assert calls == [(rng, (1, 3, 2), 40, 0.5, 0.0)]
    replica = np.random.default_rng(8)
    off = replica.normal(0, 0.03, (1, 3, 2, 1))
    rnd = replica.normal(0, 0.02, (1, 1, 2, 1))
    want = -(off + rnd)[0, ..., 0]  # log throughput of 1 s steps shifted by offset + round
    assert np.allclose([row.logs for row in tables[0]], want)
    assert tables[0][1].rounds == [0, 1]
    tables.clear()
    cal.sweep(np.random.default_rng(8), 1, 2, 2, 0.03, effect=0.1, stall=0.05)
    assert calls[-1][4] == 0.05
    shifted = np.array([row.logs for row in tables[0]])
    off = np.random.default_rng(8).normal(0, 0.03, (1, 3, 2, 1))[0, ..., 0]
    assert np.allclose(shifted, -off + np.array([[0.0], [math.log(1.1)], [math.log(1.1)]]))


def test_one_run_s_coverage_at_its_edges(monkeypatch):
    calls, rows = [], []

    def series(r, shape, n, phi, stall=0.0):
        calls.append((r, stall))
        return np.zeros((*shape, n))

    monkeypatch.setattr(cal, "series", series)
    truth = math.exp(cal.long_run_log_rate(stall=0.05))  # checked in closed form above
    cis = iter([(truth, 2.0), (0.0, truth)])
    monkeypatch.setattr(cal, "batch_rate", lambda t, w: dict(zip(("ci_lo", "ci_hi"), next(cis))))
    rng = np.random.default_rng(0)
    r = cal.within_coverage(rng, 2, 0.3, n=10, stall=0.05)
    assert r.hits == 2 and calls == [(rng, 0.05)]  # an end on the truth covers it
    refusing = iter([(None, None)] * 2)
    monkeypatch.setattr(
        cal, "batch_rate", lambda t, w: dict(zip(("ci_lo", "ci_hi"), next(refusing)))
    )
    refused = cal.within_coverage(rng, 2, 0.3, n=10)
    assert (refused.measure, refused.bound, refused.nominal) == (
        "throughput CI covers the run's own rate", (0.93, 0.97), "95%",
    )  # fmt: skip
    # the typical step: exp(typical_log_time(stall)); an interval 1e-4 around it misses 1
    step = math.exp(cal.typical_log_time(stall=0.05))
    monkeypatch.setattr(cal, "batch_median", lambda t: {"ci_lo": step - 1e-4, "ci_hi": step + 1e-4})
    assert cal.within_coverage(rng, 2, 0.3, n=10, stall=0.05, typical=True).hits == 2
    # the adaptive window: the row it was given, an interval with 1 at either end covers it
    monkeypatch.setattr(cal, "adaptive_steps", lambda row, **kw: rows.append(row) or 20)
    ends = iter([(1.0, 1.2), (0.8, 1.0)])
    monkeypatch.setattr(cal, "batch_median", lambda t: dict(zip(("ci_lo", "ci_hi"), next(ends))))
    r = cal.within_coverage(rng, 2, 0.5, stall=0.05, adaptive=True)
    assert r.hits == 2 and calls[-1] == (rng, 0.05)
    assert [row.shape for row in rows] == [(60,), (60,)]


def test_plan_results_pass_their_budget_on(monkeypatch):
    calls = []
    monkeypatch.setattr(cal, "planned_sweeps", lambda *a, **k: calls.append(k) or _planned())
    cal.plan_results("rng", 4, 7, 0.02, effect=0.05, budget_s=900.0)
    assert calls == [{"budget_s": 900.0}]


def test_truth_verdicts_every_field(monkeypatch):
    monkeypatch.setattr(cal, "sweep", lambda *a: [_v("equivalent")] * 4)
    false, power = cal.truth_verdicts("rng", 4, 3, 0.02, 0.015)
    label = "true +1.5%, R=3, offsets 2%, phi=0.5"
    assert (false.name, false.total, power.name, power.total) == (label, 4, label, 4)
    wrong, called = cal.truth_verdicts("rng", 4, 5, 0.02, 0.05)
    label = "true +5.0%, R=5, offsets 2%, phi=0.5"
    assert (wrong.name, wrong.total, called.name, called.total) == (label, 4, label, 4)


def test_the_adaptive_window_s_last_step(monkeypatch):
    # stopping at 8 of 5-9 returns 8; never stopping returns 9, and no step past it is asked
    asked = []
    monkeypatch.setattr(cal, "adaptive_should_stop", lambda t, *a: (len(t) == 8, None))
    assert cal.adaptive_steps(np.zeros(20), 0.03, 5, 9) == 8

    def never(t, *a):
        asked.append(len(t))
        return len(t) >= 10, None

    monkeypatch.setattr(cal, "adaptive_should_stop", never)
    assert cal.adaptive_steps(np.zeros(20), 0.03, 5, 9) == 9
    assert asked == [5, 6, 7, 8, 9]


def test_the_help_s_description_is_the_docstring_s_first_paragraph(capsys):
    with pytest.raises(SystemExit):
        cal.main(["--help"])
    out = capsys.readouterr().out
    assert "--markdown" not in out  # the docstring's second paragraph: its usage line


def test_the_planned_sweeps_defaults_and_pilot(monkeypatch):
    calls, plans, weights = [], [], []

    def series(r, shape, n, phi):
        calls.append((r, shape, n, phi))
        return np.zeros((*shape, n))

    monkeypatch.setattr(cal, "series", series)

    def batch_rate(times, w):
        weights.append(w.tolist())
        return {"log_se": 0.01}

    monkeypatch.setattr(cal, "batch_rate", batch_rate)

    def plan(pilot, rows, target, budget_s, goal):
        plans.append((pilot, goal))
        return {"runs": 2, "steps": 5, "seconds": 30.0, "reached": "target"}

    monkeypatch.setattr(cal, "plan", plan)
    tables = []
    monkeypatch.setattr(cal, "family_verdicts", lambda t, b, noise: tables.append(t) or
                        [{"verdict": "x", "ci_lo": 0.0, "ci_hi": 2.0}] * len(t))  # fmt: skip
    rng = np.random.default_rng(9)
    cal.planned_sweeps(rng, 1, 1, 0.03, pilot_steps=6)
    assert calls == [(rng, (2, 3), 6, 0.5), (rng, (2, 2), 5, 0.5)]
    assert weights == [[1.0] * 6] * 6
    pilot, goal = plans[0]
    assert goal == "detect"
    replica = np.random.default_rng(9)
    first = replica.normal(0, 0.03, (2, 3, 1))[..., 0]
    final = replica.normal(0, 0.03, (2, 2, 1))[..., 0]
    assert np.allclose(pilot.logs, -first)  # no effect row by default: every truth 0
    assert np.allclose([r.logs for r in tables[0]], -final)
