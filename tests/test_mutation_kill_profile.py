"""whatif/profile.py (issue 36: a module the mutation run covers): the what-if profile's small
arithmetic, checked on hand-made inputs by another route: a median counted by hand, the probe's
speed ratio, the memory speed from the optimizer phase (bytes per parameter written out), a byte
count's time with its stated extra spread (log-normal half-widths added in quadrature, written out
here), the fresh pages' cost, an interval's relative half-width, PowerSGD's pass shares."""

from __future__ import annotations

import json
import math
import os
import warnings
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


# ------------------------------------------------- synthetic: a profile from published figures
def _analysed(n=3, ready=None, flops=(None, None)):
    """A hand-made analyse_model result: n parameters of 10, 20, ... elements (4 bytes each)."""
    return {
        "names": [f"w{i}" for i in range(n)],
        "numel": [10 * (i + 1) for i in range(n)],
        "element_size": [4] * n,
        "shapes": [(i + 1, 10) for i in range(n)],
        "order": list(reversed(range(n))),
        "ready": ready,
        "fwd_flops": flops[0],
        "bwd_flops": flops[1],
    }


def test_a_synthetic_profile_holds_every_figure_it_was_given(monkeypatch):
    seen = []

    def fake(model_json, image_size):
        seen.append((model_json, image_size))
        return _analysed(ready=[0.25, 0.5, 1.0])

    monkeypatch.setattr(pf, "analyse_model", fake)
    model = {"zz": 1, "name": "tiny", "aa": [2]}  # keys out of order: the cache key sorts them
    f, b, o = Quantity(0.1, 0.09, 0.11, "f"), Quantity(0.2, 0.18, 0.22, "b"), Quantity.exact(0.05)
    link = object()
    cin, cout, cast = Quantity.exact(0.01, "ci"), Quantity.exact(0.02, "co"), {"bf16": f}
    psgd, data, step = Quantity.exact(0.03, "ps"), Quantity.exact(0.004, "d"), Quantity.exact(0.5)
    p = pf.synthetic(
        model=model,
        image_size=64,
        batch_per_rank=32,
        world_size=8,
        device="cuda",
        backend="nccl",
        forward=f,
        backward=b,
        optimizer=o,
        link=link,
        sync="flat",
        optim="powersgd",
        bucket_cap=25.0,
        bucket_view=True,
        static_graph=True,
        copy_in=cin,
        copy_out=cout,
        cast=cast,
        powersgd=psgd,
        psgd_rank=4,
        data=data,
        step=step,
        notes=["a note"],
        label="published: X",
    )
    assert seen == [('{"aa": [2], "name": "tiny", "zz": 1}', 64)]
    got = {k: getattr(p, k) for k in ("path", "model", "device", "backend", "world_size")}
    assert got == {
        "path": "published: X",
        "model": "tiny",
        "device": "cuda",
        "backend": "nccl",
        "world_size": 8,
    }
    assert (p.batch_per_rank, p.accumulate, p.sync, p.optim, p.bucket_cap) == (
        32,
        1,
        "flat",
        "powersgd",
        25.0,
    )
    assert (p.static_graph, p.bucket_view, p.psgd_rank, p.psgd_min_rate, p.psgd_batched) == (
        True,
        True,
        4,
        2.0,
        False,
    )
    assert p.params == pf.Params(
        ["w0", "w1", "w2"],
        [10, 20, 30],
        [4, 4, 4],
        [2, 1, 0],
        [0.25, 0.5, 1.0],
        "assumed: share of backward FLOPs (meta-device backward)",
    )
    assert p.shapes == [(1, 10), (2, 10), (3, 10)]
    assert (p.data, p.h2d, p.forward, p.backward, p.optimizer) == (
        data,
        Quantity.exact(0.0, "none"),
        f,
        b,
        o,
    )
    assert (p.copy_in, p.copy_out, p.cast, p.powersgd) == (cin, cout, cast, psgd)
    assert (p.powersgd_measured_rank, p.powersgd_split, p.psgd_alloc) == (
        4,
        {"pre": 6 / 11, "mid": 1 / 11, "post": 4 / 11},
        None,
    )
    c = p.contention
    assert (c.s_compute, c.s_comm, c.how, c.per_call) == (
        Quantity.exact(1.0),
        Quantity.exact(1.0),
        "none modelled (GPU)",
        Quantity.exact(0.0),
    )
    assert (p.link, p.step, p.samples_per_s, p.step_noise) == (link, step, None, None)
    assert (p.run_to_run_sd, p.notes) == (0.02, ["a note"])
    rec = p.record
    assert (rec.status, rec.task, rec.config, rec.env.hostnames) == (
        "ok",
        "train",
        {"model": model},
        ["published"],
    )
    assert (rec.result.device, rec.result.device_name) == ("cuda", "published: X")


def test_a_synthetic_profiles_defaults(monkeypatch):
    # no FLOP count (ready None): ready by position in backward, 1 - i/n; every optional figure 0
    monkeypatch.setattr(pf, "analyse_model", lambda model_json, image_size: _analysed(n=4))
    q = Quantity.exact(0.1)
    p = pf.synthetic(
        model={"arch": "x"},
        image_size=32,
        batch_per_rank=1,
        world_size=2,
        device="xpu",  # no stated run-to-run scatter for it: 5%
        backend="gloo",
        forward=q,
        backward=q,
        optimizer=q,
        link=None,
    )
    zero = Quantity.exact(0.0, "none")
    assert p.params.ready == [1.0, 0.75, 0.5, 0.25]
    assert (p.model, p.path, p.sync, p.optim, p.bucket_cap) == ("?", "", "ddp", "none", None)
    assert (p.bucket_view, p.static_graph, p.psgd_rank, p.powersgd_measured_rank) == (
        False,
        False,
        1,
        1,
    )
    assert (p.data, p.h2d, p.copy_in, p.copy_out) == (zero, zero, zero, zero)
    assert p.cast == {"bf16": zero, "fp16": zero} and p.powersgd is None
    assert (p.step, p.notes, p.run_to_run_sd) == (None, [], 0.05)
    assert p.record.result.device_name == ""
    # a model that cannot be built here: said, with its name
    monkeypatch.setattr(pf, "analyse_model", lambda model_json, image_size: None)
    with pytest.raises(pf.ProfileError) as e:
        pf.synthetic(**{**_kw(q), "model": {"name": "big"}})
    assert str(e.value) == "cannot build model big here"


def _kw(q):
    return dict(
        model={},
        image_size=32,
        batch_per_rank=1,
        world_size=2,
        device="cpu",
        backend="gloo",
        forward=q,
        backward=q,
        optimizer=q,
        link=None,
    )


# ------------------------------------------------------------------ from_record: a hand-made record
def _summary(median, lo=None, hi=None):
    d = {"median": median}
    if lo is not None:
        d.update(ci_lo=lo, ci_hi=hi, ci_level=0.95)
    return d


def _t(q):
    return (q.value, q.lo, q.hi, q.source)


def _record(task="train", config=None, env=None, **result):
    return {
        "status": "ok",
        "task": task,
        "config": config or {},
        "env": env or {},
        "result": result,
    }


def _full_train_record():
    """Two ranks of gloo on CPU, accumulate 2, every figure given (numbers chosen to be done by
    hand below); the probe timed the ready times but no hook cost; the link shaped to 2 Gbit/s."""
    return _record(
        config={
            "model": {"name": "hand", "arch": "x"},
            "solver": {"momentum": 0.9},
            "optim": {"rank": 4, "min_compression_rate": 3.5, "batched": True},
        },
        env={
            "hostnames": ["a", "b", "a"],
            "cpu_count": 6,
            "link": {"emulated": True, "rate_bit_s": 2e9, "nodes": 2},
        },
        device="cpu",
        backend="gloo",
        world_size=2,
        sync="ddp",
        optim="powersgd",
        batch_per_rank=16,
        accumulate=2,
        phases={
            "data": _summary(0.02, 0.018, 0.022),
            "h2d": _summary(0.004),
            "forward": _summary(0.1, 0.09, 0.11),
            "backward": _summary(0.3, 0.27, 0.33),
            "optimizer": _summary(0.05, 0.04, 0.0625),
        },
        step_time_s=_summary(0.5, 0.45, 0.6),
        throughput={"samples_per_s": 64.0, "samples_ci_lo": 60.0, "samples_ci_hi": 64.0},
        per_rank=[{"rank": 0, "threads": {"intra_op": 3}}],
        ddp={"static_graph": True, "gradient_as_bucket_view": True, "bucket_cap_mb": 25},
        grad_ready={
            "names": ["a.w", "b.w"],
            "numel": [1000, 2000],
            "element_size": [4, 4],
            "order": [1, 0],
            "shapes": [[10, 100], [20, 100]],
            "modes": {
                "alone": {
                    "forward_s": [0.2, 0.2, 0.2],
                    "backward_s": [0.4, 0.5, 0.6],
                    "ready_s": [[0.1, 0.6], [0.2, 0.6], [0.3, 0.7]],
                }
            },
        },
    )


def _no_model(monkeypatch):
    calls = []

    def fake(model_json, image_size):
        calls.append((model_json, image_size))
        return None

    monkeypatch.setattr(pf, "analyse_model", fake)
    return calls


def test_a_profile_from_a_full_hand_made_record(monkeypatch):
    calls = _no_model(monkeypatch)
    p = pf.from_record(_full_train_record(), "runs/x")
    assert calls == [('{"arch": "x", "name": "hand"}', 224)]  # keys sorted: one cache entry
    assert (p.path, p.label, p.model, p.device, p.backend) == (
        "runs/x",
        "runs/x",
        "hand",
        "cpu",
        "gloo",
    )
    assert (p.world_size, p.batch_per_rank, p.accumulate, p.sync, p.optim) == (
        2,
        16,
        2,
        "ddp",
        "powersgd",
    )
    assert (p.bucket_cap, p.static_graph, p.bucket_view) == (25.0, True, True)
    assert (p.psgd_rank, p.psgd_min_rate, p.psgd_batched, p.powersgd_measured_rank) == (
        4,
        3.5,
        True,
        4,
    )
    assert (p.cores, p.threads, p.hosts, p.run_to_run_sd) == (6, 3, 2, 0.05)
    # the parameters as the probe saw them: ready = median over passes / median backward (0.5 s),
    # at most 1
    assert p.params == pf.Params(
        ["a.w", "b.w"],
        [1000, 2000],
        [4, 4],
        [1, 0],
        [pytest.approx(0.4), 1.0],
        "measured: post-accumulate-grad hooks in 3 untimed backward(s) under DDP's no_sync "
        "(result.grad_ready)",
    )
    assert p.shapes == [(10, 100), (20, 100)]
    # phases per micro-step (accumulate 2), the optimizer per step
    assert p.data == Quantity(0.01, 0.009, 0.011, "result.phases.data")
    assert p.h2d == Quantity.exact(0.002, "result.phases.h2d")
    assert p.forward == Quantity(0.05, 0.045, 0.055, "result.phases.forward")
    assert p.optimizer == Quantity(0.05, 0.04, 0.0625, "result.phases.optimizer")
    # backward alone: the probe's median 0.5 s x (window forward 0.05 / probe forward 0.2), the
    # forward's relative interval
    b = p.backward
    assert (b.value, b.lo, b.hi) == (
        pytest.approx(0.125),
        pytest.approx(0.1125),
        pytest.approx(0.1375),
    )
    assert b.source.startswith(
        "result.grad_ready: backward under no_sync, 3 probe pass(es), x 0.25"
    )
    # no hook cost timed: memory traffic at the optimizer's speed, 20 B x 3000 parameters in 50 ms
    # (momentum) = 1.2 MB/s: the copies 8 B per element (20 ms), the casts 16 B (40 ms)
    assert p.copy_in.value == pytest.approx(0.02) and p.copy_out.value == pytest.approx(0.02)
    assert p.copy_in.source == (
        "DDP's copy into buckets: 8 bytes per element at the optimizer's memory speed (not "
        "measured)"
    )
    assert p.copy_out.source.startswith("DDP's copy back: 8 bytes per element")
    assert {k: q.value for k, q in p.cast.items()} == {
        "bf16": pytest.approx(0.04),
        "fp16": pytest.approx(0.04),
    }
    assert p.cast["fp16"].source.startswith("fp16 cast: 16 bytes per element")
    assert p.cast["bf16"].source.startswith("bf16 cast: 16 bytes per element")
    # PowerSGD at rank 4, min rate 3.5: only 20 x 100 compresses ((20 + 100) x 4 x 3.5 = 1680 <
    # 2000; 10 x 100: 1540 > 1000): 11 passes x 4 B x 2000 elements at 1.2 MB/s
    assert p.powersgd.value == pytest.approx(11 * 4 * 2000 / 1.2e6)
    assert p.powersgd.source == (
        "PowerSGD: 11 fp32 passes over the compressed matrices at the optimizer's memory speed "
        "(not measured)"
    )
    assert p.powersgd_split == pf.PSGD_PASSES_SHARE
    # fresh pages, not timed: the stated 0.416 ns per byte of the 12 kB gradient
    assert p.psgd_alloc.value == pytest.approx(0.416e-9 * 12000)
    assert p.psgd_alloc.source == (
        "fresh pages 0.416 [0.33, 0.53] ns per byte beyond a touched write, not timed in this "
        f"record: {pf.FRESH_PAGE_S_PER_BYTE_HOW}"
    )
    assert p.step == Quantity(0.5, 0.45, 0.6, "result.step_time_s")
    assert _t(p.step_noise) == (
        1.0,
        pytest.approx(0.9),
        pytest.approx(1.2),
        "the step median's interval, relative",
    )
    assert p.samples_per_s == Quantity(64.0, 60.0, 64.0, "result.throughput")
    from whatif.links import emulated

    assert p.link == emulated(2.0)
    c = p.contention
    assert (c.s_compute, c.s_comm, c.per_call) == (
        Quantity.exact(1.0),
        Quantity.exact(1.0),
        Quantity.exact(0.0),
    )
    assert c.how.startswith("not measurable from this run (no DDP all-reduce beside backward)")
    assert p.notes == [
        "DDP's gradient copies and the bf16/fp16/PowerSGD compute: not measured (the record "
        "predates the grad_ready probe): estimated as memory traffic at the speed the optimizer "
        "phase streamed its 12-20 bytes per parameter (+-25%; PowerSGD +-50%)",
        "no on-rank microbenchmark in this record: the link is the emulated one the run was "
        "shaped to (2 Gbit/s, env.link), at the share of the rate gloo reaches through it",
    ]


def test_a_profile_from_a_bare_record_with_the_probes_hook_costs(monkeypatch):
    # the record names almost nothing: one rank of the defaults (cpu, gloo, DDP); the probe timed
    # the hook costs; the model's rebuilt sizes (3 tensors) do not match the probe's 2: no shapes
    seen = []

    def fake(model_json, image_size):
        seen.append((model_json, image_size))
        return _analysed(n=3)

    monkeypatch.setattr(pf, "analyse_model", fake)
    rec = _record(
        config={"model": {"name": "m2"}, "data": {"image_size": 64}},
        phases={"forward": _summary(0.1), "optimizer": _summary(0.02)},
        step_time_s=_summary(0.4),
        throughput={"samples_per_s": 50.0, "samples_ci_lo": 50.0, "samples_ci_hi": 55.0},
        per_rank=[{"rank": 0}],
        grad_ready={
            "numel": [300, 100],
            "element_size": [4, 2],
            "modes": {
                "alone": {
                    "forward_s": [0.1],
                    "backward_s": [0.2, 0.4],
                    "ready_s": [[0.3, 0.1], [0.3, 0.2]],
                }
            },
            "costs": {
                "cast_timed": "fp16",
                "cast_fp16_s": [0.004, 0.006],
                "copy_in_s": [0.01, 0.03, 0.02],
                "copy_out_s": [0.005],
                "powersgd": {
                    "rank": 2,
                    "s": [0.03],
                    "pre_s": [0.2],
                    "mid_s": [0.1],
                    "post_s": [0.1],
                    "fresh_s": [0.003, 0.005],
                    "touched_s": [0.001, 0.001],
                    "fresh_bytes": 1000000,
                },
            },
        },
    )
    p = pf.from_record(rec)
    assert seen == [('{"name": "m2"}', 64)]
    assert (p.path, p.model, p.device, p.backend, p.world_size, p.batch_per_rank) == (
        "",
        "m2",
        "cpu",
        "gloo",
        1,
        1,
    )
    assert (p.accumulate, p.sync, p.optim, p.bucket_cap, p.static_graph, p.bucket_view) == (
        1,
        "ddp",
        "none",
        None,
        False,
        False,
    )
    assert (p.psgd_rank, p.powersgd_measured_rank, p.psgd_min_rate, p.psgd_batched) == (
        2,
        2,
        2.0,
        False,
    )
    assert (p.cores, p.threads, p.hosts, p.link, p.shapes) == (None, None, 1, None, None)
    # ready: each gradient's median over the passes (0.3, 0.15) over the median backward (0.3);
    # DDP's order where the probe gave none: by ready time
    assert p.params == pf.Params(
        ["0", "1"],
        [300, 100],
        [4, 2],
        [1, 0],
        [pytest.approx(1.0), 0.5],
        "measured: post-accumulate-grad hooks in 2 untimed backward(s) under DDP's no_sync "
        "(result.grad_ready)",
    )
    assert (p.data, p.h2d) == (
        Quantity.exact(0.0, "result.phases.data (absent: 0)"),
        Quantity.exact(0.0, "result.phases.h2d (absent: 0)"),
    )
    # the probe's backward (median 0.3 s) at the window's speed (its forward 0.1 s, the probe's
    # 0.1 s), +-5% stated where the forward has no interval
    assert _t(p.backward)[:3] == (
        pytest.approx(0.3),
        pytest.approx(0.3 / 1.05),
        pytest.approx(0.3 * 1.05),
    )
    # the hook costs as timed: medians, +-15% stated; bf16 taken as the fp16 timed
    assert _t(p.copy_in) == (
        pytest.approx(0.02),
        pytest.approx(0.02 / 1.15),
        pytest.approx(0.02 * 1.15),
        "result.grad_ready.costs.copy_in_s (3 timing(s), +-15% stated)",
    )
    assert p.copy_out.value == pytest.approx(0.005)
    assert (
        p.cast["fp16"].source == "result.grad_ready.costs.cast_fp16_s (2 timing(s), +-15% stated)"
    )
    assert _t(p.cast["bf16"]) == (
        pytest.approx(0.005),
        pytest.approx(0.005 / 1.15),
        pytest.approx(0.005 * 1.15),
        "result.grad_ready.costs.cast_fp16_s (2 timing(s), +-15% stated); bf16 taken as fp16 "
        "(the same bytes)",
    )
    assert _t(p.powersgd) == (
        pytest.approx(0.03),
        pytest.approx(0.03 / 1.15),
        pytest.approx(0.03 * 1.15),
        "result.grad_ready.costs.powersgd at rank 2 (+-15% stated)",
    )
    assert p.powersgd_split == {"pre": 0.5, "mid": 0.25, "post": 0.25}
    # fresh pages timed: (4 - 1 ms) / 1 MB = 3 ns per byte, x the gradient's 1400 bytes
    assert _t(p.psgd_alloc) == (
        pytest.approx(4.2e-6),
        pytest.approx(4.2e-6 / 1.25),
        pytest.approx(4.2e-6 * 1.25),
        "result.grad_ready.costs.powersgd: fresh pages 3 ns per byte beyond a touched write "
        "(2 timing(s) of 1 MB, +-25% stated)",
    )
    assert p.step == Quantity.exact(0.4, "result.step_time_s") and p.step_noise is None
    assert p.samples_per_s == Quantity(50.0, 50.0, 55.0, "result.throughput")
    assert p.contention.how.startswith("not measurable from this run")
    assert p.notes == [f"CPU contention between gloo's all-reduce and backward: {p.contention.how}"]


def test_a_profile_from_a_scripts_record(monkeypatch):
    # task=script: the probe is the window's own buckets (with_sync), the model ignored (the
    # record's model= is the tool's default, not the script's), backward its own phase, a GPU
    calls = _no_model(monkeypatch)
    rec = _record(
        task="script",
        config={"model": {"name": "the_tools_default"}},
        env={"cpu_count": 2, "hostnames": ["h"]},
        device="cuda",
        backend="nccl",
        world_size=2,
        sync="ddp",
        batch_per_rank=8,
        accumulate=2,
        script={"path": "/home/u/my_train.py"},
        phases={
            "forward": _summary(0.1),
            "backward": _summary(0.3),
            "optimizer": _summary(0.01),
        },
        grad_ready={
            "method": "task=script: each bucket's comm hook",
            "numel": [100, 200],
            "element_size": [4, 4],
            "modes": {"with_sync": {"backward_s": [0.2], "ready_s": [[0.05, 0.2]]}},
        },
    )
    p = pf.from_record(rec, "s")
    assert calls == [("{}", 224)]
    assert (p.model, p.device, p.backend, p.run_to_run_sd, p.psgd_alloc, p.powersgd) == (
        "the script my_train.py",
        "cuda",
        "nccl",
        0.02,
        None,
        None,
    )
    assert (p.params.ready, p.params.order, p.params.names) == ([0.25, 1.0], [0, 1], ["0", "1"])
    assert (
        p.params.how
        == "measured: each bucket's comm hook start in 1 window step(s) (result.grad_ready)"
    )
    assert p.backward == Quantity.exact(0.15, "result.phases.backward")  # per micro-step
    # its hook costs estimated from the optimizer's speed: 12 B x 300 in 10 ms
    assert p.copy_in.value == pytest.approx(8 * 300 / (12 * 300 / 0.01))
    assert p.contention.how.startswith("none modelled: NCCL kernels share the GPU")
    assert p.notes[0].startswith("backward compute alone: the script's backward phase")
    assert p.notes[1].startswith(
        "DDP's gradient copies and the bf16/fp16/PowerSGD compute: not measured (a script's run "
        "does not probe them): estimated as memory traffic"
    )
    assert len(p.notes) == 2
    rec["result"]["script"] = {}
    assert pf.from_record(rec).model == "the script ?"


def test_a_records_that_cannot_give_a_profile_say_why(monkeypatch):
    calls = _no_model(monkeypatch)

    def err(rec, path=""):
        with pytest.raises(pf.ProfileError) as e:
            pf.from_record(rec, path)
        return str(e.value)

    script = _record(task="script", phases={"forward": _summary(0.1)})
    assert err(script) == (
        "record: task=script, and the record holds no parameter sizes of the script's model (no "
        "bucket was all-reduced in the window, it was made before they were recorded, or with "
        "script.comm_timing=ddp_logging: no bucket's start): name a model of the same sizes with "
        "--model NAME (conf/model/NAME.yaml)"
    )
    assert err(script, "runs/s").startswith("runs/s: task=script, and the record holds")
    assert err(_record(task="collectives")) == (
        "record: task=collectives; the what-if model reads task=train runs (a task=collectives "
        "record can be its link: --collectives)"
    )
    assert err(_record(task="collectives"), "c").startswith("c: task=collectives;")
    failed = {**_record(), "status": "failed"}
    assert err(failed) == (
        "record: the run's status is 'failed'; only finished runs have the figures the model needs"
    )
    assert err(failed, "f").startswith("f: the run's status")
    no_forward = _record(phases={"backward": _summary(0.1)})
    assert err(no_forward) == (
        "record: no phase timings (timing=false or cuda_graphs=true); the model needs forward, "
        "backward and optimizer times"
    )
    assert err(no_forward, "n").startswith("n: no phase timings")
    assert err(_record()).startswith("record: no phase timings")
    # no model in the record: nothing to rebuild ({}), and no probe: the sizes are unknown
    calls.clear()
    assert err(_record(phases={"forward": _summary(0.1)})).startswith(
        "the record has no gradient-ready probe"
    )
    assert calls == [("{}", 224)]
    assert err(_record(config={"model": {"name": "gone"}}, phases={"forward": _summary(0.1)})) == (
        "the record has no gradient-ready probe and its model cannot be rebuilt here "
        "(model=gone); the parameter sizes are unknown"
    )


def test_a_profile_without_the_probe_from_the_flop_count_and_the_syncs_own_time(monkeypatch):
    # two ranks of DDP, no probe: sizes and ready times from the rebuilt model's FLOPs (forward 2,
    # backward 5), backward = forward x 2.5 plus writing every gradient once; the link from the
    # sync's own 200 ms for 2 calls of 2 MB; no backward compute beside the all-reduce to calibrate
    # the contention on
    monkeypatch.setattr(
        pf, "analyse_model", lambda j, s: _analysed(n=2, ready=[0.3, 1.0], flops=(2.0, 5.0))
    )
    rec = _record(
        config={"model": {"name": "m5"}},
        device="cpu",
        backend="gloo",
        world_size=2,
        sync="ddp",
        # optimizer 14.982 ms: 12 B x 30 parameters, so writing 4 B each takes a third: 4.994 ms
        phases={"forward": _summary(0.1, 0.08, 0.125), "optimizer": _summary(0.014982)},
        step_time_s=_summary(0.5, 0.0, 0.6),
        throughput={"samples_per_s": 10.0},
        comm={"time_s": 0.2, "bytes_per_step": 4e6, "collectives_per_step": 2},
    )
    p = pf.from_record(rec)
    assert p.params == pf.Params(
        ["w0", "w1"],
        [10, 20],
        [4, 4],
        [1, 0],
        [0.3, 1.0],
        "assumed: share of backward FLOPs (meta-device backward)",
    )
    assert p.shapes == [(1, 10), (2, 10)]
    assert (p.backward.value, p.backward.source) == (
        pytest.approx(0.25 + 0.004994),
        "forward x backward/forward FLOP ratio + writing every gradient",
    )
    # an interval reaching 0: no relative step noise; a throughput without an interval: exact
    assert p.step_noise is None
    assert p.samples_per_s == Quantity.exact(10.0, "result.throughput")
    link = p.link
    assert (link.name, link.measured_ranks) == ("this run's sync (no microbenchmark)", 2)
    assert link.source.startswith("result.comm: the sync's own span per call; weighted least")
    # one size: bandwidth only, 2 MB in 100 ms = 20 MB/s bus bandwidth at 2 ranks, +-50% stated
    assert _t(link.busbw)[:3] == (pytest.approx(2e7), pytest.approx(2e7 / 1.5), pytest.approx(3e7))
    assert link.notes == (
        "one message size only: alpha cannot be separated from the bandwidth; alpha taken as 0",
        "too few sizes for an interval on the fit",
    )
    how = (
        "not measurable from this run (no backward compute time beside its all-reduces: no "
        "grad_ready probe with the sync, and no comm.backward_compute_s): none assumed, so a "
        "prediction for DDP with gloo on CPU over-predicts the overlap"
    )
    assert p.contention.how == how
    assert p.notes == [
        "gradient-ready times: not measured (the record predates the grad_ready probe); assumed at "
        "the share of backward FLOPs done when each gradient is accumulated (torch FlopCounterMode "
        "over a meta-device backward; elementwise ops not counted)",
        "backward compute alone: not measured (DDP overlaps it with the all-reduce); assumed "
        "forward x 2.5, the model's backward/forward FLOP ratio, +-10%, plus writing every "
        "gradient once at the optimizer's memory speed (4.99 ms; the FLOP count leaves out "
        "memory-bound work)",
        "DDP's gradient copies and the bf16/fp16/PowerSGD compute: not measured (the record "
        "predates the grad_ready probe): estimated as memory traffic at the speed the optimizer "
        "phase streamed its 12-20 bytes per parameter (+-25%; PowerSGD +-50%)",
        "no on-rank microbenchmark in this record: the link is taken from the sync's own time "
        "(200 ms for 2 call(s) of 2 MB on average), a lower bound on its speed (the span includes "
        "waits for gradients), +-50%",
        f"CPU contention between gloo's all-reduce and backward: {how}",
    ]


def test_a_profile_with_a_named_model_in_place_of_the_records(monkeypatch):
    # --model NAME: its sizes, not the probe's; no optimizer phase, so no memory speed: backward
    # from the FLOP ratio alone, the hook costs 0
    named, built = [], []
    monkeypatch.setattr(pf, "named_model", lambda name: named.append(name) or {"name": "big"})

    def fake(model_json, image_size):
        built.append(model_json)
        return _analysed(n=2)  # sizes only: the FLOP count failed

    monkeypatch.setattr(pf, "analyse_model", fake)
    rec = _full_train_record()
    del rec["result"]["phases"]["optimizer"]
    del rec["result"]["grad_ready"]["modes"]  # no backward alone timed
    p = pf.from_record(rec, model="vgg_big")
    assert (named, built, p.model) == (["vgg_big"], ['{"name": "big"}'], "vgg_big")
    # no FLOP share of the ready times: by position in backward, 1 - i/n
    assert (p.params.numel, p.params.ready) == ([10, 20], [1.0, 0.5])
    assert p.params.how == (
        "assumed: proportional to the parameter's position in backward (reverse definition order)"
    )
    # no FLOP count either (it raised on None / None before issue 36): 2 x forward [0.09, 0.11],
    # +-25% stated on top (log half-widths in quadrature)
    s25 = math.log(1.25) / Z
    lo_s, hi_s = math.hypot(math.log(0.1 / 0.09) / Z, s25), math.hypot(math.log(1.1) / Z, s25)
    assert _t(p.backward) == (
        pytest.approx(0.1),
        pytest.approx(0.1 * math.exp(-Z * lo_s)),
        pytest.approx(0.1 * math.exp(Z * hi_s)),
        "2 x forward (assumed)",
    )
    assert p.copy_in == Quantity.exact(0.0, "DDP's copy into buckets: not measured (taken as 0)")
    assert p.notes[0] == (
        "gradient-ready times: not measured and the FLOP count failed; assumed: proportional to "
        "the parameter's position in backward (reverse definition order)"
    )
    # a named model that cannot be built here
    monkeypatch.setattr(pf, "analyse_model", lambda j, s: None)
    with pytest.raises(pf.ProfileError) as e:
        pf.from_record(rec, model="vgg_big")
    assert str(e.value) == "--model vgg_big: cannot build it here on the meta device"
    # ... and one that can, with its FLOP shares: said whose sizes they are
    monkeypatch.setattr(
        pf, "analyse_model", lambda j, s: _analysed(n=2, ready=[0.5, 1.0], flops=(2.0, 6.0))
    )
    p = pf.from_record(rec, model="vgg_big")
    assert p.params.ready == [0.5, 1.0] and p.notes[0].startswith(
        "gradient-ready times: not measured (those of --model vgg_big); assumed at the share"
    )
    # backward: forward x the FLOP ratio 3, nothing for writing the gradients (no memory speed)
    assert p.backward.value == pytest.approx(0.05 * 3) and p.backward.source == (
        "forward x backward/forward FLOP ratio"
    )


# --------------------------------------------------------------------- the rest, piece by piece
def test_backward_alone_sources_and_edges():
    phases = NS(backward={"median": 0.4, "ci_lo": 0.36, "ci_hi": 0.44, "ci_level": 0.95})
    fwd = Quantity(0.1, 0.08, 0.125)
    # sync=local on two ranks (each its own step): its backward phase, per micro-step, named
    q = pf._backward_alone(NS(world_size=2), phases, fwd, None, None, "local", 2, [])
    assert _t(q) == (pytest.approx(0.2), 0.18, 0.22, "result.phases.backward")
    # DDP on one rank: no all-reduce beside backward, but still DDP's step: not its phase
    q = pf._backward_alone(NS(world_size=1, script=None), phases, fwd, None, None, "ddp", 1, [])
    assert q.source == "2 x forward (assumed)"
    # the window's forward interval reaching 0: no relative interval to carry, +-5% stated
    q = pf._backward_alone(
        NS(world_size=2), None, Quantity(0.1, 0.0, 0.2), _gr([0.1], [0.3]), None, "ddp", 1, []
    )
    assert _t(q)[:3] == (pytest.approx(0.3), pytest.approx(0.3 / 1.05), pytest.approx(0.3 * 1.05))


def test_hook_costs_edges():
    notes: list[str] = []
    # timings given as single numbers (not lists): their own medians
    gr = NS(costs=HookCosts(copy_in_s=0.02, powersgd=pf.PowersgdCosts(rank=1, s=0.03)), method=None)
    out = pf._costs(gr, notes)
    assert (out[0].value, out[3].value) == (0.02, 0.03)
    # PowerSGD untimed, the copy timed: 11 fp32 passes (44 B) over the compressed elements at the
    # copy's 8 B per element: a 5 x 5 weight compresses at rank 1, min rate 2 (10 x 2 < 25); the
    # bias does not
    p = _params([25, 5])
    gr = NS(costs=HookCosts(copy_in_s=[0.003]), method=None)
    notes = []
    out = pf._costs(gr, notes, None, p, [(5, 5), (5,)], None)
    want = 0.003 * 44 / 8 * 25 / 30
    assert _t(out[3]) == (
        pytest.approx(want),
        pytest.approx(want / 1.5),
        pytest.approx(want * 1.5),
        "PowerSGD: 11 fp32 passes over the compressed matrices at the measured copy's speed (not "
        "timed: absent), +-50%",
    )
    assert notes == ["PowerSGD's compute: " + out[3].source]
    skipped = HookCosts(copy_in_s=[0.003], powersgd=pf.PowersgdCosts(skipped="over budget"))
    out = pf._costs(NS(costs=skipped, method=None), [], None, p, [(5, 5), (5,)], None)
    assert out[3].source.endswith("(not timed: over budget), +-50%")
    # ... at rank 2 (configured) 10 x 2 x 2 = 40 > 25: nothing compresses; min rate 3: 30 > 25
    out = pf._costs(gr, [], None, p, [(5, 5), (5,)], {"optim": {"rank": 2}})
    assert (out[3].value, out[4]) == (0.0, 2)
    out = pf._costs(gr, [], None, p, [(5, 5), (5,)], {"optim": {"min_compression_rate": 3}})
    assert out[3].value == 0.0
    # no shapes: nothing to say which matrices compress, PowerSGD unknown
    out = pf._costs(gr, [], Quantity.exact(1e6), p, None, None)
    assert out[3] is None
    # the probe's three parts all 0: the stated pass shares stand
    zeros = pf.PowersgdCosts(pre_s=[0.0], mid_s=[0.0], post_s=[0.0])
    out = pf._costs(NS(costs=HookCosts(powersgd=zeros), method=None), [])
    assert out[5] == pf.PSGD_PASSES_SHARE


def test_contention_edges(monkeypatch):
    from tests.test_mutation_kill_step import _hprof, _link

    def prof(**kw):
        base = dict(device="cpu", backend="gloo", bucket_cap=None, link=_link("own", 1e-3, 1e9))
        p = _hprof(copy_in=Quantity.exact(0.0), **{**base, **kw})
        p.notes = []
        return p

    # sync=per_param: its serial calls priced beyond the microbenchmark (10 calls of 1000 B, 2 ms
    # each on 2 ranks, a span 50 ms longer: 5 ms per call), +-15% at least
    ten = pf.Params(
        [str(i) for i in range(10)], [250] * 10, [4] * 10, list(range(10)), [1.0] * 10, ""
    )
    p = prof(sync="per_param", params=ten)
    span = 10 * (2e-3 + 1000 / 1e9) + 0.05
    pf._contention(p, NS(comm=NS(time_s=span, backward_compute_s=None), grad_ready=None))
    assert _t(p.contention.per_call) == (
        pytest.approx(0.005),
        pytest.approx(0.005 / 1.15),
        pytest.approx(0.005 * 1.15),
        "calibrated cost per all-reduce",
    )
    assert p.notes[0].startswith("cost per call in training: sync=per_param's 10 all-reduces")
    assert p.notes[1].startswith("CPU contention between gloo's all-reduce and backward: not ")
    assert len(p.notes) == 2
    # per_param without a comm block: nothing to price, nothing raised
    p = prof(sync="per_param", params=ten)
    pf._contention(p, NS(comm=None, grad_ready=None))
    assert p.contention.per_call == Quantity.exact(0.0) and len(p.notes) == 1
    # DDP with the timers, but not measurable: one rank, no comm time, no link, another sync
    for kw, comm in (
        (dict(world_size=1), NS(time_s=0.2, backward_compute_s=0.1)),
        (dict(sync="flat"), NS(time_s=0.2, backward_compute_s=0.1)),
        (dict(), NS(time_s=0.0, backward_compute_s=0.1)),
        (dict(link=None), NS(time_s=0.2, backward_compute_s=0.1)),
    ):
        p = prof(**kw)
        pf._contention(p, NS(comm=comm, grad_ready=None))
        assert p.contention.how.startswith("not measurable from this run (no DDP all-reduce"), kw
        assert p.contention.s_compute == Quantity.exact(1.0)
    # the probe's with_sync pass without its backward alone: DDP's own timer instead
    seen = []

    def fake(prof, compute_under_comm, comm_span):
        seen.append((compute_under_comm, comm_span))
        return 2.0, 1.5, 0.0, "how"

    monkeypatch.setattr("whatif.step.calibrate_contention", fake)
    gr = NS(modes=NS(with_sync=ReadyMode(ready_s=[[0.1, 0.3]]), alone=None))
    p = prof()
    pf._contention(p, NS(comm=NS(time_s=0.2, backward_compute_s=0.09), grad_ready=gr))
    assert seen == [(0.09, 0.2)]
    c = p.contention
    assert (c.s_compute.source, c.s_comm.source, c.per_call) == (
        "calibrated compute slow-down under all-reduce",
        "calibrated all-reduce slow-down beside compute",
        Quantity.exact(0.0),
    )
    # a cost per call beyond overlap (under 1 s), at the link's alpha's own spread where wider
    # than 15%: alpha [0.25, 4] ms about 1 ms: log(16) / 2
    monkeypatch.setattr("whatif.step.calibrate_contention", lambda p, **kw: (2.0, 1.5, 0.003, "h"))
    from whatif.links import Link

    wide = Link("w", Quantity(1e-3, 0.25e-3, 4e-3), Quantity.exact(1e9), "hand")
    p = prof(link=wide)
    pf._contention(p, NS(comm=NS(time_s=0.2, backward_compute_s=0.09), grad_ready=None))
    rel = math.log(16) / 2
    assert _t(p.contention.per_call) == (
        0.003,
        pytest.approx(0.003 / (1 + rel)),
        pytest.approx(0.003 * (1 + rel)),
        "calibrated cost per all-reduce",
    )
    assert p.notes == ["CPU contention (gloo): h"]


def test_a_compressible_3d_weight_is_rows_by_the_rest():
    # torch's PowerSGD views a (2, 3, 10) weight as 2 x 30: (2 + 30) x 2 x 0.9 = 57.6 < 60
    # compresses; as 3 x 20 it would not ((3 + 20) x 3 x 0.9 = 62.1)
    assert pf._compressible(_params([60]), [(2, 3, 10)], 4, 0.9) == 60


def test_named_model_composes_the_projects_config():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Hydra's version_base stated: no compatibility warning
        got = pf.named_model("vgg11_tiny")
    assert got == {
        "_target_": "models.vgg.VGG",
        "arch": "vgg",
        "name": "vgg11_tiny",
        "num_classes": 10,
        "layers": [4, "M", 8, "M", 8, 8, "M", 8, 8, "M", 8, 8, "M"],
        "classifier": [32, 32],
    }
    assert type(got["arch"]) is str  # the enum as its text, as a record's config holds it
    known = sorted(f[: -len(".yaml")] for f in os.listdir("conf/model") if f.endswith(".yaml"))
    with pytest.raises(pf.ProfileError) as e:
        pf.named_model("nope")
    assert str(e.value) == f"--model nope: no conf/model/nope.yaml; one of: {', '.join(known)}"
    with pytest.raises(pf.ProfileError) as e:
        pf.named_model("../config")  # a file, but not a model group's option
    assert str(e.value).startswith("--model ../config: ") and len(str(e.value)) > 30


def test_load_record_reads_a_record_or_says_why(tmp_path):
    from base.record import SCHEMA_VERSION

    missing = tmp_path / "none"
    with pytest.raises(pf.ProfileError) as e:
        pf.load_record(missing)
    assert str(e.value) == (
        f"{missing} does not exist: give a run directory (holding run_record.json) or a record file"
    )
    (tmp_path / "run_record.json").write_text(
        json.dumps({"schema_version": SCHEMA_VERSION, "status": "ok", "task": "train"})
    )
    rec, path = pf.load_record(tmp_path)
    assert (rec.status, path) == ("ok", str(tmp_path / "run_record.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(pf.ProfileError) as e:
        pf.load_record(bad)
    assert str(e.value).startswith(f"{bad}: cannot read the run record ({bad}: not a run record")


def test_the_link_from_the_on_rank_microbenchmark_first(monkeypatch):
    _no_model(monkeypatch)
    rec = _full_train_record()
    # one size timed: the fit's link, before the shaped one the env names
    rec["result"]["microbench"] = {
        "iters": 5,
        "sizes": [{"bytes": 2000000, "time_s": _summary(0.1)}],
    }
    p = pf.from_record(rec)
    assert p.link.name == "this run's ranks" and p.link.busbw.value == pytest.approx(2e7)
    assert not any("no on-rank microbenchmark" in n for n in p.notes)
    # no time it can fit: said, and the shaped link stands in
    rec["result"]["microbench"]["sizes"][0]["time_s"] = _summary(0.0)
    p = pf.from_record(rec)
    assert p.link.name == "shaped 2 Gbit/s"
    assert (
        "the on-rank microbenchmark could not be fitted: this run's ranks: no all-reduce times to "
        "fit" in p.notes
    )


def test_the_units_in_printed_sizes_and_rates_are_exact_powers_of_ten():
    # each figure sits just across a rounding edge of its printed digits, so a unit off by one part
    # in 1e9 (1e6) would print another number
    notes: list[str] = []
    env = NS(link=NS(emulated=True, rate_bit_s=1000005000.0005, nodes=2))
    pf._emulated(env, notes)
    assert "shaped to (1.00001 Gbit/s, env.link)" in notes[0]  # 1.0000050000005 to 6 digits
    notes = []
    comm = NS(time_s=0.1, bytes_per_step=1005000.5, collectives_per_step=1)
    pf._link_from_sync(NS(comm=comm, world_size=2), notes)
    assert "1 call(s) of 1.01 MB on average" in notes[0]  # 1.0050005 MB
    ps = pf.PowersgdCosts(fresh_s=[0.0040049999999], touched_s=[0.001], fresh_bytes=1005001)
    q = pf._fresh_pages(NS(costs=HookCosts(powersgd=ps)), _params([1]), "cpu")
    # 3.0049999999 ms over 1.005001 MB: 2.99 ns per byte
    assert "of 1.01 MB" in q.source and "fresh pages 2.99 ns per byte" in q.source
    ps = pf.PowersgdCosts(fresh_s=[0.0040049999999], touched_s=[0.001], fresh_bytes=1000000)
    q = pf._fresh_pages(NS(costs=HookCosts(powersgd=ps)), _params([1]), "cpu")
    assert "fresh pages 3 ns per byte" in q.source  # 3.0049999999 ns: 3.00


def test_more_record_edges(monkeypatch):
    _no_model(monkeypatch)

    def full(**result):
        rec = _full_train_record()
        rec["result"].update(result)
        return rec

    # no model name in the config: "?"; the configured PowerSGD rank (4) beside the one the probe
    # timed (2); a device with no stated run-to-run scatter: 5%; a throughput without an interval
    rec = full(device="xpu", throughput={"samples_per_s": 64.0})
    rec["config"]["model"] = {"arch": "x"}
    rec["result"]["grad_ready"]["costs"] = {"powersgd": {"rank": 2}}
    p = pf.from_record(rec)
    assert (p.model, p.psgd_rank, p.powersgd_measured_rank, p.run_to_run_sd) == ("?", 4, 2, 0.05)
    assert p.samples_per_s == Quantity.exact(64.0, "result.throughput")
    # a throughput outside its own interval: the point alone; none at all: None
    p = pf.from_record(
        full(throughput={"samples_per_s": 70.0, "samples_ci_lo": 60.0, "samples_ci_hi": 64.0})
    )
    assert p.samples_per_s == Quantity.exact(70.0, "result.throughput")
    rec = full()
    del rec["result"]["throughput"]
    assert pf.from_record(rec).samples_per_s is None
    # sync=local without the probe's backward: its own backward phase, per micro-step
    rec = full(sync="local")
    del rec["result"]["grad_ready"]
    monkeypatch.setattr(pf, "analyse_model", lambda j, s: _analysed(n=2, ready=[0.5, 1.0]))
    assert pf.from_record(rec).backward == Quantity(0.15, 0.135, 0.165, "result.phases.backward")
    _no_model(monkeypatch)
    # a backward of 0 s in the probe (below the timer): every gradient ready at 0
    rec = full()
    rec["result"]["grad_ready"]["modes"]["alone"]["backward_s"] = [0.0]
    assert pf.from_record(rec).params.ready == [0.0, 0.0]
    # a train record whose probe ran only beside the sync, or timed no ready times: not the
    # parameters' ready times (those need the no_sync pass); no model to rebuild: said
    for modes in (
        {"with_sync": {"backward_s": [0.2], "ready_s": [[0.1, 0.2]]}},
        {"alone": {"backward_s": [0.2]}},
        {"alone": {"ready_s": [[0.1, 0.2]]}},
    ):
        rec = full()
        rec["result"]["grad_ready"]["modes"] = modes
        with pytest.raises(pf.ProfileError, match="no gradient-ready probe"):
            pf.from_record(rec)


def test_a_flop_count_of_0_in_forward_gives_no_ratio(monkeypatch):
    # a forward FlopCounterMode counts nothing in: no backward/forward ratio (it divided by 0)
    monkeypatch.setattr(
        pf, "analyse_model", lambda j, s: _analysed(n=2, ready=[0.5, 1], flops=(0, 6))
    )
    rec = _full_train_record()
    del rec["result"]["grad_ready"]
    assert pf.from_record(rec).backward.source == "2 x forward (assumed)"
