"""Property-based tests (hypothesis, issue 30): invariants every printed figure must keep, over
inputs nobody wrote by hand. Bounded (max_examples, no deadline on a loaded 2-core machine) so the
fast tier stays fast; derandomized, so a run is reproducible and a failure is the same failure on
every machine."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from comm import bandwidth as bw
from stats import compare_runs, judge, median_ci, run_level
from stats.verdict import EQUIVALENT, FASTER, NS, SLOWER
from tests.test_printed_numbers import _assemble

FAST = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

ranks = st.integers(min_value=2, max_value=4096)
positive = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)


# -------------------------------------------------------------------------------------- bus factors
def nccl_tests_factor(op: str, n: int) -> float:
    """nccl-tests' definitions (doc/PERFORMANCE.md), as the bytes each rank's link carries per byte
    of the size column: all_reduce = reduce_scatter then all_gather, each moving (n-1) of n chunks;
    broadcast moves the buffer once."""
    chunks_moved = {"all_reduce": 2 * (n - 1), "all_gather": n - 1, "reduce_scatter": n - 1}
    return 1.0 if op == "broadcast" else chunks_moved[op] / n


@FAST
@given(op=st.sampled_from(bw.OPS), n=ranks)
def test_bus_factor_is_nccl_tests_definition_for_every_op_and_world_size(op, n):
    assert bw.bus_factor(op, n) == pytest.approx(nccl_tests_factor(op, n), rel=1e-12)
    assert 0 < bw.bus_factor(op, n) <= 2  # a link never carries more than twice the buffer


@FAST
@given(op=st.sampled_from(bw.OPS), n=ranks, size=st.integers(1, 1 << 34), seconds=positive)
def test_busbw_is_algbw_times_the_factor(op, n, size, seconds):
    assert bw.busbw(op, size, seconds, n) == pytest.approx(
        size / seconds / 1e9 * nccl_tests_factor(op, n), rel=1e-9
    )


# -------------------------------------------------------------------------------- per-rank measures
@FAST
@given(
    medians=st.lists(st.floats(0.01, 10.0, allow_nan=False), min_size=2, max_size=8, unique=True)
)
def test_the_slowest_rank_is_the_argmax_of_the_median_steps(medians):
    world = len(medians)
    r = _assemble(world=world, walls=[[0.5] * 10] * world, medians=medians)
    assert r["slowest_rank"] == max(range(world), key=lambda i: medians[i])


@FAST
@given(
    batch=st.integers(1, 64),
    world=st.integers(1, 8),
    accumulate=st.integers(1, 16),
    wall=st.floats(0.01, 10.0, allow_nan=False),
)
def test_samples_per_second_scales_with_batch_world_size_and_accumulate(
    batch, world, accumulate, wall
):
    """Same block walls, so the same steps/s; samples/s = steps/s x batch x world x accumulate, by
    hand."""
    r = _assemble(batch=batch, world=world, accumulate=accumulate, walls=[[wall] * 10] * world)
    steps_per_s = 20 / (10 * wall)  # 10 blocks of 2 steps
    assert r["throughput"]["steps_per_s"] == pytest.approx(steps_per_s, rel=1e-9)
    assert r["throughput"]["samples_per_s"] == pytest.approx(
        steps_per_s * batch * world * accumulate, rel=1e-9
    )


# ----------------------------------------------------------------------------------------- verdicts
# per-run log throughputs within +-20%, on a 1e-4 grid: a wall clock gives no finer differences, and
# spreads of 1e-92 underflow Welch's degrees of freedom to 0/0 (a case no run can produce)
logs = st.lists(st.integers(-2000, 2000).map(lambda k: k / 10_000), min_size=2, max_size=6)
SWAPPED = {FASTER: SLOWER, SLOWER: FASTER, EQUIVALENT: EQUIVALENT, NS: NS}


@FAST
@given(base=logs, cand=logs)
def test_a_verdict_flips_when_baseline_and_candidate_swap(base, cand):
    ab, ba = compare_runs(base, cand), compare_runs(cand, base)
    assert ba.ratio == pytest.approx(1 / ab.ratio, rel=1e-9)
    assert ba.ci_lo == pytest.approx(1 / ab.ci_hi, rel=1e-9) and ba.ci_hi == pytest.approx(
        1 / ab.ci_lo, rel=1e-9
    )
    assert ba.verdict == SWAPPED[ab.verdict], (ab.ci_lo, ab.ci_hi, ab.verdict, ba.verdict)


@FAST
@given(lo=st.floats(0.5, 2.0), width=st.floats(0.0, 0.5), noise=st.floats(0.0, 0.1))
def test_judge_is_symmetric_under_inversion(lo, width, noise):
    """An interval [lo, hi] of the ratio and [1/hi, 1/lo] of its inverse get mirrored verdicts (on
    the log scale the noise band is not symmetric, so only intervals clear of both band edges by a
    margin are compared)."""
    hi = lo + width
    verdict = judge(lo, hi, noise)
    if verdict in (
        FASTER,
        SLOWER,
    ):  # a claim beyond the band: the inverse makes the mirrored claim or none
        assert judge(1 / hi, 1 / lo, noise) in (SWAPPED[verdict], NS)
    else:
        assert judge(1 / hi, 1 / lo, noise) in (EQUIVALENT, NS)
    assert judge(None, hi, noise) == NS and judge(lo, None, noise) == NS


# ---------------------------------------------------------------------------------------- intervals
levels = st.lists(st.floats(0.5, 0.995), min_size=2, max_size=2, unique=True).map(sorted)


@FAST
@given(values=st.lists(st.floats(0.5, 2.0, allow_nan=False), min_size=3, max_size=6), pair=levels)
def test_a_run_level_interval_widens_as_its_level_rises(values, pair):
    low, high = (run_level([math.log(v) for v in values], level) for level in pair)
    assert high["ci_lo"] <= low["ci_lo"] <= low["ci_hi"] <= high["ci_hi"]
    # strictly wider unless the runs agree exactly (no spread: both intervals are the point)
    assert low["log_se"] <= 1e-9 or high["ci_hi"] - high["ci_lo"] > low["ci_hi"] - low["ci_lo"]


@FAST
@given(base=logs, cand=logs, pair=levels)
def test_a_speedup_interval_widens_as_its_level_rises(base, cand, pair):
    low, high = (compare_runs(base, cand, level=level) for level in pair)
    assert high.ci_lo <= low.ci_lo <= low.ratio <= low.ci_hi <= high.ci_hi


@FAST
@given(values=st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=6, max_size=60), pair=levels)
def test_a_median_interval_widens_as_its_level_rises(values, pair):
    (lo1, hi1, got1), (lo2, hi2, got2) = (median_ci(values, level) for level in pair)
    assert lo2 <= lo1 <= hi1 <= hi2 and got2 >= got1


@FAST
@given(walls=st.lists(st.floats(0.05, 5.0, allow_nan=False), min_size=60, max_size=90), pair=levels)
def test_a_block_throughput_interval_widens_as_its_level_rises(walls, pair):
    from stats import block_throughput

    low, high = (block_throughput(walls, [1] * len(walls), level) for level in pair)
    assert high["ci_lo"] <= low["ci_lo"] <= low["ci_hi"] <= high["ci_hi"]
