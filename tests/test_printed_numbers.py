"""Printed numbers checked by another route (issue 30): every expected value here is written out by hand or comes from
a published table or a simulation with a known truth, never from the formula under test run again.

- busbw: nccl-tests' published bus factors (doc/PERFORMANCE.md of NVIDIA/nccl-tests), as a literal table;
- a train result assembled from hand-made ranks: samples/s with accumulate > 1, the slowest rank, busbw;
- intervals: a seeded simulation with a known truth whose coverage tells 90% from 95% (each check would pass a
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

# nccl-tests doc/PERFORMANCE.md: busBw = algBw x factor; all_reduce 2(n-1)/n, reduce_scatter and all_gather (n-1)/n,
# broadcast 1. Written out for the rank counts people run, as fractions done by hand.
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
    """1 GB all-reduced in 0.5 s on 8 ranks: algbw 2 GB/s, busbw 3.5 GB/s (nccl-tests prints the same)."""
    assert bw.algbw(1_000_000_000, 0.5) == pytest.approx(2.0)
    assert bw.busbw("all_reduce", 1_000_000_000, 0.5, 8) == pytest.approx(3.5)
    assert bw.busbw("all_gather", 1_000_000_000, 0.5, 8) == pytest.approx(1.75)
    assert bw.algbw(1000, 0.0) == 0.0 and bw.algbw(1000, -1.0) == 0.0


def test_the_all_reduce_factor_is_written_once():
    """One formula, one place: 2(n-1)/n lives in comm/bandwidth.py and everything else imports it."""
    pattern = re.compile(r"2 \* \((\w+) - 1\) / \(?\1\b")
    files = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
             if not {".venv", "mutants", "tests"} & set(p.relative_to(ROOT).parts) and pattern.search(p.read_text())}
    assert files == {"comm/bandwidth.py"}, files


# ------------------------------------------------------------------------------------------------ a train result
def _assemble(*, batch=4, world=2, accumulate=3, walls=None, medians=None, sizes=None):
    """tasks.train.result.assemble on hand-made ranks: each rank's block walls and step median as given."""
    from tasks.train.result import assemble

    sizes = sizes or [2] * 10
    walls = walls or [[0.5] * len(sizes) for _ in range(world)]
    medians = medians or [0.25] * world
    cfg = SimpleNamespace(batch_size=batch, accumulate=accumulate, sync="ddp", optim=SimpleNamespace(name="none"),
                          precision="fp32", cuda_graphs=False, warmup_steps=1, timing=True,
                          profile=SimpleNamespace(enabled=False), probe_steps=1, h2d="blocking")
    ctx = SimpleNamespace(world_size=world, torch_device=torch.device("cpu"), hostname="box", backend="gloo")
    window = SimpleNamespace(sizes=sizes, steps=sum(sizes), window_s=sum(max(w) for w in zip(*walls)),
                             describe=lambda: {})
    everyone = [{"rank": r, "block_walls_s": walls[r], "step_median_s": medians[r], "wall_s": sum(walls[r])}
                for r in range(world)]
    marks = {"start": 0.0, "setup": 1.0, "warmup": 2.0, "window": 3.0, "probes": 4.0}
    feeder = SimpleNamespace(copies=0, note="")
    return assemble(cfg, ctx, {}, feeder, [], everyone, None, window, marks, 2.3, None)


def test_samples_per_second_counts_batch_ranks_and_accumulate():
    """20 optimizer steps in 10 blocks of 0.5 s on the slowest rank: 4 steps/s; each step is 4 samples x 2 ranks x 3
    micro-batches = 24 samples, so 96 samples/s."""
    r = _assemble(batch=4, world=2, accumulate=3)
    tp = r["throughput"]
    assert tp["steps_per_s"] == pytest.approx(4.0) and tp["samples_per_s"] == pytest.approx(96.0)
    assert (r["global_batch"], r["effective_batch"]) == (8, 24)
    assert r["headline"]["samples/s"] == pytest.approx(96.0) and r["headline"]["steps/s"] == pytest.approx(4.0)


def test_samples_interval_is_the_steps_interval_in_samples():
    walls = [[0.5 + 0.01 * ((i * 3) % 7) for i in range(10)], [0.5] * 10]
    tp = _assemble(batch=2, world=2, accumulate=5, walls=walls)["throughput"]
    assert tp["ci_lo"] < tp["steps_per_s"] < tp["ci_hi"]
    assert tp["samples_ci_lo"] == pytest.approx(20 * tp["ci_lo"]) and tp["samples_ci_hi"] == pytest.approx(
        20 * tp["ci_hi"])


def test_the_throughput_uses_each_blocks_slowest_rank():
    """Rank 0 is slow in the first five blocks, rank 1 in the last five: every block takes 0.8 s, so 2 steps / 0.8 s."""
    walls = [[0.8] * 5 + [0.4] * 5, [0.4] * 5 + [0.8] * 5]
    r = _assemble(walls=walls)
    assert r["throughput"]["steps_per_s"] == pytest.approx(2.5)
    assert r["throughput"]["blocks"]["walls_s"] == [0.8] * 10 and r["throughput"]["wall_s"] == pytest.approx(8.0)


def test_the_slowest_rank_is_the_one_with_the_longest_median_step():
    r = _assemble(world=4, walls=[[0.5] * 10] * 4, medians=[0.25, 0.31, 0.28, 0.30])
    assert r["slowest_rank"] == 1
    r = _assemble(world=3, walls=[[0.5] * 10] * 3, medians=[0.20, 0.21, 0.29])
    assert r["slowest_rank"] == 2


def test_comm_figures_busbw_is_nccl_tests_for_all_reduce():
    """531.45 MB in 1.54 s on 2 ranks (the README's VGG11 run): algbw 0.345 GB/s, busbw the same (factor 1); on 8
    ranks busbw is 1.75x algbw."""
    from tasks.train.result import comm_figures

    two = comm_figures({}, 2, [{"sync": 1.54}] * 12, None, collectives=4, nbytes=531_450_000)
    assert two["algbw_GBps"] == pytest.approx(0.3451, abs=1e-4) and two["busbw_GBps"] == pytest.approx(0.3451,
                                                                                                        abs=1e-4)
    eight = comm_figures({}, 8, [{"sync": 1.0}] * 12, None, collectives=4, nbytes=2_000_000_000)
    assert eight["algbw_GBps"] == pytest.approx(2.0) and eight["busbw_GBps"] == pytest.approx(3.5)


# ------------------------------------------------------------------------------------------------ intervals
# Each coverage check runs the production function on seeded samples with a known truth. 2000 draws: a 95% interval
# covers 95% +- 1% (binomial sd 0.49%), one computed at 90% covers ~90%, so the bounds [93%, 97%] tell them apart.
SIMS = 2000
BOUNDS = (0.93, 0.97)


def test_a_95_percent_median_interval_covers_95_percent_not_90():
    """Independent samples (a microbenchmark's timed calls): the order-statistic interval of the median."""
    from stats import median_ci

    rng = np.random.default_rng(30)
    x = rng.lognormal(0.0, 0.3, size=(SIMS, 40))            # true median exp(0) = 1
    hits = 0
    for row in x:
        lo, hi, level = median_ci(row, 0.95)
        hits += lo <= 1.0 <= hi
    # the order statistics give at least 95% by construction: 96.2% at n=40 (binomial tails, exact for any law)
    assert level == pytest.approx(0.9615, abs=1e-3)
    assert 0.945 <= hits / SIMS <= 0.98, hits / SIMS


def test_a_95_percent_run_level_interval_covers_95_percent_not_90():
    """Runs of a configuration (3 repeats) with a known geometric mean: the t(R-1) interval of stats.run_level."""
    from stats import run_level

    rng = np.random.default_rng(31)
    logs = rng.normal(math.log(10.0), 0.04, size=(SIMS, 3))
    hits = sum(r["ci_lo"] <= 10.0 <= r["ci_hi"] for r in (run_level(row, 0.95) for row in logs))
    assert BOUNDS[0] <= hits / SIMS <= BOUNDS[1], hits / SIMS
    hits90 = sum(r["ci_lo"] <= 10.0 <= r["ci_hi"] for r in (run_level(row, 0.90) for row in logs[:1000]))
    assert 0.87 <= hits90 / 1000 <= 0.93, hits90 / 1000


def test_a_95_percent_block_throughput_interval_covers_95_percent_not_90():
    """One run of 20 independent timed blocks with a known rate: the batch-means interval of stats.block_throughput."""
    from stats import block_throughput

    rng = np.random.default_rng(32)
    walls = np.exp(rng.normal(math.log(0.5), 0.05, size=(SIMS, 20)))
    truth = 1 / (0.5 * math.exp(0.05 ** 2 / 2))                # steps / E[wall] for lognormal walls of 1 step
    hits = sum(b["ci_lo"] <= truth <= b["ci_hi"] for b in (block_throughput(w, [1] * 20) for w in walls))
    assert BOUNDS[0] <= hits / SIMS <= BOUNDS[1], hits / SIMS


def test_a_95_percent_speedup_interval_covers_95_percent_not_90():
    """Two configurations 3 runs each, the candidate truly 5% faster: Welch's interval of stats.compare_runs."""
    from stats import compare_runs

    rng = np.random.default_rng(33)
    base = rng.normal(0.0, 0.03, size=(SIMS, 3))
    cand = rng.normal(math.log(1.05), 0.03, size=(SIMS, 3))
    hits = 0
    for b, c in zip(base, cand):
        s = compare_runs(b, c)
        hits += s.ci_lo <= 1.05 <= s.ci_hi
    assert BOUNDS[0] <= hits / SIMS <= BOUNDS[1], hits / SIMS


# ------------------------------------------------------------------------------------------------ record finalisation
def test_a_failed_runs_partial_result_reaches_its_record(tmp_path, monkeypatch):
    """A rank that failed after measuring (a correctness check's counts) hands its figures to the record: the job's
    failure path keeps them and finalisation writes them (issue 30: the only test asserted under `if rec["result"]`)."""
    import launchers.local
    from job import run as job_module
    from job.finalise import finalise
    from launchers.rank import Outcome
    from base.record import read_record

    partial = {"wrong_total": 12, "rows": [{"op": "all_reduce", "bytes": 4000, "wrong": 2}],
               "headline": {"#wrong": 12}}

    def failing(plain, job):
        raise launchers.local.RankFailed(1, "CorrectnessError: 12 wrong elements", "Traceback ...",
                                         Outcome(started="2025-01-01T00:00:00", env={"world_size": 2}, result=partial))

    monkeypatch.setattr(launchers.local, "launch_local", failing)
    plain = {"task": "collectives", "logger": {"name": "none"}}
    record, code = job_module._launch(plain, {"output_dir": str(tmp_path), "overrides": ["task=collectives"]})
    assert code == 1 and record.status == "failed"
    assert record.error == "rank 1 failed: CorrectnessError: 12 wrong elements"
    finalise(record, tmp_path, wandb=False, quiet=True)
    written = read_record(tmp_path)
    assert written["status"] == "failed" and written["result"]["wrong_total"] == 12
    assert written["result"]["rows"] == partial["rows"] and written["env"] == {"world_size": 2}
