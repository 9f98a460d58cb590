"""Numbers of the modules the mutation run reaches since issue 36 (stats/within.py, comm/measure.py,
tasks/collectives.py, diagnosis/accounting.py), each checked against a value worked out by hand or
by a plain loop written apart from the code under test: the within-run statistics behind every
interval of a train record, the per-rank statistics of the comm measurements, the collectives task's
rows and headline, and the diagnosis's step accounting."""

from __future__ import annotations

import math

import pytest

from comm.measure import block_sizes, rank_stats
from stats import within

T975_DF4 = (
    2.7764451051977987  # Student t, 0.975 quantile, 4 degrees of freedom (printed tables: 2.776)
)
T975_DF2 = 4.302652729911275  # ... 2 degrees of freedom (4.303)
T975_DF1 = 12.706204736174705  # ... 1 degree of freedom (12.706)


def test_t_quantile_is_students_t():
    assert within.t_quantile(0.975, 4) == pytest.approx(T975_DF4, rel=1e-12)
    assert within.t_quantile(0.5, 4) == pytest.approx(0.0, abs=1e-12)
    assert within.t_quantile(0.95, 1) == pytest.approx(6.313751514675, rel=1e-9)


def test_lag1_by_hand():
    # [1, 2, 3, 4]: mean 2.5, deviations -1.5 -0.5 0.5 1.5; sum of squares 5; lag-1 products 0.75 -
    # 0.25 + 0.75 = 1.25
    assert within.lag1([1, 2, 3, 4]) == pytest.approx(0.25)
    assert within.lag1([1, 3, 1, 3]) == pytest.approx(-0.75)  # d = -1 1 -1 1: products -3 over 4
    assert within.lag1([2.0, 2.0, 2.0]) == 0.0  # no variance: no correlation, not a division by 0
    assert within.lag1([1, 2]) is None  # fewer than 3 values


def _n_eff(x: list[float]) -> float:
    """Kendall-corrected AR(1) effective size by a plain loop."""
    n = len(x)
    m = sum(x) / n
    d = [v - m for v in x]
    r = sum(d[i] * d[i + 1] for i in range(n - 1)) / sum(v * v for v in d)
    r = (n * r + 1) / (n - 3)
    r = 0.0 if r < 0 else 0.99 if r > 0.99 else r
    return n * (1 - r) / (1 + r)


def test_effective_size_by_hand():
    # 1 1 2 2 1 1 2 2 1 1: mean 1.4, sum of squares 2.4, lag-1 products 0.24, r = 0.1; Kendall: (10
    # * 0.1 + 1) / 7 = 2/7, inside (0, 0.99); n_eff = 10 (5/7) / (9/7) = 50/9
    x = [1, 1, 2, 2, 1, 1, 2, 2, 1, 1]
    assert within.lag1(x) == pytest.approx(0.1)
    assert within.effective_size(x) == pytest.approx(50 / 9) == _n_eff(x)
    assert within.effective_size([1, 3, 1, 3, 1, 3]) == pytest.approx(
        6.0
    )  # r < 0 clipped to 0: n itself
    # a trend: r corrected above 0.99 is held at 0.99, n * 0.01 / 1.99
    assert within.effective_size([1, 2, 3, 4, 5]) == pytest.approx(5 * 0.01 / 1.99)
    assert within.effective_size([1, 2, 3, 4]) is None  # fewer than 5 values
    assert within.serial([1, 2, 3, 4]) == {"lag1": pytest.approx(0.25), "n_eff": None}


def test_batches_split_by_hand():
    assert [(s.start, s.stop) for s in within.batches(10)] == [
        (0, 2),
        (2, 4),
        (4, 6),
        (6, 8),
        (8, 10),
    ]
    # 12 / 5 = 2.4: edges 0 2.4 4.8 7.2 9.6 12 rounded to 0 2 5 7 10 12
    assert [(s.start, s.stop) for s in within.batches(12)] == [
        (0, 2),
        (2, 5),
        (5, 7),
        (7, 10),
        (10, 12),
    ]
    assert [(s.start, s.stop) for s in within.batches(3, count=3)] == [(0, 1), (1, 2), (2, 3)]


def test_batch_median_by_hand():
    # 1..10: median 5.5; under 40 values 2 batches (1..5, 6..10): medians 3 and 8, sd sqrt(12.5), se
    # sqrt(12.5)/sqrt(2)
    out = within.batch_median(list(range(1, 11)))
    se = math.sqrt(12.5) / math.sqrt(2)
    assert out["median"] == 5.5 and out["se"] == pytest.approx(se) and out["df"] == 1
    assert out["ci_lo"] == pytest.approx(5.5 - T975_DF1 * se) and out["ci_hi"] == pytest.approx(
        5.5 + T975_DF1 * se
    )
    assert out["method"].startswith("batch medians: 2 consecutive batches")
    # count=5 (the adaptive window's pilot): batch medians 1.5 3.5 5.5 7.5 9.5; sd sqrt(40 / 4); se
    # sqrt(10) / sqrt(5)
    five = within.batch_median(list(range(1, 11)), count=5)
    se5 = math.sqrt(10) / math.sqrt(5)
    assert five["se"] == pytest.approx(se5) and five["df"] == 4
    assert five["ci_lo"] == pytest.approx(5.5 - T975_DF4 * se5) and five["ci_hi"] == pytest.approx(
        5.5 + T975_DF4 * se5
    )
    # the batch count by length: 2 under 40, 3 under 120, 5 from 120
    assert [within.batch_count(n) for n in (10, 39, 40, 119, 120)] == [2, 2, 3, 3, 5]
    nine = within.batch_median(list(range(1, 10)))
    assert (
        nine["median"] == 5
        and nine["ci_lo"] is None
        and nine["ci_hi"] is None
        and "needs 10" in nine["method"]
    )
    narrow = within.batch_median(list(range(1, 11)), level=0.9)
    assert narrow["ci_hi"] - narrow["ci_lo"] < out["ci_hi"] - out["ci_lo"]
    with pytest.raises(ValueError):
        within.batch_median([])


def test_batch_rate_by_hand():
    # 10 blocks: the rate, no interval (the long-run rate needs 60 blocks), the 3-batch log se kept
    # for planning
    short = within.batch_rate([1.0] * 10, [float(u) for u in range(1, 11)])
    assert short["rate"] == pytest.approx(5.5) and short["ci_lo"] is None and short["df"] is None
    assert (
        short["n_blocks"] == 10
        and "needs" not in short["method"]
        and "60 blocks" in short["method"]
    )
    # 60 blocks of 1 s, units 1..60: 3 batches of 20, rates 10.5 30.5 50.5; t on their logs, df 2
    walls = [1.0] * 60
    units = [float(u) for u in range(1, 61)]
    out = within.batch_rate(walls, units)
    assert (
        out["rate"] == pytest.approx(30.5)
        and out["n_blocks"] == 60
        and out["df"] == 2
        and out["batches"] == 3
    )
    logs = [math.log(10.5), math.log(30.5), math.log(50.5)]
    mean = sum(logs) / 3
    se = math.sqrt(sum((v - mean) ** 2 for v in logs) / 2) / math.sqrt(3)
    assert out["log_se"] == pytest.approx(se)
    assert out["ci_lo"] == pytest.approx(30.5 * math.exp(-T975_DF2 * se))
    assert out["ci_hi"] == pytest.approx(30.5 * math.exp(T975_DF2 * se))
    per_block = [math.log(u) for u in units]
    assert out["lag1"] == pytest.approx(within.lag1(per_block)) and out["n_eff"] == pytest.approx(
        _n_eff(per_block)
    )
    # the rate is total work over total time, not the mean of the blocks' rates
    uneven = within.batch_rate([1.0, 3.0], [2.0, 2.0])
    assert (
        uneven["rate"] == pytest.approx(1.0)
        and uneven["ci_lo"] is None
        and "needs 60" in uneven["method"]
    )
    for walls, units in (
        ([1.0, 0.0], [1.0, 1.0]),
        ([1.0, 1.0], [1.0, -1.0]),
        ([], []),
        ([1.0], [1.0, 2.0]),
    ):
        with pytest.raises(ValueError):
            within.batch_rate(walls, units)


def test_log_median_by_hand():
    x = [math.exp(v) for v in range(1, 11)]
    med, se, df = within.log_median(x)
    assert (
        med == pytest.approx(5.5) and se == pytest.approx(math.sqrt(10) / math.sqrt(5)) and df == 4
    )
    assert within.log_median([math.e] * 9) == (pytest.approx(1.0), None, None)


def test_rank_stats_by_hand():
    assert rank_stats([0.1, 0.3, 0.2]) == {"avg": pytest.approx(0.2), "max": 0.3, "slowest_rank": 1}
    assert rank_stats([0.5]) == {"avg": 0.5, "max": 0.5, "slowest_rank": 0}
    assert rank_stats([0.3, 0.3, 0.1])["slowest_rank"] == 0  # a tie names the first rank


def test_block_sizes_cover_every_iteration():
    for iters in (1, 5, 64, 100, 1001):
        sizes = block_sizes(iters)
        assert sum(sizes) == iters and all(s >= 1 for s in sizes) and max(sizes) - min(sizes) <= 1


def test_collectives_rows_and_headline_by_hand():
    """tasks/collectives.py's result assembly on hand-made per-rank timings (2 ranks; no process):
    each row's mean and slowest time, algbw and busbw by nccl-tests' arithmetic, the block medians,
    and the headline that picks each op's largest size."""
    from types import SimpleNamespace

    import torch

    from tasks.collectives import _result, settings
    from tests.conftest import compose

    c = settings(
        compose(["task=collectives", "collectives.ops=[all_reduce,all_gather]", "logger=none"])
    )
    mb = 1 << 20
    entries = [
        {
            "op": op,
            "mode": "out_of_place",
            "size": size,
            "requested": size,
            "counts": {"count": size // 4},
        }
        for op in ("all_reduce", "all_gather")
        for size in (mb, 4 * mb)
    ]
    blocks = [0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008]
    # per rank, per entry: (seconds per call, wrong values found, the blocks' seconds per call)
    rank0 = [(0.010, 0, blocks), (0.030, 0, blocks), (0.020, 1, blocks), (0.050, 0, blocks)]
    rank1 = [
        (0.030, 0, [2 * b for b in blocks]),
        (0.010, 0, blocks),
        (0.020, 2, blocks),
        (0.070, 0, blocks),
    ]
    r = _result(
        c,
        entries,
        [rank0, rank1],
        [],
        SimpleNamespace(world_size=2, backend="gloo"),
        torch.device("cpu"),
    ).to_dict()  # the typed result, read as the record holds it
    rows = r["rows"]
    assert [(x["op"], x["bytes"]) for x in rows] == [(e["op"], e["size"]) for e in entries]
    first = rows[0]  # all_reduce 1 MiB: mean 20 ms, slowest rank 1 at 30 ms
    assert first["time_us"] == pytest.approx(20_000) and first["time_max_us"] == pytest.approx(
        30_000
    )
    assert first["slowest_rank"] == 1 and rows[1]["slowest_rank"] == 0
    assert first["algbw_GBps"] == pytest.approx(mb / 0.020 / 1e9)
    assert first["busbw_GBps"] == pytest.approx(
        mb / 0.020 / 1e9 * 2 * (2 - 1) / 2
    )  # all_reduce: 2(n-1)/n
    assert rows[3]["busbw_GBps"] == pytest.approx(
        4 * mb / 0.060 / 1e9 * (2 - 1) / 2
    )  # all_gather: (n-1)/n
    # the blocks: per block the ranks' mean (1.5 b for the first row), then their median: 1.5 x 4.5
    # ms
    assert first["time_median_us"] == pytest.approx(1.5 * 4500) and first["blocks"] == 8
    assert first["time_ci_lo_us"] <= first["time_median_us"] <= first["time_ci_hi_us"]
    assert rows[2]["wrong"] == 3 and first["wrong"] == 0 and r["wrong_total"] == 3
    h = r["headline"]
    assert h["ranks"] == 2 and h["max size B"] == 4 * mb and h["#wrong"] == 3
    assert h["all_reduce busbw GB/s"] == pytest.approx(
        round(4 * mb / 0.020 / 1e9, 4)
    )  # the largest size's
    assert h["all_gather busbw GB/s"] == pytest.approx(round(4 * mb / 0.060 / 1e9 / 2, 4))
    busbws = [
        mb / 0.020 / 1e9,
        4 * mb / 0.020 / 1e9,
        mb / 0.020 / 1e9 / 2,
        4 * mb / 0.060 / 1e9 / 2,
    ]
    assert r["avg_busbw_GBps"] == pytest.approx(sum(busbws) / 4)
    assert h["avg busbw GB/s"] == pytest.approx(round(sum(busbws) / 4, 4))
    assert r["time_per_rank_us"][0] == pytest.approx([10_000, 30_000])


def _accounting_result(
    sync: str = "ddp", late_work: float = 0.130, barrier_wall: float = 0.180
) -> dict:
    """A 2-rank task=train result by hand: 10 steps in 2.0 s (0.2 s per step from throughput); rank
    0's phases sum to 0.150 s, its mean step 0.150 s, its wall per step 0.180 s (0.030 s between
    steps), so it waits 0.020 s at the block barrier; rank 0 works 0.100 s per step, rank 1
    `late_work`."""
    phases = {"data": 0.010, "h2d": 0.0, "forward": 0.030, "backward": 0.090, "optimizer": 0.020}
    if sync != "ddp":
        phases = {**phases, "backward": 0.050, "sync": 0.040}

    def rank(r: int, work: float) -> dict:
        return {
            "rank": r,
            "host": "node-a",
            "block_walls_s": [0.9, 0.9],
            "work": {
                "step_mean_s": 0.150,
                "wall_per_step_s": barrier_wall,
                "backward_compute_s": 0.050,
                "optimizer_s": 0.020,
                "phases_mean_s": phases,
                "ready_s": {"median": work},
            },
        }

    return {
        "world_size": 2,
        "sync": sync,
        "steps": 10,
        "throughput": {"wall_s": 2.0, "steps_per_s": 5.0, "ci_lo": 4.0, "ci_hi": 6.25},
        "per_rank": [rank(0, 0.100), rank(1, late_work)],
        "comm": {"exposed_s": 0.025},
    }


def test_step_accounting_by_hand():
    from base.record_types import TrainResult
    from diagnosis.accounting import account, lines

    acc = account(TrainResult.from_dict(_accounting_result(), "result")).to_dict()
    assert acc["step_s"] == pytest.approx(0.2) and acc["complete"] is True
    assert acc["step_lo_s"] == pytest.approx(1 / 6.25) and acc["step_hi_s"] == pytest.approx(
        1 / 4.0
    )
    r0 = acc["rank0"]
    assert r0["phases_total_s"] == pytest.approx(0.150) and r0["outside_s"] == pytest.approx(0.030)
    assert r0["barrier_s"] == pytest.approx(0.020) and r0["residual_s"] == pytest.approx(
        0.0, abs=1e-12
    )
    # rank 1 works 0.130 s, rank 0 0.100 s: rank 0 waits 0.030 s, 0.020 s of it at the barrier (all
    # the barrier holds), the other 0.010 s inside DDP's all-reduces in backward (backward 0.090 -
    # compute 0.050 = 0.040 s)
    w = acc["wait"]
    assert acc["late_rank"] == 1 and w["rank"] == 1 and w["total_s"] == pytest.approx(0.030)
    assert w["at_barrier_s"] == pytest.approx(0.020) and w["in_sync_s"] == pytest.approx(0.010)
    assert acc["sync"]["exposed_s"] == pytest.approx(0.040) and acc["sync"][
        "transfer_s"
    ] == pytest.approx(0.030)
    assert acc["sync"]["compute_s"] == pytest.approx(0.050) and w["phase"].startswith("backward")
    # the probe: DDP's timers, no barrier: min(wait, exposed) = 0.025 waiting, nothing left for the
    # transfer
    assert acc["probe"] == {"exposed_s": 0.025, "wait_s": pytest.approx(0.025), "transfer_s": 0.0}
    assert [r["barrier_s"] for r in acc["ranks"]] == [pytest.approx(0.020)] * 2
    assert acc["work_s"] == {0: 0.100, 1: 0.130} and acc["work_is_complete"] is True
    text = "\n".join(lines(account(TrainResult.from_dict(_accounting_result(), "result"))))
    assert (
        "200 ms per step" in text
        and "waiting for rank 1 10" in text
        and "transfer in the window 30" in text
    )
    assert "rank 0 waits 30" in text and "not accounted for" not in text

    # an explicit strategy: the wait is inside the sync phase; a wait larger than barrier + sync is
    # capped by the sync
    flat = account(
        TrainResult.from_dict(_accounting_result(sync="flat", late_work=0.200), "result")
    ).to_dict()
    assert flat["wait"]["total_s"] == pytest.approx(0.100) and flat["wait"]["phase"] == "sync"
    assert flat["wait"]["in_sync_s"] == pytest.approx(0.040) and flat["sync"][
        "transfer_s"
    ] == pytest.approx(0.0)
    assert flat["sync"]["compute_s"] is None
    # rank 0 the slowest: nobody waits; a rank's wall beyond the step leaves no negative barrier
    fast = account(
        TrainResult.from_dict(_accounting_result(late_work=0.050, barrier_wall=0.25), "result")
    ).to_dict()
    assert (
        fast["late_rank"] is None
        and fast["wait"]["total_s"] == 0.0
        and fast["rank0"]["barrier_s"] == 0.0
    )
    assert fast["rank0"]["residual_s"] == pytest.approx(0.2 - 0.150 - 0.100)


def test_resolve_device_by_choice():
    import torch

    from base.errors import ConfigError
    from comm.measure import resolve_device

    cpu, cuda = torch.device("cpu"), torch.device("cuda", 1)
    assert resolve_device("cpu", "gloo", cuda, 0) == cpu  # asked for: CPU even on a CUDA rank
    assert (
        resolve_device("auto", "gloo", cpu, 3) == cpu
        and resolve_device("auto", "nccl", cuda, 0) == cuda
    )
    assert resolve_device("cuda", "gloo", cuda, 0) == cuda  # the rank's own GPU
    with pytest.raises(ConfigError, match="NCCL only moves CUDA tensors"):
        resolve_device("cpu", "nccl", cuda, 0)
    with pytest.raises(ConfigError, match="choose auto, cpu or cuda"):
        resolve_device("gpu", "gloo", cpu, 0)
    with pytest.raises(
        ConfigError, match="needs a GPU and none is visible"
    ):  # conftest hides every GPU here
        resolve_device("cuda", "gloo", cpu, 0)


def test_time_window_and_gather_all_on_a_one_rank_group(tmp_path):
    """A one-rank gloo group in this process (no rank process): seconds per call over the window,
    and the gather."""
    import time

    import torch
    import torch.distributed as dist

    from comm.measure import gather_all, time_window
    from tests.conftest import close_group

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        calls = []
        per_call = time_window(lambda: (calls.append(1), time.sleep(0.02)), 4, torch.device("cpu"))
        assert len(calls) == 4 and 0.02 <= per_call < 0.2  # divided by the 4 calls, not their sum
        assert gather_all({"rank": 0}) == [{"rank": 0}]
    finally:
        close_group()


# ---- diagnosis/accounting.py's printed lines, word for word (issue 36: the mutation run's
# survivors in `lines`)


def _accounting_lines(record: dict) -> list[str]:
    from base.record_types import TrainResult
    from diagnosis.accounting import account, lines

    return lines(account(TrainResult.from_dict(record, "result")))


def _with_work(record: dict, **work) -> dict:
    """The record with the same change to every rank's own work (e.g. DDP's backward compute
    timer)."""
    for r in record["per_rank"]:
        r["work"].update(work)
    return record


def _seconds_record(step_mean: float, ready: tuple[float, float], wall: float = 50.0) -> dict:
    """A 2-rank DDP record in whole seconds, so that each threshold of `lines` can be met exactly: 8
    steps in 800 s (a 100 s step: 1% of it is 1 s, 2% is 2 s, both exact in binary), rank 0's wall
    per step `wall`, so it waits 100 - wall at the block barrier; its mean step `step_mean`."""
    record = _accounting_result()
    record["steps"] = 8
    record["throughput"] = {"wall_s": 800.0, "steps_per_s": 0.01, "ci_lo": 0.008, "ci_hi": 0.0125}
    for r, work in zip(record["per_rank"], ready):
        r["work"].update(step_mean_s=step_mean, wall_per_step_s=wall, ready_s={"median": work})
    return record


def test_step_accounting_lines_word_for_word():
    """The default record's printed accounting, each number worked out by hand in
    _accounting_result's docstring and test_step_accounting_by_hand: a 200 ms step; rank 0's phases
    10 + 0 + 30 + 90 + 20 = 150 ms, of which the backward's 90 are 50 compute, 10 waiting for rank 1
    and 30 transfer; 30 ms outside the phases; 20 ms at the barrier, all of it waiting for rank 1
    (more than half the barrier); DDP's probe says 25 ms exposed; rank 0 works 100 ms, rank 1 130
    ms: a 30 ms wait, more than 2% of the step. Only the sync phase carries the split."""
    assert _accounting_lines(_accounting_result()) == [
        "step accounting: 200 ms per step from throughput (5 steps/s, each block's slowest rank)",
        "  = rank 0's timed phases 150 (data 10, h2d 0, forward 30, backward 90 (compute 50 + "
        "waiting for "
        "rank 1 10 + transfer in the window 30), optimizer 20)",
        "  + outside the phases 30 (between steps, inside the timed blocks)",
        "  + waiting at the block barrier for rank 1: 20",
        "  exposed communication, two measurements: 30 in the window (backward less DDP's compute "
        "timer and "
        "the wait) and 25 from DDP's reducer timers over the probe steps (the sync line's "
        "`exposed`, which the "
        "findings use)",
        "  each rank's own work between collectives: r0 100  r1 130; rank 0 waits 30 per step for "
        "rank 1",
    ]


def test_step_accounting_lines_when_the_compute_timer_is_longer_than_the_backward():
    """DDP's compute timer (over the probe steps) above the window's backward (90 ms): no wait can
    be inside it, said once, and the phases after it are still listed; equal to it, the split stands
    (compute 90 + transfer 0: nothing of the 30 ms wait fits past the 20 ms barrier into a backward
    that has no time left)."""
    longer = _accounting_lines(_with_work(_accounting_result(), backward_compute_s=0.100))
    assert longer[1] == (
        "  = rank 0's timed phases 150 (data 10, h2d 0, forward 30, backward 90 (DDP's backward "
        "compute timer "
        "over the probe steps says 100: no wait inside), optimizer 20)"
    )
    equal = _accounting_lines(_with_work(_accounting_result(), backward_compute_s=0.090))
    assert equal[1] == (
        "  = rank 0's timed phases 150 (data 10, h2d 0, forward 30, backward 90 (compute 90 + "
        "transfer in "
        "the window 0), optimizer 20)"
    )


def test_step_accounting_lines_at_each_threshold():
    """A 100 s step (_seconds_record). Rank 0's mean step 51 s against its 50 s wall: nothing
    outside the phases, the 50 s barrier, and 100 - 51 - 0 - 50 = -1 s not accounted for: exactly 1%
    of the step, not printed; 1.5 s is. Rank 1 works 2 s more: exactly 2% of the step, so the
    per-rank line names no wait; 3 s more, it does. A wait of 25 s is exactly half the barrier: the
    barrier is the slowest rank's of each block; 26 s, rank 1's."""
    at = _accounting_lines(_seconds_record(51.0, (10.0, 12.0)))
    assert "not accounted for" not in "\n".join(at)
    assert at[-1] == "  each rank's own work between collectives: r0 10000  r1 12000"
    assert at[3] == "  + waiting at the block barrier for the slowest rank of each block: 50000"
    past = _accounting_lines(_seconds_record(51.5, (10.0, 13.0)))
    assert past[-2] == (
        "  + not accounted for: -1500 (the device timeline and the host clock disagree)"
    )
    assert past[-1].endswith("r0 10000  r1 13000; rank 0 waits 3000 per step for rank 1")
    assert _accounting_lines(_seconds_record(51.0, (10.0, 35.0)))[3] == (
        "  + waiting at the block barrier for the slowest rank of each block: 50000"
    )
    assert _accounting_lines(_seconds_record(51.0, (10.0, 36.0)))[3] == (
        "  + waiting at the block barrier for rank 1: 50000"
    )


def test_step_accounting_lines_of_an_older_record_and_of_one_rank():
    """A record whose ranks' work lacks the optimizer (made before it was recorded) says its waits
    leave it out; one rank prints no per-rank line; a record without rank 0's block wall clocks
    prints no accounting."""
    older = _accounting_result()
    for r in older["per_rank"]:
        del r["work"]["optimizer_s"]
    assert _accounting_lines(older)[-1] == (
        "  each rank's own work between collectives: r0 100  r1 130 (data + H2D + forward + "
        "backward compute "
        "only: an older record); rank 0 waits 30 per step for rank 1"
    )
    one = _accounting_result()
    one["world_size"], one["per_rank"] = 1, one["per_rank"][:1]
    assert not any("each rank's own work" in line for line in _accounting_lines(one))
    bare = _accounting_result()
    for r in bare["per_rank"]:
        r["work"].pop("wall_per_step_s")
        r.pop("block_walls_s")
    assert _accounting_lines(bare) == []


def _account_dict(record: dict) -> dict | None:
    from base.record_types import TrainResult
    from diagnosis.accounting import account

    acc = account(TrainResult.from_dict(record, "result"))
    return acc.to_dict() if acc is not None else None


def test_step_accounting_without_a_throughput_or_steps_is_none():
    """No step count, no throughput, or a throughput without its wall clock: the step cannot be
    had."""
    for change in ({"steps": 0}, {"throughput": None}, {"throughput": {"wall_s": 0.0}}):
        assert _account_dict({**_accounting_result(), **change}) is None


def test_step_accounting_keys_and_the_record_blocks_it_reads():
    """The dict as written to the record: every key named, the step's interval from the throughput's
    (1/6.25, 1/4), none where the throughput has no interval; the timer's median as the record holds
    it; each rank's row; a record without world_size is one rank; without DDP's probe no probe
    block."""
    record = _accounting_result()
    record["step_time_s"] = {"median": 0.175}
    acc = _account_dict(record)
    assert acc["basis"] == (
        "throughput: the timed blocks' wall clock (each block's slowest rank) per step"
    )
    assert acc["timer_median_s"] == 0.175 and acc["world_size"] == 2 and acc["steps_per_s"] == 5.0
    assert acc["rank0"]["step_mean_s"] == 0.150 and acc["rank0"]["wall_per_step_s"] == 0.180
    assert acc["rank0"]["phases_s"] == {
        "data": 0.010,
        "h2d": 0.0,
        "forward": 0.030,
        "backward": 0.090,
        "optimizer": 0.020,
    }
    assert acc["ranks"] == [
        {
            "rank": r,
            "host": "node-a",
            "step_mean_s": 0.150,
            "wall_per_step_s": 0.180,
            "barrier_s": pytest.approx(0.020),
            "work_s": work,
        }
        for r, work in ((0, 0.100), (1, 0.130))
    ]
    assert acc["wait"]["phase"] == acc["sync"]["phase"] == "backward (DDP's all-reduces)"
    bare = {**_accounting_result(), "world_size": None, "comm": None}
    bare["throughput"] = {"wall_s": 2.0, "steps_per_s": 5.0}
    acc = _account_dict(bare)
    assert acc["world_size"] == 1 and acc.get("probe") is None
    assert acc["step_lo_s"] is None and acc["step_hi_s"] is None and acc["timer_median_s"] is None


def test_step_accounting_from_block_walls_and_the_series():
    """A rank without its own wall per step has it from its block wall clocks: 2 blocks of 0.9 s
    over 10 steps = 0.18 s per step; a rank 0 without timed phases or a mean step (a replayed CUDA
    graph) has both from the series: phases' means (data 0.01 and 0.03: 0.02; forward 0.05), the
    step times' mean (0.1, 0.3: 0.2), so 0.2 s per step against the 0.18 s wall: nothing outside,
    0.02 s at the barrier, 0.2 - 0.2 - 0 - 0.02 not accounted for."""
    record = _accounting_result()
    for r in record["per_rank"]:
        del r["work"]["wall_per_step_s"], r["work"]["phases_mean_s"], r["work"]["step_mean_s"]
    record["series"] = {
        "step_time_s": [0.1, 0.3],
        "phases": {"data": [0.01, 0.03], "forward": [0.05], "backward": []},
    }
    acc = _account_dict(record)
    r0 = acc["rank0"]
    assert r0["wall_per_step_s"] == pytest.approx(0.18) and r0["step_mean_s"] == pytest.approx(0.2)
    assert r0["phases_s"] == {"data": pytest.approx(0.02), "forward": pytest.approx(0.05)}
    assert r0["phases_total_s"] == pytest.approx(0.07) and r0["outside_s"] == 0.0
    assert r0["barrier_s"] == pytest.approx(0.02) and r0["residual_s"] == pytest.approx(-0.02)
    assert [r["wall_per_step_s"] for r in acc["ranks"]] == [pytest.approx(0.18)] * 2
    assert [r["barrier_s"] for r in acc["ranks"]] == [pytest.approx(0.02)] * 2
    # no phases from either: rank 0's phases total is its mean step, 0.2 s
    del record["series"]["phases"]
    assert _account_dict(record)["rank0"]["phases_total_s"] == pytest.approx(0.2)


def test_step_accounting_finds_rank_0_and_the_late_rank_by_number():
    """Rank 0 is the rank numbered 0 wherever it is listed, else the first listed; the late rank is
    the one that works longest (rank 1 of 0, 1, 2 working 0.10, 0.15, 0.12 s), not the highest
    number; a rank without a work block counts neither as complete nor incomplete, and has no
    barrier without its wall clocks."""
    record = _accounting_result()
    r0, r1 = record["per_rank"]
    r1["work"]["phases_mean_s"] = {"data": 0.5}
    r2 = {"rank": 2, "host": "node-b", "work": {**r1["work"], "ready_s": {"median": 0.120}}}
    r1["work"]["ready_s"] = {"median": 0.150}
    record["per_rank"] = [r2, r1, r0, {"rank": 3}]
    record["world_size"] = 4
    acc = _account_dict(record)
    assert acc["rank0"]["phases_s"]["data"] == 0.010 and acc["late_rank"] == 1
    assert acc["wait"]["total_s"] == pytest.approx(0.050) and acc["work_is_complete"] is True
    assert [(r["rank"], r["barrier_s"]) for r in acc["ranks"]][-1] == (3, None)
    # no rank 0 listed: the first listed stands in for it, and nobody is waited for (no rank 0 work
    # to compare)
    record["per_rank"] = [r1, r2]
    acc = _account_dict(record)
    assert acc["rank0"]["phases_s"] == {"data": 0.5} and acc["late_rank"] is None
    assert acc["wait"]["total_s"] == 0.0
    # no rank at all: the step from throughput, no split
    acc = _account_dict({**_accounting_result(), "per_rank": []})
    assert acc["complete"] is False and acc["step_s"] == pytest.approx(0.2)


def test_step_accounting_waits_need_two_ranks_work_and_rank_0s():
    """A wait needs rank 0's work and another rank's: with only rank 1's, or only rank 0's, it is
    0."""
    for keep in (0, 1):
        record = _accounting_result()
        del record["per_rank"][1 - keep]["work"]["ready_s"]
        acc = _account_dict(record)
        assert acc["wait"]["total_s"] == 0.0 and acc["late_rank"] is None
        assert acc["work_s"] == {keep: (0.100, 0.130)[keep]}


def test_step_accounting_sync_phase_by_strategy():
    """DDP without its compute timer, or an explicit strategy without a sync phase: no sync split
    (exposed, transfer and the wait inside unknown); per_param's sync phase is split as flat's is:
    rank 1 works 0.070 s more, 0.020 s of it at the barrier, 0.040 s of the remaining 0.050 inside
    the 0.040 s sync."""
    record = _with_work(_accounting_result(), backward_compute_s=None)
    for r in record["per_rank"]:
        r["work"]["phases_mean_s"]["sync"] = 0.040
    acc = _account_dict(record)
    unknown = {"phase": None, "exposed_s": None, "transfer_s": None, "compute_s": None}
    assert acc["sync"] == unknown and acc["wait"]["total_s"] == pytest.approx(0.030)
    assert acc["wait"]["in_sync_s"] is None and acc["wait"]["phase"] is None
    flat = _account_dict({**_accounting_result(), "sync": "flat"})
    assert flat["sync"] == unknown
    per_param = _accounting_result(sync="per_param", late_work=0.170)
    acc = _account_dict(per_param)
    assert acc["wait"]["phase"] == "sync" and acc["wait"]["in_sync_s"] == pytest.approx(0.040)
    assert acc["sync"]["exposed_s"] == 0.040 and acc["sync"]["transfer_s"] == pytest.approx(0.0)


def test_step_accounting_lines_of_an_explicit_strategy_and_at_no_barrier():
    """flat (_accounting_result(sync="flat")): the wait of 0.030 s is 0.020 at the barrier and 0.010
    in the sync phase's 0.040 (0.030 transfer); DDP's probe line is printed for DDP's backward only.
    A wall per step equal to the step leaves no barrier: the 30 ms wait is all inside the backward,
    and the barrier's 0 is nobody's."""
    flat = _accounting_lines(_accounting_result(sync="flat"))
    assert flat[1] == (
        "  = rank 0's timed phases 150 (data 10, h2d 0, forward 30, backward 50, optimizer 20, "
        "sync 40 "
        "(waiting for rank 1 10 + transfer in the window 30))"
    )
    assert not any(line.startswith("  exposed communication") for line in flat)
    no_barrier = _accounting_lines(_accounting_result(barrier_wall=0.2))
    assert no_barrier[3] == "  + waiting at the block barrier for the slowest rank of each block: 0"
    assert "waiting for rank 1 30" in no_barrier[1]


def test_phase_seconds_without_an_accounting():
    from base.record_types import Accounting, AccountingRank0
    from diagnosis.accounting import phase_seconds

    assert phase_seconds(None) == {} and phase_seconds(Accounting()) == {}
    assert phase_seconds(Accounting(rank0=AccountingRank0())) == {}
