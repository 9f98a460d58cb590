"""whatif/step.py (issue 36: a module the mutation run covers): the what-if model's knob changes,
the CPU-share factor and PowerSGD's cost at another rank, each checked on hand-made inputs against
the number worked out here by another route (the core counts and power law written out, the knob
words read by hand). Every test runs in well under 0.5 s: --fast runs them for each of step.py's
mutants beside test_whatif.py's hand-made simulations (FAST_TESTS in tests/mutation.py)."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

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
