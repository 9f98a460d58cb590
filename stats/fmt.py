"""Printing numbers with only the digits their interval supports.

Like torch.utils.benchmark Compare's trim_significant_figures: "1.83456" with a +-0.6 interval
invites readers to compare the 4th decimal. We keep digits down to the first significant digit of
the interval's width, plus one, so the last printed digit is the first uncertain one.
"""
from __future__ import annotations

import math

from .compare import FASTER, SLOWER


def sig_digits(value: float, lo: float | None, hi: float | None) -> int | None:
    """Decimal places to print (negative: round to tens, hundreds, ...); None without a usable interval.
    `value` is accepted so callers can pass a row as-is; the width alone decides."""
    if lo is None or hi is None or not hi > lo:
        return None
    return 1 - math.floor(math.log10(hi - lo))


def _num(x: float, decimals: int | None) -> str:
    if decimals is None:
        return f"{x:.4g}"
    if decimals < 0:
        return f"{round(x, decimals):.0f}"
    return f"{x:.{decimals}f}"


def fmt_ci(value: float, lo: float | None, hi: float | None, unit: str = "") -> str:
    d = sig_digits(value, lo, hi)
    unit = f" {unit}" if unit else ""
    if d is None:
        return f"{_num(value, None)}{unit}"
    return f"{_num(value, d)} [{_num(lo, d)}, {_num(hi, d)}]{unit}"


def fmt_ratio(ratio: float, lo: float | None, hi: float | None, verdict: str) -> str:
    """A non-significant row never shows a bare ratio: "1.04x" would be read as a 4% win."""
    d = sig_digits(ratio, lo, hi)
    if verdict not in (FASTER, SLOWER):
        return "~1 (n.s.)" if d is None else f"~1 ({_num(lo, d)}-{_num(hi, d)}, n.s.)"
    if d is None:
        return f"{_num(ratio, None)}x"
    return f"{_num(ratio, d)}x [{_num(lo, d)}, {_num(hi, d)}]"
