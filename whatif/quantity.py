"""Inputs with 95% intervals, and how their uncertainty reaches a prediction: Monte Carlo.

Every input of the step model is a Quantity: a point value, a 95% interval where one is known, and
where it came from (a record field, a probe, a preset's public source, a stated assumption).
Sampling draws from a *split* normal, in log space for positive quantities, so an asymmetric
interval (the median's order-statistic interval usually is) keeps its two sides: the point value is
the distribution's median and [lo, hi] its 2.5th and 97.5th percentiles. A quantity whose interval
touches zero (a cost that may be nothing) is split-normal in linear space, clipped at zero.

A prediction evaluates the model once at the point values (its point estimate) and once per joint
draw of all inputs (independent draws, one generator, seeded: the same record always gives the same
interval); the interval is the 2.5th-97.5th percentile of the draws. Inputs are treated as
independent: correlated inputs (two phases slowed by the same busy machine) make the interval too
narrow, which the validation's coverage column measures."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from base.record_types import Summary

Z95 = 1.959963984540054  # the standard normal's 97.5th percentile
LEVEL = 0.95


@dataclass(frozen=True)
class Quantity:
    value: float
    lo: float | None = None
    hi: float | None = None
    source: str = ""

    def __post_init__(self):
        if not math.isfinite(self.value):
            raise ValueError(f"{self.source or 'quantity'}: value {self.value} is not finite")
        if (self.lo is None) != (self.hi is None):
            raise ValueError(
                f"{self.source or 'quantity'}: give both ends of the interval or neither"
            )
        if self.lo is not None and not self.lo <= self.value <= self.hi:
            raise ValueError(
                f"{self.source or 'quantity'}: interval [{self.lo}, {self.hi}] does not hold "
                f"{self.value}"
            )

    @classmethod
    def exact(cls, value: float, source: str = "") -> "Quantity":
        return cls(float(value), None, None, source)

    @classmethod
    def relative(cls, value: float, rel: float, source: str = "") -> "Quantity":
        """value x/÷ (1 + rel) as a 95% interval (a stated relative uncertainty, symmetric in log
        space)."""
        value = float(value)
        if value <= 0 or rel <= 0:
            return cls.exact(value, source)
        return cls(value, value / (1 + rel), value * (1 + rel), source)

    @classmethod
    def between(
        cls, lo: float, hi: float, source: str = "", value: float | None = None
    ) -> "Quantity":
        """A range read as a 95% interval; the point is its geometric middle unless given."""
        lo, hi = float(lo), float(hi)
        if value is None:
            value = math.sqrt(lo * hi) if lo > 0 else (lo + hi) / 2
        return cls(float(value), lo, hi, source)

    @classmethod
    def from_describe(
        cls, d: Summary | dict | None, source: str = "", scale: float = 1.0
    ) -> "Quantity | None":
        """From a stats.describe summary (median, ci_lo, ci_hi; a record's Summary, or the dict
        describe returns): the interval only where it reaches 95% coverage (fewer than 6 samples
        give (min, max), which covers less, so it is widened to the stated level by scaling its log
        half-widths by Z95 / z(coverage))."""
        s = Summary.from_dict(d) if isinstance(d, dict) else d
        if s is None or s.median is None:
            return None
        v = float(s.median) * scale
        lo, hi = s.ci_lo, s.ci_hi
        if lo is None or hi is None or not (lo <= s.median <= hi) or hi <= lo:
            return cls.exact(v, source)
        level = float(s.ci_level or LEVEL)
        q = cls(v, float(lo) * scale, float(hi) * scale, source)
        return q.widened(level) if level < LEVEL else q

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None and self.hi > self.lo

    def widened(self, coverage: float) -> "Quantity":
        """An interval known to cover `coverage`, stretched to 95% (normal-theory factor on each
        side)."""
        if not self.has_interval or coverage >= LEVEL or coverage <= 0:
            return self
        k = Z95 / _z(coverage)
        if self.lo > 0:
            return Quantity(
                self.value,
                self.value * (self.lo / self.value) ** k,
                self.value * (self.hi / self.value) ** k,
                self.source,
            )
        return Quantity(
            self.value,
            max(0.0, self.value - k * (self.value - self.lo)),
            self.value + k * (self.hi - self.value),
            self.source,
        )

    def scaled(self, factor: float, source: str | None = None) -> "Quantity":
        f = float(factor)
        lo, hi = (None, None) if not self.has_interval else sorted((self.lo * f, self.hi * f))
        return Quantity(self.value * f, lo, hi, self.source if source is None else source)

    def with_extra(self, rel: float, source: str | None = None) -> "Quantity":
        """The same point with a further independent relative uncertainty added in quadrature (log
        space; linear, as sample draws it, where the interval touches zero: there the log
        half-widths are infinite, and dropping them would narrow the interval an extra widens; the
        draws clip the low end at zero)."""
        if rel <= 0 or self.value <= 0:
            return self
        if self.has_interval and self.lo <= 0:
            return Quantity(
                self.value,
                self.value - math.hypot(self.value - self.lo, self.value * rel / (1 + rel)),
                self.value + math.hypot(self.hi - self.value, self.value * rel),
                self.source if source is None else source,
            )
        s_extra = math.log1p(rel) / Z95
        lo_s = math.log(self.value / self.lo) / Z95 if self.has_interval else 0.0
        hi_s = math.log(self.hi / self.value) / Z95 if self.has_interval else 0.0
        lo_s, hi_s = math.hypot(lo_s, s_extra), math.hypot(hi_s, s_extra)
        return Quantity(
            self.value,
            self.value * math.exp(-Z95 * lo_s),
            self.value * math.exp(Z95 * hi_s),
            self.source if source is None else source,
        )

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if not self.has_interval:
            return np.full(n, self.value)
        z = rng.standard_normal(n)
        if self.lo > 0 and self.value > 0:
            s_lo = math.log(self.value / self.lo) / Z95
            s_hi = math.log(self.hi / self.value) / Z95
            return self.value * np.exp(np.where(z < 0, z * s_lo, z * s_hi))
        s_lo = (self.value - self.lo) / Z95
        s_hi = (self.hi - self.value) / Z95
        return np.maximum(0.0, self.value + np.where(z < 0, z * s_lo, z * s_hi))

    def text(self, scale: float = 1.0, unit: str = "") -> str:
        from stats import fmt_ci

        if not self.has_interval:
            return f"{self.value * scale:.4g}{' ' + unit if unit else ''} (no interval)"
        return fmt_ci(self.value * scale, self.lo * scale, self.hi * scale, unit)


def _z(coverage: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + coverage / 2)


@dataclass
class Draws:
    """One joint draw of every input per sample (index 0..n-1), drawn lazily by name, so a model
    asks only for the inputs it uses and two predictions with the same seed share their draws (a
    paired comparison)."""

    n: int
    seed: int = 0
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def get(self, name: str, q: Quantity) -> np.ndarray:
        if name not in self._cache:
            # one stream per name (seeded from the name), so adding an input does not change the
            # others' draws
            sub = np.random.default_rng([self.seed, _stable_hash(name)])
            self._cache[name] = q.sample(sub, self.n)
        return self._cache[name]


def _stable_hash(name: str) -> int:
    h = 1469598103934665603
    for ch in name.encode():
        h = ((h ^ ch) * 1099511628211) & 0xFFFFFFFFFFFF
    return h


def interval(samples, level: float = LEVEL) -> tuple[float, float]:
    a = np.asarray(samples, dtype=float)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return (math.nan, math.nan)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(a, [tail, 100 - tail])
    return float(lo), float(hi)
