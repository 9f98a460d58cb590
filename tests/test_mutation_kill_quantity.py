"""whatif/quantity.py (issue 36: a module the mutation run covers): every what-if input's interval
and how it reaches a prediction, checked by hand: the split normal maps z = -1.96 to lo and +1.96
to hi (so a generator that returns those z's gives the interval's ends back), widening uses the
normal quantile ratio 1.96 / 0.6745 for a 50% interval (published quartile of the standard
normal), the seed hash is 64-bit FNV-1a (published test vectors) cut to 48 bits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from base.record_types import Summary
from whatif.quantity import LEVEL, Z95, Draws, Quantity, _stable_hash, _z, interval

Z75 = 0.6744897501960817  # the standard normal's 75th percentile (its upper quartile)


class _FixedZ:
    """A generator whose standard normals are given: the sample's map from z is then checked by
    hand."""

    def __init__(self, z):
        self.z = np.asarray(z, dtype=float)

    def standard_normal(self, n):
        assert n == self.z.size
        return self.z


def test_constants_are_the_normal_quantile_and_the_95_level():
    assert Z95 == pytest.approx(1.959963984540054, rel=1e-15)
    assert LEVEL == 0.95
    assert _z(0.95) == pytest.approx(Z95, rel=1e-12)
    assert _z(0.5) == pytest.approx(Z75, rel=1e-12)


def test_a_bad_quantity_is_refused_with_its_source_named():
    with pytest.raises(ValueError, match=r"^x: value nan is not finite"):
        Quantity(math.nan, source="x")
    with pytest.raises(ValueError, match=r"^quantity: value inf is not finite"):
        Quantity(math.inf)
    with pytest.raises(ValueError, match=r"^y: give both ends of the interval or neither"):
        Quantity(1.0, 0.5, None, "y")
    with pytest.raises(ValueError, match=r"^quantity: give both ends"):
        Quantity(1.0, None, 2.0)
    with pytest.raises(ValueError, match=r"^z: interval \[2.0, 3.0\] does not hold 1.0"):
        Quantity(1.0, 2.0, 3.0, "z")
    with pytest.raises(ValueError, match=r"^quantity: interval \[0.0, 0.5\] does not hold 1.0"):
        Quantity(1.0, 0.0, 0.5)
    # the ends themselves are inside
    assert Quantity(1.0, 1.0, 2.0).lo == 1.0 and Quantity(2.0, 1.0, 2.0).hi == 2.0
    assert Quantity(1.0).lo is None and Quantity(1.0).source == ""


def test_exact_relative_and_between():
    e = Quantity.exact(3, "s")
    assert (e.value, e.lo, e.hi, e.source) == (3.0, None, None, "s")
    assert type(e.value) is float
    r = Quantity.relative(10, 0.25, "r")
    assert (r.value, r.lo, r.hi, r.source) == (10.0, 8.0, 12.5, "r")
    assert type(Quantity.relative(2, 0.5).value) is float
    # no interval at a zero relative width, or at a point that is not positive
    r = Quantity.relative(0.5, 0.25)
    assert (r.lo, r.hi) == (0.4, 0.625)
    for v, rel in ((10, 0.0), (0, 0.5), (-2, 0.5)):
        q = Quantity.relative(v, rel, "n")
        assert (q.value, q.lo, q.hi, q.source) == (float(v), None, None, "n")
    b = Quantity.between(2, 8, "b")
    assert (b.value, b.lo, b.hi, b.source) == (4.0, 2.0, 8.0, "b")  # geometric middle
    b0 = Quantity.between(0, 8)
    assert (b0.value, b0.lo, b0.hi) == (4.0, 0.0, 8.0)  # arithmetic where lo is not positive
    bn = Quantity.between(-2, 6)
    assert bn.value == 2.0
    assert Quantity.between(0.5, 2).value == 1.0  # geometric under 1 too
    bv = Quantity.between(1, 9, "v", value=2)
    assert (bv.value, bv.lo, bv.hi, bv.source) == (2.0, 1.0, 9.0, "v")
    assert type(Quantity.between(1, 4).lo) is float and type(Quantity.between(1, 4).hi) is float


def test_from_describe_keeps_a_95_interval_and_widens_a_narrower_one():
    assert Quantity.from_describe(None) is None
    assert Quantity.from_describe({"n": 3}) is None
    assert Quantity.from_describe(Summary(n=3)) is None
    d = {"median": 2.0, "ci_lo": 1.0, "ci_hi": 4.0}
    q = Quantity.from_describe(d, "d", scale=1e3)
    assert (q.value, q.lo, q.hi, q.source) == (2000.0, 1000.0, 4000.0, "d")
    q = Quantity.from_describe(Summary(median=2.0, ci_lo=1.0, ci_hi=4.0, ci_level=0.95), "s")
    assert (q.value, q.lo, q.hi, q.source) == (2.0, 1.0, 4.0, "s")
    # no interval, one end missing, an interval without the median or of no width: the point only
    for lo, hi in ((None, None), (1.0, None), (None, 4.0), (2.5, 4.0), (1.0, 1.5), (2.0, 2.0)):
        q = Quantity.from_describe({"median": 2.0, "ci_lo": lo, "ci_hi": hi}, "p", 3.0)
        assert (q.value, q.lo, q.hi, q.source) == (6.0, None, None, "p")
    # the median on an end still counts as inside
    q = Quantity.from_describe({"median": 2.0, "ci_lo": 2.0, "ci_hi": 4.0})
    assert (q.lo, q.hi) == (2.0, 4.0)
    q = Quantity.from_describe({"median": 4.0, "ci_lo": 2.0, "ci_hi": 4.0})
    assert (q.lo, q.hi) == (2.0, 4.0)
    # a 50% interval (min, max of few samples) is stretched by 1.96 / 0.6745 in log space
    k = Z95 / Z75
    q = Quantity.from_describe({"median": 10.0, "ci_lo": 5.0, "ci_hi": 20.0, "ci_level": 0.5})
    assert q.value == 10.0
    assert q.lo == pytest.approx(10 * 0.5**k, rel=1e-12)
    assert q.hi == pytest.approx(10 * 2.0**k, rel=1e-12)
    q = Quantity.from_describe({"median": 10.0, "ci_lo": 5.0, "ci_hi": 20.0, "ci_level": 0.99})
    assert (q.lo, q.hi) == (5.0, 20.0)  # a wider one is kept as it is


def test_widened_in_log_space_and_in_linear_space_clipped_at_zero():
    k = Z95 / Z75
    q = Quantity(10.0, 8.0, 20.0, "w").widened(0.5)
    assert q.value == 10.0 and q.source == "w"
    assert q.lo == pytest.approx(10 * 0.8**k, rel=1e-12)
    assert q.hi == pytest.approx(10 * 2.0**k, rel=1e-12)
    # an interval touching zero: linear half-widths times k, the low end clipped at zero
    q = Quantity(1.0, 0.0, 1.5, "l").widened(0.5)
    assert (q.value, q.lo, q.source) == (1.0, 0.0, "l")
    assert q.hi == pytest.approx(1.0 + k * 0.5, rel=1e-12)
    q = Quantity(2.0, -0.1, 2.1).widened(0.5)
    assert q.lo == 0.0 and q.hi == pytest.approx(2.0 + 0.1 * k, rel=1e-12)
    q = Quantity(1.0, -0.05, 1.1).widened(0.9)  # k = 1.96 / 1.645: -0.05 -> 1 - 1.05 k < 0
    assert q.lo == 0.0
    q = Quantity(5.0, -0.1, 6.0).widened(0.5)
    assert q.lo == 0.0 and q.hi == pytest.approx(5.0 + k, rel=1e-12)
    q = Quantity(5.0, 0.0, 6.0).widened(0.9)
    kk = Z95 / 1.6448536269514722  # the 95th percentile
    assert q.lo == 0.0 and q.hi == pytest.approx(5.0 + kk, rel=1e-12)
    q = Quantity(5.0, 4.0, 6.0).widened(0.5)
    assert q.lo == pytest.approx(5.0 * 0.8**k, rel=1e-12)  # log space where lo is positive
    q = Quantity(1.0, 0.8, 2.0).widened(0.5)
    assert q.lo == pytest.approx(0.8**k, rel=1e-12)  # ... under 1 too
    q = Quantity(5.0, -4.0, 6.0).widened(0.9)  # 5 - 1.19 x 9 < 0
    assert q.lo == 0.0
    # nothing to widen: no interval, 95% or more already, or no coverage stated
    p = Quantity(3.0, 1.0, 4.0)
    for cov in (0.95, 0.99, 0.0, -0.5):
        assert p.widened(cov) is p
    e = Quantity.exact(3.0)
    assert e.widened(0.5) is e
    f = Quantity(3.0, 3.0, 3.0)
    assert f.widened(0.5) is f


def test_the_default_source_is_empty():
    assert Quantity.exact(1.0).source == ""
    assert Quantity.relative(1.0, 0.1).source == ""
    assert Quantity.between(1.0, 2.0).source == ""
    assert Quantity.from_describe({"median": 1.0}).source == ""


def test_has_interval_needs_both_ends_and_a_width():
    assert Quantity(1.0, 0.5, 2.0).has_interval
    assert not Quantity(1.0).has_interval
    assert not Quantity(1.0, 1.0, 1.0).has_interval


def test_scaled_keeps_the_ends_in_order():
    q = Quantity(2.0, 1.0, 4.0, "a").scaled(3)
    assert (q.value, q.lo, q.hi, q.source) == (6.0, 3.0, 12.0, "a")
    q = Quantity(2.0, 1.0, 4.0, "a").scaled(-1, "neg")
    assert (q.value, q.lo, q.hi, q.source) == (-2.0, -4.0, -1.0, "neg")
    q = Quantity.exact(2.0, "e").scaled(5)
    assert (q.value, q.lo, q.hi, q.source) == (10.0, None, None, "e")


def test_with_extra_adds_in_quadrature_in_log_space():
    # no interval: the extra alone, value /÷ (1 + rel)
    q = Quantity.exact(10.0, "x").with_extra(0.1)
    assert q.value == 10.0 and q.source == "x"
    assert q.lo == pytest.approx(10 / 1.1, rel=1e-12) and q.hi == pytest.approx(11.0, rel=1e-12)
    # an asymmetric interval: each side's log half-width with log(1.1) in quadrature
    q = Quantity(10.0, 8.0, 20.0, "x").with_extra(0.1, "y")
    lo_w = math.sqrt(math.log(1.25) ** 2 + math.log(1.1) ** 2)
    hi_w = math.sqrt(math.log(2.0) ** 2 + math.log(1.1) ** 2)
    assert q.source == "y"
    assert q.lo == pytest.approx(10 * math.exp(-lo_w), rel=1e-12)
    assert q.hi == pytest.approx(10 * math.exp(hi_w), rel=1e-12)
    # nothing added at a zero extra or at a point that is not positive
    p = Quantity(10.0, 8.0, 20.0)
    assert p.with_extra(0.0) is p and p.with_extra(-0.2) is p
    z = Quantity(0.0, 0.0, 1.0)
    assert z.with_extra(0.3) is z
    # a point under 1 is still widened, in log space where its interval is positive
    q = Quantity.exact(0.5).with_extra(0.1)
    assert (q.lo, q.hi) == (pytest.approx(0.5 / 1.1, rel=1e-12), pytest.approx(0.55, rel=1e-12))
    q = Quantity(1.0, 0.8, 2.0).with_extra(0.1)
    assert q.lo == pytest.approx(math.exp(-math.hypot(math.log(1.25), math.log(1.1))), rel=1e-12)
    assert q.hi == pytest.approx(math.exp(math.hypot(math.log(2.0), math.log(1.1))), rel=1e-12)
    n = Quantity(-1.0, -2.0, 1.0)
    assert n.with_extra(0.3) is n


def test_with_extra_never_narrows_an_interval_that_touches_zero():
    """It used to drop such an interval (its log half-width is infinite) and keep the extra alone:
    1 [0, 2] with +-10% came out 1 [0.909, 1.1]. Linear, as the draws are: each side's half-width
    with the extra's (1 - 1/1.1 below, 0.1 above) in quadrature."""
    q = Quantity(1.0, 0.0, 2.0, "c").with_extra(0.1)
    assert q.source == "c" and q.value == 1.0
    assert q.lo == pytest.approx(1 - math.hypot(1.0, 1 - 1 / 1.1), rel=1e-12)
    assert q.hi == pytest.approx(1 + math.hypot(1.0, 0.1), rel=1e-12)
    assert q.lo < 0.0 and q.hi > 2.0
    q = Quantity(2.0, -1.0, 2.5).with_extra(0.5, "d")
    assert q.source == "d"
    assert q.lo == pytest.approx(2 - math.hypot(3.0, 2 * 0.5 / 1.5), rel=1e-12)
    assert q.hi == pytest.approx(2 + math.hypot(0.5, 1.0), rel=1e-12)


def test_sample_maps_z_of_196_to_the_ends_of_the_interval():
    z = [-Z95, 0.0, Z95, -2 * Z95, 2 * Z95]
    # log space: the point is the median, +-1.96 the ends, each side its own width
    s = Quantity(10.0, 8.0, 20.0).sample(_FixedZ(z), 5)
    assert s == pytest.approx([8.0, 10.0, 20.0, 6.4, 40.0], rel=1e-12)
    # linear space where the interval touches zero: the same, clipped at zero
    s = Quantity(1.0, 0.0, 3.0).sample(_FixedZ(z), 5)
    assert s == pytest.approx([0.0, 1.0, 3.0, 0.0, 5.0], abs=1e-12)
    s = Quantity(1.0, 0.0, 3.0).sample(_FixedZ([-Z95 / 2, Z95 / 2]), 2)
    assert s == pytest.approx([0.5, 2.0], abs=1e-12)
    # a point under 1 with a positive interval: log space still
    s = Quantity(0.5, 0.25, 1.0).sample(_FixedZ([-Z95 / 2, Z95 / 2]), 2)
    assert s == pytest.approx([0.5 * 0.5**0.5, 0.5 * 2**0.5], rel=1e-12)
    s = Quantity(2.0, 1.0, 3.0).sample(_FixedZ([-Z95, Z95, -0.5 * Z95]), 3)
    assert s == pytest.approx([1.0, 3.0, 2 * 0.5**0.5], rel=1e-12)
    s = Quantity(0.0, -1.0, 2.0).sample(_FixedZ([-Z95, Z95, 0.5 * Z95]), 3)
    assert s == pytest.approx([0.0, 2.0, 1.0], abs=1e-12)  # clipped; linear (value 0)
    s = Quantity(4.0, 2.0, 5.0).sample(_FixedZ([-Z95 / 2, Z95 / 2]), 2)
    assert s == pytest.approx([4 * 0.5**0.5, 4 * 1.25**0.5], rel=1e-12)
    # no interval: the point, n times, without a draw
    s = Quantity.exact(7.0).sample(None, 3)
    assert list(s) == [7.0, 7.0, 7.0]
    # a real generator: the draws' 2.5th, 50th and 97.5th percentiles are lo, the point and hi
    s = Quantity(10.0, 8.0, 20.0).sample(np.random.default_rng(1), 20_000)
    assert np.percentile(s, [2.5, 50, 97.5]) == pytest.approx([8.0, 10.0, 20.0], rel=0.04)


def test_text_prints_the_interval_or_says_there_is_none():
    assert Quantity.exact(0.0123456).text(1e3, "ms") == "12.35 ms (no interval)"
    assert Quantity.exact(5.0).text() == "5 (no interval)"
    assert Quantity(2.0, 1.0, 4.0).text(1e3, "ms") == "2000 [1000, 4000] ms"
    assert Quantity(2.0, 1.0, 4.0).text() == "2.0 [1.0, 4.0]"


def test_stable_hash_is_pinned():
    """The draws of every committed prediction come from these seeds: a changed hash moves every
    what-if interval. It is FNV-1a's recurrence (xor a byte, times the 64-bit FNV prime, cut to
    48 bits) from a start that is FNV's offset basis 14695981039346656037 without its last digit:
    any fixed start mixes as well, so it stays. One byte worked by hand: ((start ^ 0x61) x prime)
    mod 2^48."""
    start, prime, mask = 1469598103934665603, 1099511628211, (1 << 48) - 1
    assert _stable_hash("") == start
    assert _stable_hash("a") == ((start ^ 0x61) * prime) % (1 << 48) == 152645080553734
    assert _stable_hash("ab") == (((152645080553734 ^ 0x62) * prime) & mask)
    assert _stable_hash("foobar") == 237222468978674
    assert _stable_hash("noise:source") != _stable_hash("noise:sourcf")


def test_draws_are_one_stream_per_name_seeded_by_seed_and_name():
    q = Quantity(10.0, 8.0, 20.0)
    d = Draws(4, seed=3)
    a = d.get("a", q)
    assert a.shape == (4,)
    want = q.sample(np.random.default_rng([3, _stable_hash("a")]), 4)
    assert list(a) == list(want)
    # cached: the same array whatever quantity is asked for later
    assert d.get("a", Quantity.exact(1.0)) is a
    # another name draws its own stream, unchanged by the first
    b = Draws(4, seed=3).get("b", q)
    assert list(d.get("b", q)) == list(b) and list(b) != list(a)
    # the seed matters; the default seed is 0
    assert list(Draws(4).get("a", q)) == list(
        q.sample(np.random.default_rng([0, _stable_hash("a")]), 4)
    )
    assert Draws(4).seed == 0


def test_interval_is_the_central_95_percent_of_the_finite_draws():
    x = list(range(0, 1001))  # 0..1000: percentiles are the values themselves
    assert interval(x) == pytest.approx((25.0, 975.0), rel=1e-12)
    assert interval(x, 0.5) == pytest.approx((250.0, 750.0), rel=1e-12)
    assert interval([*x, math.nan, math.inf, -math.inf]) == pytest.approx((25.0, 975.0), rel=1e-12)
    lo, hi = interval([])
    assert math.isnan(lo) and math.isnan(hi)
    lo, hi = interval([math.nan])
    assert math.isnan(lo) and math.isnan(hi)
    assert interval([1, 2]) == (1.025, 1.975)
    assert type(interval([1, 2])[0]) is float
