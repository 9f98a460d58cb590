"""diagnosis/rules.py (issue 36: a module the mutation run covers): the arithmetic the rules'
printed figures rest on, each checked on hand-made inputs against the number worked out here by
another route (the closed form written out, or counted by hand): DDP's default bucket count, the
hiccup's spike cut and period lattice, the after-fix
scatter of a straggler's saving, the lag's lower end, the per-step counters beyond the other
ranks', the straggler read from phase medians, a rank's series split, and the evidence lines'
units."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

import pytest
from scipy.stats import norm

from base.record_types import Straggler, StragglerRank
from diagnosis import rules
from diagnosis.view import Sample

MIB = 1024 * 1024


def test_ddp_default_buckets_is_a_first_mib_then_25_mib_each():
    # DDP's default: a first bucket of 1 MiB, then 25 MiB caps; counted by hand
    assert rules.ddp_default_buckets(0) == 1
    assert rules.ddp_default_buckets(MIB) == 1
    assert rules.ddp_default_buckets(MIB + 1) == 2
    assert rules.ddp_default_buckets(MIB + 25 * MIB) == 2
    assert rules.ddp_default_buckets(MIB + 25 * MIB + 1) == 3
    assert rules.ddp_default_buckets(MIB + 100 * MIB) == 5


def test_a_spike_clears_both_five_mads_and_a_quarter_of_the_median():
    # median 1.0; absolute deviations 0 x3, 0.1 x6, 0.4, 0.6: MAD 0.1; cut 1 + max(0.5, 0.25) = 1.5
    values = [0.9, 1.0, 1.1, 0.9, 1.1, 1.0, 0.9, 1.1, 1.0, 1.6, 1.4]
    assert rules._spikes(values) == [9]
    # MAD 0: the cut is the median's quarter, 1.25; a step at the cut is not past it
    flat = [1.0] * 9 + [1.25, 1.26]
    assert rules._spikes(flat) == [10]


def test_spikes_are_measured_from_the_median_not_the_mean():
    values = [2.0] * 7 + [2.6, 10.0]  # mean 3.07; median 2, MAD 0: cut 2.5
    assert rules._spikes(values) == [7, 8]


def test_a_period_from_evenly_spaced_spikes():
    assert rules._period([2, 5, 8], 10) == (3, [], [])
    assert rules._period([1, 5], 10) == (4, [], [])


def test_a_period_with_one_extra_spike_off_it():
    # on every third step from 0, plus one at 7 that is off the lattice
    assert rules._period([0, 3, 6, 7, 9], 10) == (3, [7], [])


def test_a_period_with_one_missed_step():
    # every third step from 0 to 12, step 6 without a spike
    assert rules._period([0, 3, 9, 12], 13) == (3, [], [6])


def test_a_period_needs_three_on_the_lattice_and_at_most_one_exception():
    assert rules._period([0, 1, 5, 6, 11], 12) is None
    assert rules._period([0, 4, 5, 9], 10) is None  # gaps 4, 1, 4: two on each lattice
    # two off the lattice: none
    assert rules._period([0, 3, 4, 6, 8, 9], 10) is None


def test_a_period_prefers_the_lattice_holding_more_spikes():
    # p=2 holds 0,2,4,6,8 (one extra at 5); p=3 holds only 0,3,6 (two off): 2 wins
    assert rules._period([0, 2, 4, 5, 6, 8], 10) == (2, [5], [])


def test_the_after_fix_scatter_is_a_log_normal_95_percent_range():
    from whatif.profile import RUN_TO_RUN_SD

    z = norm.ppf(0.975)
    long_cpu = NS(step_s=1.0, device="cpu")
    lo, hi, sd, source = rules._after_fix_scatter(long_cpu, 0.2)
    sd_cpu = RUN_TO_RUN_SD.get("cpu", 0.05)
    assert sd == sd_cpu and source == "whatif.profile.RUN_TO_RUN_SD"
    assert lo == pytest.approx(0.8 * (math.exp(z * sd_cpu) - 1), rel=1e-9)
    assert hi == pytest.approx(0.8 * (1 - math.exp(-z * sd_cpu)), rel=1e-9)
    # a step left under 50 ms off GPU: the short steps' 23.9%
    short = NS(step_s=0.06, device="cpu")
    lo, hi, sd, source = rules._after_fix_scatter(short, 0.02)
    assert sd == 0.239 and source == "diagnosis.rules.SHORT_STEP_RUN_TO_RUN_SD"
    assert lo == pytest.approx(0.04 * (math.exp(z * 0.239) - 1), rel=1e-9)
    assert hi == pytest.approx(0.04 * (1 - math.exp(-z * 0.239)), rel=1e-9)
    # exactly 50 ms left is not short
    at = NS(step_s=0.07, device="cpu")
    assert rules._after_fix_scatter(at, 0.02)[2] == sd_cpu
    # a short CUDA step keeps the device's figure
    cuda = NS(step_s=0.03, device="cuda")
    assert rules._after_fix_scatter(cuda, 0.01)[2] == RUN_TO_RUN_SD.get("cuda", 0.05)


def test_no_after_fix_scatter_without_a_step_left():
    assert rules._after_fix_scatter(NS(step_s=None, device="cpu"), 0.1) is None
    assert rules._after_fix_scatter(NS(step_s=1.0, device="cpu"), None) is None
    assert rules._after_fix_scatter(NS(step_s=1.0, device="cpu"), 1.0) is None
    assert rules._after_fix_scatter(NS(step_s=1.0, device="cpu"), 1.5) is None
    assert rules._after_fix_scatter(NS(step_s=1.0, device="cpu"), 0.999) is not None


def _straggler(rank, by_s, cis):
    return Straggler(
        rank=rank,
        by_s=by_s,
        per_rank=[StragglerRank(rank=r, ready_ci=ci) for r, ci in cis.items()],
    )


def test_the_lags_lower_end_is_its_interval_less_the_slowest_others_upper():
    s = _straggler(1, 0.05, {0: [0.09, 0.10], 1: [0.14, 0.16], 2: [0.095, 0.11]})
    assert rules._lag_low(s) == pytest.approx(0.14 - 0.11)
    overlap = _straggler(1, 0.05, {0: [0.09, 0.15], 1: [0.14, 0.16]})
    assert rules._lag_low(overlap) == 0.0
    # without the intervals: the lag itself
    assert rules._lag_low(_straggler(1, 0.05, {0: [0.09, None], 1: [0.14, 0.16]})) == 0.05
    assert rules._lag_low(_straggler(1, 0.05, {0: [0.09, 0.1], 1: [None, 0.16]})) == 0.05
    assert rules._lag_low(_straggler(1, 0.05, {1: [0.14, 0.16]})) == 0.05
    assert rules._lag_low(_straggler(1, 0.05, {0: [0.09, 0.1], 1: None})) == 0.05
    assert rules._lag_low(_straggler(1, 0.05, {0: None, 1: [0.14, 0.16]})) == 0.05
    assert rules._lag_low(Straggler(rank=1, by_s=0.05)) == 0.05


def _view_with_work(works: dict):
    per_rank = [NS(rank=r, work=None if w is None else NS(**w)) for r, w in sorted(works.items())]
    return NS(train=NS(per_rank=per_rank))


def test_a_ranks_extra_counter_per_step_is_beyond_the_others_median():
    v = _view_with_work(
        {
            0: {"steps": 10, "cpu_s": 1.0},
            1: {"steps": 10, "cpu_s": 3.0},
            2: {"steps": 20, "cpu_s": 4.0},
            3: {"steps": 10, "cpu_s": 5.0},
        }
    )
    # per step: 0.1, 0.3, 0.2, 0.5; rank 3's others' median 0.2
    assert rules._extra_per_step(v, 3, "cpu_s") == pytest.approx(0.3)
    assert rules._extra_per_step(v, 0, "cpu_s") == pytest.approx(0.1 - 0.3)
    assert rules._extra_per_step(v, 7, "cpu_s") is None
    lacking = _view_with_work({0: {"steps": 10, "cpu_s": 1.0}, 1: {"steps": 10, "cpu_s": None}})
    assert rules._extra_per_step(lacking, 0, "cpu_s") is None
    alone = _view_with_work({0: {"steps": 10, "cpu_s": 1.0}, 1: {"steps": 0, "cpu_s": 1.0}})
    assert rules._extra_per_step(alone, 0, "cpu_s") is None
    two = _view_with_work({0: {"steps": 4, "cpu_s": 1.0}, 1: {"steps": 4, "cpu_s": 3.0}, 2: None})
    assert rules._extra_per_step(two, 1, "cpu_s") == pytest.approx(0.5)


def test_the_core_wait_per_step_is_the_most_of_any_rank():
    works = [
        NS(main_runqueue_s=1.0, steps=10),
        NS(main_runqueue_s=3.0, steps=20),
        NS(main_runqueue_s=0.5, steps=10),
        NS(main_runqueue_s=None, steps=10),
        NS(main_runqueue_s=9.0, steps=0),
    ]
    assert rules._core_wait_per_step(NS(works=lambda: works)) == pytest.approx(0.15)
    assert rules._core_wait_per_step(NS(works=lambda: works[:1] + works[3:])) is None


def test_ranks_per_host_rounds_up():
    assert rules._ranks_per_host(NS(env=NS(hostnames=["a", "b"]), world_size=5)) == 3
    assert rules._ranks_per_host(NS(env=NS(hostnames=["a", "b"]), world_size=4)) == 2
    assert rules._ranks_per_host(NS(env=NS(hostnames=None), world_size=3)) == 3
    assert rules._ranks_per_host(NS(env=NS(hostnames=["a", "b", "c"]), world_size=0)) == 1


def test_a_saving_is_each_seconds_share_of_the_step():
    v = NS(fraction=lambda s: None if s is None else s / 0.5)
    s = rules._saving(v, 0.1, "how", 0.05, 0.2, of="the wait")
    assert (s.fraction, s.seconds, s.lo, s.hi) == (
        pytest.approx(0.2),
        0.1,
        pytest.approx(0.1),
        pytest.approx(0.4),
    )
    assert (s.of, s.how) == ("the wait", "how")
    d = rules._saving(v, 0.1, "how")
    assert (d.lo, d.hi, d.of) == (None, None, "the step")


def test_evidence_in_ms_and_percent_scales_the_interval_too():
    s = Sample(0.0123, 0.011, 0.0135, 0.95, 40, "result.step_time_s")
    e = rules.ev_ms("step", s, "src")
    assert (e.value, e.ci_lo, e.ci_hi, e.unit) == (
        pytest.approx(12.3),
        pytest.approx(11.0),
        pytest.approx(13.5),
        "ms",
    )
    assert e.note == "95% interval over 40 steps, result.step_time_s"
    p = rules.ev_pct("share", Sample(0.25, 0.2, 0.3), "src")
    assert (p.value, p.ci_lo, p.ci_hi, p.unit) == (
        pytest.approx(25.0),
        pytest.approx(20.0),
        pytest.approx(30.0),
        "%",
    )
    one = rules.ev_ms("step", Sample(0.5, source="x"), "src")
    assert (one.value, one.ci_lo, one.ci_hi) == (pytest.approx(500.0), None, None)
    half = rules.ev_pct("share", Sample(0.5, None, 0.6), "src")
    assert (half.ci_lo, half.ci_hi) == (None, pytest.approx(60.0))
    half = rules.ev_ms("step", Sample(0.5, 0.4, None), "src")
    assert (half.ci_lo, half.ci_hi) == (pytest.approx(400.0), None)
    assert rules.ev_ms("x", None, "src").value is None
    assert rules.ev_pct("x", None, "src").note == "not in the record"
    assert rules.ev("x", 3, "n", "src").note == "no interval: one figure"
    assert rules.ev("x", None, "n", "src").note == "not in the record"
    assert rules.ev("x", 3, "n", "src", "mine").note == "mine"


def _phases_view(medians: dict, sync: str = "ddp", step_s: float = 1.0):
    per_rank = [
        NS(rank=r, host=f"h{r}", phases_median=None if m is None else NS(to_dict=lambda m=m: m))
        for r, m in medians.items()
    ]
    return NS(train=NS(per_rank=per_rank, sync=sync), fraction=lambda s: s / step_s)


def test_the_straggler_from_phase_medians_with_ddp_leaves_backward_out():
    v = _phases_view(
        {
            0: {"data": 0.01, "h2d": 0.002, "forward": 0.10, "backward": 0.50},
            1: {"data": 0.05, "h2d": 0.002, "forward": 0.12, "backward": 0.30},
            2: {"data": 0.02, "h2d": 0.004, "forward": 0.11, "backward": 0.40},
        },
        step_s=0.8,
    )
    s = rules._straggler_from_phases(v)
    # ready: 0.112, 0.172, 0.134 -> rank 1 by 0.172 - median(0.112, 0.134) = 0.049
    assert s.rank == 1 and s.host == "h1"
    assert s.by_s == pytest.approx(0.049)
    assert s.share_of_step == pytest.approx(0.049 / 0.8)
    # data: 0.05 - 0.015; h2d: 0.002 - 0.003; compute: 0.12 - 0.105
    assert s.parts_s == pytest.approx({"data": 0.035, "h2d": -0.001, "compute": 0.015})
    assert s.mostly == "data"
    assert [(p.rank, p.ready_s) for p in s.per_rank] == [
        (0, pytest.approx(0.112)),
        (1, pytest.approx(0.172)),
        (2, pytest.approx(0.134)),
    ]


def test_the_straggler_from_phase_medians_without_ddp_counts_backward():
    v = _phases_view(
        {
            0: {"data": 0.01, "forward": 0.10, "backward": 0.50},
            1: {"data": 0.01, "forward": 0.12, "backward": 0.30},
        },
        sync="manual",
    )
    s = rules._straggler_from_phases(v)
    assert s.rank == 0 and s.by_s == pytest.approx(0.61 - 0.43)
    assert s.mostly == "compute"
    assert s.parts_s == pytest.approx({"data": 0.0, "h2d": 0.0, "compute": 0.18})


def test_no_straggler_from_fewer_than_two_ranks_phases():
    assert rules._straggler_from_phases(_phases_view({0: {"data": 0.1}, 1: None})) is None
    assert rules._straggler_from_phases(_phases_view({0: {"data": 0.1}, 1: {}})) is None


def _series(steps, **phases):
    return NS(step_time_s=steps, phases=NS(to_dict=lambda: phases) if phases else None)


def test_a_ranks_series_splits_its_ready_work_and_the_time_outside_the_phases():
    steps = [1.0] * 9 + [2.0]
    fwd = [0.3] * 10
    sync = [0.2] * 9 + [0.1]
    got = rules._rank_series(_series(steps, forward=fwd, sync=sync, data=[0.1] * 10))
    assert got["ready"] == pytest.approx([0.8] * 9 + [1.9])
    assert got["outside"] == pytest.approx([0.4] * 9 + [1.5])
    assert got["forward"] == fwd and got["data"] == [0.1] * 10
    assert got["backward"] == [0.0] * 10 and got["optimizer"] == [0.0] * 10
    # timed phases longer than the step: nothing outside, not a negative time
    over = rules._rank_series(_series([1.0] * 10, forward=[1.2] * 10))
    assert over["outside"] == [0.0] * 10
    bare = rules._rank_series(_series([1.0] * 10))
    assert bare["ready"] == [1.0] * 10 and bare["outside"] == [1.0] * 10
    assert rules._rank_series(_series([1.0] * 9, forward=[0.1] * 9)) is None
    assert rules._rank_series(_series(None)) is None


class _NoiseView:
    """What noise_rule reads of a run: its steps, its step time and the command of a change."""

    acc = False

    def __init__(self, steps=40):
        self.train = NS(steps=steps)
        self.step = Sample(0.1, 0.09, 0.11, 0.95, steps, "result.step_time_s")

    def command(self, change, env):
        return f"python train.py {' '.join(f'{k}={v}' for k, v in (change or {}).items())}"


def _finding(material, rule="x"):
    return NS(material=material, rule=rule)


def _noise(**kw):
    from diagnosis.view import Noise

    return Noise(**{"floor": 0.08, "threshold": 0.02, "noisy": True, **kw})


def test_noise_names_what_it_hides_and_the_steps_that_would_narrow_it():
    v = _NoiseView(40)
    hidden = [_finding(0.05, "straggler"), _finding(0.01, "tiny"), _finding(0.09, "big")]
    f = rules.noise_rule(v, _noise(n=40, rel_halfwidth=0.10, reasons=["spread"]), hidden)
    # only 0.02 < 5% <= 8% is hidden; steps: 40 x (0.10 / 0.05)^2 = 160, within [80, 200]
    assert f.recommends == {"steps": 160}
    assert f.title == (
        "Noisy measurement: differences under 8.0% of the step are not attributable; it hides "
        "1 finding of 5.0% (straggler)"
    )
    assert f.impact == 0.08 and f.saving is None
    assert f.detail.startswith("spread. More steps")
    two = rules.noise_rule(v, _noise(n=40), [_finding(0.08, "a"), _finding(0.03, "b")])
    assert "hides 2 findings of 8.0% (a), 3.0% (b)" in two.title
    # half-width from the floor where the noise has none: 40 x (0.08 / 0.05)^2 = 102.4 -> 103
    assert two.recommends == {"steps": 103}


def test_the_noise_rules_step_count_is_bounded():
    v = _NoiseView(40)
    hide = [_finding(0.05)]
    # at least twice this run's steps
    assert rules.noise_rule(v, _noise(n=40, rel_halfwidth=0.06), hide).recommends == {"steps": 80}
    # at least 30
    assert rules.noise_rule(v, _noise(n=10, rel_halfwidth=0.06), hide).recommends == {"steps": 30}
    # at most 200
    assert rules.noise_rule(v, _noise(n=40, rel_halfwidth=0.2), hide).recommends == {"steps": 200}
    # n from the run's steps where the noise has none; else 1
    assert rules.noise_rule(v, _noise(rel_halfwidth=0.1), hide).recommends == {"steps": 160}
    bare = _NoiseView(None)
    assert rules.noise_rule(bare, _noise(rel_halfwidth=0.1), hide).recommends == {"steps": 30}


def test_no_noise_finding_when_quiet_or_nothing_hidden():
    v = _NoiseView(40)
    assert rules.noise_rule(v, _noise(noisy=False), [_finding(0.05)]) is None
    assert rules.noise_rule(v, _noise(), [_finding(0.02)]) is None  # at the threshold: not hidden
    assert rules.noise_rule(v, _noise(), [_finding(0.081)]) is None  # above the floor: shown
    assert rules.noise_rule(v, _noise(), []) is None
    assert rules.noise_rule(v, _noise()) is None


def test_the_efficiency_side_is_read_on_the_end_that_could_refute_it():
    assert rules.efficiency_side({"efficiency": 0.3, "efficiency_ci_hi": 0.49}) == "low"
    assert rules.efficiency_side({"efficiency": 0.3, "efficiency_ci_hi": 0.5}) is None
    assert rules.efficiency_side({"efficiency": 0.7, "efficiency_ci_lo": 0.5}) == "high"
    assert rules.efficiency_side({"efficiency": 0.7, "efficiency_ci_lo": 0.49}) is None
    assert rules.efficiency_side({"efficiency": 0.49}) == "low"
    assert rules.efficiency_side({"efficiency": 0.5}) == "high"
    both = {"efficiency": 0.6, "efficiency_ci_lo": 0.4, "efficiency_ci_hi": 0.8}
    assert rules.efficiency_side(both) is None


def test_the_efficiency_evidence_in_percent_with_its_source():
    ref = {
        "reference": "microbenchmark",
        "efficiency": 0.4,
        "efficiency_ci_lo": 0.3,
        "efficiency_ci_hi": 0.55,
    }
    e = rules._efficiency_ev(ref)
    assert (e.value, e.ci_lo, e.ci_hi, e.unit) == (
        pytest.approx(40.0),
        pytest.approx(30.0),
        pytest.approx(55.0),
        "%",
    )
    assert e.source == "result.comm.vs_microbench (microbenchmark)"
    assert e.note == "interval from the microbenchmark's per-size intervals"
    assert e.name == "comm efficiency (sync's speed / the microbenchmark at the same calls)"
    few = rules._efficiency_ev({"reference": "microbenchmark", "efficiency": 0.4})
    assert (few.ci_lo, few.ci_hi) == (None, None)
    assert few.note == "no interval: too few microbenchmark calls"
    link = {"reference": "link", "efficiency": 1.2, "source": "result.env.link"}
    e = rules._efficiency_ev(link)
    assert e.value == pytest.approx(120.0) and e.source == "result.env.link (link)"
    assert e.note == (
        "no interval: the link's rate is a setting; above 100%: the shaper's burst passed part of "
        "it at the line's speed"
    )
    below = rules._efficiency_ev({**link, "efficiency": 1.0})
    assert below.note == "no interval: the link's rate is a setting"
    # above 100% against the microbenchmark: not measurable, no figure
    over = rules._efficiency_ev({"reference": "microbenchmark", "efficiency": 1.6})
    assert over.value is None and over.note.startswith("not measurable: 160% (no interval)")


def _rank(rank, steps, host=None, **phases):
    n = len(steps)
    ph = {"data": [0.005] * n, "forward": [0.03] * n, "backward": [0.04] * n}
    ph.update(sync=[0.02] * n, optimizer=[0.005] * n)
    ph.update(phases)
    return NS(rank=rank, host=host, series=_series(steps, **ph))


def _hiccup_view(per_rank, warmup=5, world_size=2):
    return NS(
        world_size=world_size,
        train=NS(per_rank=per_rank, warmup_steps=warmup),
        fraction=lambda s: None if s is None else s / 0.1,
        command=lambda *a: "python train.py x=1",
    )


def test_a_rank_that_stalls_every_third_step_outside_its_phases():
    # rank 1: 100 ms steps, 150 ms on steps 2, 5, 8, 11 (the 50 ms outside the timed phases);
    # its ready work (step less sync): 80 ms, 130 ms on those; median 80, MAD 0: cut 80 + 20
    spiky = [0.15 if i % 3 == 2 else 0.1 for i in range(12)]
    v = _hiccup_view([_rank(0, [0.1] * 12, "h0"), _rank(1, spiky, "h1")])
    f = rules.hiccup(v)
    per_step = 4 * 0.05 / 12  # the others' wait averaged over every step
    assert f.title == (
        "Rank 1 on h1 stalls 50 ms every 3 steps in its own code outside the timed phases "
        "(evaluation, checkpointing, logging); the other ranks wait for it: 16.7 ms per step on "
        "average (17% of the step)"
    )
    assert (f.saving.seconds, f.saving.fraction, f.saving.lo, f.saving.hi) == (
        pytest.approx(per_step),
        pytest.approx(per_step / 0.1),
        None,
        pytest.approx(per_step / 0.1),
    )
    assert f.impact == pytest.approx(per_step / 0.1)
    assert f.command == (
        "in the script, move rank 1's every 3 steps work off the step; then: python train.py x=1"
    )
    ev = {e.name: e for e in f.evidence}
    assert ev["its stall (median over the spikes)"].value == pytest.approx(50.0)
    assert ev["its stall (median over the spikes)"].note == (
        "steps 8, 11, 14, 17, against its own median step work"
    )
    assert ev["its usual work between collectives"].value == pytest.approx(80.0)
    assert ev["what grew on those steps"].value == pytest.approx(50.0)
    assert ev["what grew on those steps"].note == "outside"
    assert ev["averaged over every step"].value == pytest.approx(1e3 * per_step)
    assert f.recommends == {} and f.rule == "hiccup"


def test_irregular_stalls_in_a_phase_leave_out_the_steps_every_rank_stalled():
    # rank 0's data wait grows on steps 1, 2 and 7 (+60 ms); both ranks stall on step 4: not a
    # rank's own; rank 1 stalls only there
    data0 = [0.065 if i in (1, 2, 4, 7) else 0.005 for i in range(12)]
    steps0 = [0.16 if i in (1, 2, 4, 7) else 0.1 for i in range(12)]
    data1 = [0.065 if i == 4 else 0.005 for i in range(12)]
    steps1 = [0.16 if i == 4 else 0.1 for i in range(12)]
    v = _hiccup_view([_rank(0, steps0, data=data0), _rank(1, steps1, data=data1)], warmup=None)
    f = rules.hiccup(v)
    per_step = 3 * 0.06 / 12
    assert f.title == (
        "Rank 0 stalls 60 ms on 3 of 12 steps in its data wait; the other ranks wait for it: "
        "15.0 ms per step on average (15% of the step)"
    )
    assert f.command == "python train.py x=1"  # not outside the phases: profile it
    assert "Profile rank 0's data on those steps" in f.detail
    ev = {e.name: e for e in f.evidence}
    assert ev["its stall (median over the spikes)"].note.startswith("steps 2, 3, 8, against")
    assert ev["what grew on those steps"].value == pytest.approx(60.0)
    assert f.saving.seconds == pytest.approx(per_step)


def test_a_period_with_an_extra_spike_is_named_with_it():
    spiky = [0.15 if i % 3 == 0 or i == 7 else 0.1 for i in range(13)]
    v = _hiccup_view([_rank(0, [0.1] * 13), _rank(1, spiky)], warmup=2)
    f = rules.hiccup(v)
    assert "stalls 50 ms every 3 steps (and once more, on step 10) in" in f.title
    assert "rank 1's every 3 steps work" in f.command
    missed = [0.15 if i in (0, 3, 9, 12) else 0.1 for i in range(13)]
    g = rules.hiccup(_hiccup_view([_rank(0, [0.1] * 13), _rank(1, missed)], warmup=0))
    assert "every 3 steps (but not on step 7) in" in g.title
    many = [0.15 if i % 3 == 0 else 0.1 for i in range(24)]  # 8 spikes: the first 6 named
    h = rules.hiccup(_hiccup_view([_rank(0, [0.1] * 24), _rank(1, many)], warmup=0))
    note = next(e.note for e in h.evidence if e.name.startswith("its stall"))
    assert note.startswith("steps 1, 4, 7, 10, 13, 16, ..., against")
    six = [0.15 if i % 3 == 0 else 0.1 for i in range(18)]  # 6 spikes: all named
    k = rules.hiccup(_hiccup_view([_rank(0, [0.1] * 18), _rank(1, six)], warmup=0))
    note = next(e.note for e in k.evidence if e.name.startswith("its stall"))
    assert note.startswith("steps 1, 4, 7, 10, 13, 16, against")


def test_no_hiccup_without_two_ranks_series_or_two_own_spikes():
    spiky = [0.15 if i % 3 == 2 else 0.1 for i in range(12)]
    quiet = _rank(0, [0.1] * 12)
    assert rules.hiccup(_hiccup_view([quiet, _rank(1, spiky)], world_size=1)) is None
    assert rules.hiccup(_hiccup_view([])) is None
    assert rules.hiccup(_hiccup_view([quiet, NS(rank=1, host=None, series=None)])) is None
    assert rules.hiccup(_hiccup_view([quiet, _rank(1, spiky[:9])])) is None  # under 10 steps
    one = [0.15 if i == 5 else 0.1 for i in range(12)]
    assert rules.hiccup(_hiccup_view([quiet, _rank(1, one)])) is None  # a single slow step
    both = _rank(0, spiky)
    shared = rules.hiccup(_hiccup_view([both, _rank(1, spiky)]))  # every rank stalls: no rank's
    assert shared.rule == "hiccup.shared" and shared.recommends == {}


def test_the_after_fix_scatter_of_a_device_with_no_figure_of_its_own():
    # no run-to-run figure for the device: 5%, z x 0.05 either side of the 0.8 s left
    z = norm.ppf(0.975)
    lo, hi, sd, source = rules._after_fix_scatter(NS(step_s=1.0, device="tpu"), 0.2)
    assert (sd, source) == (0.05, "whatif.profile.RUN_TO_RUN_SD")
    assert lo == pytest.approx(0.8 * (math.exp(z * 0.05) - 1), rel=1e-9)
    assert hi == pytest.approx(0.8 * (1 - math.exp(-z * 0.05)), rel=1e-9)


def _unclear_view(iters):
    config = {"diagnose": {"microbench_iters": iters}} if iters is not None else {}
    return NS(config=config, command=lambda change, env=None: f"python train.py {change}")


def test_an_unclear_efficiency_asks_for_more_timed_calls():
    # 30% of the step exposed; the efficiency's interval [40, 90]% straddles the 70% line;
    # microbench_iters=12 -> 4 x 12 = 48 timed calls per size (at least 20)
    share = Sample(0.3)
    evidence = [rules.ev("x", 1.0, "", "s")]
    ref = {"efficiency": 0.6, "efficiency_ci_lo": 0.4, "efficiency_ci_hi": 0.9}
    f = rules._cause_unclear(_unclear_view(12), share, ref, evidence)
    assert f.title == (
        "Exposed communication is 30% of the step; the comm efficiency's interval [40, 90]% "
        f"straddles {100 * rules.LOW_EFFICIENCY:.0f}%, so it cannot tell a slow sync path from a "
        "slow link"
    )
    assert f.detail == (
        "More timed calls per size in the microbenchmark (diagnose.microbench_iters=48) narrow "
        "the interval; the run's diagnosis then names the cause."
    )
    assert f.evidence is evidence and f.impact == 0.3
    assert f.recommends == {"diagnose.microbench": True, "diagnose.microbench_iters": 48}
    assert (
        f.saving.how == "the microbenchmark says how much of the exposed time the link itself needs"
    )
    assert f.saving.fraction is None
    # no interval: both ends are the efficiency itself; the default 5 iters -> 20 calls
    f = rules._cause_unclear(_unclear_view(None), share, {"efficiency": 0.55}, evidence)
    assert "[55, 55]%" in f.title and f.recommends["diagnose.microbench_iters"] == 20
    assert (
        rules._cause_unclear(_unclear_view(3), share, ref, evidence).recommends[
            "diagnose.microbench_iters"
        ]
        == 20
    )  # 4 x 3 = 12 < 20
    low_only = {"efficiency": 0.6, "efficiency_ci_lo": 0.45, "efficiency_ci_hi": None}
    assert "[45, 60]%" in rules._cause_unclear(_unclear_view(12), share, low_only, evidence).title


def _contention_view(ref=None, comm_s=0.25, accumulate=None):
    c = NS(cores=2, host_busy=0.97, own=0.9, switches_per_s=1234.4)
    compute = Sample(0.6, 0.5, 0.7, 0.95, 40, "phases")
    return NS(
        contention=lambda: c,
        train=NS(sync="ddp", comm=NS(time_s=comm_s), accumulate=accumulate),
        share=lambda phases: compute if phases == ("forward", "backward") else None,
        reference=ref,
        command=lambda change, env=None: f"python train.py {change}",
    )


def test_contention_s_evidence_row_by_row():
    ref = {"source": "result.env.link", "reference": "the link", "achievable_s": 0.125}
    f = rules._contention(_contention_view(ref), 2, 1)
    rows = [(e.name, e.value, e.unit, e.ci_lo, e.ci_hi, e.source, e.note) for e in f.evidence]
    one = "no interval: one figure"
    assert rows[:6] == [
        ("ranks on this host", 2, "", None, None, "result.world_size / env.hostnames", "counted"),
        ("torch intra-op threads per rank", 1, "", None, None,
         "result.per_rank[].work.torch_threads", "counted"),
        ("cores", 2, "", None, None, "env.cpu_count", "counted"),
        ("host busy over the window (every process)", pytest.approx(97.0), "%", None, None,
         "result.per_rank[0].work.host_busy", "/proc/stat"),
        ("the ranks' own CPU use over the window", pytest.approx(90.0), "%", None, None,
         "result.per_rank[].work.cpu_s", "getrusage of each rank / cores x wall"),
        ("involuntary context switches per second per rank", 1234.4, "", None, None,
         "result.per_rank[].work.involuntary_switches",
         "median over ranks: preempted for another thread"),
    ]  # fmt: skip
    assert rows[6] == (
        "compute share of the step (forward + backward)", pytest.approx(60.0), "%",
        pytest.approx(50.0), pytest.approx(70.0), "phases", "95% interval over 40 steps, phases",
    )  # fmt: skip
    assert rows[7] == (
        "the all-reduces' span in training vs what the link allows", 250.0, "ms", None, None,
        "result.comm.time_s", "what the link allows (the link): 125 ms",
    )  # fmt: skip
    assert len(rows) == 8 and one not in [r[6] for r in rows]
    assert f.title == (
        "2 DDP ranks keep the 2 cores 97% busy and are preempted 1234 times a second: compute "
        "and gloo's all-reduce threads take turns on the cores"
    )
    assert f.impact == 0.6 and f.recommends == {"accumulate": 4}
    alone = {"source": "microbench", "reference": "the microbenchmark", "achievable_s": 0.1}
    f = rules._contention(_contention_view(alone, accumulate=3), 2, 1)
    assert f.evidence[7].name == "the all-reduces' span in training vs alone"
    assert f.evidence[7].note.startswith("alone (the microbenchmark): ")
    assert f.recommends == {"accumulate": 6}  # twice the run's 3
    assert len(rules._contention(_contention_view(alone, comm_s=0.0), 2, 1).evidence) == 7
    assert len(rules._contention(_contention_view(None), 2, 1).evidence) == 7


def test_the_core_wait_needs_two_ranks_counters():
    two = [NS(main_runqueue_s=1.0, steps=10), NS(main_runqueue_s=3.0, steps=20)]
    assert rules._core_wait_per_step(NS(works=lambda: two)) == pytest.approx(0.15)


def test_an_unmeasurable_efficiency_names_its_reference_and_why():
    over = rules._efficiency_ev({"reference": "microbenchmark", "efficiency": 1.6})
    assert (over.name, over.value, over.unit, over.ci_lo, over.ci_hi, over.source) == (
        "comm efficiency (sync's speed / microbenchmark's at the same calls)", None, "%", None,
        None, "result.comm.vs_microbench (microbenchmark)",
    )  # fmt: skip


def test_contention_s_words_and_a_run_without_phases():
    ref = {"source": "result.env.link", "reference": "the link", "achievable_s": 0.125}
    f = rules._contention(_contention_view(ref, accumulate=3), 2, 1)
    assert f.detail == (
        "DDP overlaps each bucket's all-reduce with the rest of backward; with gloo on CPU the "
        "all-reduce is CPU work on gloo's own threads, so on a host with no spare core it does not "
        "hide behind backward, it slows it down. The same contention makes identical ranks finish "
        "at different times, so it is not named as a straggler. Fewer syncs (accumulate=6: DDP's "
        "no_sync for 5 of 6 micro-batches, the gloo thread's first reply) leave the cores to the "
        "compute; `python train.py -m experiment=scaling` measures one rank alone."
    )
    assert f.saving.how == (
        "how much compute the all-reduce's CPU work displaces is measured by accumulate=6 against "
        "accumulate=1 (compare samples/s)"
    )
    assert f.saving.fraction is None
    v = _contention_view(ref)
    v.share = lambda phases: None
    f = rules._contention(v, 2, 1)
    assert f.impact == 0.0
    assert (f.evidence[6].value, f.evidence[6].note) == (None, "not in the record")
    v.train.sync = "flat"
    assert rules._contention(v, 2, 1) is None
    v.train.sync, v.contention = "ddp", lambda: None
    assert rules._contention(v, 2, 1) is None


def test_exposed_communication_from_too_few_probe_steps():
    ref = {"reference": "microbenchmark", "efficiency": 0.4}
    v = NS(reference=ref, command=lambda change, env=None: f"python train.py {change}")
    evidence = []
    f = rules._exposed_unconfirmed(v, Sample(0.2, n=None), Sample(0.25), evidence)
    assert f.title == (
        "Exposed communication was 25% of the step in 1 probe step: too few samples to name a cause"
    )
    assert f.detail == (
        "DDP's reducer timers were read over probe_steps=1 untimed step(s) after the window, and "
        "one step's exposed time moves a lot between runs; probe_steps=6 reads them over 6 steps, "
        "which gives it a 95% interval, and the diagnosis of that run names the cause (a slow sync "
        "path or a slow link) and what to change."
    )
    assert f.evidence is evidence and len(evidence) == 1
    assert (
        evidence[0].name == "comm efficiency (sync's speed / the microbenchmark at the same calls)"
    )
    assert f.saving.how == "one probe step cannot say; probe_steps=6 measures it with an interval"
    assert f.recommends == {"probe_steps": 6} and f.impact == 0.25
    f = rules._exposed_unconfirmed(v, Sample(0.2, n=3), Sample(0.25), [])
    assert "in 3 probe steps: too few" in f.title and "probe_steps=3 untimed" in f.detail
    f = rules._exposed_unconfirmed(v, Sample(0.2, n=2), Sample(0.25), [])
    assert "in 2 probe steps: too few" in f.title
    v.reference = None
    assert rules._exposed_unconfirmed(v, Sample(0.2, n=2), Sample(0.25), []).evidence == []


def test_the_link_reference(monkeypatch):
    from comm import efficiency

    got = []
    vs = {"efficiency": 0.8, "reference": "link"}
    monkeypatch.setattr(efficiency, "versus_link", lambda *a: got.append(a) or vs)
    v = NS(train=NS(sync="ddp", comm="comm"), env=NS(link="link"), world_size=4)
    assert rules._link_reference(v) is vs and got == [("link", "comm", 4)]
    v.train.sync = "local"
    assert rules._link_reference(v) is None
    v.train.sync = "ddp"
    vs["efficiency"] = None
    assert rules._link_reference(v) is None
    monkeypatch.setattr(efficiency, "versus_link", lambda *a: None)
    assert rules._link_reference(v) is None


def test_a_ranks_series_counts_its_host_to_device_copy_as_timed():
    # 1 s steps, 0.25 s of them the copy: 0.75 s outside the phases
    got = rules._rank_series(_series([1.0] * 10, h2d=[0.25] * 10))
    assert got["outside"] == pytest.approx([0.75] * 10)


def test_a_period_from_exactly_three_on_the_lattice_and_one_off():
    assert rules._period([0, 3, 6, 7], 10) == (3, [7], [])


def test_the_microbenchmark_s_calls_end_with_its_latency_call():
    sizes, latency = [NS(bytes=4096), NS(bytes=65536)], NS(bytes=4)
    micro = NS(sizes=sizes, latency=latency)
    assert rules._micro_calls(NS(train=NS(microbench=micro))) == [*sizes, latency]
    micro.latency = None
    assert rules._micro_calls(NS(train=NS(microbench=micro))) == sizes
    micro.sizes = None
    assert rules._micro_calls(NS(train=NS(microbench=micro))) == []
    assert rules._micro_calls(NS(train=NS(microbench=None))) == []


def _link_view(sync="ddp", err=None):
    return NS(
        train=NS(sync=sync, accuracy=NS(grad_rel_error=err) if err is not None else None),
        fraction=lambda s: None if s is None else s / 0.5,  # a 0.5 s step
        command=lambda change, env=None: f"python train.py {change}",
    )


def test_a_slow_link_finding_in_words_and_numbers():
    # 0.2 s exposed of a 0.5 s step (40%); the sync at 80% of the microbenchmark's speed;
    # accumulate=4 leaves one sync in 4: 0.2 x 3/4 = 150 ms less exposed time per 4 micro-batches
    ref = {"efficiency": 0.8, "reference": "microbenchmark"}
    evidence = [rules.ev("x", 1.0, "", "s")]
    f = rules._slow_link(_link_view(err=3.1e-3), None, 0.2, Sample(0.4), ref, evidence)
    assert f.title == (
        "Exposed communication is 40% of the step and the sync already runs at 80% of the "
        "microbenchmark's speed: the link is the bottleneck, send fewer bytes"
    )
    big = rules.LARGER_BUCKET_MB
    assert f.detail == (
        "bf16 compression halves the bytes on the wire; its gradient error is measured by that "
        "run (grad rel err); this run's own error is 3.10e-03. Other levers: optim=powersgd (far "
        "fewer bytes; its gradient error and bytes are measured by the run), "
        f"bucket={big} (fewer calls), or accumulate=4 (one sync per 4 micro-batches: ~150 ms "
        "less exposed time per 4 micro-batches, at 4x the effective batch)."
    )
    assert f.evidence is evidence and f.impact == 0.4
    assert (f.saving.seconds, f.saving.fraction, f.saving.lo, f.saving.hi) == (
        0.1, pytest.approx(0.2), 0.0, pytest.approx(0.4),
    )  # fmt: skip
    assert f.recommends == {"optim": "bf16"}
    assert f.fixes == [{"optim": "bf16"}, {"optim": "powersgd"}, {"bucket": big},
                       {"accumulate": 4}]  # fmt: skip
    # a flat sync: DDP first; as fast as the link's set rate: no percent
    link = {"efficiency": 1.2, "reference": "link"}
    f = rules._slow_link(_link_view(sync="flat"), None, 0.2, Sample(0.4), link, [])
    assert f.title == (
        "Exposed communication is 40% of the step and the sync already runs as fast as the link: "
        "the link is the bottleneck, send fewer bytes"
    )
    assert f.detail.startswith(
        "bf16 compression halves the bytes on the wire; its gradient error is measured by that "
        "run (grad rel err). Other levers:"
    )
    assert f.recommends == {"sync": "ddp", "optim": "bf16"}
    assert f.fixes == [{"sync": "ddp", "optim": "bf16"}, {"sync": "ddp"}]
    at_one = {"efficiency": 1.0, "reference": "link"}
    f = rules._slow_link(_link_view(), None, 0.2, Sample(0.4), at_one, [])
    assert "already runs at 100% of the link's speed" in f.title


def test_the_step_s_evidence_from_throughput_or_the_step_median():
    by_rate = rules._step_ev(NS(acc=True, step_sample=lambda: Sample(0.125, 0.12, 0.13, 0.95, 8,
                                                                      "throughput")))  # fmt: skip
    assert (by_rate.name, by_rate.value, by_rate.unit, by_rate.source) == (
        "step (throughput)", 125.0, "ms", "result.throughput")  # fmt: skip
    assert (by_rate.ci_lo, by_rate.ci_hi) == (pytest.approx(120.0), pytest.approx(130.0))
    median = rules._step_ev(NS(acc=False, step=Sample(0.25, None, None, None, None, "steps")))
    assert (median.name, median.value, median.unit, median.source, median.note) == (
        "step time (median)", 250.0, "ms", "result.step_time_s", "no interval: steps")  # fmt: skip


def test_a_phase_a_rank_did_not_time_counts_as_zero():
    # rank 1 timed only backward (left out under DDP): its ready work is 0; rank 0's is 0.16 s
    v = _phases_view({0: {"data": 0.05, "h2d": 0.01, "forward": 0.1}, 1: {"backward": 0.3}})
    s = rules._straggler_from_phases(v)
    assert s.rank == 0 and s.by_s == pytest.approx(0.16)
    assert s.parts_s == pytest.approx({"data": 0.05, "h2d": 0.01, "compute": 0.1})
    assert [p.ready_s for p in s.per_rank] == [pytest.approx(0.16), 0.0]


def test_the_sync_path_s_saving_is_the_time_it_would_lose_at_the_reference_s_speed():
    # a GPU run with DDP (larger buckets); the sync took 0.3 s where alone it takes 0.12 s: it
    # would lose 0.18 s, at most the 0.1 s exposed; a sync already at its reference loses nothing
    v = NS(gpu_like=True, train=NS(h2d=None, sync="ddp"), fraction=lambda s: s / 0.5,
           command=lambda change, env=None: f"python train.py {change}")  # fmt: skip
    ref = {"sync_s": 0.3, "achievable_s": 0.12, "efficiency": 0.4, "reference": "microbenchmark"}
    assert rules._sync_path(v, None, 0.1, Sample(0.2), ref, []).saving.seconds == 0.1
    assert rules._sync_path(v, None, 0.5, Sample(0.2), ref, []).saving.seconds == pytest.approx(
        0.18
    )
    fast = {**ref, "sync_s": 0.1}
    assert rules._sync_path(v, None, 0.5, Sample(0.2), fast, []).saving.seconds == 0.0


def test_a_straggler_without_ddp_counts_a_backward_a_rank_did_not_time_as_zero():
    v = _phases_view({0: {"forward": 0.1, "backward": 0.2}, 1: {"forward": 0.1}}, sync="manual")
    s = rules._straggler_from_phases(v)
    assert s.rank == 0 and s.by_s == pytest.approx(0.2)


def test_the_sync_path_finding_in_words():
    v = NS(gpu_like=True, train=NS(h2d=None, sync="flat"), fraction=lambda s: s / 0.5,
           command=lambda change, env=None: f"python train.py {change}")  # fmt: skip
    ref = {"sync_s": 0.3, "achievable_s": 0.12, "efficiency": 0.4, "reference": "microbenchmark"}
    evidence = [rules.ev("x", 1.0, "", "s")]
    f = rules._sync_path(v, None, 0.1, Sample(0.2), ref, evidence)
    assert f.title == (
        "Exposed communication is 20% of the step and the sync runs at 40% of the "
        "microbenchmark's speed: the sync path is the problem, not the link"
    )
    assert f.detail == (
        "sync=flat packs, all-reduces and unpacks after backward: no overlap, and two copies of "
        "every gradient."
    )
    assert f.evidence is evidence and f.impact == 0.2 and f.recommends == {"sync": "ddp"}
    overlapped = {**ref, "overlap_s": 0.05, "efficiency": 0.25}
    f = rules._sync_path(v, None, 0.1, Sample(0.2), overlapped, evidence)
    assert f.title == (
        "Exposed communication is 20% of the step and the all-reduces spanned 4.0x their time in "
        "the microbenchmark (waits for gradients included): the sync path, not the link, is the "
        "likelier problem"
    )


def _cpu_sync_view(cpu_count, world_size, threads, accumulate=None):
    return NS(gpu_like=False, train=NS(h2d=None, sync="ddp", accumulate=accumulate),
              env=NS(cpu_count=cpu_count, hostnames=["a"]), world_size=world_size,
              works=lambda: [NS(torch_threads=threads)], fraction=lambda s: s / 0.5,
              command=lambda change, env=None: f"{change} {env}")  # fmt: skip


def test_the_sync_path_on_cpu_fewer_threads_or_fewer_syncs():
    ref = {"sync_s": 0.3, "achievable_s": 0.12, "efficiency": 0.4, "reference": "microbenchmark"}

    def fix(v):
        f = rules._sync_path(v, None, 0.1, Sample(0.2), ref, [])
        return f.recommends, f.command, f.detail

    # 8 cores, 3 ranks on the host: 2 threads each (8 // 3); 3 threads per rank do not fit
    change, command, detail = fix(_cpu_sync_view(8, 3, 3))
    assert change == {} and command == "{} {'OMP_NUM_THREADS': 2}"
    assert detail == (
        "on CPU the all-reduce's gloo threads compete with the compute threads of every rank on "
        "the host; 2 intra-op thread(s) per rank leaves the cores to share rather than to fight "
        "over."
    )
    # no core count: 1 core, so 1 thread for the one rank
    assert fix(_cpu_sync_view(None, 1, 2))[1] == "{} {'OMP_NUM_THREADS': 1}"
    # 2 threads fit 2 cores per rank: fewer syncs instead, accumulate twice the run's 3
    change, command, detail = fix(_cpu_sync_view(4, 2, 2, accumulate=3))
    assert change == {"accumulate": 6} and command == "{'accumulate': 6} None"
    assert detail == (
        "on CPU the all-reduce's gloo threads compete with the compute threads of every rank on "
        "the host, and 2 intra-op thread(s) per rank already fit the cores; accumulate=6 syncs "
        "once per 6 micro-batches (DDP's no_sync), so the cores go to compute (the gloo thread's "
        "reply)."
    )
    assert fix(_cpu_sync_view(4, 2, 2))[0] == {"accumulate": 4}  # at least 4
    # a GPU run with DDP: larger buckets
    gpu = NS(gpu_like=True, train=NS(h2d=None, sync="ddp"), fraction=lambda s: s / 0.5,
             command=lambda change, env=None: f"{change} {env}")  # fmt: skip
    change, command, detail = fix(gpu)
    big = rules.LARGER_BUCKET_MB
    assert change == {"bucket": big} and command == f"{{'bucket': {big}}} None"
    assert detail == (
        f"DDP's calls run slower than alone: fewer, larger buckets (bucket={big}: 4x DDP's "
        f"{rules.DDP_BUCKET_MB} MiB) cut per-call overhead."
    )


def test_a_lag_the_scheduler_can_explain(monkeypatch):
    # a straggler 0.1 s late (SAME_CPU = 0.5: half of it is 0.05 s); the counters scripted
    from diagnosis.view import OTHER_LOAD

    assert rules.SAME_CPU == 0.5

    def waited(busy=True, other=None, reach=None, low=0.1, cpu=None, queue=None, mostly="data"):
        counters = {"cpu_s": cpu, "runqueue_s": queue}
        monkeypatch.setattr(rules, "_core_wait_per_step", lambda v: reach)
        monkeypatch.setattr(rules, "_lag_low", lambda s: low if s.rank == 1 else None)
        monkeypatch.setattr(
            rules, "_extra_per_step", lambda v, rank, key: counters[key] if rank == 1 else None
        )
        v = NS(contention=lambda: NS() if busy else None, other_load=lambda: other)
        return rules._waited_for_a_core(v, NS(rank=1, by_s=0.1, mostly=mostly))

    # a loop thread's wait of 0.05 s covers half the lag's lower end; no more CPU time: the
    # scheduler's
    assert waited(reach=0.05) is True
    assert waited(reach=0.0499) is False
    assert waited(reach=0.05, low=0.2) is False
    assert waited(reach=0.05, cpu=0.0499) is True
    assert waited(reach=0.05, cpu=0.05) is False  # it did half its lag in extra CPU time
    # the run queue's extra wait says it directly
    assert waited(queue=0.05) is True and waited(queue=0.0499) is False
    assert waited(reach=0.01, queue=0.05) is True
    # no counters: only a compute lag, with no extra CPU time (or none measured on an idle host)
    assert waited(mostly=None, cpu=0.0499) is True
    assert waited(mostly="compute", cpu=0.05) is False
    assert waited(mostly="compute") is False  # busy, nothing measured
    assert waited(busy=False, other=OTHER_LOAD + 0.01, mostly="compute") is True
    assert waited(busy=False, other=OTHER_LOAD, mostly="compute") is False  # not loaded enough
    assert waited(busy=False, other=None, reach=1.0) is False


def test_evidence_not_in_the_record():
    for make, unit in ((rules.ev_ms, "ms"), (rules.ev_pct, "%")):
        e = make("exposed", None, "result.comm.exposed_s")
        assert (e.name, e.value, e.unit, e.ci_lo, e.ci_hi, e.source, e.note) == (
            "exposed", None, unit, None, None, "result.comm.exposed_s", "not in the record",
        )  # fmt: skip
    e = rules.ev("calls", None, "", "result.comm.collectives_per_step")
    assert (e.value, e.note) == (None, "not in the record")
    e = rules.ev("calls", 3, "", "result.comm.collectives_per_step")
    assert e.note == "no interval: one figure"


def test_the_noise_rule_s_drift_evidence_and_a_run_without_a_step_count():
    from base.record_types import SteadyState

    v = _NoiseView(40)
    hidden = [_finding(0.05, "straggler")]
    steady = SteadyState(steady=False, drift=0.034, p_value=0.0123)
    f = rules.noise_rule(v, _noise(n=40, steady=steady, reasons=["drift"]), hidden)
    assert len(f.evidence) == 2
    e = f.evidence[1]
    assert (e.name, e.value, e.unit, e.source, e.note) == (
        "drift, last third vs first third of the window", pytest.approx(3.4), "%",
        "result.steady", "p=0.012",
    )  # fmt: skip
    no_p = SteadyState(steady=False, drift=-0.02)
    e = rules.noise_rule(v, _noise(n=40, steady=no_p, reasons=["d"]), hidden).evidence[1]
    assert e.value == pytest.approx(-2.0) and e.note == "no interval: one figure"
    no_drift = SteadyState(steady=True)
    assert (
        len(rules.noise_rule(v, _noise(n=40, steady=no_drift, reasons=["d"]), hidden).evidence) == 1
    )
    # no step count anywhere: one step; +-50% -> 1 x (0.5 / 0.05)^2 = 100 steps
    v.train.steps = None
    f = rules.noise_rule(v, _noise(n=None, rel_halfwidth=0.5, reasons=["r"]), hidden)
    assert f.recommends == {"steps": 100}


def test_a_rule_is_registered_with_the_tasks_it_reads(monkeypatch):
    def check(v):
        return None

    registered = []
    monkeypatch.setattr(rules, "RULES", registered)
    assert rules.reads("train", "grad_sync")(check) is check
    assert rules.reads()(check) is check
    assert registered == [rules.Rule(check, ("train", "grad_sync")), rules.Rule(check, None)]
    assert rules.rules_for("grad_sync") == [check, check] and rules.rules_for("pair_groups") == [
        check
    ]


def test_a_finding_carries_its_template_s_pool():
    v = NS(command=lambda change, env=None: "python train.py")
    f = rules.EXPOSED_UNEXPLAINED.finding(
        v, title="t", detail="d", evidence=[], saving=None, impact=0.1
    )
    assert f.pool == "exposed" and f.rule == "exposed_comm.unexplained"
    assert (
        rules.EXPOSED_UNCLEAR.finding(
            v, title="t", detail="d", evidence=[], saving=None, impact=0.1
        ).pool
        == ""
    )


def test_the_titles_percentages_at_90():
    # 90% exposed, a sync at 90% of its reference: a factor 1.01 off would print 91%
    cmd = lambda change, env=None: "python train.py"  # noqa: E731 - a stand-in for the run view's command builder
    share = Sample(0.9)
    ref = {"efficiency": 0.9, "efficiency_ci_lo": 0.9, "efficiency_ci_hi": 0.9,
           "reference": "microbenchmark", "sync_s": 0.3, "achievable_s": 0.27}  # fmt: skip
    unclear = rules._cause_unclear(NS(config={}, command=cmd), share, ref, [])
    assert unclear.title.startswith("Exposed communication is 90% of the step; the comm ")
    assert "interval [90, 90]% straddles" in unclear.title
    unconfirmed = rules._exposed_unconfirmed(NS(reference=None, command=cmd), Sample(0.5, n=1),
                                             share, [])  # fmt: skip
    assert unconfirmed.title.startswith("Exposed communication was 90% of the step in 1 probe")
    link = rules._slow_link(_link_view(), None, 0.2, share, ref, [])
    assert link.title.startswith(
        "Exposed communication is 90% of the step and the sync already runs at 90% of the "
    )
    gpu = NS(gpu_like=True, train=NS(h2d=None, sync="ddp"), fraction=lambda s: s, command=cmd)
    path = rules._sync_path(gpu, None, 0.2, share, ref, [])
    assert path.title.startswith(
        "Exposed communication is 90% of the step and the sync runs at 90% of the microbenchmark"
    )
    spanned = rules._sync_path(gpu, None, 0.2, share, {**ref, "overlap_s": 0.1}, [])
    assert spanned.title.startswith(
        "Exposed communication is 90% of the step and the all-reduces spanned 1.1x their time"
    )


def test_consecutive_spikes_are_a_burst_not_a_period():
    assert rules._period([3, 4, 5], 10) is None
    assert rules._period([3, 5, 7], 10) == (2, [], [])


def test_a_long_lattice_allows_one_exception_per_five_spikes():
    # every 3rd step from 0 to 27 (10 on it), one off it (13) and one missed (15): 2 exceptions,
    # 10 // 5 = 2 allowed
    own = [0, 3, 6, 9, 12, 13, 18, 21, 24, 27]
    assert rules._period(own, 30) is None  # 9 on it, 2 exceptions: 9 // 5 = 1
    own = [0, 3, 6, 9, 12, 13, 18, 21, 24, 27, 30]
    assert rules._period(own, 31) == (3, [13], [15])


def test_two_steps_are_a_whole_lattice_when_the_window_holds_no_third():
    # steps a < b, period b - a: none before a, none after b in a window of n
    assert rules._whole_lattice([2, 6], 10) is True  # 2 - 4 < 0, 6 + 4 >= 10
    assert rules._whole_lattice([2, 6], 11) is False  # 10 is in the window
    assert rules._whole_lattice([4, 8], 12) is False  # 0 is in the window (4 - 4 = 0)
    assert rules._whole_lattice([3, 7], 11) is True  # 3 - 4 < 0, 7 + 4 = 11 >= 11
    assert rules._whole_lattice([3, 7], 12) is False
    assert rules._whole_lattice([4, 5], 6) is False  # consecutive: no period
    assert rules._whole_lattice([1, 3], 5) is True  # period 2
    assert rules._whole_lattice([5, 8], 10) is False  # 2 is in the window


def test_the_lattice_test_corrects_for_tied_steps():
    # 30 steps of exactly 1.0 except 2.0 on every 5th from 0 (6 of them): heavy ties; the chance is
    # scipy's tie-corrected Mann-Whitney p (one-sided, with continuity) times the lattices tried
    from scipy.stats import mannwhitneyu

    n = 30
    ready = [2.0 if i % 5 == 0 else 1.0 for i in range(n)]
    flat = [1.0] * n
    steps, envelope, chance = rules._beyond_noise(ready, [], set(), [flat])
    on = [ready[i] for i in steps]
    off = [ready[i] for i in range(n) if i not in steps]
    p = mannwhitneyu(on, off, alternative="greater", method="asymptotic").pvalue
    tried = sum(1 for q in range(2, n // 3 + 1) for r in range(q) if len(range(r, n, q)) >= 3)
    assert envelope == 0.0
    assert chance == pytest.approx(p * tried, rel=1e-9)


def test_a_lattice_another_rank_shares_by_half_is_the_job_s():
    # the rank's lattice steps are 1.0 up; another rank's are exactly half as much up: the job's
    n = 30
    ready = [2.0 if i % 5 == 0 else 1.0 for i in range(n)]
    half = [1.5 if i % 5 == 0 else 1.0 for i in range(n)]
    assert rules._beyond_noise(ready, [], set(), [half]) is None
    less = [1.25 if i % 5 == 0 else 1.0 for i in range(n)]
    assert rules._beyond_noise(ready, [], set(), [less]) is not None


def test_a_lattice_another_rank_shares_by_less_than_half_is_the_rank_s():
    n = 30
    ready = [2.0 if i % 5 == 0 else 1.0 for i in range(n)]
    third = [1.4 if i % 5 == 0 else 1.0 for i in range(n)]  # 0.4 of the rank's 1.0: under half
    assert rules._beyond_noise(ready, [], set(), [third]) is not None


def test_stalls_exactly_twice_the_others_excursion_are_not_beyond_it():
    # two stalls 0.5 above the median on a whole lattice (steps 2 and 7 of 10); the other rank
    # rose 0.25 once: twice that is 0.5, not exceeded
    ready = [1.0] * 10
    ready[2] = ready[7] = 1.5
    other = [1.0] * 10
    other[4] = 1.25
    assert rules._beyond_noise(ready, [2, 7], set(), [other]) is None
    ready[2] = ready[7] = 1.5001
    assert rules._beyond_noise(ready, [2, 7], set(), [other]) == ([2, 7], 0.25, None)
