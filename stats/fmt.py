"""Printing numbers with only the digits their interval supports.

Like torch.utils.benchmark Compare's trim_significant_figures: "1.83456" with a +-0.6 interval
invites readers to compare the 4th decimal. We keep digits down to the first significant digit of
the interval's width, plus one, so the last printed digit is the first uncertain one.
"""

from __future__ import annotations

import math

from .verdict import EQUIVALENT, FASTER, NO_VERDICT, NS, SLOWER


def sig_digits(value: float, lo: float | None, hi: float | None) -> int | None:
    """Decimal places to print (negative: round to tens, hundreds, ...); None without a usable
    interval.
    `value` is accepted so callers can pass a row as-is; the width alone decides."""
    if lo is None or hi is None or not hi > lo:
        return None
    return 1 - math.floor(math.log10(hi - lo))


def rounded(value: float) -> str:
    """A number without an interval, to the digits a table reader needs: fewer decimals as it
    grows."""
    a = abs(value)
    if a == 0:
        return "0"
    if a >= 1000:
        return f"{value:.0f}"
    if a >= 100:
        return f"{value:.1f}"
    if a >= 10:
        return f"{value:.2f}"
    if a >= 1:
        return f"{value:.3f}"
    if a >= 1e-3:
        return f"{value:.4f}"
    return f"{value:.2e}"


def ms(seconds: float) -> str:
    """Milliseconds as people read them: 3813, 21.4, 0.374 (never 3.81e+03)."""
    v = seconds * 1e3
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _num(x: float, decimals: int | None) -> str:
    if decimals is None:
        return f"{x:.4g}"
    if decimals < 0:
        return f"{round(x, decimals):.0f}"
    return f"{x:.{decimals}f}"


def fmt_ci(value: float, lo: float | None, hi: float | None, unit: str = "") -> str:
    """The value and its interval to the interval's digits, but never so few that the value loses
    its first significant digit: an interval 35 times the value's size (a 39 us median in [34, 1366]
    us, seen on an H200) printed
    `0 [0, 1400]`."""
    d = sig_digits(value, lo, hi)
    unit = f" {unit}" if unit else ""
    if d is None:
        return f"{_num(value, None)}{unit}"
    if value:
        d = max(d, -math.floor(math.log10(abs(value))))
    return f"{_num(value, d)} [{_num(lo, d)}, {_num(hi, d)}]{unit}"


def fmt_ratio(ratio: float, lo: float | None, hi: float | None, verdict: str) -> str:
    """A row that is not faster or slower never shows a bare ratio: "1.04x" would be read as a 4%
    win. faster / slower: "1.25x [1.18, 1.31]"; equivalent: "~1 (0.99-1.01, equiv.)"; no significant
    difference: "~1 (0.93-1.07, n.s.)"; no verdict (one run a side): "0.66 (1 run: no CI)"."""
    d = sig_digits(ratio, lo, hi)
    if verdict == NO_VERDICT:
        return f"{ratio:.2f} (1 run: no CI)"
    if verdict not in (FASTER, SLOWER):
        tag = "equiv." if verdict == EQUIVALENT else "n.s."
        return f"~1 ({tag})" if d is None else f"~1 ({_num(lo, d)}-{_num(hi, d)}, {tag})"
    if d is None:
        return f"{_num(ratio, None)}x"
    return f"{_num(ratio, d)}x [{_num(lo, d)}, {_num(hi, d)}]"


def verdict_text(
    verdict: str | None,
    noise: float | None = None,
    repeats_needed: int | None = None,
    notes: tuple = (),
) -> str:
    """The verdict column: the code's words, with what decides an inconclusive row and any caveat
    (notes)."""
    if verdict is None:
        return ""
    if verdict == EQUIVALENT and noise is not None:
        text = (
            f"equivalent within ±{noise:.0%}"
            if noise * 100 == round(noise * 100)
            else f"equivalent within ±{noise:.1%}"
        )
    elif verdict == NS:
        text = NS + (f" (~{repeats_needed} runs each would decide)" if repeats_needed else "")
    else:
        text = verdict
    return "; ".join([text, *notes])
