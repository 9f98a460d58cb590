"""whatif/step.py (issue 36: a module the mutation run covers): the what-if model's knob changes,
the CPU-share factor and PowerSGD's cost at another rank, each checked on hand-made inputs against
the number worked out here by another route (the core counts and power law written out, the knob
words read by hand). Every test runs in well under 0.5 s: --fast runs them for each of step.py's
mutants beside test_whatif.py's hand-made simulations (FAST_TESTS in tests/mutation.py)."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

import numpy as np
import pytest

from whatif import step
from whatif.quantity import Quantity


def _cfg(**kw) -> step.Config:
    base = dict(
        world_size=2,
        sync="ddp",
        optim="none",
        bucket_cap=None,
        accumulate=1,
        bucket_view=False,
        static_graph=False,
        psgd_rank=1,
        link=None,
    )
    return step.Config(**{**base, **kw})


def test_each_knob_word_sets_its_field():
    c = step.changed(
        _cfg(),
        {
            "bucket_cap_mb": "100",
            "optim": "bf16",
            "accumulate": "4",
            "n": "8",
            "ddp.static_graph": "True",
            "gradient_as_bucket_view": "1",
            "optim.rank": "2",
            "ranks_per_host": "3",
        },
    )
    assert (c.bucket_cap, c.optim, c.accumulate, c.world_size) == (100.0, "bf16", 4, 8)
    assert (c.static_graph, c.bucket_view, c.psgd_rank, c.ranks_per_host) == (True, True, 2, 3)
    off = step.changed(
        _cfg(static_graph=True, bucket_view=True), {"static_graph": "0", "bucket_view": "FALSE"}
    )
    assert (off.static_graph, off.bucket_view) == (False, False)
    assert step.changed(_cfg(bucket_cap=50.0), {"bucket": "default"}).bucket_cap is None
    assert step.changed(_cfg(), {" world_size ": " 4 "}).world_size == 4
    assert step.changed(_cfg(), {"rank": "2.9"}).psgd_rank == 2  # int() of the number
    assert step.changed(_cfg(), {}) == _cfg()
    assert step.changed(_cfg(), None) == _cfg()


def test_sync_local_is_one_rank():
    c = step.changed(_cfg(world_size=4), {"sync": "local"})
    assert (c.sync, c.world_size) == ("local", 1)
    assert step.changed(_cfg(world_size=4), {"sync": "flat"}).world_size == 4


def test_the_own_link_words_clear_a_named_link():
    named = _cfg(link=object(), link_name="1gbe")
    for word in ("own", "none", "measured"):
        c = step.changed(named, {"link": word})
        assert (c.link, c.link_name) == (None, "own")
    mine = NS(name="mine")
    c = step.changed(_cfg(), {"link": "mine"}, links={"mine": mine})
    assert c.link is mine and c.link_name == "mine"


@pytest.mark.parametrize(
    "change, says",
    [
        ({"colour": "red"}, "unknown knob 'colour'"),
        ({"optim": "adam"}, "optim=adam: one of none, bf16, fp16, powersgd"),
        ({"sync": "ring"}, "sync=ring: one of ddp, per_param, flat, local"),
        ({"static_graph": "yes"}, "static_graph=yes: true or false"),
        ({"accumulate": "0"}, "accumulate must be a positive number, got 0.0"),
        ({"world_size": "-2"}, "world_size must be a positive number, got -2.0"),
        ({"bucket": "inf"}, "bucket must be a positive number, got inf"),
        ({"bucket": "nan"}, "bucket must be a positive number, got nan"),
    ],
)
def test_a_bad_knob_is_refused_naming_it(change, says):
    with pytest.raises(ValueError) as e:
        step.changed(_cfg(), change)
    assert says in str(e.value)


def test_positive_passes_a_positive_number_through():
    assert step._positive(0.5, "k") == 0.5
    assert step._positive(1e-9, "k") == 1e-9


def test_megabytes_are_decimal_with_three_significant_digits():
    assert step._mb(25_000_000) == "25 MB"
    assert step._mb(1_234_567) == "1.23 MB"
    assert step._mb(1_048_576) == "1.05 MB"
    assert step._mb(1_235_000) == "1.24 MB"  # 1.235: rounds up, by a hair


def _prof(**kw):
    base = dict(device="cpu", cores=8, world_size=2, hosts=1, threads=4, core_scaling=None)
    return NS(**{**base, **kw})


def test_more_ranks_on_a_host_share_its_cores_by_the_calibrated_power():
    e, e_lo, e_hi = step.CORE_SCALING
    # 2 ranks of 4 threads on 8 cores -> 4 ranks of one thread each: 4 cores per rank -> 1
    q = step.cpu_share(_prof(), _cfg(world_size=4))
    assert q.value == pytest.approx(4.0**e)
    assert (q.lo, q.hi) == (pytest.approx(4.0**e_lo), pytest.approx(4.0**e_hi))
    assert "4 -> 1" in q.source and "(2 -> 4 ranks on 8 cores)" in q.source
    # threads cap a rank's cores: 2 threads on 8 cores, 2 ranks -> 4 ranks: 2 cores -> 1
    q = step.cpu_share(_prof(threads=2), _cfg(world_size=4))
    assert q.value == pytest.approx(2.0**e)
    # no thread count: one
    q = step.cpu_share(_prof(threads=None), _cfg(world_size=4))
    assert q.value == pytest.approx(1.0)
    # fewer ranks: one rank takes every core: 4 cores per rank -> 8, faster
    q = step.cpu_share(_prof(), _cfg(world_size=1))
    assert q.value == pytest.approx(0.5**e)
    assert (q.lo, q.hi) == (pytest.approx(0.5**e_hi), pytest.approx(0.5**e_lo))


def test_a_records_own_core_scaling_replaces_the_calibrated_one():
    q = step.cpu_share(_prof(core_scaling=(1.0, 0.5, 1.5)), _cfg(world_size=4))
    assert (q.value, q.lo, q.hi) == (
        pytest.approx(4.0),
        pytest.approx(2.0),
        pytest.approx(8.0),
    )


def test_ranks_per_host_decide_the_share():
    # a two-host source (1 rank each) to 4 ranks: a network link keeps 1 per host
    net = NS(same_host=False)
    assert step.cpu_share(_prof(hosts=2), _cfg(world_size=4, link=net)).value == 1.0
    # a one-host source with a network link named: its 2 per host, more hosts
    assert step.cpu_share(_prof(), _cfg(world_size=4, link=net)).value == 1.0
    # ... an emulated link on the same host: the ranks share it
    same = NS(same_host=True)
    e = step.CORE_SCALING[0]
    assert step.cpu_share(_prof(), _cfg(world_size=4, link=same)).value == pytest.approx(4.0**e)
    # ranks_per_host named: at most the world size
    assert step.cpu_share(
        _prof(), _cfg(world_size=4, ranks_per_host=4, link=net)
    ).value == pytest.approx(4.0**e)
    assert step.cpu_share(_prof(), _cfg(world_size=2, ranks_per_host=4)).value == 1.0
    # a source of 3 ranks on 2 hosts has ceil(3/2) = 2 per host: to 2 ranks on a network link
    assert step.cpu_share(_prof(world_size=3, hosts=2), _cfg(world_size=2, link=net)).value == 1.0
    # ... and to 1 rank on a network link: 1 per host, 8 cores: 4 -> 8
    one = step.cpu_share(_prof(world_size=3, hosts=2), _cfg(world_size=1, link=net))
    assert one.value == pytest.approx(0.5**e)


def test_no_cpu_share_off_cpu_or_without_a_core_count():
    assert step.cpu_share(_prof(device="cuda"), _cfg(world_size=4)).value == 1.0
    q = step.cpu_share(_prof(cores=None), _cfg(world_size=4))
    assert (q.value, q.has_interval) == (1.0, False)
    assert step.cpu_share(_prof(), _cfg(world_size=2)).source == "same ranks per host"


def test_powersgd_cost_is_flat_to_rank_four_then_proportional():
    measured = Quantity(0.01, 0.008, 0.012, "psgd")

    def cost(r, rm):
        return step._psgd_cost(NS(powersgd=measured, powersgd_measured_rank=rm), _cfg(psgd_rank=r))

    assert cost(1, 1).value == pytest.approx(0.01)
    assert cost(4, 1).value == pytest.approx(0.01)
    assert cost(8, 1).value == pytest.approx(0.02)  # 8 / 4
    assert cost(8, 2).value == pytest.approx(0.02)
    assert cost(16, 8).value == pytest.approx(0.02)  # 16 / 8
    assert cost(2, 8).value == pytest.approx(0.005)  # 4 / 8
    q = cost(5, 1)
    assert (q.value, q.lo, q.hi) == (
        pytest.approx(0.0125),
        pytest.approx(0.010),
        pytest.approx(0.015),
    )
    none = step._psgd_cost(NS(powersgd=None, powersgd_measured_rank=1), _cfg(psgd_rank=8))
    assert none.value == 0.0 and not none.has_interval
    assert math.isclose(cost(4, 4).value, 0.01)


def _link(name, alpha, busbw, floor=None):
    from whatif.links import Link

    return Link(name, Quantity.exact(alpha), Quantity.exact(busbw), "hand", floor=floor)


def test_link_times_are_the_ring_formula_and_the_host_floors_duty():
    # ring: 2 (n - 1) alpha + 2 (n - 1) / n x bytes / busbw
    net = _link("net", 1e-4, 1e9)
    point = step.PointDraws()
    times, duties = step.link_times(net, 4, [1_000_000, 0], point)
    assert float(times[0][0]) == pytest.approx(6e-4 + 1.5 * 1e-3)
    assert float(times[1][0]) == 0.0
    assert [float(d[0]) for d in duties] == [1.0, 1.0]
    # a host floor slower than the link on small calls: the time is the floor's, duty 1;
    # faster on large ones: the link's time, duty floor / link
    host = _link("host", 1e-3, 1e10)
    both = _link("net", 1e-4, 1e9, floor=host)
    times, duties = step.link_times(both, 2, [1_000, 100_000_000], point)
    small_floor = 2e-3 + 1_000 / 1e10
    assert float(times[0][0]) == pytest.approx(small_floor)
    assert float(duties[0][0]) == pytest.approx(1.0)
    big_link, big_floor = 2e-4 + 0.1, 2e-3 + 0.01
    assert float(times[1][0]) == pytest.approx(big_link)
    assert float(duties[1][0]) == pytest.approx(big_floor / big_link)
    # a zero-byte call on a floored link: no time, duty 1
    times, duties = step.link_times(both, 2, [0], point)
    assert float(times[0][0]) == 0.0 and float(duties[0][0]) == 1.0


def test_per_param_calls_price_the_span_beyond_the_microbenchmark():
    link = _link("own", 1e-3, 1e9)  # latency-bound: 2 x 1 ms per call on 2 ranks
    prof = NS(
        sync="per_param",
        world_size=2,
        link=link,
        params=NS(numel=[250] * 10, element_size=[4] * 10),  # 10 calls of 1000 bytes
    )
    alone = 10 * (2e-3 + 1000 / 1e9)
    per, how = step.calibrate_serial_calls(prof, alone + 0.05)
    assert per == pytest.approx(0.005)
    assert "sync=per_param's 10 all-reduces" in how and "5 ms more per call" in how
    assert step.calibrate_serial_calls(prof, alone * 0.999) is None  # no longer span
    seven = NS(**{**vars(prof), "params": NS(numel=[250] * 7, element_size=[4] * 7)})
    assert step.calibrate_serial_calls(seven, 1.0) is None  # fewer than 8 calls
    eight = NS(**{**vars(prof), "params": NS(numel=[250] * 8, element_size=[4] * 8)})
    assert step.calibrate_serial_calls(eight, 1.0) is not None
    assert step.calibrate_serial_calls(NS(**{**vars(prof), "sync": "ddp"}), 1.0) is None
    assert step.calibrate_serial_calls(NS(**{**vars(prof), "world_size": 1}), 1.0) is None
    assert step.calibrate_serial_calls(NS(**{**vars(prof), "link": None}), 1.0) is None
    # calls mostly bytes: a longer span cannot be told from a slower link
    bulk = NS(**{**vars(prof), "params": NS(numel=[25_000_000] * 10, element_size=[4] * 10)})
    assert step.calibrate_serial_calls(bulk, 100.0) is None


def _plan_prof(batched=False, alloc=None):
    from whatif.profile import Params

    # a 1000x1000 weight (4 MB), a bias of 100, a 200x50 weight: DDP's default caps put the first
    # (1 MiB cap reached) alone, the other two together
    params = Params(
        ["w", "b", "v"], [1_000_000, 100, 10_000], [4, 4, 4], [0, 1, 2], [0.3, 0.6, 1.0], ""
    )
    return NS(
        params=params,
        shapes=[(1000, 1000), (100,), (200, 50)],
        psgd_min_rate=2.0,
        psgd_batched=batched,
        psgd_alloc=alloc,
    )


TOTAL = 4 * 1_010_100


def test_the_plan_of_plain_buckets():
    p = step.plan(_plan_prof(), _cfg())
    assert [(b.index, b.nbytes, b.ready_frac, b.serial) for b in p.buckets] == [
        (0, 4_000_000, 0.3, False),
        (1, 40_400, 1.0, False),
    ]
    assert [b.copy_frac for b in p.buckets] == [pytest.approx(4_000_000 / TOTAL), 1.0]
    assert [[(s.kind, s.label, s.nbytes) for s in b.segs] for b in p.buckets] == [
        [("net", "all-reduce 4 MB", 4_000_000)],
        [("net", "all-reduce 0.0404 MB", 40_400)],
    ]
    assert all(b.pre == [] for b in p.buckets)
    assert (p.copy_in, p.copy_out, p.notes) == (True, True, [])
    view = step.plan(_plan_prof(), _cfg(bucket_view=True))
    assert (view.copy_in, view.copy_out) == (True, False)  # no hook: the copy in stays


def test_the_plan_of_a_half_precision_hook():
    p = step.plan(_plan_prof(), _cfg(optim="bf16", bucket_view=True))
    share = 4_000_000 / TOTAL
    b = p.buckets[0]
    assert b.pre == [("cast_bf16", pytest.approx(share / 2))]
    assert [(s.kind, s.label, s.nbytes, s.cost) for s in b.segs] == [
        ("net", "all-reduce 2 MB (bf16)", 2_000_000, ""),
        ("cpu", "bf16 cast back", 0, "cast_bf16"),
    ]
    assert b.segs[1].share == pytest.approx(share / 2) and not b.serial
    assert (p.copy_in, p.copy_out) == (False, False)  # a hook on the bucket's view: no copies
    fp16 = step.plan(_plan_prof(), _cfg(optim="fp16")).buckets[1]
    assert fp16.segs[0].nbytes == 20_200 and fp16.segs[1].cost == "cast_fp16"


def test_the_plan_of_powersgd_by_torchs_compression_rule():
    # (rows + cols) x rank x 2 < rows x cols: both weights compressed at rank 1, the bias not
    p = step.plan(_plan_prof(), _cfg(optim="powersgd"))
    assert p.notes == [
        "PowerSGD rank 1: 1,010,000 of 1,010,100 gradient elements compressed (torch's "
        "_should_compress at min_compression_rate 2)"
    ]
    first, second = p.buckets
    f0, f1 = 1_000_000 / 1_010_000, 10_000 / 1_010_000
    assert [(s.kind, s.nbytes, s.cost) for s in first.segs] == [
        ("net", 0, ""),
        ("net", 4000, ""),
        ("cpu", 0, "psgd_mid"),
        ("net", 4000, ""),
        ("cpu", 0, "psgd_post"),
    ]
    assert [s.nbytes for s in second.segs if s.kind == "net"] == [400, 800, 200]
    assert first.pre == [("psgd_pre", pytest.approx(f0))]
    assert second.segs[2].share == pytest.approx(f1) and second.segs[4].share == pytest.approx(f1)
    assert first.serial and second.serial
    assert first.segs[1].label == "all-reduce P 0.004 MB"
    # rank 4: P 1000 x 4 and Q 1000 x 4 elements
    r4 = step.plan(_plan_prof(), _cfg(optim="powersgd", psgd_rank=4)).buckets[0]
    assert [s.nbytes for s in r4.segs if s.kind == "net"] == [0, 16_000, 16_000]


def test_the_plan_of_batched_powersgd_and_its_fresh_pages():
    p = step.plan(_plan_prof(batched=True), _cfg(optim="powersgd"))
    # one square matrix per bucket: side ceil(sqrt(elements)) x rank
    assert [[s.nbytes for s in b.segs if s.kind == "net"] for b in p.buckets] == [
        [0, 4000, 4000],
        [0, 404, 404],
    ]
    assert p.notes[0].endswith("; batched_powerSGD_hook: one square matrix per bucket")
    assert "1,010,100 of 1,010,100" in p.notes[0]
    fresh = step.plan(_plan_prof(alloc=Quantity.exact(0.01)), _cfg(optim="powersgd")).buckets[1]
    share = 40_400 / TOTAL
    assert fresh.pre[1] == ("psgd_alloc", pytest.approx(share))
    assert (fresh.segs[-1].cost, fresh.segs[-1].share) == ("psgd_alloc", pytest.approx(share))
    assert len(fresh.segs) == 6


# ------------------------------------------------------------------ a whole step on a hand-made run
# Two 2 MB parameters (the second ready at the end of backward, the first half-way), exact inputs in
# seconds and a ring link of alpha 0.1 ms and 1 GB/s: each number below is the step formula of the
# module docstring added up by hand (2 ranks: 2 alpha + bytes / busbw per all-reduce).
DATA, H2D, FWD, BWD, OPT, CIN, COUT = 0.010, 0.002, 0.030, 0.060, 0.005, 0.004, 0.003
MICRO = DATA + H2D + FWD  # 0.042


def _ar(nbytes, alpha=1e-4, busbw=1e9):
    return 2 * alpha + nbytes / busbw  # 2 ranks, ring


def _hprof(**kw):
    from whatif.profile import Contention, Params

    x = Quantity.exact
    base = dict(
        record=NS(env=NS(hostnames=["h0"])),
        device="cuda",
        backend="nccl",
        world_size=2,
        batch_per_rank=8,
        accumulate=1,
        sync="ddp",
        optim="none",
        bucket_cap=100.0,
        static_graph=False,
        bucket_view=False,
        psgd_rank=1,
        psgd_min_rate=2.0,
        psgd_batched=False,
        params=Params(["a", "b"], [500_000, 500_000], [4, 4], [0, 1], [0.5, 1.0], ""),
        shapes=[(1000, 500), (1000, 500)],
        data=x(DATA),
        h2d=x(H2D),
        forward=x(FWD),
        backward=x(BWD),
        optimizer=x(OPT),
        copy_in=x(CIN),
        copy_out=x(COUT),
        cast={"bf16": x(0.008), "fp16": x(0.006)},
        powersgd=None,
        powersgd_measured_rank=1,
        powersgd_split={"pre": 0.5, "mid": 0.25, "post": 0.25},
        psgd_alloc=None,
        contention=Contention(x(1.0), x(1.0), "none"),
        link=_link("own", 1e-4, 1e9),
        step=None,
        samples_per_s=None,
        step_noise=None,
        run_to_run_sd=0.0,
        cores=None,
        threads=None,
        hosts=1,
        core_scaling=None,
    )
    return NS(**{**base, **kw})


def _step(prof, **change):
    cfg = step.changed(step.Config.of(prof), {k: str(v) for k, v in change.items()})
    ev = step._evaluate(prof, cfg, step.PointDraws())
    return float(ev.step[0]), float(ev.compute[0]), float(ev.compression[0]), ev


def test_one_bucket_at_the_end_adds_its_all_reduce_to_the_step():
    s, c, z, ev = _step(_hprof())
    assert s == pytest.approx(MICRO + BWD + CIN + _ar(4e6) + COUT + OPT)  # 0.1182
    assert c == pytest.approx(MICRO + BWD + CIN + COUT + OPT)
    assert z == 0.0 and ev.buckets == [4_000_000] and ev.notes == [] and ev.timeline is None
    # accumulate 3: two no_sync micro-steps (forward and backward alone) before the synced one
    s, c, _, _ = _step(_hprof(), accumulate=3)
    assert s == pytest.approx(3 * MICRO + 2 * BWD + BWD + CIN + _ar(4e6) + COUT + OPT)
    assert c == pytest.approx(3 * MICRO + 3 * BWD + CIN + COUT + OPT)
    # gradient_as_bucket_view with no hook: the copy back goes, the copy in stays
    s, c, _, ev = _step(_hprof(), bucket_view="true")
    assert s == pytest.approx(MICRO + BWD + CIN + _ar(4e6) + OPT)
    assert c == pytest.approx(MICRO + BWD + CIN + OPT) and ev.notes == []
    # and a record without the copies says its saving shows as 0
    _, _, _, ev = _step(_hprof(copy_out=Quantity.exact(0.0)), bucket_view="true")
    assert ev.notes == [
        "DDP's gradient copies are not in this record: gradient_as_bucket_view's saving shows as 0"
    ]


def test_an_early_bucket_overlaps_the_rest_of_backward():
    # DDP's default caps: a bucket per parameter; the first ready at half of backward plus half of
    # the copy in, its all-reduce (2.2 ms) done long before the second bucket is ready
    s, _, _, ev = _step(_hprof(bucket_cap=None))
    assert ev.buckets == [2_000_000, 2_000_000]
    assert s == pytest.approx(MICRO + BWD + CIN + _ar(2e6) + COUT + OPT)
    # a cost per call in training (calibrated): each all-reduce pays it; the first still hides
    per = Quantity.exact(0.001)
    from whatif.profile import Contention

    prof = _hprof(
        bucket_cap=None, contention=Contention(Quantity.exact(1.0), Quantity.exact(1.0), "", per)
    )
    s, _, _, _ = _step(prof)
    assert s == pytest.approx(MICRO + BWD + CIN + _ar(2e6) + 0.001 + COUT + OPT)


def test_a_half_precision_hook_casts_on_both_threads():
    # one 4 MB bucket: the cast (half of 8 ms for the whole gradient) on the compute thread before
    # the launch, 2 MB on the wire, the cast back (the other half) in the queue after it
    s, c, z, ev = _step(_hprof(), optim="bf16")
    assert s == pytest.approx(MICRO + BWD + CIN + 0.004 + _ar(2e6) + 0.004 + COUT + OPT)
    assert (c, z) == (pytest.approx(MICRO + BWD + CIN + COUT + OPT), pytest.approx(0.008))
    assert ev.notes == []
    # on the bucket's view: neither copy
    s, c, _, _ = _step(_hprof(), optim="bf16", bucket_view="true")
    assert s == pytest.approx(MICRO + BWD + 0.004 + _ar(2e6) + 0.004 + OPT)
    assert c == pytest.approx(MICRO + BWD + OPT)
    s, _, z, _ = _step(_hprof(), optim="fp16")
    assert s == pytest.approx(MICRO + BWD + CIN + 0.003 + _ar(2e6) + 0.003 + COUT + OPT)
    assert z == pytest.approx(0.006)
    zero = {"bf16": Quantity.exact(0.0), "fp16": Quantity.exact(0.006)}
    _, _, _, ev = _step(_hprof(cast=zero), optim="bf16")
    assert ev.notes == ["the bf16 cast is not in this record: left out (optimistic)"]


def test_powersgd_runs_serially_with_its_compute_between_the_calls():
    # both 1000 x 500 weights compressed at rank 1: P 2 x 1000 and Q 2 x 500 floats, no
    # uncompressed bytes; its 20 ms (rank 1, measured) split 10 / 5 / 5 ms: before the launch, after
    # P, after Q; the compute thread waits for the bucket (serial)
    prof = _hprof(powersgd=Quantity.exact(0.02))
    s, c, z, ev = _step(prof, optim="powersgd")
    queue = _ar(8000) + 0.005 + _ar(4000) + 0.005
    assert s == pytest.approx(MICRO + BWD + CIN + 0.010 + queue + COUT + OPT)
    assert (c, z) == (pytest.approx(MICRO + BWD + CIN + COUT + OPT), pytest.approx(0.02))
    assert ev.notes == [
        "PowerSGD rank 1: 1,000,000 of 1,000,000 gradient elements compressed (torch's "
        "_should_compress at min_compression_rate 2)"
    ]
    # fresh pages (1 ms a pass over the gradient): one pass before the launch, one at the bucket's
    # end; the compression counts both
    fresh = _hprof(powersgd=Quantity.exact(0.02), psgd_alloc=Quantity(0.001, 0.0005, 0.002, "p"))
    s, _, z, ev = _step(fresh, optim="powersgd")
    assert s == pytest.approx(MICRO + BWD + CIN + 0.011 + queue + 0.001 + COUT + OPT)
    assert z == pytest.approx(0.022)
    assert ev.notes[1] == (
        "PowerSGD's clone and new error, 2 x 4 MB a step in fresh pages: 2 ms (p)"
    )
    # not measured: no compute, and the row says it is a lower bound
    s, _, z, ev = _step(_hprof(), optim="powersgd")
    assert s == pytest.approx(MICRO + BWD + CIN + _ar(8000) + _ar(4000) + COUT + OPT)
    assert z == 0.0
    assert ev.notes[1].startswith("PowerSGD's compute is not in this record (no grad_ready probe)")


def test_the_serial_syncs_add_their_calls_after_backward():
    per = Quantity.exact(0.001)
    from whatif.profile import Contention

    prof = _hprof(contention=Contention(Quantity.exact(1.0), Quantity.exact(1.0), "", per))
    # per_param: one call per parameter, each paying the cost per call
    s, c, z, ev = _step(prof, sync="per_param", accumulate=2)
    comm = 2 * (_ar(2e6) + 0.001)
    assert s == pytest.approx(2 * (MICRO + BWD) + comm + OPT)
    assert (c, z, ev.buckets) == (pytest.approx(2 * (MICRO + BWD) + OPT), 0.0, [])
    # flat: one call of every byte, and the copies into and out of the flat buffer
    s, c, _, _ = _step(prof, sync="flat")
    assert s == pytest.approx(MICRO + BWD + CIN + COUT + _ar(4e6) + 0.001 + OPT)
    assert c == pytest.approx(MICRO + BWD + CIN + COUT + OPT)
    # local: no communication, one rank
    s, c, _, _ = _step(prof, sync="local")
    assert (s, c) == (pytest.approx(MICRO + BWD + OPT), pytest.approx(MICRO + BWD + OPT))
    # a one-rank flat sync sends nothing
    s, _, _, _ = _step(prof, sync="flat", world_size=1)
    assert s == pytest.approx(MICRO + BWD + OPT)


def test_one_rank_needs_no_link_and_sends_nothing():
    prof = _hprof(world_size=1, link=None)
    s, c, _, ev = _step(prof)
    assert s == pytest.approx(MICRO + BWD + CIN + COUT + OPT) and s == pytest.approx(c)
    assert ev.buckets == [4_000_000]
    # a local config left at two ranks (never made by `changed`) sends nothing either
    cfg = step.Config(2, "local", "none", None, 1, False, False, 1, None)
    ev = step._evaluate(prof, cfg, step.PointDraws())
    assert float(ev.step[0]) == pytest.approx(MICRO + BWD + OPT)
    with pytest.raises(ValueError, match="--link NAME"):
        step._evaluate(prof, step.changed(step.Config.of(prof), {"n": "2"}), step.PointDraws())


def test_contention_slows_compute_by_the_host_floors_share_of_a_call():
    # DDP's default caps: the first 2 MB bucket at half of backward (no copy in here). Its call
    # takes the link's 2.2 ms; the host's own all-reduce takes 0.2 + 1 = 1.2 ms of it (duty 6/11).
    # With compute 2x slower under a fully busy call, it runs at 1 / (1 + 6/11) = 11/17 for those
    # 2.2 ms, so backward ends 2.2 x 6/17 ms late; the second bucket's call follows alone.
    from whatif.profile import Contention

    host = _link("host", 1e-4, 2e9)
    slow = Contention(Quantity.exact(2.0), Quantity.exact(1.0), "")
    prof = _hprof(
        bucket_cap=None,
        copy_in=Quantity.exact(0.0),
        link=_link("own", 1e-4, 1e9, floor=host),
        contention=slow,
    )
    s, _, _, _ = _step(prof)
    assert s == pytest.approx(MICRO + BWD + _ar(2e6) * 6 / 17 + _ar(2e6) + COUT + OPT)
    # the all-reduce 2x slower instead, compute not: the first call (2.2 ms at 17/11 the time) still
    # ends before backward does; one bucket at the end has nothing beside it
    slow_m = Contention(Quantity.exact(1.0), Quantity.exact(2.0), "")
    s, _, _, _ = _step(_hprof(bucket_cap=None, contention=slow_m, link=prof.link))
    assert s == pytest.approx(MICRO + BWD + CIN + _ar(2e6) + COUT + OPT)
    # the all-reduce 3x slower under a half-busy host: 1 + 2 x 0.5 = 2x; the first call (50 ms on
    # the link, 25 of them the host's) does 15 ms of its 50 beside the last 30 ms of backward, 35
    # alone, then the last call's 50 ms: 145 ms
    half = _link("own", 0.0, 2e6 / 0.05, floor=_link("host", 0.0, 2e6 / 0.025))
    slow_half = Contention(Quantity.exact(1.0), Quantity.exact(3.0), "")
    prof = _hprof(bucket_cap=None, copy_in=Quantity.exact(0.0), link=half, contention=slow_half)
    s, _, _, _ = _step(prof)
    assert s == pytest.approx(MICRO + 0.145 + COUT + OPT)
    # both under way the whole time: a 30 ms call beside the last 30 ms of backward, duty 1
    busy = Contention(Quantity.exact(2.0), Quantity.exact(3.0), "")
    big = _hprof(
        bucket_cap=None,
        copy_in=Quantity.exact(0.0),
        link=_link("own", 0.0, 2e6 / 0.03),
        contention=busy,
    )
    # compute at 1/2, the call at 1/3: after 0.09 s the call is done (compute did 45 ms > 30: no),
    # so compute ends first: 30 ms of backward take 60 ms, the call did 20 of its 30 ms; the rest
    # (10 ms) alone; then the second bucket's 30 ms
    s, _, _, _ = _step(big)
    assert s == pytest.approx(MICRO + 0.030 + 0.060 + 0.010 + 0.030 + COUT + OPT)


def test_the_notes_name_what_the_model_assumes():
    from whatif.links import Link

    # a CPU host: 2 ranks of 4 threads on 8 cores -> one rank with all 8 (sync=local)
    cpu = _hprof(device="cpu", cores=8, threads=4)
    e, e_lo, e_hi = step.CORE_SCALING
    s, _, _, ev = _step(cpu, sync="local")
    assert s == pytest.approx((MICRO + BWD + OPT) * 0.5**e)
    assert ev.notes == [
        f"compute per rank x {0.5**e:.3g} [{0.5**e_hi:.3g}, {0.5**e_lo:.3g}]: CPU cores per rank "
        f"4 -> 8 (2 -> 1 ranks on 8 cores), compute time x (cores before / after) ** {e:.3g} "
        f"[{e_lo:.3g}, {e_hi:.3g}] (stated scaling, cores / ranks)"
    ]
    _, _, _, ev = _step(_hprof(), static_graph="true")
    assert ev.notes == [
        "ddp.static_graph: modelled as no change (without find_unused_parameters DDP does no "
        "per-step graph search that a static graph would save; source 003 measured 'negligible')"
    ]
    # gloo on one CPU host under a named link: the host's own all-reduce is its floor
    gloo = _hprof(backend="gloo", device="cpu")
    named = Link("fast", Quantity.exact(0.0), Quantity.exact(1e12), "hand")
    cfg = step.changed(step.Config.of(gloo), {"link": "fast"}, links={"fast": named})
    ev = step._evaluate(gloo, cfg, step.PointDraws())
    assert ev.notes == ["link fast: the slower of the link and this host's own all-reduce (own)"]
    assert float(ev.step[0]) == pytest.approx(MICRO + BWD + CIN + _ar(4e6) + COUT + OPT)


def test_the_timeline_of_a_ddp_step_and_of_a_serial_one():
    prof = _hprof()
    cfg = step.changed(step.Config.of(prof), {"accumulate": "2"})
    tl = step._evaluate(prof, cfg, step.PointDraws(), timeline=True).timeline
    fb = MICRO + BWD  # 0.102
    b0 = fb + MICRO  # backward starts: 0.144
    ar = b0 + BWD + CIN  # 0.208
    end = ar + _ar(4e6)
    want = [
        (0.0, fb, "no_sync micro-step"),
        (fb, fb + DATA + H2D, "data + h2d"),
        (fb + DATA + H2D, b0, "forward"),
        (b0, ar, "backward"),
        (end, end + COUT, "DDP copy back"),
        (end + COUT, end + COUT + OPT, "optimizer"),
    ]
    assert [lab for _, _, lab in tl["compute"]] == [w[2] for w in want]
    assert [(a, b) for a, b, _ in tl["compute"]] == [pytest.approx((a, b)) for a, b, _ in want]
    assert [(a, b) for a, b, _, _ in tl["comm"]] == [pytest.approx((ar, end))]
    assert [(lab, k) for _, _, lab, k in tl["comm"]] == [("all-reduce 4 MB", 0)]
    assert tl["step_s"] == pytest.approx(end + COUT + OPT)
    assert tl["backward_start_s"] == pytest.approx(b0)
    # no data or h2d time: no such bar; bucket view: no copy back
    quick = _hprof(data=Quantity.exact(0.0), h2d=Quantity.exact(0.0))
    cfg = step.changed(step.Config.of(quick), {"bucket_view": "true"})
    tl = step._evaluate(quick, cfg, step.PointDraws(), timeline=True).timeline
    assert [lab for _, _, lab in tl["compute"]] == ["forward", "backward", "optimizer"]
    assert tl["step_s"] == pytest.approx(FWD + BWD + CIN + _ar(4e6) + OPT)
    # flat: the copy in, the call, the copy out after backward
    cfg = step.changed(step.Config.of(prof), {"sync": "flat", "accumulate": "2"})
    tl = step._evaluate(prof, cfg, step.PointDraws(), timeline=True).timeline
    t = 2 * fb
    half = (CIN + COUT) / 2
    call = _ar(4e6)
    assert [lab for _, _, lab in tl["compute"]] == [
        "micro-step",
        "forward + backward",
        "copy in",
        "copy out",
        "optimizer",
    ]
    assert [(a, b) for a, b, _ in tl["compute"]] == [
        pytest.approx((0.0, fb)),
        pytest.approx((fb, t)),
        pytest.approx((t, t + half)),
        pytest.approx((t + half + call, t + 2 * half + call)),
        pytest.approx((t + 2 * half + call, t + 2 * half + call + OPT)),
    ]
    assert tl["comm"] == [
        (pytest.approx(t + half), pytest.approx(t + half + call), "flat all-reduce", 0)
    ]
    assert (
        tl["step_s"] == pytest.approx(t + 2 * half + call + OPT) and tl["backward_start_s"] is None
    )
    cfg = step.changed(step.Config.of(prof), {"sync": "per_param"})
    tl = step._evaluate(prof, cfg, step.PointDraws(), timeline=True).timeline
    assert [lab for _, _, lab, _ in tl["comm"]] == ["per_param all-reduces"]
    assert tl["comm"][0][1] - tl["comm"][0][0] == pytest.approx(2 * _ar(2e6))
    cfg = step.changed(step.Config.of(prof), {"sync": "local"})
    tl = step._evaluate(prof, cfg, step.PointDraws(), timeline=True).timeline
    assert tl["comm"] == [] and tl["step_s"] == pytest.approx(fb + OPT)


def test_a_prediction_of_exact_inputs_has_no_width():
    from whatif.quantity import Draws

    prof = _hprof()
    own = step.predict(prof, step.Config.of(prof), Draws(50))
    s = MICRO + BWD + CIN + _ar(4e6) + COUT + OPT
    assert (own.step_s, own.lo, own.hi) == (pytest.approx(s), pytest.approx(s), pytest.approx(s))
    assert own.samples_per_s == pytest.approx(16 / s)  # 2 ranks x 8
    assert (own.sps_lo, own.sps_hi) == (pytest.approx(16 / s), pytest.approx(16 / s))
    assert own.parts == {
        "compute_s": pytest.approx(s - _ar(4e6)),
        "exposed_comm_s": pytest.approx(_ar(4e6)),
        "compression_s": 0.0,
    }
    assert own.dominant == "compute" and own.buckets == [4_000_000] and own.timeline is None
    assert own.label == "(the run's own config)" and own.speedup is None
    four = step.predict(prof, step.changed(own.config, {"accumulate": "4"}), Draws(50), own=own)
    s4 = 4 * MICRO + 4 * BWD + CIN + _ar(4e6) + COUT + OPT
    assert four.step_s == pytest.approx(s4) and four.samples_per_s == pytest.approx(64 / s4)
    assert four.speedup == pytest.approx((64 / s4) / (16 / s))
    assert (four.speedup_lo, four.speedup_hi) == (
        pytest.approx(four.speedup),
        pytest.approx(four.speedup),
    )
    assert four.label == "accumulate=4"
    d = four.as_dict()
    assert (d["step_s"], d["step_lo"], d["step_hi"]) == (four.step_s, four.lo, four.hi)
    assert (d["samples_lo"], d["samples_hi"], d["speedup"]) == (
        four.sps_lo,
        four.sps_hi,
        four.speedup,
    )
    assert (d["speedup_lo"], d["speedup_hi"], d["level"]) == (
        four.speedup_lo,
        four.speedup_hi,
        0.95,
    )
    assert d["config"]["accumulate"] == "4" and d["parts_s"] is four.parts
    assert (d["dominant"], d["buckets_bytes"], d["notes"]) == ("compute", [4_000_000], [])
    assert (d["label"], d["samples_per_s"]) == ("accumulate=4", four.samples_per_s)
    # a slow link: the exposed all-reduce dominates
    slow = _hprof(link=_link("own", 1e-4, 1e7))  # 4 MB at 10 MB/s: 0.4 s
    p = step.predict(slow, step.Config.of(slow), step.PointDraws(), timeline=True)
    assert p.dominant == "exposed comm" and p.parts["exposed_comm_s"] == pytest.approx(
        _ar(4e6, busbw=1e7)
    )
    assert p.timeline["step_s"] == pytest.approx(p.step_s)
    # compression the largest part
    heavy = _hprof(powersgd=Quantity.exact(1.0))
    p = step.predict(
        heavy, step.changed(step.Config.of(heavy), {"optim": "powersgd"}), step.PointDraws()
    )
    assert p.dominant == "compression" and p.parts["compression_s"] == pytest.approx(1.0)
    assert p.notes[0].startswith("PowerSGD rank 1: 1,000,000 of 1,000,000 gradient elements")
    # the draws' samples/s, each the samples over its step (exact inputs: all the same)
    assert list(own.sps_samples) == [pytest.approx(16 / s)] * 50


def test_contention_is_calibrated_back_from_timers_worked_out_by_hand():
    # the first 2 MB bucket's call takes 100 ms alone (2 MB at 20 MB/s), from 30 ms (half of the
    # 60 ms backward) on; with compute 2x and the call 1.5x slower while both run: compute's last
    # 30 ms take 60, so the last bucket is ready at 90 ms, when the call has done 40 of its 100 ms;
    # its other 60 ms alone, then the last bucket's 100 ms: the span from 30 ms to 250 ms, plus
    # the 3 ms copy back after it
    prof = _hprof(bucket_cap=None, copy_in=Quantity.exact(0.0), link=_link("own", 0.0, 2e7))
    s_c, s_m, per_call, how = step.calibrate_contention(prof, 0.090, 0.223)
    assert (s_c, s_m, per_call) == (pytest.approx(2.0, rel=1e-6), pytest.approx(1.5, rel=1e-6), 0.0)
    assert how == (
        "compute 2.00x and all-reduce 1.50x slower while both run, calibrated so the model "
        "reproduces this run's DDP timers (backward compute under all-reduce 90 ms, model 90; "
        "all-reduce span 223 ms, model 223) from backward alone 60 ms and the all-reduces alone "
        "(on-rank microbenchmark)"
    )
    # timers beyond what the overlap can explain: both factors stop at their bound (at 5x each the
    # model's compute ends at 30 + 5 x 30 = 180 ms, its span 30 + 70 + 100 + 3 = 323 ms)
    s_c, s_m, per_call, how = step.calibrate_contention(prof, 0.25, 0.4)
    assert (s_c, s_m) == (pytest.approx(step.MAX_SLOWDOWN), pytest.approx(step.MAX_SLOWDOWN))
    assert how.startswith("compute 5.00x and all-reduce 5.00x slower while both run")
    assert how.endswith(
        "; the compute and all-reduce factor stopped at its bound 5 (the timers ask for more than "
        "the overlap can explain: a noisy or busy run)"
    )
    # compute 4.5x (under the bound, not at it): its last 30 ms take 135, the call has done 90 of
    # its 100 ms by then (at 1/1.5); 10 ms alone and the last call: 275 - 30 + 3 ms
    s_c, s_m, _, how = step.calibrate_contention(prof, 0.165, 0.248)
    assert (s_c, s_m) == (pytest.approx(4.5, rel=1e-6), pytest.approx(1.5, rel=1e-6))
    assert "bound" not in how and "could not" not in how
    # a compute timer no factor in [1, 5] moves by 2% of it: compute's factor not identifiable
    # (1), the all-reduce's calibrated with it: compute ends at 60 ms, the call has done 20 of its
    # 100 ms (at 1/1.5); 80 alone and the last call: 240 - 30 + 3 ms
    s_c, s_m, _, how = step.calibrate_contention(prof, 10.0, 0.213)
    assert (s_c, s_m) == (1.0, pytest.approx(1.5, rel=1e-6))
    assert how.startswith("compute 1.00x and all-reduce 1.50x slower while both run")
    assert how.endswith(
        "; the compute factor could not be calibrated (little or no overlap in this run's own "
        "step): 1 assumed"
    )
    # timers under the model's no-contention value: the factors stay at 1
    s_c, s_m, _, _ = step.calibrate_contention(prof, 0.05, 0.1)
    assert (s_c, s_m) == (1.0, 1.0)


def test_a_span_no_overlap_explains_is_a_cost_per_call():
    # eight 2 MB parameters in a bucket each (cap 1 MB), all ready at the end of backward: nothing
    # overlaps, so neither factor can be calibrated; the span's 8 ms beyond the eight calls and the
    # copy back is 1 ms per call
    from whatif.profile import Params

    eight = Params(
        [f"p{i}" for i in range(8)], [500_000] * 8, [4] * 8, list(range(8)), [1.0] * 8, ""
    )
    prof = _hprof(params=eight, shapes=None, bucket_cap=1.0, copy_in=Quantity.exact(0.0))
    model = 8 * _ar(2e6) + COUT
    s_c, s_m, per_call, how = step.calibrate_contention(prof, BWD, model + 0.008)
    assert (s_c, s_m) == (1.0, 1.0) and per_call == pytest.approx(0.001, rel=1e-6)
    assert (
        "; the compute factor and the all-reduce factor could not be calibrated (little or no "
        "overlap in this run's own step): 1 assumed; the rest of the span, 1 ms per all-reduce, is "
        "a cost per call in training beyond the microbenchmark's (each bucket pays it)"
    ) in how
    # seven calls: too few to tell a cost per call from a slower link
    seven = Params(
        [f"p{i}" for i in range(7)], [500_000] * 7, [4] * 7, list(range(7)), [1.0] * 7, ""
    )
    prof7 = _hprof(params=seven, shapes=None, bucket_cap=1.0, copy_in=Quantity.exact(0.0))
    assert step.calibrate_contention(prof7, BWD, 7 * _ar(2e6) + COUT + 0.007)[2] == 0.0
    # a span the model reaches (within 2%): nothing added
    assert step.calibrate_contention(prof, BWD, model * 1.01)[2] == 0.0


def test_a_steps_scatter_about_the_model_is_log_normal():
    from whatif.quantity import Draws, Z95

    prof = _hprof(run_to_run_sd=0.05)
    cfg = step.Config.of(prof)
    assert list(step._noise(prof, step.PointDraws(), cfg)) == [1.0]
    draws = Draws(4000, seed=3)
    f = step._noise(prof, draws, cfg)
    # source and target offsets each log-normal with sd 0.05: their product's log sd 0.05 x sqrt 2
    assert np.std(np.log(f)) == pytest.approx(0.05 * math.sqrt(2), rel=0.05)
    # the source run's own interval (x/ e^(1.96 x 0.03)) is part of the run-to-run sd: the source's
    # share is sqrt(0.05^2 - 0.03^2) = 0.04, the target's stays 0.05
    w = math.exp(Z95 * 0.03)
    inner = _hprof(run_to_run_sd=0.05, step_noise=Quantity(1.0, 1 / w, w))
    f = step._noise(inner, Draws(4000, seed=3), cfg)
    assert np.std(np.log(f)) == pytest.approx(math.hypot(0.04, 0.05), rel=0.05)
    src = Draws(4000, seed=3)
    step._noise(inner, src, cfg)
    assert np.std(np.log(src.get("noise:source", Quantity.exact(1.0)))) == pytest.approx(
        0.04, rel=0.05
    )
    # a source interval wider than the run-to-run sd: no source share, the target drawn from it
    wide = _hprof(run_to_run_sd=0.02, step_noise=Quantity(1.0, 1 / w, w))
    d = Draws(4000, seed=3)
    f = step._noise(wide, d, cfg)
    assert "noise:source" not in d._cache
    assert np.std(np.log(f)) == pytest.approx(0.03, rel=0.05)
    # nothing to scatter
    assert list(step._noise(_hprof(), Draws(5), cfg)) == [1.0] * 5


def test_a_cpu_share_scales_the_work_not_the_contention_or_the_cost_per_call():
    # 2 ranks of 2 threads on 8 cores -> 4 ranks of one thread: 2 cores a rank -> 1, at a stated
    # exponent of exactly 1 (no interval): every piece of work takes 2x as long; the slow-down
    # factors and the cost per call stay (they are ratios and a per-call cost, not work)
    from whatif.profile import Contention

    per = Quantity.exact(0.001)
    busy = Contention(Quantity.exact(2.0), Quantity.exact(3.0), "", per)
    cpu = dict(device="cpu", cores=8, threads=2, core_scaling=(1.0, 1.0, 1.0), contention=busy)
    prof = _hprof(**cpu)
    # per_param at 4 ranks (the factor 2.0 exactly, no interval): 6 alpha + 1.5 x bytes / busbw
    # per call, plus the 1 ms cost per call
    call = 6e-4 + 1.5 * 2e6 / 1e9
    s, _, _, _ = _step(prof, sync="per_param", world_size=4)
    assert s == pytest.approx(2 * (MICRO + BWD + OPT) + 2 * (call + 0.001))
    # ddp, the first bucket half-way through a 120 ms backward (60 ms alone, x 2); each 2 MB call
    # 45 ms alone (1.5 x 2 MB at 2 MB / 30 ms) + 1 ms; beside the last 60 ms of backward, compute
    # at 1/2 and the call at 1/3: compute ends at 60 + 120 = 180 ms, the call has done 40 of its
    # 46 ms; 6 ms alone, then the last bucket's 46 ms
    overlap = _hprof(
        **cpu, bucket_cap=None, copy_in=Quantity.exact(0.0), link=_link("own", 0.0, 2e6 / 0.03)
    )
    s, _, _, _ = _step(overlap, world_size=4)
    assert s == pytest.approx(2 * (MICRO + COUT + OPT) + 0.180 + 0.006 + 0.046)
    # fewer ranks, at the same exponent: one rank takes all 8 cores against 2: x 1/4
    two = _hprof(device="cpu", cores=8, threads=2, core_scaling=(1.0, 1.0, 1.0))
    s, _, _, _ = _step(two, sync="local", world_size=1)
    assert s == pytest.approx((MICRO + BWD + OPT) / 4)
    # drawn: the calibrated exponent's interval, one factor per world size, each around its point
    from whatif.quantity import Draws

    e, e_lo, e_hi = step.CORE_SCALING
    draws = Draws(400, seed=1)
    shared = _hprof(device="cpu", cores=8, threads=2)
    for n, f in ((4, 2.0), (1, 0.25)):
        cfg = step.changed(step.Config.of(shared), {"sync": "local" if n == 1 else "ddp", "n": n})
        p = step.predict(shared, cfg, draws)
        base = p.step_s / f**e
        assert p.lo == pytest.approx(base * min(f**e_lo, f**e_hi), rel=0.1)
        assert p.hi == pytest.approx(base * max(f**e_lo, f**e_hi), rel=0.1)


def _split_prof(shapes, min_rate, batched=False, no_shapes=False):
    from whatif.profile import Params

    numel = [math.prod(s) for s in shapes]
    n = len(shapes)
    params = Params([f"p{i}" for i in range(n)], numel, [4] * n, list(range(n)), [1.0] * n, "")
    return NS(
        params=params,
        shapes=None if no_shapes else shapes,
        psgd_min_rate=min_rate,
        psgd_batched=batched,
        psgd_alloc=None,
    )


def _net(bucket):
    return [s.nbytes for s in bucket.segs if s.kind == "net"]


def test_powersgds_split_per_tensor_by_hand():
    # rank 4 at min_compression_rate 0.1: a 2 x 1000 and a 1000 x 2 weight compress at rank 2 (the
    # smaller side): P 2 x 2 + 1000 x 2, Q 1000 x 2 + 2 x 2 elements; the two biases (1-D) and an
    # empty weight stay as they are: 100 + 50 + 0 elements
    shapes = [(2, 1000), (100,), (1000, 2), (50,), (0, 10)]
    p = step.plan(_split_prof(shapes, 0.1), _cfg(optim="powersgd", psgd_rank=4, bucket_cap=100.0))
    (b,) = p.buckets
    assert _net(b) == [150 * 4, 2004 * 4, 2004 * 4]
    assert b.pre == [("psgd_pre", 1.0)]
    assert p.notes[0].startswith("PowerSGD rank 4: 4,000 of 4,150 gradient elements compressed")
    # at rate 2 and rank 1 a 3 x 3 weight is not worth it ((3 + 3) x 2 > 9): nothing compressed,
    # so no share of PowerSGD's compute falls on the bucket
    p = step.plan(_split_prof([(3, 3)], 2.0), _cfg(optim="powersgd", bucket_cap=100.0))
    (b,) = p.buckets
    assert _net(b) == [36, 0, 0] and b.pre == [("psgd_pre", 0.0)]
    assert [s.share for s in b.segs if s.kind == "cpu"] == [0.0, 0.0]
    assert p.notes[0].startswith("PowerSGD rank 1: 0 of 9 gradient elements compressed")
    # no shapes in the record: every tensor is taken as 1-D, sent as it is
    p = step.plan(_split_prof([(3, 3)], 2.0, no_shapes=True), _cfg(optim="powersgd"))
    assert _net(p.buckets[0]) == [36, 0, 0]
    # batched at rank 2: one 1000 x 1000 square per bucket, P and Q 1000 x 2 each
    r2 = step.plan(_plan_prof(batched=True), _cfg(optim="powersgd", psgd_rank=2)).buckets[0]
    assert _net(r2) == [0, 8000, 8000]


def test_the_scatter_of_one_or_two_draws_and_of_an_uneven_interval():
    from whatif.quantity import Draws, Z95

    prof = _hprof(run_to_run_sd=0.05)
    cfg = step.Config.of(prof)
    assert list(step._noise(prof, Draws(1), cfg)) == [1.0]  # one draw: no scatter
    assert all(v != 1.0 for v in step._noise(prof, Draws(2), cfg))
    # the source's interval uneven (-10%, +21%) and exactly as wide (in log) as the run-to-run sd:
    # the target is drawn from it, uneven, and the source keeps no share
    within = Quantity(1.0, 1 / 1.1, 1.21)
    rr = math.log(1.21 * 1.1) / (2 * Z95)
    f = step._noise(_hprof(run_to_run_sd=rr, step_noise=within), Draws(20000, seed=5), cfg)
    lo, hi = np.percentile(np.log(f), [2.5, 97.5])
    assert (lo, hi) == (
        pytest.approx(-math.log(1.1), rel=0.05),
        pytest.approx(math.log(1.21), rel=0.05),
    )


def test_the_backward_script_by_hand():
    from whatif.step import BucketPlan, Launch, Ready, Seg, Wait, Work

    def bucket(k, ready, copy, pre=(), serial=False):
        return BucketPlan(k, 1, ready, copy, list(pre), [Seg("net", "x", 1)], serial)

    # 1 s of backward and 0.2 s of copies: the first bucket at half of each (0.6 s), its hook's
    # cast (half of 0.1 s) before its launch; the second and third at the end, the third's hook
    # cost not measured (0) and serial: no zero-length work anywhere, no work after the last
    buckets = [
        bucket(0, 0.5, 0.5, [("cast_bf16", 0.5)]),
        bucket(1, 1.0, 1.0),
        bucket(2, 1.0, 1.0, [("psgd_pre", 1.0)], serial=True),
    ]
    script = step.backward_script(buckets, 1.0, 0.2, {"cast_bf16": 0.1})
    assert script == [
        Work(pytest.approx(0.6), "backward"),
        Ready(0),
        Work(pytest.approx(0.05), "comm hook"),
        Launch(0),
        Work(pytest.approx(0.6), "backward"),
        Ready(1),
        Launch(1),
        Ready(2),
        Launch(2),
        Wait(2),
    ]
    # backward's rest after the last bucket's ready point
    script = step.backward_script([bucket(0, 0.5, 0.5)], 1.0, 0.2, {})
    assert script[-1] == Work(pytest.approx(0.6), "backward") and len(script) == 4


def test_the_calibrated_factors_say_when_they_are_not_identifiable_only():
    prof = _hprof(bucket_cap=None, copy_in=Quantity.exact(0.0), link=_link("own", 0.0, 2e7))
    # timers under the model's no-contention value: 1 and 1, calibrated (the overlap is there)
    s_c, s_m, _, how = step.calibrate_contention(prof, 0.05, 0.1)
    assert (s_c, s_m) == (1.0, 1.0) and "could not be calibrated" not in how
    assert "compute 1.00x and all-reduce 1.00x slower" in how
    # the serial syncs' timeline: no copy bars without copies
    cfg = step.changed(step.Config.of(prof), {"sync": "per_param"})
    tl = step._evaluate(prof, cfg, step.PointDraws(), timeline=True).timeline
    assert [lab for _, _, lab in tl["compute"]] == ["forward + backward", "optimizer"]


def test_a_span_beyond_the_bound_leaves_a_cost_per_call():
    # eight 2 MB buckets ready through a 1 s backward, each call 100 ms alone: at 5x slower beside
    # compute the calls end by 1 + 8 x 0.5 s at the latest, so a 10 s span is beyond the bound; the
    # all-reduce factor stops there and the rest is priced per call: at least (10 - 5) / 8 s each
    from whatif.profile import Params

    ready = [(i + 1) / 8 for i in range(8)]
    eight = Params([f"p{i}" for i in range(8)], [500_000] * 8, [4] * 8, list(range(8)), ready, "")
    prof = _hprof(
        params=eight,
        shapes=None,
        bucket_cap=1.0,
        backward=Quantity.exact(1.0),
        copy_in=Quantity.exact(0.0),
        link=_link("own", 0.0, 2e7),
    )
    s_c, s_m, per_call, how = step.calibrate_contention(prof, 1.0, 10.0)
    assert (s_c, s_m) == (1.0, pytest.approx(step.MAX_SLOWDOWN))
    assert per_call > (10.0 - 5.0) / 8
    assert "the all-reduce factor stopped at its bound 5" in how
    assert "ms per all-reduce, is a cost per call in training" in how


def test_contention_calibrated_on_a_half_precision_hook_with_its_copies():
    # bf16 on DDP's default caps: two 2 MB buckets, ready at half and all of backward (60 ms) and
    # of the copy in (4 ms); each casts a quarter of 8 ms (2 ms) before its launch and after its
    # call (1 MB at 20 MB/s: 50 ms). Bucket 0 launches at 34 ms: call to 84, cast back to 86;
    # the last bucket is ready at 66 ms (launched at 68): its call 86-136, cast back to 138; the
    # span 34 ms to 138 plus the 3 ms copy back
    prof = _hprof(bucket_cap=None, optim="bf16", link=_link("own", 0.0, 2e7))
    s_c, s_m, _, how = step.calibrate_contention(prof, 0.066, 0.107)
    assert (s_c, s_m) == (pytest.approx(1.0), pytest.approx(1.0))
    assert (
        "(backward compute under all-reduce 66 ms, model 66; all-reduce span 107 ms, model 107)"
        in how
    )
    # on the bucket's view: no copies; launches at 32 and 64 ms, the calls 32-82 and 84-134, the
    # cast backs to 84 and 136
    view = _hprof(bucket_cap=None, optim="bf16", bucket_view=True, link=_link("own", 0.0, 2e7))
    _, _, _, how = step.calibrate_contention(view, 0.062, 0.104)
    assert (
        "(backward compute under all-reduce 62 ms, model 62; all-reduce span 104 ms, model 104)"
        in how
    )


def test_per_param_calls_say_their_span_and_need_latency_bound_calls():
    link = _link("own", 1e-3, 1e9)
    prof = NS(
        sync="per_param",
        world_size=2,
        link=link,
        params=NS(numel=[250] * 10, element_size=[4] * 10),
    )
    alone = 10 * (2e-3 + 1000 / 1e9)
    _, how = step.calibrate_serial_calls(prof, alone + 0.05)
    assert how == (
        "sync=per_param's 10 all-reduces took 70 ms against 20 ms for the same calls in the "
        "microbenchmark: 5 ms more per call in training (every call of every configuration pays it)"
    )
    # no latency: a 1-byte call's time (1 ns at 1 GB/s) against 3-byte calls: latency 8 ns < half
    # of 24 ns, the calls are mostly bytes: nothing priced per call
    bytes_only = NS(
        sync="per_param",
        world_size=2,
        link=_link("own", 0.0, 1e9),
        params=NS(numel=[3] * 8, element_size=[1] * 8),
    )
    assert step.calibrate_serial_calls(bytes_only, 1.0) is None


def test_two_ranks_on_a_host_get_one_thread_each_and_a_preset_link_by_name():
    # one rank of 8 threads on 8 cores -> 2 ranks: the local launcher gives each one thread
    e = step.CORE_SCALING[0]
    q = step.cpu_share(_prof(world_size=1, threads=8), _cfg(world_size=2))
    assert q.value == pytest.approx(8.0**e)
    from whatif.links import preset

    c = step.changed(_cfg(), {"link": "10gbe"}, links={"other": NS(name="other")})
    assert c.link == preset("10gbe") and c.link_name == "10gbe"


def test_more_threads_than_cores_per_rank_and_a_profile_without_its_own_scaling():
    e = step.CORE_SCALING[0]
    # 8 threads a rank, 2 ranks on 8 cores: 4 cores each (the cores, not the threads) -> 1
    assert step.cpu_share(_prof(threads=8), _cfg(world_size=4)).value == pytest.approx(4.0**e)
    # a profile object without core_scaling: the calibrated exponent
    bare = NS(device="cpu", cores=8, world_size=2, hosts=1, threads=4)
    assert step.cpu_share(bare, _cfg(world_size=4)).value == pytest.approx(4.0**e)
    gpu = step.cpu_share(_prof(device="cuda"), _cfg(world_size=4))
    assert (gpu.value, gpu.source) == (1.0, "same ranks per host")


def test_link_times_are_float_arrays_one_per_draw():
    from whatif.quantity import Draws

    both = _link("net", 1e-4, 1e9, floor=_link("host", 1e-3, 1e10))
    times, duties = step.link_times(both, 2, [1_000], Draws(5))
    assert times[0].dtype == float and duties[0].dtype == float
    assert list(times[0]) == [pytest.approx(2e-3 + 1_000 / 1e10)] * 5
    assert list(duties[0]) == [pytest.approx(1.0)] * 5


def test_powersgds_segments_are_labelled_and_the_fresh_pages_are_cpu_work():
    p = step.plan(_plan_prof(alloc=Quantity.exact(0.01)), _cfg(optim="powersgd"))
    assert [(s.kind, s.label) for s in p.buckets[0].segs] == [
        ("net", "all-reduce uncompressed 0 MB"),
        ("net", "all-reduce P 0.004 MB"),
        ("cpu", "PowerSGD: orthogonalise P, Q = M^T P"),
        ("net", "all-reduce Q 0.004 MB"),
        ("cpu", "PowerSGD: P Q^T, error feedback"),
        ("cpu", "PowerSGD: the new error in fresh pages"),
    ]


def test_a_predictions_interval_is_the_steps_scatter():
    from whatif.quantity import Draws, Z95

    # exact inputs; the source's step interval uneven (-10%, +21%) and as wide as the run-to-run
    # sd: the step's 95% interval is the step x/ that interval
    within = Quantity(1.0, 1 / 1.1, 1.21)
    prof = _hprof(run_to_run_sd=math.log(1.21 * 1.1) / (2 * Z95), step_noise=within)
    p = step.predict(prof, step.Config.of(prof), Draws(1500, seed=2))
    s = MICRO + BWD + CIN + _ar(4e6) + COUT + OPT
    assert p.step_s == pytest.approx(s)
    assert (p.lo, p.hi) == (pytest.approx(s / 1.1, rel=0.02), pytest.approx(s * 1.21, rel=0.02))
    assert (p.sps_lo, p.sps_hi) == (
        pytest.approx(16 / (s * 1.21), rel=0.02),
        pytest.approx(16 * 1.1 / s, rel=0.02),
    )


def test_a_named_link_gets_the_hosts_own_all_reduce_as_its_floor_on_one_cpu_host():
    own = _link("own", 1e-3, 1e9)
    net = _link("10g", 1e-5, 1e10)
    gloo = dict(backend="gloo", device="cpu", link=own)

    def resolved(cfg_link=net, hosts=("h0",), **kw):
        prof = _hprof(**{**gloo, **kw, "record": NS(env=NS(hostnames=hosts))})
        return step.resolve_link(prof, _cfg(link=cfg_link))

    assert resolved(cfg_link=None) is own  # the run's own ranks
    assert resolved().floor is own and resolved().name == "10g"
    assert resolved(hosts=None).floor is own  # no host names: one host
    assert resolved(hosts=("h0", "h0")).floor is own
    assert resolved(hosts=("h0", "h1")) is net  # two hosts: the named link as it is
    assert resolved(backend="nccl") is net
    assert resolved(device="cuda") is net
    assert resolved(link=None) is net  # no measured link of its own to floor it
    floored = _link("10g", 1e-5, 1e10, floor=_link("other", 0.0, 1e12))
    assert resolved(cfg_link=floored) is floored  # a floor of its own is kept


def test_hook_work_in_the_queue_is_fully_busy_and_an_unmeasured_cost_is_free():
    from whatif.step import BucketPlan, Seg, simulate_backward

    segs = [Seg("net", "call", 1), Seg("cpu", "hook", cost="cast_bf16", share=1.0)]
    early = [BucketPlan(0, 1, 0.5, 0.0, [], segs, False)]
    # 1 s of backward, the bucket at half: a 0.1 s call (duty 0.5) then 0.2 s of hook work (duty
    # 1, whatever the slot says) beside the rest; compute 2x slower under a fully busy queue:
    # 0.1 s at 1 / 1.5 (0.0667 s of work), 0.2 s at 1/2 (0.1 s), then the other 0.3333 s alone
    r = simulate_backward(early, 1.0, 0.0, {"cast_bf16": 0.2}, [[0.1, 0.0]], [[0.5, 0.5]], 2.0)
    assert r.end == pytest.approx(0.5 + 0.1 + 0.2 + (0.5 - 0.1 / 1.5 - 0.1))
    assert r.lane is None  # nothing recorded unless asked
    # the hook's cost not measured: no time in the queue
    late = [BucketPlan(0, 1, 1.0, 0.0, [], segs, False)]
    r = simulate_backward(late, 1.0, 0.0, {}, [[0.1, 0.0]], [[1.0, 1.0]])
    assert r.end == pytest.approx(1.1) and r.compute_end == pytest.approx(1.0)


def test_a_configs_items_are_the_knob_words():
    c = _cfg(world_size=8, optim="powersgd", psgd_rank=4, bucket_cap=50.0, accumulate=2)
    c = step.changed(c, {"ranks_per_host": "2", "static_graph": "1", "bucket_view": "true"})
    assert c.items() == {
        "world_size": "8",
        "ranks_per_host": "2",
        "sync": "ddp",
        "optim": "powersgd",
        "bucket": "50",
        "accumulate": "2",
        "ddp.gradient_as_bucket_view": "true",
        "ddp.static_graph": "true",
        "optim.rank": "4",
        "link": "own",
    }
    plain = _cfg().items()
    assert "optim.rank" not in plain and "ranks_per_host" not in plain
    assert (plain["ddp.gradient_as_bucket_view"], plain["ddp.static_graph"]) == ("false", "false")
    assert step.Config.of(_hprof()).items()["link"] == "own"
    assert c.label(_cfg()) == (
        "world_size=8 ranks_per_host=2 optim=powersgd bucket=50 accumulate=2 "
        "ddp.gradient_as_bucket_view=true ddp.static_graph=true optim.rank=4"
    )


def test_one_rank_of_a_contended_run_sends_nothing_and_pays_no_cost_per_call():
    # the record's own calibration (compute 2x beside a call, 1 ms per call) at one rank, the first
    # bucket half-way through backward: its calls take no time, so neither weighs on the step
    from whatif.profile import Contention

    busy = Contention(Quantity.exact(2.0), Quantity.exact(1.0), "", Quantity.exact(0.001))
    s, _, _, _ = _step(_hprof(contention=busy, bucket_cap=None), world_size=1)
    assert s == pytest.approx(MICRO + BWD + CIN + COUT + OPT)


def test_the_fresh_pages_note_and_the_fp16_cast_note():
    from whatif.profile import Params

    # 1,234,501 one-byte gradients: 1.234501 MB, 4 digits: 1.235; 2 x 0.61745 ms: 1.2349, 3 digits
    params = Params(["a"], [1_234_501], [1], [0], [1.0], "")
    prof = _hprof(
        params=params,
        shapes=[(1_234_501,)],
        powersgd=Quantity.exact(0.02),
        psgd_alloc=Quantity.exact(0.00061745, "p"),
    )
    _, _, _, ev = _step(prof, optim="powersgd")
    assert (
        ev.notes[-1]
        == "PowerSGD's clone and new error, 2 x 1.235 MB a step in fresh pages: 1.23 ms (p)"
    )
    # a profile object without psgd_alloc: no fresh pages
    bare = _hprof(powersgd=Quantity.exact(0.02))
    del bare.psgd_alloc
    s, _, _, _ = _step(bare, optim="powersgd")
    queue = _ar(8000) + 0.005 + _ar(4000) + 0.005
    assert s == pytest.approx(MICRO + BWD + CIN + 0.010 + queue + COUT + OPT)
    zero = {"bf16": Quantity.exact(0.008), "fp16": Quantity.exact(0.0)}
    _, _, _, ev = _step(_hprof(cast=zero), optim="fp16")
    assert ev.notes == ["the fp16 cast is not in this record: left out (optimistic)"]


def test_a_source_interval_with_no_width_is_no_interval():
    from whatif.quantity import Draws

    prof = _hprof(run_to_run_sd=0.05, step_noise=Quantity.exact(1.0))
    f = step._noise(prof, Draws(4000, seed=3), step.Config.of(prof))
    assert np.std(np.log(f)) == pytest.approx(0.05 * math.sqrt(2), rel=0.05)


def test_the_timeline_of_three_micro_steps_and_a_hooks_bars():
    prof = _hprof()
    cfg = step.changed(step.Config.of(prof), {"accumulate": "3", "optim": "bf16"})
    tl = step._evaluate(prof, cfg, step.PointDraws(), timeline=True).timeline
    fb = MICRO + BWD
    b0 = 2 * fb + MICRO
    want = [
        (0.0, fb, "no_sync micro-step"),
        (fb, 2 * fb, "no_sync micro-step"),
        (2 * fb, 2 * fb + DATA + H2D, "data + h2d"),
        (2 * fb + DATA + H2D, b0, "forward"),
        (b0, b0 + BWD + CIN, "backward"),
        (b0 + BWD + CIN, b0 + BWD + CIN + 0.004, "comm hook"),
    ]
    assert [lab for _, _, lab in tl["compute"][:6]] == [w[2] for w in want]
    assert [(a, b) for a, b, _ in tl["compute"][:6]] == [pytest.approx((a, b)) for a, b, _ in want]


def test_the_last_backward_work_after_a_late_bucket():
    from whatif.step import BucketPlan, Seg, Work

    late = [BucketPlan(0, 1, 0.9, 0.9, [], [Seg("net", "x", 1)], False)]
    # ready at 0.9 + 0.18 s of 1 + 0.2: 0.12 s of work after it
    script = step.backward_script(late, 1.0, 0.2, {})
    assert script[-1] == Work(pytest.approx(0.12), "backward")


def test_the_calibration_text_in_milliseconds():
    # the hand case of test_contention_is_calibrated_back_from_timers_worked_out_by_hand, 10x longer
    prof = _hprof(
        bucket_cap=None,
        backward=Quantity.exact(0.6),
        copy_in=Quantity.exact(0.0),
        copy_out=Quantity.exact(0.03),
        link=_link("own", 0.0, 2e6),
    )
    _, _, _, how = step.calibrate_contention(prof, 0.9, 2.23)
    assert (
        "(backward compute under all-reduce 900 ms, model 900; all-reduce span 2230 ms, model "
        "2230) from backward alone 600 ms"
    ) in how


def test_the_cost_per_call_and_the_serial_calls_in_three_digits():
    # the eight-bucket case of test_a_span_no_overlap_explains_is_a_cost_per_call with 1.2349 ms a
    # call left over: 3 digits, 1.23
    from whatif.profile import Params

    eight = Params(
        [f"p{i}" for i in range(8)], [500_000] * 8, [4] * 8, list(range(8)), [1.0] * 8, ""
    )
    prof = _hprof(params=eight, shapes=None, bucket_cap=1.0, copy_in=Quantity.exact(0.0))
    model = 8 * _ar(2e6) + COUT
    _, _, per_call, how = step.calibrate_contention(prof, BWD, model + 8 * 0.0012349)
    assert per_call == pytest.approx(0.0012349, rel=1e-6)
    assert "; the rest of the span, 1.23 ms per all-reduce, is a cost per call" in how
    # sync=per_param: ten calls of 0.12349 ms alone (2 alpha + 1 us), 1.2349 ms more each
    alpha = (1.2349e-4 - 1e-6) / 2
    serial = NS(
        sync="per_param",
        world_size=2,
        link=_link("own", alpha, 1e9),
        params=NS(numel=[250] * 10, element_size=[4] * 10),
    )
    _, how = step.calibrate_serial_calls(serial, 10 * 1.2349e-4 + 10 * 1.2349e-3)
    assert "against 1.23 ms for the same calls in the microbenchmark: 1.23 ms more per call" in how


def test_contention_calibrated_on_a_powersgd_run():
    # one 4 MB bucket at the end of backward (64 ms with the copy in), PowerSGD's 10 ms before its
    # launch, then P (0.208 ms), 5 ms, Q (0.204 ms), 5 ms in the queue while compute waits: nothing
    # overlaps; the span from the launch at 74 ms is 10.412 ms, plus the 3 ms copy back
    prof = _hprof(optim="powersgd", powersgd=Quantity.exact(0.02))
    _, _, _, how = step.calibrate_contention(prof, 0.064, 0.0134)
    assert (
        "(backward compute under all-reduce 64 ms, model 64; all-reduce span 13 ms, model 13)"
        in how
    )
