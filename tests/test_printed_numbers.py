"""Printed numbers checked by another route (issue 30): every expected value here is written out by
hand or comes from a published table or a simulation with a known truth, never from the formula
under test run again.

- busbw: nccl-tests' published bus factors (doc/PERFORMANCE.md of NVIDIA/nccl-tests), as a literal
  table;
- a train result assembled from hand-made ranks: samples/s with accumulate > 1, the slowest rank,
  busbw;
- intervals: a seeded simulation with a known truth whose coverage tells 90% from 95% (each check
  would pass a
  95% interval and fail one computed at 90%, and the other way round)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from comm import bandwidth as bw

ROOT = Path(__file__).resolve().parents[1]

# nccl-tests doc/PERFORMANCE.md: busBw = algBw x factor; all_reduce 2(n-1)/n, reduce_scatter and
# all_gather (n-1)/n, broadcast 1. Written out for the rank counts people run, as fractions done by
# hand.
NCCL_TESTS_FACTORS = {
    "all_reduce": {2: 1.0, 3: 4 / 3, 4: 1.5, 8: 1.75, 16: 1.875, 32: 1.9375, 64: 1.96875},
    "all_gather": {2: 0.5, 3: 2 / 3, 4: 0.75, 8: 0.875, 16: 0.9375, 32: 0.96875, 64: 0.984375},
    "reduce_scatter": {2: 0.5, 3: 2 / 3, 4: 0.75, 8: 0.875, 16: 0.9375, 32: 0.96875, 64: 0.984375},
    "broadcast": {2: 1.0, 3: 1.0, 4: 1.0, 8: 1.0, 16: 1.0, 32: 1.0, 64: 1.0},
}


@pytest.mark.parametrize("op", sorted(NCCL_TESTS_FACTORS))
def test_bus_factors_are_nccl_tests_published_ones(op):
    for n, factor in NCCL_TESTS_FACTORS[op].items():
        assert bw.bus_factor(op, n) == pytest.approx(factor, rel=1e-12), (op, n)
    with pytest.raises(ValueError, match="unknown collective"):
        bw.bus_factor("all_to_all", 8)


def test_busbw_of_a_known_transfer():
    """1 GB all-reduced in 0.5 s on 8 ranks: algbw 2 GB/s, busbw 3.5 GB/s (nccl-tests prints the
    same)."""
    assert bw.algbw(1_000_000_000, 0.5) == pytest.approx(2.0)
    assert bw.busbw("all_reduce", 1_000_000_000, 0.5, 8) == pytest.approx(3.5)
    assert bw.busbw("all_gather", 1_000_000_000, 0.5, 8) == pytest.approx(1.75)
    assert bw.algbw(1000, 0.0) == 0.0 and bw.algbw(1000, -1.0) == 0.0


def test_the_all_reduce_factor_is_written_once():
    """One formula, one place: 2(n-1)/n lives in comm/bandwidth.py and everything else imports
    it."""
    pattern = re.compile(r"2 \* \((\w+) - 1\) / \(?\1\b")
    files = {
        str(p.relative_to(ROOT))
        for p in ROOT.rglob("*.py")
        if not {".venv", "mutants", "tests"} & set(p.relative_to(ROOT).parts)
        and pattern.search(p.read_text())
    }
    assert files == {"comm/bandwidth.py"}, files


# ----------------------------------------------------------------------------------- a train result
def _assemble(*, batch=4, world=2, accumulate=3, walls=None, medians=None, sizes=None):
    """tasks.train.result.assemble on hand-made ranks: each rank's block walls and step median as
    given."""
    from tasks.train.result import assemble

    sizes = sizes or [2] * 10
    walls = walls or [[0.5] * len(sizes) for _ in range(world)]
    medians = medians or [0.25] * world
    cfg = SimpleNamespace(
        batch_size=batch,
        accumulate=accumulate,
        sync="ddp",
        optim=SimpleNamespace(name="none"),
        precision="fp32",
        cuda_graphs=False,
        warmup_steps=1,
        timing=True,
        profile=SimpleNamespace(enabled=False),
        probe_steps=1,
        h2d="blocking",
    )
    ctx = SimpleNamespace(
        world_size=world, torch_device=torch.device("cpu"), hostname="box", backend="gloo"
    )
    window = SimpleNamespace(
        sizes=sizes,
        steps=sum(sizes),
        window_s=sum(max(w) for w in zip(*walls)),
        describe=lambda: {},
    )
    everyone = [
        {"rank": r, "block_walls_s": walls[r], "step_median_s": medians[r], "wall_s": sum(walls[r])}
        for r in range(world)
    ]
    marks = {"start": 0.0, "setup": 1.0, "warmup": 2.0, "window": 3.0, "probes": 4.0}
    feeder = SimpleNamespace(copies=False, note="")
    return assemble(cfg, ctx, None, feeder, [], everyone, None, window, marks, 2.3, None).to_dict()


def test_samples_per_second_counts_batch_ranks_and_accumulate():
    """20 optimizer steps in 10 blocks of 0.5 s on the slowest rank: 4 steps/s; each step is 4
    samples x 2 ranks x 3 micro-batches = 24 samples, so 96 samples/s."""
    r = _assemble(batch=4, world=2, accumulate=3)
    tp = r["throughput"]
    assert tp["steps_per_s"] == pytest.approx(4.0) and tp["samples_per_s"] == pytest.approx(96.0)
    assert (r["global_batch"], r["effective_batch"]) == (8, 24)
    assert r["headline"]["samples/s"] == pytest.approx(96.0) and r["headline"][
        "steps/s"
    ] == pytest.approx(4.0)


def test_samples_interval_is_the_steps_interval_in_samples():
    walls = [
        [0.5 + 0.01 * ((i * 3) % 7) for i in range(60)],
        [0.5] * 60,
    ]  # 60 blocks: the rate's interval
    tp = _assemble(batch=2, world=2, accumulate=5, walls=walls, sizes=[2] * 60)["throughput"]
    assert tp["ci_lo"] < tp["steps_per_s"] < tp["ci_hi"]
    assert tp["samples_ci_lo"] == pytest.approx(20 * tp["ci_lo"]) and tp[
        "samples_ci_hi"
    ] == pytest.approx(20 * tp["ci_hi"])


def test_the_throughput_uses_each_blocks_slowest_rank():
    """Rank 0 is slow in the first five blocks, rank 1 in the last five: every block takes 0.8 s, so
    2 steps / 0.8 s."""
    walls = [[0.8] * 5 + [0.4] * 5, [0.4] * 5 + [0.8] * 5]
    r = _assemble(walls=walls)
    assert r["throughput"]["steps_per_s"] == pytest.approx(2.5)
    assert r["throughput"]["blocks"]["walls_s"] == [0.8] * 10 and r["throughput"][
        "wall_s"
    ] == pytest.approx(8.0)


def test_the_slowest_rank_is_the_one_with_the_longest_median_step():
    r = _assemble(world=4, walls=[[0.5] * 10] * 4, medians=[0.25, 0.31, 0.28, 0.30])
    assert r["slowest_rank"] == 1
    r = _assemble(world=3, walls=[[0.5] * 10] * 3, medians=[0.20, 0.21, 0.29])
    assert r["slowest_rank"] == 2


def test_comm_figures_busbw_is_nccl_tests_for_all_reduce():
    """531.45 MB in 1.54 s on 2 ranks (the README's VGG11 run): algbw 0.345 GB/s, busbw the same
    (factor 1); on 8 ranks busbw is 1.75x algbw."""
    from tasks.train.result import comm_figures

    two = comm_figures(None, 2, [{"sync": 1.54}] * 12, None, collectives=4, nbytes=531_450_000)
    assert two.algbw_GBps == pytest.approx(0.3451, abs=1e-4) and two.busbw_GBps == pytest.approx(
        0.3451, abs=1e-4
    )
    eight = comm_figures(None, 8, [{"sync": 1.0}] * 12, None, collectives=4, nbytes=2_000_000_000)
    assert eight.algbw_GBps == pytest.approx(2.0) and eight.busbw_GBps == pytest.approx(3.5)


# ---------------------------------------------------------------------------------------- intervals
# Each coverage check runs the production function on seeded samples with a known truth. 2000 draws:
# a 95% interval covers 95% +- 1% (binomial sd 0.49%), one computed at 90% covers ~90%, so the
# bounds [93%, 97%] tell them apart.
SIMS = 2000
BOUNDS = (0.93, 0.97)


def test_a_95_percent_median_interval_covers_95_percent_not_90():
    """Independent samples (a microbenchmark's timed calls): the order-statistic interval of the
    median."""
    from stats import median_ci

    rng = np.random.default_rng(30)
    x = rng.lognormal(0.0, 0.3, size=(SIMS, 40))  # true median exp(0) = 1
    hits = 0
    for row in x:
        lo, hi, level = median_ci(row, 0.95)
        hits += lo <= 1.0 <= hi
    # the order statistics give at least 95% by construction: 96.2% at n=40 (binomial tails, exact
    # for any law)
    assert level == pytest.approx(0.9615, abs=1e-3)
    assert 0.945 <= hits / SIMS <= 0.98, hits / SIMS


def test_a_95_percent_run_level_interval_covers_95_percent_not_90():
    """Runs of a configuration (3 repeats) with a known geometric mean: the t(R-1) interval of
    stats.run_level."""
    from stats import run_level

    rng = np.random.default_rng(31)
    logs = rng.normal(math.log(10.0), 0.04, size=(SIMS, 3))
    hits = sum(r["ci_lo"] <= 10.0 <= r["ci_hi"] for r in (run_level(row, 0.95) for row in logs))
    assert BOUNDS[0] <= hits / SIMS <= BOUNDS[1], hits / SIMS
    hits90 = sum(
        r["ci_lo"] <= 10.0 <= r["ci_hi"] for r in (run_level(row, 0.90) for row in logs[:1000])
    )
    assert 0.87 <= hits90 / 1000 <= 0.93, hits90 / 1000


def test_a_95_percent_block_throughput_interval_covers_95_percent_not_90():
    """One run of 60 independent timed blocks with a known rate: the batch-means interval of
    stats.block_throughput (the long-run rate has one from 60 blocks on)."""
    from stats import block_throughput

    rng = np.random.default_rng(32)
    walls = np.exp(rng.normal(math.log(0.5), 0.05, size=(SIMS, 60)))
    truth = 1 / (0.5 * math.exp(0.05**2 / 2))  # steps / E[wall] for lognormal walls of 1 step
    hits = sum(
        b["ci_lo"] <= truth <= b["ci_hi"] for b in (block_throughput(w, [1] * 60) for w in walls)
    )
    assert BOUNDS[0] <= hits / SIMS <= BOUNDS[1], hits / SIMS


def test_a_95_percent_speedup_interval_covers_95_percent_not_90():
    """Two configurations 3 runs each, the candidate truly 5% faster: Welch's interval of
    stats.compare_runs."""
    from stats import compare_runs

    rng = np.random.default_rng(33)
    base = rng.normal(0.0, 0.03, size=(SIMS, 3))
    cand = rng.normal(math.log(1.05), 0.03, size=(SIMS, 3))
    hits = 0
    for b, c in zip(base, cand):
        s = compare_runs(b, c)
        hits += s.ci_lo <= 1.05 <= s.ci_hi
    assert BOUNDS[0] <= hits / SIMS <= BOUNDS[1], hits / SIMS


# ------------------------------------------------------------------------------ record finalisation
def test_a_failed_runs_partial_result_reaches_its_record(tmp_path, monkeypatch):
    """A rank that failed after measuring (a correctness check's counts) hands its figures to the
    record: the job's failure path keeps them and finalisation writes them (issue 30: the only test
    asserted under `if rec["result"]`)."""
    import launchers.local
    from job import run as job_module
    from job.finalise import finalise
    from launchers.rank import Outcome
    from base.record import read_record

    partial = {
        "wrong_total": 12,
        "rows": [{"op": "all_reduce", "bytes": 4000, "wrong": 2}],
        "headline": {"#wrong": 12},
    }

    def failing(plain, job):
        raise launchers.local.RankFailed(
            1,
            "CorrectnessError: 12 wrong elements",
            "Traceback ...",
            Outcome(started="2025-01-01T00:00:00", env={"world_size": 2}, result=partial),
        )

    monkeypatch.setattr(launchers.local, "launch_local", failing)
    plain = {"task": "collectives", "logger": {"name": "none"}}
    record, code = job_module._launch(
        plain, {"output_dir": str(tmp_path), "overrides": ["task=collectives"]}
    )
    assert code == 1 and record.status == "failed"
    assert record.error == "rank 1 failed: CorrectnessError: 12 wrong elements"
    finalise(record, tmp_path, wandb=False, quiet=True)
    written = read_record(tmp_path)
    assert written["status"] == "failed" and written["result"]["wrong_total"] == 12
    assert written["result"]["rows"] == partial["rows"] and written["env"] == {"world_size": 2}


# ------------------------------------------------------------------------------------ the straggler
# Hand arithmetic on binary fractions (exact in floats), so every figure is compared exactly (issue
# 30's mutation run found the per-rank table's columns, the CPU deltas and the significance edge
# checked nowhere).
def test_cpu_usage_is_the_change_since_the_earlier_reading(monkeypatch):
    from tasks.train import stragglers

    ru = SimpleNamespace(ru_utime=2.0, ru_stime=0.5, ru_nvcsw=25, ru_nivcsw=7)
    monkeypatch.setattr(
        stragglers, "resource", SimpleNamespace(RUSAGE_SELF=0, getrusage=lambda who: ru)
    )
    monkeypatch.setattr(stragglers, "time", SimpleNamespace(perf_counter=lambda: 104.0))
    host = [(260, 1200)]
    monkeypatch.setattr("device.host.host_cpu_jiffies", lambda: host[0])
    queue = {"/proc/self/schedstat": 0.75}  # the loop thread's run-queue wait; every thread's: 2.0
    monkeypatch.setattr(stragglers, "_runqueue_s", lambda pattern="all": queue.get(pattern, 2.0))
    assert stragglers.cpu_usage() == {
        "cpu_s": 2.5,
        "voluntary_switches": 25,
        "involuntary_switches": 7,
        "wall_s": 104.0,
        "runqueue_s": 2.0,
        "main_runqueue_s": 0.75,
        "host": (260, 1200),
    }
    since = {
        "cpu_s": 1.0,
        "voluntary_switches": 10,
        "involuntary_switches": 3,
        "wall_s": 100.0,
        "host": (200, 1000),
        "runqueue_s": 1.5,
        "main_runqueue_s": 0.5,
    }
    # 60 busy jiffies of 200 on the whole host: 30% busy; waits for a core 0.5 s (all threads), 0.25
    # s (the loop's)
    assert stragglers.cpu_usage(since) == {
        "cpu_s": 1.5,
        "voluntary_switches": 15,
        "involuntary_switches": 4,
        "wall_s": 4.0,
        "runqueue_s": 0.5,
        "main_runqueue_s": 0.25,
        "host_busy": 0.3,
    }
    queue["/proc/self/schedstat"] = None  # a kernel without schedstat: no wait, and none is made up
    assert stragglers.cpu_usage(since)["main_runqueue_s"] is None
    host[0] = (200, 1000)  # no host time passed: no share to give
    assert stragglers.cpu_usage(since)["host_busy"] is None
    host[0] = None  # no /proc/stat
    assert stragglers.cpu_usage(since)["host_busy"] is None


STEPS = [
    {"data": 0.25, "h2d": 0.125, "forward": 1.0, "backward": 2.0, "step": 3.375},
    {"data": 0.5, "h2d": 0.125, "forward": 1.5, "backward": 2.5, "step": 4.625},
    {"data": 0.25, "h2d": 0.25, "forward": 1.0, "backward": 3.0, "step": 4.5},
]
USAGE = {
    "cpu_s": 3.0,
    "wall_s": 4.0,
    "voluntary_switches": 1,
    "involuntary_switches": 2,
    "host_busy": 0.5,
}


def test_a_ranks_work_before_the_collective_by_hand():
    from tasks.train.stragglers import rank_work

    common = {
        "data_s": 0.25,
        "h2d_s": 0.125,
        "forward_s": 1.0,
        "torch_threads": torch.get_num_threads(),
        **USAGE,
        "steps": 3,
        "optimizer_s": 0.0,
        "outside_s": 0.0,
    }
    keys = [*common, "backward_compute_s", "compute_s", "backward_from"]
    # explicit sync: backward is compute; ready = data + h2d + forward + backward per step: 3.375,
    # 4.625, 4.5
    w = rank_work(STEPS, None, USAGE)
    assert {k: w[k] for k in keys} == {
        **common,
        "backward_compute_s": 2.5,
        "compute_s": 3.5,
        "backward_from": "backward phase",
    }
    assert w["ready_s"]["median"] == 4.5 and (w["ready_s"]["min"], w["ready_s"]["max"]) == (
        3.375,
        4.625,
    )
    # DDP: the backward phase holds the all-reduce's wait, so backward compute is the reducer's 0.5
    # s, added to data + h2d + forward: 1.375 + 0.5, 2.125 + 0.5, 1.5 + 0.5
    w = rank_work(STEPS, {"backward_compute_s": 0.5}, USAGE)
    assert {k: w[k] for k in keys} == {
        **common,
        "backward_compute_s": 0.5,
        "compute_s": 1.5,
        "backward_from": "DDP's reducer timer (median of the probe steps)",
    }
    assert (w["ready_s"]["min"], w["ready_s"]["median"], w["ready_s"]["max"]) == (1.875, 2.0, 2.625)
    # DDP without the reducer's timer: no backward compute, and none is made up
    w = rank_work(STEPS, {"calls": 3}, USAGE)
    assert w["backward_compute_s"] is None and w["compute_s"] == 1.0
    assert (w["ready_s"]["min"], w["ready_s"]["median"], w["ready_s"]["max"]) == (1.375, 1.5, 2.125)
    # no steps, or a replayed CUDA graph (no forward phase): no work to give the time inside the
    # timed blocks no phase holds is work too: walls of 4.5 s per step against steps of 4.1667
    w = rank_work(STEPS, None, USAGE, walls=[4.5, 4.5, 4.5])
    assert w["outside_s"] == pytest.approx(4.5 - 12.5 / 3) and w["step_mean_s"] == pytest.approx(
        12.5 / 3
    )
    assert w["ready_s"]["median"] == pytest.approx(4.5 + 4.5 - 12.5 / 3)
    assert rank_work([], None, USAGE) is None
    assert rank_work([{"graph_replay": 1.0}], None, USAGE) is None


def _rank(rank, median, lo, hi, data, h2d, compute, level=0.95):
    ready = {
        "median": median,
        "ci_lo": lo,
        "ci_hi": hi,
        **({} if level is None else {"ci_level": level}),
    }
    return {
        "rank": rank,
        "host": f"node{rank}",
        "work": {
            "ready_s": ready,
            "data_s": data,
            "h2d_s": h2d,
            "compute_s": compute,
            "torch_threads": 1,
            "cpu_s": 10.0 + rank,
            "involuntary_switches": 100 + rank,
        },
    }


def test_the_straggler_and_its_table_by_hand():
    from tasks.train.stragglers import find_straggler

    ranks = [
        _rank(0, 1.0, 0.875, 1.125, 0.25, 0.125, 0.625),
        _rank(1, 1.5, 1.25, 1.75, 0.75, 0.125, 0.625),
        _rank(2, 1.25, 1.0, 1.5, 0.25, 0.25, 0.75),
        {"rank": 3, "work": None},
    ]
    s = find_straggler(ranks, 2.0).to_dict()
    # rank 1 is slowest; the others' medians: ready (1.0, 1.25) -> 1.125, data 0.25, h2d 0.1875,
    # compute 0.6875
    assert {k: v for k, v in s.items() if k != "method"} == {
        "rank": 1,
        "host": "node1",
        "by_s": 0.375,
        "share_of_step": 0.1875,
        "significant": False,
        "mostly": "data",
        "parts_s": {"data": 0.5, "h2d": -0.0625, "compute": -0.0625},
        "per_rank": [
            {
                "rank": r,
                "host": f"node{r}",
                "ready_s": m,
                "ready_ci": ci,
                "data_s": d,
                "h2d_s": h,
                "compute_s": c,
                "optimizer_s": None,
                "outside_s": None,
                "torch_threads": 1,
                "cpu_s": 10.0 + r,
                "runqueue_s": None,
                "involuntary_switches": 100 + r,
            }
            for r, m, ci, d, h, c in [
                (0, 1.0, [0.875, 1.125], 0.25, 0.125, 0.625),
                (1, 1.5, [1.25, 1.75], 0.75, 0.125, 0.625),
                (2, 1.25, [1.0, 1.5], 0.25, 0.25, 0.75),
            ]
        ],
    }
    assert s["method"].startswith("work between collectives per step")
    # significant only when its interval clears every other rank's: touching is not clearing
    assert find_straggler(ranks[:2], 2.0).significant is True  # 1.25 > 1.125
    touching = [_rank(0, 1.0, 0.875, 1.25, 0.25, 0.125, 0.625), ranks[1]]
    assert find_straggler(touching, 2.0).significant is False  # 1.25 == 1.25
    # a 75% interval is the least that may be read; below it, or without a level, no claim either
    # way
    assert (
        find_straggler(
            [ranks[0], _rank(1, 1.5, 1.25, 1.75, 0.75, 0.125, 0.625, level=0.75)], 2.0
        ).significant
        is True
    )
    assert (
        find_straggler(
            [ranks[0], _rank(1, 1.5, 1.25, 1.75, 0.75, 0.125, 0.625, level=0.5)], 2.0
        ).significant
        is None
    )
    assert (
        find_straggler(
            [ranks[0], _rank(1, 1.5, 1.25, 1.75, 0.75, 0.125, 0.625, level=None)], 2.0
        ).significant
        is None
    )
    assert find_straggler(ranks[:2], None).share_of_step is None  # no step time: no share
    assert find_straggler(ranks[:1], 2.0) is None  # one rank waits for nobody


# ---------------------------------------------------------------------------------- comm efficiency
def test_the_sync_against_the_microbenchmark_by_hand():
    from comm.efficiency import versus_sync

    # 2 calls of 1 MB at 1 ms [0.8, 1.2] on 4 ranks (bus factor 2 * 3 / 4 = 1.5); the sync took 4 ms
    # for them
    calls = [{"bytes": 1_000_000, "calls": 2, "time_s": 0.001, "ci_lo": 0.0008, "ci_hi": 0.0012}]
    v = versus_sync("microbenchmark", calls, 0.004, None, 4, "DDP's comm hook")
    got = {
        k: v[k]
        for k in (
            "achievable_s",
            "achievable_ci_lo",
            "achievable_ci_hi",
            "sync_s",
            "efficiency",
            "efficiency_ci_lo",
            "efficiency_ci_hi",
            "sync_busbw_GBps",
            "reference_busbw_GBps",
        )
    }
    want = {
        "achievable_s": 0.002,
        "achievable_ci_lo": 0.0016,
        "achievable_ci_hi": 0.0024,
        "sync_s": 0.004,
        "efficiency": 0.5,
        "efficiency_ci_lo": 0.4,
        "efficiency_ci_hi": 0.6,
        "sync_busbw_GBps": 0.75,
        "reference_busbw_GBps": 1.5,
    }  # 2 MB / 4 ms * 1.5; 2 MB / 2 ms * 1.5
    assert got == pytest.approx(want, rel=1e-12, abs=0)
    assert (v["calls"], v["bytes"], v["efficiency_is"]) == (2, 2_000_000, "estimate")
    # the sync's own byte count, when it has one, makes its busbw
    assert versus_sync("microbenchmark", calls, 0.004, 4_000_000, 4, "")[
        "sync_busbw_GBps"
    ] == pytest.approx(1.5)
    # a reference that took no time has no busbw (and no division by zero)
    free = [{"bytes": 1_000, "calls": 1, "time_s": 0.0}]
    assert versus_sync("microbenchmark", free, 0.004, None, 4, "")["reference_busbw_GBps"] is None
    # nothing to compare: no calls, or a sync time of zero or less
    assert versus_sync("microbenchmark", [], 0.004, None, 4, "") is None
    assert versus_sync("microbenchmark", calls, 0.0, None, 4, "") is None
    assert versus_sync("microbenchmark", calls, -0.004, None, 4, "") is None
    # an interval needs both ends of every size's
    half = [{**calls[0], "ci_hi": None}]
    v = versus_sync("microbenchmark", half, 0.004, None, 4, "")
    assert (v["efficiency_ci_lo"], v["efficiency_ci_hi"]) == (None, None)


# ------------------------------------------------------------------------------------ planned steps
def test_steins_rule_plans_the_pilots_size_times_the_squared_ratio():
    """n = pilot size x (pilot half-width / target)^2, with the pilot's 5-batch batch-medians
    half-width (the plan keeps the 5 batches it was calibrated with); a target a quarter of the
    pilot's width asks for 16x the steps."""
    from stats.summary import planned_steps, rel_halfwidth
    from stats.within import batch_median

    pilot = list(1.0 + 0.05 * np.random.default_rng(3).standard_normal(20))
    for level in (0.95, 0.5):
        b = batch_median(pilot, level, count=5)
        half = rel_halfwidth(b["median"], b["ci_lo"], b["ci_hi"])
        assert planned_steps(pilot, half / 4, 10, None, level=level) == 320  # 20 x 4^2
        assert (
            planned_steps(pilot, half * 2, 10, None, level=level) == 10
        )  # 20 / 4 = 5, below the minimum
    assert planned_steps(pilot, 0.01, 10, None) == planned_steps(pilot, 0.01, 10, None, level=0.95)
    assert (
        planned_steps(pilot[:5], 0.01, 10, None) == 10
    )  # too few steps for an interval: the minimum
    assert (
        planned_steps([0.0] * 20, 0.01, 10, None) == 20
    )  # no positive median: no relative width to plan from
    assert planned_steps(pilot, 0.0, 10, 500) == 500  # no target: as many steps as the cap allows
    assert planned_steps(pilot, 0.0, 10, None) == 20  # nor a cap: the pilot


def test_times_are_printed_as_nccl_tests_prints_them():
    """nccl-tests' time column: 2 decimals below 100 us, 1 below 10 ms, none above (its
    common.cu)."""
    assert bw.fmt_us(99.99499e-6) == "99.99"  # microseconds are 1e6 per second, not a hair more
    assert [
        bw.fmt_us(s)
        for s in (12.3456e-6, 99.994e-6, 100e-6, 123.46e-6, 9999.94e-6, 0.01, 0.0123456)
    ] == ["12.35", "99.99", "100.0", "123.5", "9999.9", "10000", "12346"]


def test_element_sizes_and_sizes_as_nccl_tests_takes_them():
    """Element sizes from the dtype's own width (not float32's); nccl-tests' -b 1 is a valid
    smallest size."""
    assert [bw.element_size(d) for d in ("float16", "bfloat16", "float32", "float64", "int8")] == [
        2,
        2,
        4,
        8,
        1,
    ]
    assert bw.size_list(1, 8, 2) == [1, 2, 4, 8]
    assert bw.size_list(1, 5, 1.1) == [
        1,
        2,
        3,
        4,
        5,
    ]  # a factor too small to grow a size: one byte more
    with pytest.raises(ValueError, match=r"factor must be > 1, got 1"):
        bw.size_list(1, 8, 1)
    with pytest.raises(ValueError, match=r"need 1 <= min_bytes <= max_bytes, got 0, 8"):
        bw.size_list(0, 8, 2)
    assert [bw.dtype_name(d) for d in ("fp16", "bf16", "double", "float32")] == [
        "float16",
        "bfloat16",
        "float64",
        "float32",
    ]  # the names users type (base/schema.py)
    with pytest.raises(KeyError, match="float7"):
        bw.dtype_name("float7")


def test_the_efficiencys_bus_factor_and_when_it_cannot_be_read():
    from comm.efficiency import bus_factor, not_measurable

    assert [bus_factor(n) for n in (1, 2, 4, 8)] == [
        0.0,
        1.0,
        1.5,
        1.75,
    ]  # nccl-tests: 2(n-1)/n; one rank sends 0
    assert not_measurable({"efficiency": 1.0}) is None  # exactly as fast: readable
    assert not_measurable(None) is None and not_measurable({"efficiency": None}) is None
    noise = not_measurable({"efficiency": 1.61, "efficiency_ci_lo": 0.68, "efficiency_ci_hi": 3.33})
    assert noise.startswith("not measurable: 161% [68, 333], ") and noise.endswith(
        "inside each other's noise"
    )
    # an interval that ends at 100% is not wholly above it
    assert not_measurable(
        {"efficiency": 1.5, "efficiency_ci_lo": 1.0, "efficiency_ci_hi": 2.0}
    ).endswith("noise")
    above = not_measurable({"efficiency": 1.5, "efficiency_ci_lo": 1.25, "efficiency_ci_hi": 2.0})
    assert above.startswith("not measurable: 150% [125, 200], ") and "per-call cost" in above
    assert not_measurable(
        {"efficiency": 1.5, "efficiency_ci_lo": 1.25, "efficiency_ci_hi": None}
    ).startswith("not measurable: 150% (no interval), ")


def test_throughput_and_the_adaptive_stop_keep_their_level_and_caps():
    from stats.summary import PILOT, adaptive_should_stop, block_throughput, planned_steps
    from stats.within import batch_rate

    walls, steps = list(1.0 + 0.1 * np.random.default_rng(5).standard_normal(20)), [10] * 20
    for level in (0.95, 0.5):
        b, r = block_throughput(walls, steps, level=level), batch_rate(walls, steps, level)
        assert (b["ci_lo"], b["ci_hi"], b["log_se"]) == (r["ci_lo"], r["ci_hi"], r["log_se"])
    times = list(1.0 + 0.05 * np.random.default_rng(7).standard_normal(400))
    plan = planned_steps(times[:PILOT], 0.005, PILOT, None, level=0.5)
    assert PILOT < plan < planned_steps(times[:PILOT], 0.005, PILOT, None)  # 71 at 50%, 987 at 95%
    assert adaptive_should_stop(times[: plan - 1], 0.005, 10, None, 1.0, None, level=0.5) == (
        False,
        "continue",
    )
    assert adaptive_should_stop(times[:plan], 0.005, 10, None, 1.0, None, level=0.5) == (
        True,
        "target reached",
    )
    # no precision target: the window runs to its cap, not to the pilot's end
    assert adaptive_should_stop(times[:PILOT], 0.0, 10, 50, 1.0, None) == (False, "continue")
    assert adaptive_should_stop(times[:50], 0.0, 10, 50, 1.0, None) == (True, "target reached")
    assert adaptive_should_stop(times[:5], 0.01, 10, None, 60.0, 60.0) == (
        True,
        "max_s reached",
    )  # at the limit


def test_the_sync_against_the_emulated_link_by_hand():
    """2 nodes behind an 8 Gbit/s link: an all-reduce puts 2(2-1)/2 = 1x each byte through a NIC, 1
    ns a byte, so the sync's 4 MB (buckets 1 + 1 + 2 MB) take at least 4 ms; it took 8 ms: 50%, a
    lower bound as it overlapped."""
    from comm.efficiency import versus_link

    link = {"emulated": True, "payload_rate_bit_s": 8e9, "nodes": 2}
    comm = {
        "buckets": {"sizes_bytes": [1_000_000, 1_000_000, 2_000_000]},
        "time_s": 0.008,
        "bytes_per_step": 4_000_000,
        "method": "DDP",
        "overlap_s": 0.001,
    }
    v = versus_link(link, comm, 2)
    assert (v["achievable_s"], v["efficiency"], v["calls"], v["bytes"]) == pytest.approx(
        (0.004, 0.5, 3, 4e6)
    )
    assert (v["efficiency_ci_lo"], v["efficiency_is"], v["source"]) == (
        None,
        "lower bound",
        "result.env.link",
    )
    assert (v["reference"], v["overlap_s"]) == ("emulated link", 0.001)
    # the sync's busbw counts the bytes the step sent (8 MB here, beside 4 MB of buckets): 8 MB / 8
    # ms x 1
    assert versus_link(link, {**comm, "bytes_per_step": 8_000_000}, 2)[
        "sync_busbw_GBps"
    ] == pytest.approx(1.0)
    assert "N=2 nodes' NICs at 8 Gbit/s" in v["method"]
    # no buckets: the step's bytes in one call
    one = versus_link(link, {**comm, "buckets": None}, 2)
    assert (one["achievable_s"], one["calls"]) == pytest.approx((0.004, 1))
    # 4 ranks on 2 nodes: the NICs carry the nodes' all-reduce, 2(2-1)/2, not the ranks' 2(4-1)/4
    assert versus_link(link, comm, 4)["achievable_s"] == pytest.approx(0.004)
    # nothing to compare against, or nothing to compare
    for bad_link in (
        None,
        {**link, "emulated": False},
        {**link, "payload_rate_bit_s": None},
        {**link, "nodes": 1},
    ):
        assert versus_link(bad_link, comm, 2) is None, bad_link
    assert versus_link(link, None, 2) is None
    assert versus_link(link, {**comm, "buckets": None, "bytes_per_step": None}, 2) is None


# ---------------------------------------------------------------------------------- a row's summary
def test_a_rows_summary_by_hand():
    """describe's columns on five values, by hand: numpy's linear percentiles on 5 points land on
    the values at positions 1 and 3 (q1, q3) and 60% of the way from the 4th to the 5th (p90);
    Tukey's fences at 1.5 IQR."""
    from stats.summary import describe, median_ci

    d = describe([-2.0, 2.0, 3.0, 4.0, 8.0])
    assert {
        k: d[k]
        for k in (
            "n",
            "median",
            "mean",
            "min",
            "max",
            "q1",
            "q3",
            "iqr",
            "outliers_low",
            "outliers_high",
        )
    } == {
        "n": 5,
        "median": 3.0,
        "mean": 3.0,
        "min": -2.0,
        "max": 8.0,
        "q1": 2.0,
        "q3": 4.0,
        "iqr": 2.0,
        "outliers_low": 1,
        "outliers_high": 1,
    }  # fences -1 and 7
    assert d["p90"] == pytest.approx(6.4, abs=1e-12)
    assert d["ci_method"] and "batch" not in d["ci_method"]
    on_fences = describe([-1.0, 2.0, 3.0, 4.0, 7.0])  # on a fence is not beyond it
    assert (on_fences["outliers_low"], on_fences["outliers_high"]) == (0, 0)
    assert describe([1, 2, 3])["median"] == 2.0
    x = list(np.random.default_rng(11).lognormal(0, 0.2, 40))
    for level in (0.95, 0.5):
        assert (describe(x, level=level)["ci_lo"], describe(x, level=level)["ci_hi"]) == median_ci(
            x, level
        )[:2]
    lo95, hi95, _ = median_ci(x)
    lo50, hi50, _ = median_ci(x, 0.5)
    assert lo95 < lo50 < hi50 < hi95
    with pytest.raises(ValueError, match="no values"):
        describe([])


def test_a_serial_series_summary_keeps_its_level_and_method():
    from stats.summary import SERIAL_CI_METHOD, describe
    from stats.within import batch_median, serial

    x = list(np.random.default_rng(13).lognormal(0, 0.2, 40))
    for level in (0.95, 0.5):
        d, b = (
            describe(x, level=level, serial_series=True),
            batch_median(np.asarray(x), level, count=5),
        )
        assert (d["ci_lo"], d["ci_hi"], d["ci_level"], d["ci_method"]) == (
            b["ci_lo"],
            b["ci_hi"],
            level,
            SERIAL_CI_METHOD,
        )
    assert (
        describe(x, serial_series=True)["lag1"] == serial(np.log(x))["lag1"]
    )  # positive: on the log scale
    with_zero = [0.0, *x]
    assert describe(with_zero, serial_series=True)["lag1"] == serial(np.asarray(with_zero))["lag1"]
    short = describe(x[:6], serial_series=True)  # too few for batches: no interval
    assert (short["ci_lo"], short["ci_level"]) == (None, None)
    assert short["ci_method"] == batch_median(np.asarray(x[:6]), 0.95)["method"] != SERIAL_CI_METHOD


def test_median_ranks_refuse_a_level_outside_0_1_and_bytes_print_in_binary_units():
    from stats.summary import median_ranks, rel_halfwidth

    assert rel_halfwidth(2.0, 1.5, 3.0) == 0.375  # half of (3 - 1.5) over 2
    assert rel_halfwidth(2.0, 1.5, None) is None and rel_halfwidth(2.0, None, 3.0) is None
    assert rel_halfwidth(0.0, -1.0, 1.0) is None

    for level in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match=r"level must be in \(0, 1\)"):
            median_ranks(10, level)
    assert [
        bw.fmt_bytes(n)
        for n in (0, 1023, 1024, 1536 * 1024, 3 * 1024**3, 5 * 1024**4, 2048 * 1024**4)
    ] == ["0 B", "1023 B", "1.0 KiB", "1.5 MiB", "3.0 GiB", "5.0 TiB", "2048.0 TiB"]
