"""comm/fit.py (issue 36: a module the mutation run covers): the alpha-beta fit the diagnosis and
task=grad_sync print, checked against numpy's weighted least squares (polyfit with weights 1/t on
the residuals, i.e. 1/t^2 on their squares) on hand-made calls, and exact on calls that lie on a
line."""

from __future__ import annotations

import numpy as np
import pytest

from comm.fit import fit_latency_bandwidth


def _rows(pairs):
    return [{"bytes": b, "time_s": t} for b, t in pairs]


def test_calls_on_a_line_give_its_latency_and_bandwidth():
    alpha, beta = 50e-6, 2e9  # 50 us, 2 GB/s
    sizes = [1_000, 64_000, 4_000_000, 400_000_000]
    fit = fit_latency_bandwidth(_rows((s, alpha + s / beta) for s in sizes))
    assert fit["alpha_s"] == pytest.approx(alpha, rel=1e-9)
    assert fit["beta_GBps"] == pytest.approx(2.0, rel=1e-9)
    assert fit["points"] == 4 and fit["weights"] == "1/t^2"


def test_scattered_calls_are_fitted_on_relative_error():
    pairs = [(1_000, 60e-6), (10_000, 70e-6), (100_000, 150e-6), (1_000_000, 900e-6), (8e6, 4e-3)]
    x = np.array([p[0] for p in pairs], dtype=float)
    y = np.array([p[1] for p in pairs])
    slope, intercept = np.polyfit(x, y, 1, w=1 / y)
    fit = fit_latency_bandwidth(_rows(pairs))
    assert fit["alpha_s"] == pytest.approx(intercept, rel=1e-6)
    assert fit["beta_GBps"] == pytest.approx(1 / slope / 1e9, rel=1e-6)
    # unweighted, the large calls would set alpha: a different figure
    slope_u, intercept_u = np.polyfit(x, y, 1)
    assert abs(fit["alpha_s"] - intercept_u) > 1e-6


def test_calls_without_time_are_left_out():
    pairs = [(1_000, 1e-4), (2_000, 0.0), (3_000, -1.0), (5_000, 3e-4)]
    fit = fit_latency_bandwidth(_rows(pairs))
    assert fit["points"] == 2
    # the two kept: slope 2e-4 / 4000 = 5e-8 s/B, alpha 1e-4 - 1000 * 5e-8 = 5e-5
    assert fit["alpha_s"] == pytest.approx(5e-5, rel=1e-9)
    assert fit["beta_GBps"] == pytest.approx(1 / 5e-8 / 1e9, rel=1e-9)


def test_one_size_or_a_falling_time_gives_no_bandwidth():
    assert fit_latency_bandwidth(_rows([(1_000, 1e-4), (1_000, 2e-4)])) is None
    assert fit_latency_bandwidth(_rows([(1_000, 1e-4), (0, 0.0)])) is None
    assert fit_latency_bandwidth([]) is None
    falling = fit_latency_bandwidth(_rows([(1_000, 2e-4), (2_000, 1e-4)]))
    assert falling["beta_GBps"] is None
    assert falling["alpha_s"] == pytest.approx(3e-4, rel=1e-9)
    flat = fit_latency_bandwidth(_rows([(1_000, 1e-4), (2_000, 1e-4)]))
    assert flat["beta_GBps"] is None


def test_the_slope_does_not_move_when_every_call_is_larger_by_the_same_bytes():
    # shifting every size by one offset keeps the slope (translation invariance) and moves alpha by
    # slope x offset; the centred sums keep it to 9 digits even 1 TB out (an uncentred sum of
    # products loses 6 of them there)
    base = [
        (b, 1e-3 + b / 1e9 * (1 + 0.01 * (i % 2))) for i, b in enumerate([1000, 3000, 7000, 20000])
    ]
    near = fit_latency_bandwidth(_rows(base))
    off = 1e12
    far = fit_latency_bandwidth(_rows((b + off, t) for b, t in base))
    assert far["beta_GBps"] == pytest.approx(near["beta_GBps"], rel=1e-9)
    slope = 1 / (near["beta_GBps"] * 1e9)
    assert far["alpha_s"] == pytest.approx(near["alpha_s"] - slope * off, rel=1e-6)
