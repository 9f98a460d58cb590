"""whatif/profile.py (issue 36: a module the mutation run covers): the what-if profile's small
arithmetic, checked on hand-made inputs by another route: a median counted by hand, the probe's
speed ratio, the memory speed from the optimizer phase (bytes per parameter written out), a byte
count's time with its stated extra spread (log-normal half-widths added in quadrature, written out
here), the fresh pages' cost, an interval's relative half-width, PowerSGD's pass shares."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

import pytest

from base.record_types import HookCosts, ReadyMode
from whatif import profile as pf
from whatif.quantity import Quantity

Z = 1.959963984540054


def _params(numel, element_size=None):
    n = len(numel)
    return pf.Params(
        [f"p{i}" for i in range(n)], numel, element_size or [4] * n, list(range(n)), [0.0] * n, ""
    )


def test_median_counted_by_hand():
    assert pf._median([3.0, 1.0, 2.0]) == 2.0
    assert pf._median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert pf._median([5.0]) == 5.0
    assert pf._median([1.0, 9.0]) == 5.0


def test_the_probes_speed_ratio_is_window_forward_over_the_probes_median():
    assert pf.probe_scale(ReadyMode(forward_s=[0.2, 0.1, 0.4]), Quantity.exact(0.1)) == 0.5
    assert pf.probe_scale(ReadyMode(forward_s=[0.1, 0.3]), Quantity.exact(0.3)) == pytest.approx(
        1.5
    )
    assert pf.probe_scale(ReadyMode(forward_s=[]), Quantity.exact(0.3)) == 1.0
    assert pf.probe_scale(ReadyMode(), Quantity.exact(0.3)) == 1.0
    assert pf.probe_scale(ReadyMode(forward_s=[0.0, 0.0, 1.0]), Quantity.exact(0.3)) == 1.0
    assert pf.probe_scale(ReadyMode(forward_s=[0.2]), Quantity.exact(0.0)) == 1.0


def test_memory_speed_is_the_optimizers_bytes_over_its_time():
    p = _params([1000, 3000])  # 4000 parameters
    sgd = pf._memory_speed({"solver": {"momentum": 0.0}}, Quantity.exact(0.001), p)
    assert sgd.value == pytest.approx(12 * 4000 / 0.001) and not sgd.has_interval
    mom = pf._memory_speed({"solver": {"momentum": 0.9}}, Quantity(0.002, 0.001, 0.004), p)
    assert (mom.value, mom.lo, mom.hi) == (
        pytest.approx(20 * 4000 / 0.002),
        pytest.approx(20 * 4000 / 0.004),
        pytest.approx(20 * 4000 / 0.001),
    )
    assert "20 bytes per parameter" in mom.source
    assert pf._memory_speed(None, Quantity.exact(0.001), p).value == pytest.approx(
        12 * 4000 / 0.001
    )
    assert pf._memory_speed(None, Quantity.exact(0.0), p) is None
    assert pf._memory_speed(None, Quantity.exact(-1.0), p) is None
    # an interval reaching 0: the point alone
    at0 = pf._memory_speed(None, Quantity(0.002, 0.0, 0.004), p)
    assert at0.value == pytest.approx(12 * 4000 / 0.002) and not at0.has_interval


def test_a_byte_counts_time_carries_the_stated_extra_spread():
    # 1e9 B/s exact: 1e6 B take 1 ms, +-25% stated as a log-normal 95% interval: x/ 1.25
    q = pf._bytes_time(1e6, Quantity.exact(1e9), "w")
    assert q.value == pytest.approx(1e-3)
    assert (q.lo, q.hi) == (pytest.approx(1e-3 / 1.25), pytest.approx(1e-3 * 1.25))
    # with the speed's own interval [0.5e9, 2e9]: time [0.5 ms, 2 ms] widened in quadrature
    q = pf._bytes_time(1e6, Quantity(1e9, 0.5e9, 2e9), "w", extra=0.1)
    s_own, s_extra = math.log(2) / Z, math.log(1.1) / Z
    s = math.hypot(s_own, s_extra)
    assert q.value == pytest.approx(1e-3)
    assert (q.lo, q.hi) == (
        pytest.approx(1e-3 * math.exp(-Z * s)),
        pytest.approx(1e-3 * math.exp(Z * s)),
    )
    assert q.source == "w"


def test_fresh_pages_from_the_probe_or_the_stated_figure():
    p = _params([1_000_000], [4])  # 4 MB
    assert pf._fresh_pages(None, p, "cuda") is None
    v, lo, hi = pf.FRESH_PAGE_S_PER_BYTE
    q = pf._fresh_pages(None, p, "cpu")
    assert (q.value, q.lo, q.hi) == (
        pytest.approx(v * 4e6),
        pytest.approx(lo * 4e6),
        pytest.approx(hi * 4e6),
    )
    # timed: (median fresh - median touched) / fresh bytes per byte, x the gradient's bytes
    ps = NS(fresh_s=[0.003, 0.005, 0.004], touched_s=[0.001, 0.002, 0.003], fresh_bytes=2e6)
    gr = NS(costs=NS(powersgd=ps))
    q = pf._fresh_pages(gr, p, "cpu")
    per = (0.004 - 0.002) / 2e6
    assert q.value == pytest.approx(per * 4e6)
    assert (q.lo, q.hi) == (pytest.approx(per * 4e6 / 1.25), pytest.approx(per * 4e6 * 1.25))
    assert "3 timing(s) of 2 MB" in q.source
    faster = NS(costs=NS(powersgd=NS(fresh_s=[0.001], touched_s=[0.002], fresh_bytes=2e6)))
    assert pf._fresh_pages(faster, p, "cpu").value == 0.0
    untimed = NS(costs=NS(powersgd=NS(fresh_s=None, touched_s=[0.002], fresh_bytes=2e6)))
    assert pf._fresh_pages(untimed, p, "cpu").value == pytest.approx(v * 4e6)
    assert pf._fresh_pages(NS(costs=None), p, "cpu").value == pytest.approx(v * 4e6)


def test_an_intervals_relative_half_width_in_log_space():
    assert pf._rel(Quantity(1.0, 0.5, 2.0)) == pytest.approx(math.log(4) / 2)
    assert pf._rel(Quantity(2.0, 1.0, 3.0)) == pytest.approx(math.log(3) / 2)
    assert pf._rel(Quantity.exact(1.0)) == 0.0
    assert pf._rel(Quantity(0.0, -1.0, 1.0)) == 0.0
    assert pf._rel(Quantity(1.0, 0.0, 2.0)) == 0.0


def test_total_bytes_and_the_powersgd_pass_shares():
    assert _params([10, 20], [4, 2]).total_bytes == 80
    assert pf.PSGD_PASSES_SHARE == pytest.approx({"pre": 6 / 11, "mid": 1 / 11, "post": 4 / 11})


def test_the_image_size_setting():
    assert pf._image_size({"data": {"image_size": 32}}) == 32
    assert pf._image_size({"scale": {"image_size": 64}}) == 64
    assert pf._image_size({"data": {"image_size": 32}, "scale": {"image_size": 64}}) == 32
    assert pf._image_size(None) == 224


def test_the_grad_ready_modes():
    alone = ReadyMode(forward_s=[1.0])
    gr = NS(modes=NS(alone=alone, with_sync=None))
    assert pf._mode(gr, "alone") is alone
    assert pf._mode(gr, "with_sync") == ReadyMode()
    assert pf._mode(None, "alone") == ReadyMode()
    assert pf._mode(NS(modes=None), "alone") == ReadyMode()


def _gr(forward_s, backward_s):
    return NS(modes=NS(alone=ReadyMode(forward_s=forward_s, backward_s=backward_s), with_sync=None))


def test_backward_alone_from_the_probe_scaled_to_the_window():
    # the probe's median backward 0.3 s, its forward 0.2 s against the window's 0.1 s: x 0.5
    fwd = Quantity(0.1, 0.08, 0.125)
    notes: list[str] = []
    gr = _gr([0.1, 0.2, 0.3], [0.2, 0.4, 0.3])
    q = pf._backward_alone(NS(world_size=2), None, fwd, gr, None, "ddp", 1, notes)
    assert (q.value, q.lo, q.hi) == (
        pytest.approx(0.15),
        pytest.approx(0.12),
        pytest.approx(0.1875),
    )
    assert q.source == (
        "result.grad_ready: backward under no_sync, 3 probe pass(es), x 0.5 (the window's "
        "forward / the probe's); interval: the window's forward phase's, relative"
    )
    # the window's forward without an interval: +-5% stated
    q = pf._backward_alone(NS(world_size=2), None, Quantity.exact(0.1), gr, None, "ddp", 1, notes)
    assert (q.value, q.lo, q.hi) == (
        pytest.approx(0.15),
        pytest.approx(0.15 / 1.05),
        pytest.approx(0.15 * 1.05),
    )
    assert q.source.endswith(" (none there: +-5% stated)") and notes == []


def test_backward_alone_without_the_probe():
    fwd = Quantity(0.1, 0.08, 0.125)
    phases = NS(backward={"median": 0.4, "ci_lo": 0.36, "ci_hi": 0.44, "ci_level": 0.95})
    one = NS(world_size=1, script=None)
    # a sync with nothing beside backward: its own phase, per micro-step (accumulate 2)
    for sync, r in (("local", one), ("per_param", NS(world_size=2)), ("flat", NS(world_size=2))):
        q = pf._backward_alone(r, phases, fwd, None, None, sync, 2, [])
        assert (q.value, q.lo, q.hi) == (
            pytest.approx(0.2),
            pytest.approx(0.18),
            pytest.approx(0.22),
        )
    # a script: its backward phase, with a note that it holds the all-reduces' slow-down
    notes: list[str] = []
    q = pf._backward_alone(
        NS(world_size=2, script=object()), phases, fwd, None, None, "ddp", 1, notes
    )
    assert q.value == pytest.approx(0.4) and notes[0].startswith(
        "backward compute alone: the script's"
    )
    # DDP without a probe: forward x the FLOP ratio (2.5), +-FLOP_MODEL_EXTRA on top
    notes = []
    r = NS(world_size=2, script=None)
    q = pf._backward_alone(r, phases, fwd, None, (2.0, 5.0), "ddp", 1, notes)
    want = fwd.scaled(2.5).with_extra(pf.FLOP_MODEL_EXTRA)
    assert (q.value, q.lo, q.hi) == (
        pytest.approx(0.25),
        pytest.approx(want.lo),
        pytest.approx(want.hi),
    )
    assert notes == [
        "backward compute alone: not measured (DDP overlaps it with the all-reduce); assumed "
        f"forward x 2.5, the model's backward/forward FLOP ratio, +-{pf.FLOP_MODEL_EXTRA:.0%}"
    ]
    # ... plus writing every gradient once (4 bytes each) at the memory speed: 4 MB at 1 GB/s
    notes = []
    mem = Quantity.exact(1e9)
    q = pf._backward_alone(
        r, phases, fwd, None, (2.0, 5.0), "ddp", 1, notes, mem, _params([1_000_000])
    )
    w = pf._bytes_time(4e6, mem, "w")
    assert (q.value, q.lo, q.hi) == (
        pytest.approx(0.25 + 0.004),
        pytest.approx(want.lo + w.lo),
        pytest.approx(want.hi + w.hi),
    )
    assert notes[0].endswith(
        ", plus writing every gradient once at the optimizer's memory speed (4 ms; the FLOP count "
        "leaves out memory-bound work)"
    )
    # no FLOP count: 2 x forward, +-25% on top
    notes = []
    q = pf._backward_alone(r, phases, fwd, None, None, "ddp", 1, notes)
    want = fwd.scaled(2.0).with_extra(0.25)
    assert (q.value, q.lo, q.hi) == (
        pytest.approx(0.2),
        pytest.approx(want.lo),
        pytest.approx(want.hi),
    )
    assert notes == [
        "backward compute alone: assumed 2 x forward (no FLOP count for this model), +-25%"
    ]


def test_compressible_elements_by_torchs_rule_by_hand():
    # rank 4 at min_compression_rate 0.6: (rows + cols) x min(rows, cols, 4) x 0.6 < rows x cols
    shapes = [(100,), (2, 1000), (1000, 2), (3, 3), (10, 10), (4, 5, 6)]
    numel = [math.prod(s) for s in shapes]
    # 1-D: never; 2 x 1000 and 1000 x 2 at rank 2: 1202.4 < 2000; 3 x 3 at 3: 10.8 > 9, no;
    # 10 x 10 at 4: 48 < 100; 4 x 30 (the rest folded) at 4: 81.6 < 120
    assert pf._compressible(_params(numel), shapes, 4, 0.6) == 2000 + 2000 + 100 + 120


def test_the_bucket_cap_ddp_got():
    ddp = NS(bucket_cap_mb=50.0, has=lambda k: k == "bucket_cap_mb")
    assert pf._bucket_cap(NS(ddp=ddp, bucket_mb=25.0)) == 50.0
    unset = NS(bucket_cap_mb=None, has=lambda k: False)
    assert pf._bucket_cap(NS(ddp=unset, bucket_mb=25.0)) == 25.0
    assert pf._bucket_cap(NS(ddp=None, bucket_mb="default")) is None


def test_contention_calibrated_from_a_runs_timers_by_hand():
    # the hand case of test_mutation_kill_step.py's test_contention_is_calibrated_back_...: two
    # 2 MB buckets, backward 60 ms, each call 100 ms alone; compute 2x and the call 1.5x slower
    # give DDP's timers 90 ms (backward compute) and 223 ms (the all-reduce span)
    from tests.test_mutation_kill_step import _hprof, _link

    def prof(**kw):
        base = dict(device="cpu", backend="gloo")
        p = _hprof(
            bucket_cap=None,
            copy_in=Quantity.exact(0.0),
            link=_link("own", 0.0, 2e7),
            **{**base, **kw},
        )
        p.notes = []
        return p

    p = prof()
    pf._contention(p, NS(comm=NS(time_s=0.223, backward_compute_s=0.090), grad_ready=None))
    c = p.contention
    rel = pf.MIN_DUTY_REL
    assert (c.s_compute.value, c.s_comm.value) == (pytest.approx(2.0), pytest.approx(1.5))
    assert c.s_compute.hi == pytest.approx(2.0 * (1 + rel))
    assert c.s_comm.lo == pytest.approx(1.5 / (1 + rel))
    assert c.per_call.value == 0.0 and not c.per_call.has_interval
    assert c.how.startswith("compute 2.00x and all-reduce 1.50x slower while both run")
    assert p.notes == [f"CPU contention (gloo): {c.how}"]
    # the probe's ratio instead of DDP's timer: the last gradient ready beside the all-reduces
    # (median over passes of each pass's last: 0.4 s) over its backward alone (0.2 s), x the
    # window's 60 ms: 120 ms, so compute is 3x slower; the call then does 60 of its 100 ms by
    # 120 ms, 40 alone and the last 100: a span of 260 - 30 + 3 ms
    p = prof()
    gr = NS(
        modes=NS(
            with_sync=ReadyMode(ready_s=[[0.1, 0.3], [0.2, 0.5]]),
            alone=ReadyMode(backward_s=[0.2]),
        )
    )
    pf._contention(p, NS(comm=NS(time_s=0.233, backward_compute_s=0.5), grad_ready=gr))
    assert (p.contention.s_compute.value, p.contention.s_comm.value) == (
        pytest.approx(3.0),
        pytest.approx(1.5),
    )
    # NCCL on a GPU: nothing calibrated, said
    p = prof(device="cuda")
    before = p.contention
    pf._contention(p, NS(comm=NS(time_s=0.223, backward_compute_s=0.09), grad_ready=None))
    assert (
        p.contention.how.startswith("none modelled: NCCL kernels share the GPU") and p.notes == []
    )
    assert p.contention.s_compute is before.s_compute
    # one rank: nothing beside backward to calibrate on, said in the notes
    p = prof(world_size=1)
    pf._contention(p, NS(comm=None, grad_ready=None))
    assert p.contention.how.startswith("not measurable from this run")
    assert p.notes == [f"CPU contention between gloo's all-reduce and backward: {p.contention.how}"]


def test_a_byte_counts_time_keeps_what_it_times_as_its_source():
    assert pf._bytes_time(1e6, Quantity.exact(1e9), "writing").source == "writing"


def test_an_emulated_link_from_the_records_env():
    from whatif.links import emulated

    def env(**kw):
        return NS(link=NS(**{**dict(emulated=True, rate_bit_s=2e9, nodes=2), **kw}))

    notes: list[str] = []
    lk = pf._emulated(env(), notes)
    assert lk == emulated(2.0)  # 2e9 bit/s: 2 Gbit/s
    assert notes == [
        "no on-rank microbenchmark in this record: the link is the emulated one the run was shaped "
        "to (2 Gbit/s, env.link), at the share of the rate gloo reaches through it"
    ]
    for bad in (dict(emulated=False), dict(rate_bit_s=0), dict(nodes=1), dict(nodes=None)):
        assert pf._emulated(env(**bad), notes) is None
    assert pf._emulated(None, notes) is None and pf._emulated(NS(link=None), notes) is None
    assert len(notes) == 1


def test_a_link_from_the_syncs_own_time_per_call():
    # 4 calls of 1 MB on average in 100 ms: 25 ms a call, on 2 ranks
    comm = NS(time_s=0.1, bytes_per_step=4e6, collectives_per_step=4)
    notes: list[str] = []
    lk = pf._link_from_sync(NS(comm=comm, world_size=2), notes)
    assert lk.point_time(1_000_000, 2) == pytest.approx(0.025)
    assert lk.measured_ranks == 2
    assert (lk.busbw.lo, lk.busbw.hi) == (
        pytest.approx(lk.busbw.value / 1.5),
        pytest.approx(lk.busbw.value * 1.5),
    )
    assert notes == [
        "no on-rank microbenchmark in this record: the link is taken from the sync's own time "
        "(100 ms for 4 call(s) of 1 MB on average), a lower bound on its speed (the span includes "
        "waits for gradients), +-50%"
    ]
    assert pf._link_from_sync(NS(comm=None, world_size=2), notes) is None
    assert pf._link_from_sync(NS(comm=comm, world_size=1), notes) is None
    assert pf._link_from_sync(NS(comm=comm, world_size=None), notes) is None
    for bad in ("time_s", "bytes_per_step", "collectives_per_step"):
        zero = NS(**{**vars(comm), bad: 0})
        assert pf._link_from_sync(NS(comm=zero, world_size=2), notes) is None
    assert len(notes) == 1


def test_the_hook_costs_measured_by_the_probe():
    from base.record_types import PowersgdCosts

    ps = PowersgdCosts(rank=2, s=[0.02, 0.03, 0.01], pre_s=[0.006], mid_s=[0.002], post_s=[0.004])
    costs = HookCosts(
        cast_timed="bf16",
        cast_bf16_s=[0.002, 0.004],
        copy_in_s=[0.004, 0.006, 0.005],
        copy_out_s=[0.003],
        powersgd=ps,
    )
    notes: list[str] = []
    cin, cout, cast, psgd, rank, split = pf._costs(NS(costs=costs, method=None), notes)
    assert (cin.value, cin.lo, cin.hi) == (
        pytest.approx(0.005),
        pytest.approx(0.005 / 1.15),
        pytest.approx(0.005 * 1.15),
    )
    assert cin.source == "result.grad_ready.costs.copy_in_s (3 timing(s), +-15% stated)"
    assert cout.value == pytest.approx(0.003)
    # fp16 not timed: taken as bf16's (the same bytes)
    assert cast["bf16"].value == pytest.approx(0.003) and cast["fp16"].value == pytest.approx(0.003)
    assert cast["fp16"].source.endswith("; fp16 taken as bf16 (the same bytes)")
    assert (cast["fp16"].lo, cast["fp16"].hi) == (cast["bf16"].lo, cast["bf16"].hi)
    assert psgd.value == pytest.approx(0.02) and psgd.hi == pytest.approx(0.02 * 1.15)
    assert psgd.source == "result.grad_ready.costs.powersgd at rank 2 (+-15% stated)"
    assert rank == 2
    assert split == {
        "pre": pytest.approx(0.5),
        "mid": pytest.approx(1 / 6),
        "post": pytest.approx(1 / 3),
    }
    assert notes == []


def test_the_hook_costs_estimated_without_the_probe():
    # 1000 x 1000 weights and a bias: 1,000,100 elements, 1,000,000 of them compressible; memory
    # at 1 GB/s: the copies 8 bytes an element, the casts 16, PowerSGD 11 passes x 4 bytes
    params = _params([1_000_000, 100])
    shapes = [(1000, 1000), (100,)]
    mem = Quantity.exact(1e9)
    notes: list[str] = []
    cin, cout, cast, psgd, rank, split = pf._costs(None, notes, mem, params, shapes)
    assert cin.value == pytest.approx(8 * 1_000_100 / 1e9) and cout.value == cin.value
    assert cast["bf16"].value == pytest.approx(16 * 1_000_100 / 1e9)
    assert (cin.lo, cin.hi) == (pytest.approx(cin.value / 1.25), pytest.approx(cin.value * 1.25))
    assert psgd.value == pytest.approx(44 * 1_000_000 / 1e9)
    assert psgd.hi == pytest.approx(psgd.value * 1.5)
    assert (rank, split) == (1, pf.PSGD_PASSES_SHARE)
    assert notes == [
        "DDP's gradient copies and the bf16/fp16/PowerSGD compute: not measured (the record "
        "predates the grad_ready probe): estimated as memory traffic at the speed the optimizer "
        "phase streamed its 12-20 bytes per parameter (+-25%; PowerSGD +-50%)"
    ]
    # the copy timed but not PowerSGD: 44 / 8 of the copy's time per compressible element
    notes = []
    timed = NS(costs=HookCosts(copy_in_s=[0.008]), method="task=script probe")
    _, _, _, psgd, _, _ = pf._costs(timed, notes, None, params, shapes)
    assert psgd.value == pytest.approx(0.008 * 44 / 8 * 1_000_000 / 1_000_100)
    assert psgd.lo == pytest.approx(psgd.value / 1.5)
    assert notes == ["PowerSGD's compute: " + psgd.source]
    # nothing: zeros, said
    notes = []
    cin, _, cast, psgd, _, _ = pf._costs(NS(costs=None, method="task=script"), notes)
    assert (cin.value, cast["fp16"].value, psgd) == (0.0, 0.0, None)
    assert notes[0].endswith("not measured (a script's run does not probe them): taken as 0")


def test_the_sources_of_an_exact_memory_speed_and_of_untimed_fresh_pages():
    p = _params([1000, 3000])
    sgd = pf._memory_speed({"solver": {"momentum": 0.0}}, Quantity.exact(0.001), p)
    assert sgd.source == "12 bytes per parameter / the optimizer phase"
    # a PowerSGD cost block without the fresh-page fields: the stated figure
    v = pf.FRESH_PAGE_S_PER_BYTE[0]
    q = pf._fresh_pages(NS(costs=NS(powersgd=NS())), _params([1_000_000], [4]), "cpu")
    assert q.value == pytest.approx(v * 4e6)
