"""whatif/profile.py (issue 36: a module the mutation run covers): the what-if profile's small
arithmetic, checked on hand-made inputs by another route: a median counted by hand, the probe's
speed ratio, the memory speed from the optimizer phase (bytes per parameter written out), a byte
count's time with its stated extra spread (log-normal half-widths added in quadrature, written out
here), the fresh pages' cost, an interval's relative half-width, PowerSGD's pass shares."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

import pytest

from base.record_types import ReadyMode
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
