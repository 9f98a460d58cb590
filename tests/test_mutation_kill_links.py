"""whatif/links.py (issue 36: a module the mutation run covers): the all-reduce cost the what-if
model prints, by hand. The ring 2(n-1) alpha + 2(n-1)/n S / B and the tree's 2 ceil(log2 n) alpha;
a fit on points that lie on a line gives that line's alpha and busbw back exactly, numpy's
weighted polyfit (weights 1/t on the residuals) gives the same line on scattered ones; the presets'
figures from their stated line rates (10 Gbit/s is 1.25 GB/s, x 1448/1538 TCP payload); an emulated
link's rate x share."""

from __future__ import annotations

import math

import numpy as np
import pytest

from base.record import Record
from base.record_types import (
    CollectiveRow,
    CollectivesResult,
    Microbench,
    MicrobenchSize,
    Summary,
    TrainResult,
)
from whatif import links as lk
from whatif.quantity import Quantity


def _link(alpha=10e-6, busbw=1e9, **kw):
    return lk.Link("x", Quantity.exact(alpha), Quantity.exact(busbw), "s", **kw)


def test_ring_tree_and_no_cost_on_one_rank():
    link = _link()
    # n = 4: 6 alpha + 1.5 S / B
    assert link.point_time(1e6, 4) == pytest.approx(6 * 10e-6 + 1.5e-3, rel=1e-12)
    assert link.point_time(1e6, 2) == pytest.approx(2 * 10e-6 + 1e-3, rel=1e-12)
    assert link.point_time(1e6, 1) == 0.0 and link.point_time(0, 4) == 0.0
    z = link.time(1e6, 1, np.array([1.0, 2.0]), 1e9)
    assert list(z) == [0.0, 0.0]
    assert link.time(1e6, 1, 0.0, 1e9) == 0.0  # an alpha of zero too
    # the tree: 2 ceil(log2 5) = 6 alpha steps against the ring's 8
    tree = _link(alpha=1e-3, tree=True)
    assert tree.point_time(1e3, 5) == pytest.approx(6e-3 + 1.6 * 1e3 / 1e9, rel=1e-12)
    assert tree.point_time(1e3, 4) == pytest.approx(4e-3 + 1.5e-6, rel=1e-12)  # ceil(log2 4) = 2
    # the ring wins at 2 ranks (2 alpha either way) and where the tree is no shorter
    assert tree.point_time(1e3, 2) == pytest.approx(2e-3 + 1e-6, rel=1e-12)
    # drawn arrays: element by element
    t = link.time(1e6, 4, np.array([10e-6, 20e-6]), np.array([1e9, 2e9]))
    assert t == pytest.approx([6e-5 + 1.5e-3, 1.2e-4 + 0.75e-3], rel=1e-12)


def _table(ranks):
    rows = [
        {"bytes": 1000, "in_place": {"time_us": 10.0, "busbw_GBps": 0.1}},
        {"bytes": 100000, "in_place": {"time_us": 1000.0, "busbw_GBps": 0.1}},
    ]
    return {"rows": rows, "ranks": ranks}


def test_an_nccl_table_is_read_at_its_own_rank_count_scaled_by_the_draw():
    link = _link(busbw=2e9, nccl_table=_table(2))
    # 10^4 B between 10^3 (10 us) and 10^5 (1000 us) in log-log: 100 us
    assert link.point_time(10_000, 2) == pytest.approx(100e-6, rel=1e-9)
    t = link.time(10_000, 2, 0.0, np.array([2e9, 1e9, 4e9]))
    assert t == pytest.approx([100e-6, 200e-6, 50e-6], rel=1e-9)
    # a table that does not say its ranks is read at any count
    assert _link(busbw=2e9, nccl_table=_table(None)).point_time(10_000, 8) == pytest.approx(
        100e-6, rel=1e-9
    )
    # another rank count: the alpha-beta model (8 alpha + 1.75 S / B at n = 8)
    other = _link(alpha=1e-6, busbw=1e9, nccl_table=_table(2))
    assert other.point_time(10_000, 8) == pytest.approx(14e-6 + 1.75e-5, rel=1e-12)


def test_describe_says_the_model_the_table_and_the_floor():
    link = lk.Link("L", Quantity.exact(5e-6), Quantity.exact(2e9), "src")
    assert (
        link.describe()
        == "L: alpha 5 us (no interval), busbw 2 GB/s (no interval) (ring); source: src"
    )
    floor = lk.Link("F", Quantity.exact(1e-6), Quantity.exact(1e9), "f")
    t = lk.Link("L", Quantity.exact(5e-6), Quantity.exact(2e9), "src", tree=True, floor=floor)
    assert t.describe().endswith("(ring or tree, the faster); source: src; host floor: F")
    n = lk.Link("L", Quantity.exact(5e-6), Quantity.exact(2e9), "src", nccl_table={"ranks": 4})
    assert n.describe().startswith("L: nccl-tests table, 4 ranks, interpolated; beyond it alpha 5")
    a = lk.Link("L", Quantity(1.0, 0.999999, 1.000001), Quantity.exact(2e9), "s")
    assert a.describe().startswith("L: alpha 1000000.0 [999999.0, 1000001.0] us, busbw 2 GB/s")
    n = lk.Link("L", Quantity.exact(5e-6), Quantity.exact(2e9), "src", nccl_table={})
    assert "nccl-tests table, ? ranks" in n.describe()


def test_fit_on_a_line_gives_its_alpha_and_busbw():
    # t = a + b S with a = 60 us, b = 1 ns/B on 4 ranks: alpha = a / 6 = 10 us, busbw = 1.5 / b
    pts = [(s, 60e-6 + s * 1e-9, None, None) for s in (1e3, 1e5, 1e7)]
    fit = lk.fit_alpha_beta(pts, 4, name="N", source="S", resamples=200)
    assert fit.alpha.value == pytest.approx(10e-6, rel=1e-9)
    assert fit.busbw.value == pytest.approx(1.5e9, rel=1e-9)
    assert fit.measured_ranks == 4 and fit.name == "N"
    assert fit.source == (
        "S; weighted least squares t = a + b S over 3 sizes (1000-10000000 B), 95% interval by "
        "bootstrap (points resampled)"
    )
    # every resample of points on a line is the line: an interval of no width
    assert fit.alpha.lo == pytest.approx(10e-6, rel=1e-6) and fit.busbw.hi == pytest.approx(1.5e9)
    assert fit.alpha.source == "N alpha (points resampled)"
    assert fit.busbw.source == "N busbw (points resampled)"
    assert fit.notes == ()


def test_fit_skips_empty_points_and_refuses_none_or_one_rank():
    pts = [(0, 1.0, None, None), (1e3, 0.0, None, None), (1e3, None, None, None)]
    with pytest.raises(ValueError, match=r"^N: no all-reduce times to fit$"):
        lk.fit_alpha_beta(pts, 2, name="N", source="S")
    with pytest.raises(
        ValueError, match="^an all-reduce fit needs measurements on 2 or more ranks$"
    ):
        lk.fit_alpha_beta([(1e3, 1e-3, None, None)], 1, name="N", source="S")
    good = [(s, 20e-6 + s * 1e-9, None, None) for s in (1e3, 1e6)]
    fit = lk.fit_alpha_beta([*pts, *good], 2, name="N", source="S", resamples=150)
    assert fit.alpha.value == pytest.approx(10e-6, rel=1e-9)  # 20 us / 2(2-1)
    assert fit.busbw.value == pytest.approx(1e9, rel=1e-9)  # 2(1)/2 / 1 ns
    assert "over 2 sizes (1000-1000000 B)" in fit.source


def test_one_size_only_takes_alpha_as_zero():
    fit = lk.fit_alpha_beta([(1e6, 2e-3, None, None)] * 3, 2, name="N", source="S")
    assert fit.alpha.value == 0.0
    assert fit.busbw.value == pytest.approx(1e6 / 2e-3, rel=1e-12)  # bus factor 1 at 2 ranks
    assert fit.notes == (
        "one message size only: alpha cannot be separated from the bandwidth; alpha taken as 0",
        "too few sizes for an interval on the fit",
    )
    assert fit.alpha == Quantity.exact(0.0, "N alpha") and not fit.busbw.has_interval


def test_one_size_only_takes_the_first_calls_time_per_byte():
    fit = lk.fit_alpha_beta(
        [(1e6, 2e-3, None, None), (1e6, 4e-3, None, None)], 2, name="N", source="S"
    )
    assert fit.busbw.value == pytest.approx(1e6 / 2e-3, rel=1e-12)
    one = lk.fit_alpha_beta([(1e6, 4e-3, None, None)], 2, name="N", source="S")
    assert one.busbw.value == pytest.approx(1e6 / 4e-3, rel=1e-12) and one.alpha.value == 0.0


def test_a_one_byte_call_is_a_size():
    pts = [(1, 20e-6 + 1e-9, None, None), (1e6, 20e-6 + 1e-3, None, None)]
    fit = lk.fit_alpha_beta(pts, 2, name="N", source="S", resamples=10)
    assert "over 2 sizes (1-1000000 B)" in fit.source
    assert fit.busbw.value == pytest.approx(1e9, rel=1e-9)


def test_exactly_100_draws_make_an_interval():
    pts = [(s, 60e-6 + s * 1e-9) for s in (1e3, 1e7)]
    pts = [(s, t, t / 1.1, t * 1.1) for s, t in pts]
    fit = lk.fit_alpha_beta(pts, 4, name="N", source="S", resamples=100)
    assert fit.notes == () and fit.busbw.has_interval
    fit = lk.fit_alpha_beta(pts, 4, name="N", source="S", resamples=99)
    assert fit.notes == ("too few sizes for an interval on the fit",)


def _two_size_draws(q0, q1, s0, s1, n, resamples):
    """By hand: each draw's line goes through both redrawn points, slope (t1 - t0) / (S1 - S0)."""
    rng = np.random.default_rng(0)
    bws, alphas = [], []
    for _ in range(resamples):
        y0, y1 = q0.sample(rng, 1)[0], q1.sample(rng, 1)[0]
        slope = (y1 - y0) / (s1 - s0)
        bws.append((2 * (n - 1) / n) / slope)
        alphas.append(max(y0 - slope * s0, 0.0) / (2 * (n - 1)))
    return np.percentile(bws, [2.5, 97.5]), np.percentile(alphas, [2.5, 97.5])


def test_the_interval_is_the_draws_central_95_percent():
    """Two sizes with their intervals: the interval is the 2.5th and 97.5th percentiles of bus
    factor / slope and of the intercept / 2(n-1) over the draws of the same generator."""
    s0, s1 = 1e3, 1e7
    t0, t1 = 60e-6 + s0 * 1e-9, 60e-6 + s1 * 1e-9
    q0, q1 = Quantity(t0, t0 / 1.5, t0 * 1.5), Quantity(t1, t1 / 1.1, t1 * 1.1)
    fit = lk.fit_alpha_beta(
        [(s0, t0, q0.lo, q0.hi), (s1, t1, q1.lo, q1.hi)], 4, name="N", source="S", resamples=300
    )
    bw, al = _two_size_draws(q0, q1, s0, s1, 4, 300)
    assert (fit.busbw.lo, fit.busbw.hi) == pytest.approx(tuple(bw), rel=1e-6)
    assert (fit.alpha.lo, fit.alpha.hi) == pytest.approx(tuple(al), rel=1e-6)
    # each time on an end of its interval is still an interval (lo <= t <= hi): every draw's
    # slope is at most the point's, so busbw's low end and alpha's are the point
    q0, q1 = Quantity(t0, t0, t0 * 1.5), Quantity(t1, t1 / 1.1, t1)
    fit = lk.fit_alpha_beta(
        [(s0, t0, q0.lo, q0.hi), (s1, t1, q1.lo, q1.hi)], 4, name="N", source="S", resamples=300
    )
    bw, al = _two_size_draws(q0, q1, s0, s1, 4, 300)
    assert fit.busbw.hi == pytest.approx(bw[1], rel=1e-6)
    assert fit.alpha.hi == pytest.approx(al[1], rel=1e-6)


def test_a_negative_intercept_is_alpha_zero_with_a_note():
    pts = [(s, -5e-6 + s * 1e-9, None, None) for s in (1e5, 1e6, 1e7)]
    fit = lk.fit_alpha_beta(pts, 2, name="N", source="S", resamples=150)
    assert fit.alpha.value == 0.0
    assert fit.busbw.value == pytest.approx(1e9, rel=1e-9)
    assert fit.notes[0] == (
        "the fit's intercept was negative (bandwidth-bound sizes only): alpha taken as 0"
    )


def test_too_few_resamples_give_no_interval():
    pts = [(s, 60e-6 + s * 1e-9, None, None) for s in (1e3, 1e5, 1e7)]
    fit = lk.fit_alpha_beta(pts, 4, name="N", source="S", resamples=99)
    assert fit.notes == ("too few sizes for an interval on the fit",)
    assert fit.alpha.lo is None and fit.alpha.source == "N alpha"
    assert fit.busbw.source == "N busbw"


def test_per_point_intervals_are_redrawn():
    pts = [(s, 60e-6 + s * 1e-9) for s in (1e3, 1e5, 1e7)]
    pts = [(s, t, t / 1.1, t * 1.1) for s, t in pts]
    fit = lk.fit_alpha_beta(pts, 4, name="N", source="S", resamples=300, seed=2)
    assert fit.alpha.value == pytest.approx(10e-6, rel=1e-9)
    assert fit.busbw.value == pytest.approx(1.5e9, rel=1e-9)
    assert fit.busbw.lo < 1.5e9 < fit.busbw.hi and fit.alpha.lo < 10e-6 < fit.alpha.hi
    # +-10% on the 10 MB call moves busbw by about +-10%, no more
    assert 1.5e9 / 1.2 < fit.busbw.lo and fit.busbw.hi < 1.5e9 * 1.2
    assert fit.busbw.source == "N busbw (per-point intervals redrawn)"
    assert fit.source.endswith("(per-point intervals redrawn)")
    # the same seed, the same interval; another seed, another
    again = lk.fit_alpha_beta(pts, 4, name="N", source="S", resamples=300, seed=2)
    assert again.busbw == fit.busbw
    other = lk.fit_alpha_beta(pts, 4, name="N", source="S", resamples=300, seed=3)
    assert other.busbw.lo != fit.busbw.lo
    # one point without an interval: the points are resampled instead
    mixed = [*pts[:2], (pts[2][0], pts[2][1], None, None)]
    fit = lk.fit_alpha_beta(mixed, 4, name="N", source="S", resamples=150)
    assert fit.source.endswith("(points resampled)")
    # one end missing: no interval either
    half = [*pts[:2], (pts[2][0], pts[2][1], None, pts[2][3])]
    fit = lk.fit_alpha_beta(half, 4, name="N", source="S", resamples=150)
    assert fit.source.endswith("(points resampled)")
    # an interval of no width counts as none
    flat = [*pts[:2], (pts[2][0], pts[2][1], pts[2][1], pts[2][1])]
    fit = lk.fit_alpha_beta(flat, 4, name="N", source="S", resamples=150)
    assert fit.source.endswith("(points resampled)")


def test_a_time_that_does_not_grow_with_the_bytes_takes_the_bootstraps_median():
    # flat times: the point fit has b <= 0 (busbw infinite); the draws that resolve it decide
    pts = [
        (1e3, 1.0e-4, 0.9e-4, 1.1e-4),
        (2e3, 1.0e-4, 0.9e-4, 1.1e-4),
        (4e3, 1e-4, 0.9e-4, 1.1e-4),
    ]
    fit = lk.fit_alpha_beta(pts, 2, name="N", source="S", resamples=400)
    assert math.isfinite(fit.busbw.value) and fit.busbw.value > 0
    # the draws that do not resolve it (infinite) are left out: the high end is the finite draws'
    # 97.5th percentile, above their median (with them in, numpy's percentile of inf is nan)
    assert math.isfinite(fit.busbw.hi) and fit.busbw.hi > fit.busbw.value
    assert fit.busbw.lo <= fit.busbw.value <= fit.busbw.hi
    assert (
        "the sizes do not resolve the bandwidth (the fitted time does not grow with the bytes): "
        "alpha and busbw are the medians of the bootstrap fits that resolve it"
    ) in fit.notes


def test_the_bootstrap_draws_every_point_and_2000_resamples_by_default():
    # two sizes: a resample holds both (half the time) or one twice (skipped); a resampler that
    # never drew the first point would never hold both
    pts = [(1e3, 21e-6, None, None), (1e7, 20e-6 + 1e-2, None, None)]
    fit = lk.fit_alpha_beta(pts, 2, name="N", source="S", resamples=400)
    assert fit.notes == () and fit.busbw.value == pytest.approx(1e9, rel=1e-9)
    pts = [(s, 60e-6 + s * 1e-9) for s in (1e3, 1e7)]  # redrawn in their intervals: continuous
    pts = [(s, t, t / 1.1, t * 1.1) for s, t in pts]
    by_default = lk.fit_alpha_beta(pts, 4, name="N", source="S")
    assert by_default == lk.fit_alpha_beta(pts, 4, name="N", source="S", resamples=2000, seed=0)


def test_a_link_slower_than_a_byte_a_second_still_gets_its_interval():
    # 2 s per byte on 2 ranks: busbw 0.5 B/s, every resample the same line
    pts = [(s, 2.0 * s, None, None) for s in (1e3, 1e4, 1e5)]
    fit = lk.fit_alpha_beta(pts, 2, name="N", source="S", resamples=150)
    assert fit.busbw.value == pytest.approx(0.5, rel=1e-9)
    assert "too few sizes for an interval on the fit" not in fit.notes
    assert fit.busbw.source == "N busbw (points resampled)"


def test_wls_is_numpys_weighted_polyfit():
    x = np.array([1e3, 1e4, 1e5, 1e6, 8e6])
    y = np.array([60e-6, 70e-6, 150e-6, 900e-6, 4e-3])
    slope, intercept = np.polyfit(x, y, 1, w=1 / y)
    a, b = lk._wls(x, y)
    assert a == pytest.approx(intercept, rel=1e-9) and b == pytest.approx(slope, rel=1e-9)
    assert lk._wls(np.array([2.0, 2.0]), np.array([4.0, 4.0])) == (0.0, 2.0)
    assert lk._wls(np.array([2.0, 4.0]), np.array([1.0, 3.0])) == pytest.approx((-1.0, 1.0))


def test_to_alpha_busbw():
    assert lk._to_alpha_busbw(60e-6, 1e-9, 4) == pytest.approx((10e-6, 1.5e9))
    assert lk._to_alpha_busbw(-1.0, 1e-9, 2) == pytest.approx((0.0, 1e9))
    assert lk._to_alpha_busbw(1.0, 0.0, 3) == (1.0 / 4, math.inf)
    assert lk._to_alpha_busbw(1.0, -1e-9, 3)[1] == math.inf


def _size(nbytes, t, lo=None, hi=None, level=0.95):
    return MicrobenchSize(
        bytes=nbytes, time_s=Summary(median=t, ci_lo=lo, ci_hi=hi, ci_level=level)
    )


def test_from_microbench_fits_the_runs_own_sizes():
    sizes = [_size(s, 20e-6 + s * 1e-9) for s in (1e3, 1e5)]
    total = _size(1e7, 20e-6 + 1e7 * 1e-9)
    micro = Microbench(
        sizes=[*sizes, MicrobenchSize(bytes=5000)],  # a size without a time: left out
        total=total,
        latency=_size(4, 20e-6 + 4e-9),
        iters=7,
    )
    link = lk.from_microbench(TrainResult(world_size=2, microbench=micro))
    assert link.alpha.value == pytest.approx(10e-6, rel=1e-9)
    assert link.busbw.value == pytest.approx(1e9, rel=1e-9)
    assert link.name == "this run's ranks"
    assert link.source.startswith(
        "the record's on-rank microbenchmark (result.microbench: 3 sizes, 7 timed calls each); "
        "weighted least squares t = a + b S over 4 sizes (4-10000000 B)"
    )
    assert lk.from_microbench(TrainResult(world_size=1, microbench=micro)) is None
    assert lk.from_microbench(TrainResult(world_size=2)) is None
    assert lk.from_microbench(TrainResult(world_size=2, microbench=Microbench(sizes=[]))) is None
    assert lk.from_microbench(TrainResult(microbench=micro)) is None  # one rank by default


def test_from_microbench_keeps_intervals_of_75_percent_or_more():
    def micro(level):
        sizes = [
            _size(s, 20e-6 + s * 1e-9, (20e-6 + s * 1e-9) / 1.05, (20e-6 + s * 1e-9) * 1.05, level)
            for s in (1e3, 1e5, 1e7)
        ]
        return Microbench(sizes=sizes, iters=3)

    kept = lk.from_microbench(TrainResult(world_size=2, microbench=micro(0.75)))
    assert kept.source.endswith("(per-point intervals redrawn)")
    dropped = lk.from_microbench(TrainResult(world_size=2, microbench=micro(0.74)))
    assert dropped.source.endswith("(points resampled)")
    none = lk.from_microbench(TrainResult(world_size=2, microbench=micro(None)))
    assert none.source.endswith("(points resampled)")


def _coll(rows, n=2):
    return Record.from_dict(
        {
            "task": "collectives",
            "status": "ok",
            "env": {"hostnames": ["h1", "h2"]},
            "result": CollectivesResult(
                world_size=n, backend="gloo", device_name="cpu", rows=rows
            ).to_dict(),
        }
    )


def test_from_collectives_fits_the_in_place_all_reduce_rows():
    rows = [
        CollectiveRow(op="all_reduce", mode="in_place", bytes=s, time_median_us=20 + s * 1e-3)
        for s in (1000, 100000, 10000000)
    ]
    rows.append(CollectiveRow(op="all_reduce", mode="out_of_place", bytes=10000, time_us=1e6))
    rows.append(CollectiveRow(op="broadcast", mode="in_place", bytes=10000, time_us=1e6))
    rows.append(CollectiveRow(op="all_reduce", mode="in_place", bytes=10000, time_us=30.0))
    link = lk.from_collectives(_coll(rows))
    assert link.alpha.value == pytest.approx(10e-6, rel=1e-9)
    assert link.busbw.value == pytest.approx(1e9, rel=1e-9)
    assert link.name == "task=collectives on h1, h2" and link.measured_ranks == 2
    assert link.source.startswith("task=collectives record (2 ranks, gloo, cpu); ")
    assert "over 4 sizes (1000-10000000 B)" in link.source


def test_from_collectives_reads_the_rows_intervals_in_microseconds():
    rows = [
        CollectiveRow(
            op="all_reduce",
            mode="in_place",
            bytes=s,
            time_median_us=20 + s * 1e-3,
            time_ci_lo_us=(20 + s * 1e-3) / 1.02,
            time_ci_hi_us=(20 + s * 1e-3) * 1.02,
        )
        for s in (1000, 100000, 10000000)
    ]
    link = lk.from_collectives(_coll(rows))
    assert link.source.endswith("(per-point intervals redrawn)")
    assert link.busbw.lo < 1e9 < link.busbw.hi and link.busbw.hi < 1.1e9


def test_from_collectives_without_ranks_or_hosts():
    rows = [
        CollectiveRow(op="all_reduce", mode="in_place", bytes=s, time_median_us=20 + s * 1e-3)
        for s in (1000, 100000)
    ]
    rec = _coll(rows)
    rec.env.hostnames = None
    assert lk.from_collectives(rec).name == "task=collectives on ?"
    rec.result.world_size = None  # one rank: nothing to fit
    with pytest.raises(ValueError, match="needs measurements on 2 or more ranks"):
        lk.from_collectives(rec)
    rec.result = None
    with pytest.raises(ValueError, match="has no in-place all_reduce rows"):
        lk.from_collectives(rec)


def test_from_collectives_without_all_reduce_rows_says_what_to_add():
    rows = [CollectiveRow(op="broadcast", mode="in_place", bytes=1000, time_us=5.0)]
    with pytest.raises(ValueError, match=r"collectives.ops must hold all_reduce"):
        lk.from_collectives(_coll(rows))


def test_from_nccl_tests_keeps_the_table_and_adds_its_stated_spread():
    parsed = {
        "file": "f.log",
        "ranks": 4,
        "rows": [
            {"bytes": 0, "in_place": {"time_us": 5.0}},
            {"bytes": 1, "in_place": {"time_us": 60 + 0.001}},
            {"bytes": 1000, "in_place": {"time_us": 60 + 1.0}},
            {"bytes": 100000, "in_place": None, "out_of_place": {"time_us": 60 + 100.0}},
            {"bytes": 10000000, "in_place": {"time_us": 60 + 10000.0}},
            {"bytes": 2000, "in_place": {"time_us": 0}},
        ],
    }
    link = lk.from_nccl_tests(parsed, rel=0.1)
    assert link.name == "nccl-tests (4 ranks)" and link.nccl_table is parsed
    assert link.alpha.value == pytest.approx(10e-6, rel=1e-9)  # 60 us / 6
    assert link.busbw.value == pytest.approx(1.5e9, rel=1e-9)
    # +-10% stated: the fit's own interval has no width (the points lie on a line)
    assert link.busbw.lo == pytest.approx(1.5e9 / 1.1, rel=1e-6)
    assert link.busbw.hi == pytest.approx(1.5e9 * 1.1, rel=1e-6)
    assert link.busbw.source == "nccl-tests busbw"
    assert link.notes[-1] == (
        "nccl-tests prints one mean per size without an interval: +-10% assumed (run-to-run "
        "spread of all_reduce_perf)"
    )
    assert "over 4 sizes (1-10000000 B)" in link.source
    assert link.source.startswith("nccl-tests file f.log;")
    assert link.alpha.source == "nccl-tests alpha (points resampled)"
    parsed = {**parsed, "ranks": None, "file": None}
    link = lk.from_nccl_tests(parsed)
    assert link.name == "nccl-tests (? ranks)" and link.source.startswith("nccl-tests file ;")
    assert link.notes[-1] == "the file does not say how many ranks ran: 2 assumed for the fit"
    assert link.notes[-2].startswith("nccl-tests prints one mean per size without an interval")
    assert link.alpha.value == pytest.approx(30e-6, rel=1e-9)  # 60 us / 2(2-1)
    assert link.busbw.lo == pytest.approx(link.busbw.value / 1.05, rel=1e-6)  # 5% by default


def test_presets_from_their_stated_line_rates():
    ten = lk.preset("10gbe")
    assert ten.busbw.value == pytest.approx(1.25e9 * 1448 / 1538, rel=1e-12)
    assert (ten.busbw.lo, ten.busbw.hi) == pytest.approx((1.0e9, 1.1875e9), rel=1e-12)
    assert (ten.alpha.value, ten.alpha.lo, ten.alpha.hi) == pytest.approx((50e-6, 20e-6, 100e-6))
    assert not ten.tree and ten.name == "10gbe" and ten.source == lk.PRESETS["10gbe"].source
    assert ten.alpha.source == "10gbe alpha (stated)" and ten.busbw.source == "10gbe busbw"
    assert lk.PRESETS["1gbe"].what == "1 Gbit/s Ethernet, TCP sockets"
    assert lk.PRESETS["25gbe"].busbw_GBps[0] == pytest.approx(3.125 * 1448 / 1538)
    assert lk.PRESETS["10gbe"].source.startswith("line rate 10 Gbit/s (IEEE 802.3ae); busbw")
    ib = lk.preset("IB200")
    assert (ib.busbw.value, ib.busbw.lo, ib.busbw.hi) == pytest.approx((23e9, 20e9, 24e9))
    assert (ib.alpha.value, ib.alpha.lo, ib.alpha.hi) == pytest.approx((5e-6, 2e-6, 10e-6))
    assert ib.tree
    assert lk.PRESETS["ib400"].what == "400 Gb/s InfiniBand NDR, one NIC per rank, GPUDirect RDMA"
    assert lk.PRESETS["ib100"].source.startswith("EDR line rate 100 Gb/s (InfiniBand")
    nv = lk.preset(" NVLink-A100 ")
    assert (nv.busbw.value, nv.busbw.lo, nv.busbw.hi) == pytest.approx((230.8e9, 200e9, 240e9))
    assert (nv.alpha.value, nv.alpha.lo, nv.alpha.hi) == pytest.approx((1e-6, 0.5e-6, 3e-6))
    pc = lk.preset("pcie_shm")
    assert (pc.busbw.value, pc.busbw.lo, pc.busbw.hi) == pytest.approx((24e9, 6e9, 35e9))
    assert list(lk.PRESETS) == [
        "nvlink_a100",
        "pcie_shm",
        "ib100",
        "ib200",
        "ib400",
        "10gbe",
        "25gbe",
        "1gbe",
    ]
    with pytest.raises(KeyError, match=r"unknown link 'nope'; presets: nvlink_a100, pcie_shm, "):
        lk.preset("nope")


def test_the_preset_makers_from_a_line_rate():
    e = lk._ethernet(40, "40gbe", "IEEE 802.3ba")
    assert e.name == "40gbe" and e.what == "40 Gbit/s Ethernet, TCP sockets" and not e.tree
    assert e.busbw_GBps == pytest.approx((5 * 1448 / 1538, 4.0, 4.75), rel=1e-12)
    assert e.alpha_us == (50.0, 20.0, 100.0)
    assert e.source == (
        "line rate 40 Gbit/s (IEEE 802.3ba); busbw = line rate x TCP/IPv4 payload per frame "
        "(1448 of 1538 bytes on the wire, 94%), interval 80-95% of line rate; alpha: a TCP hop, "
        "20-100 us (a 4-byte gloo all-reduce across one veth took 90-160 us for its 2 steps here)"
    )
    i = lk._infiniband(800, "ib800", "XDR")
    assert i.name == "ib800" and i.tree
    assert i.what == "800 Gb/s InfiniBand XDR, one NIC per rank, GPUDirect RDMA"
    assert i.busbw_GBps == pytest.approx((92.0, 80.0, 96.0), rel=1e-12)
    assert i.alpha_us == (5.0, 2.0, 10.0)
    assert i.source == (
        "XDR line rate 800 Gb/s (InfiniBand Trade Association specification); achieved fraction "
        "0.92 [0.80, 0.96] of line rate: NVIDIA/nccl-tests#252 shows 4 x 200 Gb/s HDR NICs at "
        "95.3 GB/s all_reduce busbw (23.8 GB/s per NIC, 0.95 of line rate); alpha 5 [2, 10] us "
        "per step (stated: an RDMA hop plus NCCL's proxy)"
    )


def test_payload_shares_and_the_calibrated_link_share():
    assert lk.TCP_PAYLOAD == 1448 / 1538 and lk.TC_PAYLOAD == 1448 / 1514 and lk.GB == 1e9
    assert lk.LINK_SHARE == (0.941, 0.941, 0.949)


def test_an_emulated_link_is_its_rate_at_the_share_over_the_host_floor():
    floor = lk.Link("host", Quantity.exact(7e-6), Quantity.exact(0.7e9), "h")
    e = lk.emulated(1.0, floor)
    # 1 Gbit/s = 125 MB/s, at 0.941 [0.941, 0.949]
    assert (e.busbw.value, e.busbw.lo, e.busbw.hi) == pytest.approx(
        (125e6 * 0.941, 125e6 * 0.941, 125e6 * 0.949), rel=1e-12
    )
    assert e.alpha is floor.alpha and e.floor is floor and e.same_host and not e.tree
    assert e.name == "shaped 1 Gbit/s"
    assert e.source.startswith("htb at 1 Gbit/s; gloo's achieved share 0.941 [0.941, 0.949] ")
    assert lk.LINK_SHARE_HOW in e.source
    g = lk.emulated(0.2, share=(0.9, 0.8, 0.95))
    assert (g.busbw.value, g.busbw.lo, g.busbw.hi) == pytest.approx((22.5e6, 20e6, 23.75e6))
    assert (g.alpha.value, g.alpha.lo, g.alpha.hi) == (50e-6, 20e-6, 100e-6)
    assert g.floor is None and "(given; 0.956 = 1448/1514" in g.source
    assert g.busbw.source == "shaped rate x achieved share"
    assert g.alpha.source == "alpha (stated: a TCP hop)"


def test_with_floor():
    link, floor = _link(), _link(alpha=1.0)
    assert lk.with_floor(link, None) is link
    assert lk.with_floor(link, floor).floor is floor and lk.with_floor(link, floor).name == "x"
