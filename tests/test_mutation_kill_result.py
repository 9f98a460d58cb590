"""task=train's result assembly (tasks/train/result.py) on hand-made steps, windows and probes: the
per-rank figures, the throughput block in steps/s and samples/s, the communication figures (DDP's
probe, the explicit strategies' sync phase, nothing timed), the time budget, written out by hand
(a median of a list, a ratio, the ring all-reduce's 2(n-1)/n). The mutation run's targeted tests
for the module (docs/testing.md "Mutation testing")."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import numpy as np
import pytest

from base.context import JOB_START_ENV
from base.record_types import CommStats, DdpInfo
from tasks.train import result as res

STEPS = [
    {"step": 0.10, "forward": 0.03, "sync": 0.02},
    {"step": 0.30, "forward": 0.05, "sync": 0.04},
    {"step": 0.20, "forward": 0.04, "sync": 0.01},
    {"step": 0.40, "forward": 0.07, "sync": 0.03},
]


def test_rank_figures_written_out():
    ctx = SimpleNamespace(rank=3, hostname="node-b")
    window = SimpleNamespace(walls=[0.5, 1.5], steps=8)
    f = res.rank_figures(ctx, STEPS, window, cpu_s=4.0)
    assert (f["rank"], f["host"], f["wall_s"]) == (3, "node-b", 2.0)
    assert f["steps_per_s"] == pytest.approx(4.0)
    assert f["step_median_s"] == pytest.approx(0.25)
    assert f["step_p90_s"] == pytest.approx(0.37)  # linear between 0.3 and 0.4 at 0.9 of 3
    assert f["phases_median"] == {"forward": pytest.approx(0.045), "sync": pytest.approx(0.025)}
    assert f["block_walls_s"] == [0.5, 1.5] and f["cpu_s_per_step"] == pytest.approx(0.5)
    assert set(f["threads"]) == {"intra_op", "inter_op", "OMP_NUM_THREADS"}
    empty = res.rank_figures(ctx, [], window, cpu_s=0.0)
    assert empty["step_median_s"] is None and empty["step_p90_s"] is None
    assert empty["phases_median"] == {}


def test_thread_counts_read_torch_and_the_environment(monkeypatch):
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    t = res.thread_counts()
    assert t == {
        "intra_op": torch.get_num_threads(),
        "inter_op": torch.get_num_interop_threads(),
        "OMP_NUM_THREADS": "7",
    }


def _tp():
    return {
        "steps_per_s": 4.0,
        "ci_lo": 3.5,
        "ci_hi": 4.5,
        "n_blocks": 60,
        "method": "m",
        "lag1": 0.1,
        "n_eff": 50.0,
        "batches": 3,
    }


def test_throughput_of_scales_every_rate_by_the_samples_of_a_step():
    t = res.throughput_of(_tp(), 8.0, 15.0, [0.25] * 3, [1, 1, 1], "per_step")
    assert (t.wall_s, t.steps_per_s, t.ci_lo, t.ci_hi) == (15.0, 4.0, 3.5, 4.5)
    assert (t.samples_per_s, t.samples_ci_lo, t.samples_ci_hi) == (32.0, 28.0, 36.0)
    assert (t.ci_level, t.n_blocks, t.method, t.lag1, t.n_eff, t.batches) == (
        0.95,
        60,
        "m",
        0.1,
        50.0,
        3,
    )
    assert t.blocks.walls_s == [0.25] * 3 and t.blocks.steps == [1, 1, 1] and t.basis == "per_step"
    unknown = res.throughput_of({**_tp(), "ci_lo": None}, None, 15.0, [], [], "b")
    assert unknown.samples_per_s is None and unknown.samples_ci_hi is None
    no_lo = res.throughput_of({**_tp(), "ci_lo": None}, 2.0, 15.0, [], [], "b")
    assert no_lo.samples_ci_lo is None and no_lo.samples_ci_hi == 9.0


def _ddp(buckets=True):
    return (
        DdpInfo.from_dict({"buckets": {"count": 2, "sizes_bytes": [10, 20]}}) if buckets else None
    )


def test_ddp_comm_figures_come_from_the_probe():
    probe = {"comm_s": 0.05, "overlap_s": 0.03, "backward_compute_s": 0.08}
    c = res.comm_figures(_ddp(), 4, STEPS, probe, 3.0, 2e9)
    assert (c.time_s, c.overlap_s, c.backward_compute_s) == (0.05, 0.03, 0.08)
    assert c.exposed_s == pytest.approx(0.02) and c.exposed_n == 1
    assert c.exposed_ci_lo is None and c.exposed_ci_hi is None  # one sample: no interval
    assert c.algbw_GBps == pytest.approx(2e9 / 0.05 / 1e9)
    assert c.busbw_GBps == pytest.approx(40.0 * 2 * 3 / 4)
    assert (c.bytes_per_step, c.collectives_per_step) == (2e9, 3.0)
    assert c.buckets.count == 2 and c.method.startswith("DDP runtime stats")
    fully = res.comm_figures(_ddp(), 2, STEPS, {**probe, "overlap_s": 0.09}, 3.0, 1e6)
    assert fully.exposed_s == 0.0  # overlap past the time: nothing exposed, never negative
    samples = [0.010, 0.012, 0.011, 0.013, 0.009, 0.010, 0.014, 0.011, 0.012, 0.010, 0.011, 0.012]
    many = res.comm_figures(
        _ddp(), 2, STEPS, {**probe, "exposed_samples_s": samples, "method": "own"}, 3.0, 1e6
    )
    assert many.exposed_s == pytest.approx(float(np.median(samples)))
    assert many.exposed_n == 12 and many.method == "own"
    assert many.exposed_ci_lo is not None and many.exposed_ci_lo <= many.exposed_s
    assert many.exposed_ci_hi >= many.exposed_s


def test_explicit_strategies_comm_is_the_sync_phase():
    c = res.comm_figures(None, 2, STEPS, None, 1.0, 4e8)
    assert c.time_s == pytest.approx(0.025)  # the median sync phase
    assert c.overlap_s == 0.0 and c.backward_compute_s is None and c.buckets is None
    assert c.exposed_s == pytest.approx(0.025) and c.exposed_n == 4
    assert c.algbw_GBps == pytest.approx(4e8 / 0.025 / 1e9)
    assert c.busbw_GBps == pytest.approx(c.algbw_GBps * 1.0)  # 2 ranks: 2(2-1)/2 = 1
    assert c.method.startswith("median sync phase")


def test_nothing_timed_says_so_and_prints_no_number():
    ddp = res.comm_figures(_ddp(), 2, STEPS, None, 3.0, 1e6)
    assert ddp.time_s is None and ddp.overlap_s is None and ddp.exposed_s is None
    assert ddp.algbw_GBps is None and ddp.busbw_GBps is None and ddp.exposed_n is None
    assert ddp.method.startswith("not measured: probe_steps=0")
    untimed = res.comm_figures(None, 2, [{"step": 0.1}], None, 1.0, 1e6)
    assert untimed.method.startswith("not measured: timing=false")
    assert untimed.time_s is None and untimed.backward_compute_s is None


def test_time_budget_splits_the_job_at_its_marks(monkeypatch):
    now = time.time()
    marks = {
        "start": now - 100.0,
        "setup": now - 90.0,
        "warmup": now - 80.0,
        "window": now - 50.0,
        "probes": now - 45.0,
    }
    monkeypatch.setenv(JOB_START_ENV, str(now - 120.0))
    b = res.time_budget(marks, 30.0)
    assert b.job_s == pytest.approx(120.0, abs=1.0)
    assert b.before_task_s == pytest.approx(20.0)
    assert (b.setup_s, b.warmup_s, b.probes_s) == (
        pytest.approx(10.0),
        pytest.approx(10.0),
        pytest.approx(5.0),
    )
    assert b.window_s == 30.0 and b.window_share == pytest.approx(30.0 / b.job_s)
    monkeypatch.delenv(JOB_START_ENV)
    own = res.time_budget(marks, 30.0)
    assert own.before_task_s == 0.0 and own.job_s == pytest.approx(100.0, abs=1.0)
    future = res.time_budget({**marks, "start": now + 1000.0}, 30.0)
    assert future.window_share is None  # no job time yet: no share
    assert "JOB" in JOB_START_ENV.upper() and os.environ.get(JOB_START_ENV) is None


def test_exposed_text_numbers_and_sample_counts():
    c = CommStats(exposed_s=0.0123, exposed_n=1)
    assert res.exposed_text(c) == "12.3 ms (1 probe step: no interval; probe_steps=6 gives one)"
    assert res.exposed_text(c, short=True) == "12.3 ms (1 probe step)"
    assert res.exposed_text(CommStats(exposed_s=0.0123, exposed_n=3), short=True) == (
        "12.3 ms (3 probe steps)"
    )
    assert res.exposed_text(CommStats(exposed_s=0.0123)) == "12.3 ms"
    assert res.exposed_text(CommStats()) == "n/a"
    ci = res.exposed_text(CommStats(exposed_s=0.012, exposed_ci_lo=0.010, exposed_ci_hi=0.015))
    assert "12" in ci and "10" in ci and "15" in ci and ci.endswith("ms")
