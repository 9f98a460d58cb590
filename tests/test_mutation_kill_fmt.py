"""stats/fmt.py, the number formats every table, verdict and accounting line goes through (issue 36:
a module the mutation run covers), each string written out by hand from the rule its docstring
states: digits down to the first significant digit of the interval's width, plus one; fewer decimals
as a bare number grows; milliseconds without an exponent; a ratio that is not a win never shown
bare."""

from __future__ import annotations

from stats.fmt import fmt_ci, fmt_ratio, ms, rounded, sig_digits, verdict_text


def test_sig_digits_from_the_widths_first_digit():
    # width 0.4: first significant digit in the tenths, one more: 2 decimals; 1: 1; 10: 0; 0.1: 2;
    # 1332: -2
    assert sig_digits(1.0, 0.9, 1.3) == 2
    assert sig_digits(1.0, 1.0, 2.0) == 1
    assert sig_digits(5.0, 0.0, 10.0) == 0
    assert sig_digits(1.0, 0.5, 0.6) == 2
    assert sig_digits(39.0, 34.0, 1366.0) == -2
    # no usable interval: an end missing, empty or reversed
    assert sig_digits(1.0, None, 2.0) is None and sig_digits(1.0, 1.0, None) is None
    assert sig_digits(1.0, 1.0, 1.0) is None and sig_digits(1.0, 2.0, 1.0) is None


def test_rounded_keeps_fewer_decimals_as_the_number_grows():
    assert rounded(0) == "0" and rounded(0.0) == "0"
    assert rounded(1000.0) == "1000" and rounded(-1500.4) == "-1500"
    assert rounded(999.94) == "999.9" and rounded(100.0) == "100.0" and rounded(-100.0) == "-100.0"
    assert rounded(99.994) == "99.99" and rounded(10.0) == "10.00" and rounded(-10.0) == "-10.00"
    assert rounded(9.9994) == "9.999" and rounded(1.0) == "1.000" and rounded(-1.0) == "-1.000"
    assert (
        rounded(0.99994) == "0.9999" and rounded(0.001) == "0.0010" and rounded(-0.001) == "-0.0010"
    )
    assert rounded(0.000999) == "9.99e-04" and rounded(-0.000123) == "-1.23e-04"


def test_ms_as_people_read_them():
    assert ms(3.8134) == "3813" and ms(0.1) == "100" and ms(-0.2) == "-200"
    assert ms(0.0999) == "99.9" and ms(0.0214) == "21.4" and ms(0.000374) == "0.374"
    assert ms(0.0) == "0" and ms(-0.0214) == "-21.4"


def test_fmt_ci_to_the_intervals_digits():
    assert fmt_ci(1.23456, 1.2, 1.3) == "1.23 [1.20, 1.30]"
    assert fmt_ci(1.23456, 1.2, 1.3, "ms") == "1.23 [1.20, 1.30] ms"
    # width 20: its first digit in the tens, one more: whole numbers
    assert fmt_ci(123.4, 110.0, 130.0, "steps/s") == "123 [110, 130] steps/s"
    # width 1332: tens would be -2 (hundreds), but the value 39 keeps its first digit: tens
    assert fmt_ci(39.0, 34.0, 1366.0, "us") == "40 [30, 1370] us"
    # a value of 0 has no first digit to keep
    assert fmt_ci(0.0, -1.0, 1.0) == "0.0 [-1.0, 1.0]"
    # no interval: four significant digits
    assert fmt_ci(1.23456, None, None, "ms") == "1.235 ms" and fmt_ci(1234.5, 1.0, 1.0) == "1234"
    assert fmt_ci(-0.0123456, -0.02, -0.01) == "-0.012 [-0.020, -0.010]"


def test_fmt_ratio_never_shows_a_bare_ratio_that_is_not_a_win():
    assert fmt_ratio(0.6634, None, None, "no verdict") == "0.66 (1 run: no CI)"
    assert fmt_ratio(0.6634, 0.5, 0.9, "no verdict") == "0.66 (1 run: no CI)"
    assert fmt_ratio(1.001, 0.99, 1.01, "equivalent") == "~1 (0.990-1.010, equiv.)"
    assert fmt_ratio(1.04, 0.93, 1.07, "no significant difference") == "~1 (0.93-1.07, n.s.)"
    assert fmt_ratio(1.04, None, None, "no significant difference") == "~1 (n.s.)"
    assert fmt_ratio(1.0, None, None, "equivalent") == "~1 (equiv.)"
    assert fmt_ratio(1.25, 1.18, 1.31, "faster") == "1.25x [1.18, 1.31]"
    assert fmt_ratio(1.2512, 1.1834, 1.3167, "faster") == "1.25x [1.18, 1.32]"
    assert fmt_ratio(0.8, 0.75, 0.85, "slower") == "0.80x [0.75, 0.85]"
    assert fmt_ratio(1.23456, None, None, "faster") == "1.235x"
    assert fmt_ratio(1.23456, 1.3, 1.3, "slower") == "1.235x"


def test_verdict_text_says_what_decides_an_inconclusive_row():
    assert verdict_text(None) == "" and verdict_text(None, 0.05, 3, ("x",)) == ""
    assert verdict_text("equivalent", 0.05) == "equivalent within ±5%"
    assert verdict_text("equivalent", 0.025) == "equivalent within ±2.5%"
    assert verdict_text("equivalent", 0.75) == "equivalent within ±75%"
    assert verdict_text("equivalent") == "equivalent"
    assert verdict_text("no significant difference", 0.02, 12) == (
        "no significant difference (~12 runs each would decide)"
    )
    assert verdict_text("no significant difference", 0.02) == "no significant difference"
    assert verdict_text("faster", 0.02, 12) == "faster"
    assert verdict_text("slower", notes=("drift in run 2", "one run")) == (
        "slower; drift in run 2; one run"
    )
