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
import torch

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
    # every rank's own steps, as written (the hiccup rule reads a rank's stalls in them)
    assert f["series"] == {
        "step_time_s": [0.10, 0.30, 0.20, 0.40],
        "phases": {"forward": [0.03, 0.05, 0.04, 0.07], "sync": [0.02, 0.04, 0.01, 0.03]},
    }
    empty = res.rank_figures(ctx, [], window, cpu_s=0.0)
    assert empty["step_median_s"] is None and empty["step_p90_s"] is None
    assert empty["phases_median"] == {}
    assert empty["series"] == {"step_time_s": [], "phases": {}}


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


# ------------------------------------------------------------------ the printed summary (summarize)
def _summary(med, lo, hi, level=0.95, iqr=0.002, low=1, high=2):
    return {
        "n": 40,
        "median": med,
        "ci_lo": lo,
        "ci_hi": hi,
        "ci_level": level,
        "ci_method": "binomial order statistics",
        "iqr": iqr,
        "outliers_low": low,
        "outliers_high": high,
    }


def _threads(intra=1):
    return {"intra_op": intra, "inter_op": 1, "OMP_NUM_THREADS": "1"}


def _result(**changes):
    """A hand-made train result of round figures: 40 steps of 250 ms on 2 ranks, 4 steps/s, 24
    samples a step (4 x 2 ranks x 3 micro-batches), a 4 ms exposed all-reduce."""
    r = {
        "sync": "ddp",
        "optim": "sgd",
        "bucket_mb": 25,
        "world_size": 2,
        "backend": "gloo",
        "device_name": "box CPU",
        "batch_per_rank": 4,
        "global_batch": 8,
        "accumulate": 3,
        "effective_batch": 24,
        "warmup_steps": 5,
        "steps": 40,
        "throughput": {
            "steps_per_s": 4.0,
            "ci_lo": 3.5,
            "ci_hi": 4.5,
            "samples_per_s": 96.0,
            "samples_ci_lo": 84.0,
            "samples_ci_hi": 108.0,
            "n_blocks": 20,
            "method": "batch means",
            "lag1": 0.25,
            "n_eff": 12.0,
        },
        "measure": {
            "policy": "adaptive",
            "steps": 40,
            "blocks": 20,
            "block_steps": 2,
            "rel_ci_halfwidth": 0.031,
            "rel_ci_target": 0.02,
            "target_reached": False,
            "stopped_by": "max_steps",
        },
        "steady_state": {"steady": True, "drift": 0.01, "reason": "no drift", "of": "step times"},
        "step_time_s": _summary(0.25, 0.24, 0.26, iqr=0.004, low=0, high=3),
        "phases": {
            "forward": _summary(0.05, 0.048, 0.052),
            "backward": _summary(0.1, None, None, low=0, high=0),
        },
        "comm": {
            "method": "DDP probe",
            "bytes_per_step": 4.2e6,
            "collectives_per_step": 3.0,
            "time_s": 0.012,
            "overlap_s": 0.008,
            "exposed_s": 0.004,
            "exposed_ci_lo": 0.003,
            "exposed_ci_hi": 0.005,
            "backward_compute_s": 0.09,
            "algbw_GBps": 0.35,
            "busbw_GBps": 0.7,
            "buckets": {"count": 2},
        },
        "accuracy": {"final_loss": 2.30259, "grad_rel_error": 1.5e-7},
        "per_rank": [
            {"rank": 0, "host": "a", "step_median_s": 0.25, "threads": _threads()},
            {"rank": 1, "host": "b", "step_median_s": 0.2625, "threads": _threads()},
        ],
        "slowest_rank": 1,
        "straggler": {"rank": 1, "by_s": 0.0125, "mostly": "outside", "significant": False},
        "h2d": {"mode": "blocking", "note": "copies on the main thread"},
        "time_budget": {
            "job_s": 20.0,
            "before_task_s": 3.0,
            "setup_s": 2.0,
            "warmup_s": 1.5,
            "window_s": 10.0,
            "probes_s": 2.5,
            "window_share": 0.5,
            "launcher_cpu_s": 0.5,
            "launcher_wall_s": 20.0,
            "launcher_cpu_share": 0.025,
        },
    }
    r.update(changes)
    return r


def _record(**changes):
    from base.record import Record

    return Record.from_dict(
        {
            "status": "ok",
            "task": "train",
            "config": {"model": {"name": "mlp"}},
            "result": _result(**changes),
        }
    )


def test_the_printed_summary_of_a_run_written_out():
    # every figure by hand: 50 ms of a 250 ms step is 20.0%, 100 ms 40.0%; 1 + 2 outliers; the
    # backward phase has no interval (*, explained under the table though the step has one);
    # 4.2e6 B is 4.2 MB; 10 s of a 20 s job is 50%
    want = """\
task=train  model=mlp  sync=ddp  optim=sgd  bucket=25  world_size=2  backend=gloo  device=box CPU
batch/rank=4  global=8  accumulate=3  effective=24  warm-up=5  measured=40

throughput  4.0 [3.5, 4.5] steps/s   96 [84, 108] samples/s
            (95% CI; wall clock of 20 timed blocks, slowest rank per block; batch means)
            serial correlation of the blocks: lag-1 0.25, worth ~12 independent blocks of 20; \
one run's interval holds its own noise only (repeats add the spread between runs)
window      40 steps in 20 timed blocks of <= 2 steps, measure.policy=adaptive: median step known \
to +-3.1% on rank 0 (target +-2.0% on every rank); stopped by max_steps: TARGET NOT REACHED
steady      yes: no drift (step times)

phase                 median ms [95% CI]    IQR ms  outliers   share   (rank 0)
forward                50.0 [48.0, 52.0]         2         3   20.0%
backward                            100*         2         0   40.0%
step                      250 [240, 260]         4         3
(median CI: binomial order statistics; outliers: beyond Tukey's fences, 1.5 IQR; * no 95% \
interval: fewer than 10 steps)

gradient sync: 3 collectives/step, 4.2 MB/step, 2 buckets
  comm 12 ms, overlapped with backward 8 ms, exposed 4.0 [3.0, 5.0] ms, backward compute 90 ms
  algbw 0.35 GB/s  busbw 0.7 GB/s  (DDP probe)

loss 2.3026   gradient rel. error vs exact fp32 all-reduce 1.500e-07
per rank: r0@a 250.0 ms  r1@b 262.5 ms   slowest: rank 1
straggler: rank 1, +12.5 ms of work between collectives per step against the others' median \
(mostly outside the timed phases), inside the ranks' intervals: not significant
h2d: blocking - copies on the main thread
threads: intra-op 1, inter-op 1, OMP_NUM_THREADS=1 (every rank)
time: measured window 10.0 s of 20.0 s job (50%); start 3.0 s, set-up 2.0 s, warm-up 1.5 s, \
probes 2.5 s
launcher: 0.50 CPU s over the 20.0 s launch (2.5% of one core on average: the parent's elastic \
agent and heartbeat watch)"""
    assert res.summarize(_record()) == want


def test_the_printed_summary_of_a_sparser_run():
    # no rate interval (under 60 blocks), one block of one step each, fixed window, no phases, a
    # probe of one step without an interval, no loss, one rank, a significant straggler
    tp = {"steps_per_s": 4.0, "samples_per_s": 96.0, "n_blocks": 10}
    comm = {
        "method": "DDP probe",
        "bytes_per_step": 1.5e5,
        "collectives_per_step": 1.0,
        "time_s": 0.002,
        "exposed_s": 0.002,
        "exposed_n": 1,
    }
    rank = {"rank": 0, "host": "a", "step_median_s": 0.25, "threads": _threads()}
    r = _record(
        throughput=tp,
        measure={"policy": "fixed", "steps": 10, "blocks": 10, "block_steps": 1},
        steady_state={"steady": None, "drift": None, "reason": "too few steps", "of": "x"},
        phases=None,
        comm=comm,
        accuracy={"final_loss": None},
        per_rank=[rank],
        straggler={"rank": 0, "by_s": -0.002, "mostly": "data", "significant": True},
        time_budget={"job_s": 5.0},
    )
    want = """\
task=train  model=mlp  sync=ddp  optim=sgd  bucket=25  world_size=2  backend=gloo  device=box CPU
batch/rank=4  global=8  accumulate=3  effective=24  warm-up=5  measured=40

throughput  4 steps/s (no CI under 60 blocks)   96 samples/s (no CI under 60 blocks)
            (95% CI; wall clock of 10 timed blocks, slowest rank per block; )
window      10 steps in 10 timed blocks of 1 step, measure.policy=fixed
steady      untested: too few steps (x)

gradient sync: 1 collectives/step, 0.15 MB/step
  comm 2 ms, overlapped with backward n/a ms, exposed 2 ms (1 probe step: no interval; \
probe_steps=6 gives one)
  algbw n/a GB/s  busbw n/a GB/s  (DDP probe)

straggler: rank 0, -2.0 ms of work between collectives per step against the others' median \
(mostly data)
h2d: blocking - copies on the main thread
threads: intra-op 1, inter-op 1, OMP_NUM_THREADS=1 (every rank)"""
    assert res.summarize(r) == want


def test_the_summary_lines_each_branch_adds():
    def lines(**changes):
        return res.summarize(_record(**changes)).split("\n")

    tp = {**_result()["throughput"], "n_eff": None}
    assert "worth ~n/a independent blocks of 20" in lines(throughput=tp)[5]
    reached = {**_result()["measure"], "target_reached": True, "rel_ci_halfwidth": None}
    assert lines(measure=reached)[6].endswith(
        "median step known to n/a on rank 0 (target +-2.0% on every rank); target reached"
    )
    unsteady = {"steady": False, "reason": "drift 5%", "of": "step times"}
    assert lines(steady_state=unsteady)[7] == (
        "WARNING     drift 5% (step times): warm-up was not enough (raise warmup_steps) or the "
        "machine changed during the window; steady: false"
    )
    unknown = {"steady": None, "drift": 0.03, "reason": "r", "of": "o"}
    assert lines(steady_state=unknown)[7] == "steady      unknown: r (o)"
    assert "steady" not in " ".join(lines(steady_state={})[6:9])
    # a step without a 95% interval: every row marked, and the footnote says why
    step = _summary(0.25, None, None, iqr=0.004, low=0, high=0)
    out = lines(step_time_s=step)
    assert out[12] == "step" + " " * 32 + "250*" + " " * 9 + "4" + " " * 9 + "0"
    assert out[13] == (
        "(median CI: binomial order statistics; outliers: beyond Tukey's fences, 1.5 IQR; * no 95% "
        "interval: fewer than 10 steps)"
    )
    narrow = _summary(0.25, 0.2495, 0.2505, iqr=0.004, low=0, high=0)  # to 0.1 ms
    out = lines(step_time_s=narrow)
    assert out[12] == "step" + " " * 16 + "250.0 [249.5, 250.5]" + " " * 9 + "4" + " " * 9 + "0"
    low = _summary(0.25, 0.24, 0.26, level=0.9, iqr=0.004, low=0, high=0)
    out = lines(step_time_s=low)
    assert out[12] == "step                     250 [240, 260]*         4         0"
    assert out[13].endswith("; * no 95% interval: fewer than 10 steps)")
    # the per-rank line lists the ranks with a median only
    per = [*_result()["per_rank"], {"rank": 2, "host": "c", "threads": _threads(2)}]
    out = lines(per_rank=per)
    assert out[20] == "per rank: r0@a 250.0 ms  r1@b 262.5 ms   slowest: rank 1"
    assert out[23] == (
        "threads: intra-op 1, inter-op 1, OMP_NUM_THREADS=1 (rank 0; they differ: see per_rank in "
        "the record)"
    )
    assert lines(straggler={"rank": 1, "by_s": 0.001, "mostly": "x", "significant": None})[21] == (
        "straggler: rank 1, +1.0 ms of work between collectives per step against the others' "
        "median (mostly x), no interval"
    )
    assert lines(accuracy={"final_loss": 1.0})[19] == "loss 1.0000"


def test_the_summary_names_the_buckets_as_built():
    sizes = [1_000_000 * (i + 1) for i in range(9)]
    ddp = {
        "bucket_caps": {"rule": "25 MB caps"},
        "buckets": {"sizes_bytes": sizes, "rebuilt": True},
    }
    out = res.summarize(_record(ddp=ddp)).split("\n")
    assert out[18] == (
        "  buckets: 25 MB caps; as built after DDP's rebuild, in all-reduce order: "
        "1, 2, 3, 4, 5, 6, 7, 8, ... MB"
    )
    first = {
        "bucket_caps": {"rule": "r"},
        "buckets": {"sizes_bytes": [2_500_000], "rebuilt": False},
    }
    out = res.summarize(_record(ddp=first)).split("\n")
    assert out[18] == "  buckets: r; as first built (DDP had not rebuilt them yet): 2.5 MB"
    out = res.summarize(_record(ddp={"bucket_caps": {"rule": "r"}})).split("\n")
    assert out[18] == "  buckets: r; as first built (DDP had not rebuilt them yet):  MB"


# ------------------------------------------------------------------- assemble: rank 0's TrainResult
ASM_STEPS = [
    {"step": 0.25, "forward": 0.05, "backward": 0.10},
    {"step": 0.20, "forward": 0.04, "backward": 0.12},
    {"step": 0.30, "forward": 0.06, "backward": 0.08},
]


def _assembled(steps=ASM_STEPS, final_loss=2.5, grad_error=1e-7, works=None, comm=None, **kw):
    """assemble on a hand-made run: 2 ranks of batch 4, accumulate 3, two timed blocks of 2 and 1
    steps; rank 1 is the slower one (blocks 0.5 s and 0.3 s against 0.4 s and 0.35 s)."""
    cfg = SimpleNamespace(
        batch_size=4,
        accumulate=3,
        sync="ddp",
        optim=SimpleNamespace(name="adamw"),
        precision="bf16",
        cuda_graphs=1,
        warmup_steps=7,
        timing=1,
        profile=SimpleNamespace(enabled=1),
        probe_steps=6,
        h2d="pinned",
    )
    ctx = SimpleNamespace(
        world_size=2, torch_device=torch.device("cpu"), hostname="box", backend="gloo"
    )
    window = SimpleNamespace(
        sizes=[2, 1], steps=3, window_s=0.85, describe=lambda: {"policy": "fixed", "steps": 3}
    )
    everyone = [
        {"rank": 0, "block_walls_s": [0.4, 0.35], "step_median_s": 0.25, "wall_s": 0.75},
        {"rank": 1, "block_walls_s": [0.5, 0.3], "step_median_s": 0.26, "wall_s": 0.8},
    ]
    marks = {"start": time.time() - 10.0, "setup": 0.0, "warmup": 0.0, "window": 0.0, "probes": 0.0}
    marks.update(setup=marks["start"] + 1, warmup=marks["start"] + 2, window=marks["start"] + 3)
    marks["probes"] = marks["start"] + 4
    for rank, work in zip(everyone, works or ()):
        rank["work"] = work
    feeder = SimpleNamespace(copies=True, note="pinned copies")
    described = DdpInfo(bucket_cap_mb=25)
    return res.assemble(
        cfg,
        ctx,
        described,
        feeder,
        steps,
        everyone,
        comm,
        window,
        marks,
        final_loss,
        grad_error,
        **kw,
    ).to_dict()


def test_assemble_fills_the_record_from_the_run_written_out(monkeypatch):
    monkeypatch.delenv(JOB_START_ENV, raising=False)
    r = _assembled()
    assert (r["device"], r["device_name"], r["world_size"], r["backend"]) == (
        "cpu",
        "box CPU",
        2,
        "gloo",
    )
    assert (r["sync"], r["optim"], r["bucket_mb"], r["precision"]) == ("ddp", "adamw", 25, "bf16")
    assert r["cuda_graphs"] is True and r["timing"] is True and r["profiled"] is True
    assert r["ddp"]["bucket_cap_mb"] == 25
    # 4 per rank x 2 ranks = 8 a micro-batch; x 3 micro-batches = 24 a step
    assert (r["batch_per_rank"], r["global_batch"], r["accumulate"]) == (4, 8, 3)
    assert (r["effective_batch"], r["warmup_steps"], r["steps"]) == (24, 7, 3)
    assert r["measure"] == {"policy": "fixed", "steps": 3}
    # the slowest rank per block: 0.5 s and 0.35 s, 0.85 s for 3 steps
    tp = r["throughput"]
    assert tp["wall_s"] == pytest.approx(0.85)
    assert tp["steps_per_s"] == pytest.approx(3 / 0.85)
    assert tp["samples_per_s"] == pytest.approx(24 * 3 / 0.85)
    assert tp["blocks"] == {"walls_s": [0.5, 0.35], "steps": [2, 1]}
    assert tp["basis"] == "wall clock of each timed block on its slowest rank"
    # rank 0's step times: median 0.25 s; the phases' medians 0.05 s and 0.10 s
    assert r["step_time_s"]["median"] == pytest.approx(0.25) and r["step_time_s"]["n"] == 3
    assert r["phases"]["forward"]["median"] == pytest.approx(0.05)
    assert r["phases"]["backward"]["median"] == pytest.approx(0.10)
    assert set(r["phases"]) == {"forward", "backward"}
    assert r["series"]["step_time_s"] == [0.25, 0.20, 0.30]
    assert r["series"]["phases"] == {"forward": [0.05, 0.04, 0.06], "backward": [0.10, 0.12, 0.08]}
    assert r["steady_state"]["of"] == "step times (rank 0)"
    assert r["steady"] == r["steady_state"]["steady"]
    assert [p["rank"] for p in r["per_rank"]] == [0, 1] and r["slowest_rank"] == 1
    assert r["per_rank"][1]["block_walls_s"] == [0.5, 0.3]
    assert r["accuracy"] == {"final_loss": 2.5, "grad_rel_error": 1e-7, "grad_error_steps": 6}
    assert r["h2d"] == {"mode": "pinned", "copies": True, "note": "pinned copies"}
    b = r["time_budget"]
    assert b["window_s"] == 0.85 and (b["setup_s"], b["warmup_s"], b["probes_s"]) == (1, 1, 1)
    assert b["job_s"] == pytest.approx(10.0, abs=1.0)
    assert r["headline"]["steps/s"] == pytest.approx(3 / 0.85)
    assert "warnings" not in r or not r["warnings"]


def test_assemble_without_steps_or_a_gradient_check():
    r = _assembled(steps=[], grad_error=None)
    assert r.get("step_time_s") is None and r.get("phases") is None
    assert r["steady_state"]["of"] == "block wall clock per step"
    assert r["accuracy"]["grad_error_steps"] == 0
    assert r["series"]["step_time_s"] == []


def test_assemble_warns_of_a_loss_that_is_not_finite():
    r = _assembled(final_loss=float("nan"))
    assert r["warnings"] == [
        "the training loss is nan (not finite): the data or the settings (lr, precision) produce "
        "NaN/inf. The timings stand; the loss and gradients are not meaningful."
    ]


def test_assemble_s_step_times_honour_their_serial_correlation():
    # rank 0's step times are one run's consecutive steps: three of them give no interval that
    # honours serial correlation (it needs 10), where independent order statistics would give a
    # 75% one, [0.20, 0.30]
    st = _assembled()["step_time_s"]
    assert (st["ci_lo"], st["ci_hi"], st["ci_level"]) == (None, None, None)
    assert st["ci_method"].startswith("no interval: 3 value(s); an interval that honours serial")


def _work(ready, data):
    return {
        "ready_s": {
            "median": ready,
            "ci_lo": ready - 0.001,
            "ci_hi": ready + 0.001,
            "ci_level": 0.95,
        },
        "data_s": data,
        "h2d_s": 0.0,
        "compute_s": 0.1,
        "torch_threads": 1,
        "cpu_s": 1.0,
        "involuntary_switches": 0,
    }


def test_assemble_s_straggler_share_is_of_the_step_the_throughput_implies():
    # rank 1 readies its gradients 30 ms after rank 0 (all of it in data loading); the run's
    # throughput implies 0.85 s / 3 steps a step, so the straggler costs 30 / 283.3 of it
    r = _assembled(works=[_work(0.12, 0.01), _work(0.15, 0.04)])
    s = r["straggler"]
    assert s["rank"] == 1 and s["by_s"] == pytest.approx(0.03) and s["mostly"] == "data"
    assert s["share_of_step"] == pytest.approx(0.03 / (0.85 / 3))
    assert s["significant"] is True


def test_assemble_keeps_what_the_loop_measured_beside_the_window():
    from base.record_types import DeviceLayer, Fault, PrecisionFlags

    comm = CommStats(method="m", exposed_s=0.004)
    r = _assembled(
        comm=comm,
        forward_dtype="bfloat16",
        precision_flags=PrecisionFlags(float32_matmul_precision="high"),
        grad_ready={"method": "hooks"},
        microbench={"mode": "beside"},
        fault=Fault(delay_s=0.01, delay_rank=1),
        device_layer=DeviceLayer(kind="cpu"),
    )
    assert r["comm"]["method"] == "m" and r["comm"]["exposed_s"] == 0.004
    assert r["forward_dtype"] == "bfloat16"
    assert r["precision_flags"]["float32_matmul_precision"] == "high"
    assert r["grad_ready"]["method"] == "hooks" and r["microbench"]["mode"] == "beside"
    assert (r["fault"]["delay_s"], r["fault"]["delay_rank"]) == (0.01, 1)
    assert r["device_layer"]["kind"] == "cpu"


def test_assemble_of_one_step_and_of_a_steady_run():
    one = _assembled(steps=[{"step": 0.2, "forward": 0.05}])
    assert one["phases"]["forward"]["median"] == 0.05 and one["step_time_s"]["median"] == 0.2
    # the phases are serial too: no interval from 3 steps (order statistics would give 75%)
    ph = _assembled()["phases"]["forward"]
    assert ph["ci_lo"] is None and ph["ci_method"].startswith("no interval: 3 value(s)")
    # 40 steps alternating 0.24 / 0.26 s: steady, judged on the step times (the 2 blocks would
    # be too few to judge)
    flat = [{"step": 0.24 + 0.02 * (i % 2), "forward": 0.05} for i in range(40)]
    r = _assembled(steps=flat)
    assert r["steady"] is True and r["steady_state"]["steady"] is True


def test_the_small_edges_of_the_figures():
    # one step: its phases are read from it (there is no second)
    ctx = SimpleNamespace(rank=0, hostname="h")
    one = res.rank_figures(ctx, STEPS[:1], SimpleNamespace(walls=[0.1], steps=1), cpu_s=0.1)
    assert one["phases_median"] == {"forward": 0.03, "sync": 0.02}
    # 2 GB in exactly 1 s is 2 GB/s, to the bit
    probe = {"comm_s": 1.0, "overlap_s": 0.5, "backward_compute_s": 0.8}
    assert res.comm_figures(_ddp(), 2, STEPS, probe, 1.0, 2e9).algbw_GBps == 2.0
    # an interval 10 us wide: to 0.1 us (stats.fmt's digits: two of the width)
    c = CommStats(exposed_s=0.004, exposed_ci_lo=0.003995, exposed_ci_hi=0.004005)
    assert res.exposed_text(c) == "4.0000 [3.9950, 4.0050] ms"
    two = CommStats(exposed_s=0.004, exposed_n=2)
    assert res.exposed_text(two, short=True) == "4 ms (2 probe steps)"


def test_the_summary_s_figures_to_their_digits_and_its_absent_blocks():
    def lines(**changes):
        return res.summarize(_record(**changes)).split("\n")

    # 1.5 s of all-reduce prints as 1500 ms (not 1.5e+03); 1,235,001 B as 1.24 MB (two places)
    comm = {**_result()["comm"], "time_s": 1.5, "bytes_per_step": 1_235_001, "buckets": None}
    out = lines(comm=comm)
    assert out[15] == "gradient sync: 3 collectives/step, 1.24 MB/step"
    assert out[16].startswith("  comm 1500 ms, overlapped with backward 8 ms, exposed")
    ddp = {
        "bucket_caps": {"rule": "r"},
        "buckets": {"sizes_bytes": [1_235_001] * 8, "rebuilt": True},
    }
    assert lines(ddp=ddp)[18].endswith(": " + ", ".join(["1.24"] * 8) + " MB")  # 8: no "..."
    # an IQR of 123.49 ms prints as 123 (3 significant digits)
    step = _summary(0.25, 0.24, 0.26, iqr=0.12349, low=0, high=0)
    assert (
        lines(step_time_s=step)[12]
        == "step" + " " * 22 + "250 [240, 260]" + " " * 7 + "123" + " " * 9 + "0"
    )
    # a straggler half a second behind
    late = {"rank": 1, "by_s": 0.5, "mostly": "x", "significant": True}
    assert lines(straggler=late)[21].startswith("straggler: rank 1, +500.0 ms of work")
    # no comm block, no straggler, no ranks: their lines are absent
    bare = lines(comm=None, straggler=None, per_rank=[])
    assert not [
        x for x in bare if x.startswith(("gradient sync", "straggler", "threads", "per rank"))
    ]
    # ranks without thread counts: none printed (rank 0's), or rank 0's for a mixed run
    per = [
        {"rank": 0, "host": "a", "step_median_s": 0.25},
        {"rank": 1, "host": "b", "step_median_s": 0.25},
    ]
    assert not [x for x in lines(per_rank=per) if x.startswith("threads")]
    mixed = [{**per[0], "threads": _threads()}, per[1]]
    assert lines(per_rank=mixed)[23].endswith("(rank 0; they differ: see per_rank in the record)")


def test_time_budget_of_a_job_that_has_not_run_a_second(monkeypatch):
    monkeypatch.delenv(JOB_START_ENV, raising=False)
    monkeypatch.setattr(res.time, "time", lambda: 1000.0)
    marks = {"start": 1000.0, "setup": 1000.0, "warmup": 1000.0, "window": 1000.0, "probes": 1000.0}
    assert res.time_budget(marks, 0.0).window_share is None  # no job time: no share
    half = res.time_budget({**marks, "start": 999.5}, 0.25)
    assert half.job_s == 0.5 and half.window_share == 0.5


def test_timed_phases_lists_the_named_phases_of_a_record_with_an_extra_one():
    # a phase the record type does not name is kept (phases.extra), not a field: the phase
    # table lists the named ones and does not fail on it
    r = _record(
        phases={"forward": _summary(0.05, 0.048, 0.052), "custom": _summary(0.01, None, None)}
    )
    assert list(res.timed_phases(r.result)) == ["forward"]


def test_assemble_names_a_cuda_device_and_the_slowest_rank_by_wall_clock(monkeypatch):
    named = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: named.append(d) or "H100")
    cuda = SimpleNamespace(type="cuda")
    ctx = SimpleNamespace(world_size=2, torch_device=cuda, hostname="box", backend="nccl")
    cfg = SimpleNamespace(
        batch_size=1, accumulate=1, sync="ddp", optim=SimpleNamespace(name="sgd"),
        precision="fp32", cuda_graphs=False, warmup_steps=1, timing=True,
        profile=SimpleNamespace(enabled=False), probe_steps=1, h2d="blocking",
    )  # fmt: skip
    window = SimpleNamespace(sizes=[1], steps=1, window_s=0.5, describe=lambda: {})
    # no step medians (timing off): the slowest rank is the one with the longest wall clock
    everyone = [
        {"rank": 0, "block_walls_s": [0.5], "step_median_s": None, "wall_s": 0.9},
        {"rank": 1, "block_walls_s": [0.4], "step_median_s": None, "wall_s": 0.7},
    ]
    marks = {"start": 0.0, "setup": 0.0, "warmup": 0.0, "window": 0.0, "probes": 0.0}
    feeder = SimpleNamespace(copies=False, note="")
    r = res.assemble(cfg, ctx, None, feeder, [], everyone, None, window, marks, 1.0, None)
    assert r.device == "cuda" and r.device_name == "H100" and named == [cuda]
    assert r.slowest_rank == 0


def test_assemble_sets_the_sync_beside_the_microbenchmark():
    t = {"median": 0.004, "ci_lo": 0.0038, "ci_hi": 0.0042, "ci_level": 0.95}
    micro = {"mode": "beside", "sizes": [{"bytes": 1_000_000, "calls": 3, "time_s": t}]}
    comm = CommStats(method="m", time_s=0.012, overlap_s=0.004, bytes_per_step=3e6)
    r = _assembled(comm=comm, microbench=micro)
    assert r["comm"]["vs_microbench"] is not None
    assert r["microbench"]["sizes"][0]["bytes"] == 1_000_000
    # without a comm block there is nothing to set beside it
    assert _assembled(microbench=micro).get("comm") is None


def test_assemble_without_step_times_judges_steadiness_on_each_block_s_time_per_step():
    # timing off: 40 blocks of 1..40 steps, each 0.25 s a step; per step the blocks are flat
    # (steady), though the blocks' own walls (and walls x steps) grow with their sizes
    sizes = list(range(1, 41))
    walls = [0.25 * n for n in sizes]
    cfg = SimpleNamespace(
        batch_size=1, accumulate=1, sync="ddp", optim=SimpleNamespace(name="sgd"),
        precision="fp32", cuda_graphs=False, warmup_steps=1, timing=False,
        profile=SimpleNamespace(enabled=False), probe_steps=1, h2d="blocking",
    )  # fmt: skip
    ctx = SimpleNamespace(
        world_size=1, torch_device=torch.device("cpu"), hostname="box", backend="gloo"
    )
    window = SimpleNamespace(sizes=sizes, steps=sum(sizes), window_s=sum(walls), describe=dict)
    everyone = [{"rank": 0, "block_walls_s": walls, "step_median_s": None, "wall_s": sum(walls)}]
    marks = {"start": 0.0, "setup": 0.0, "warmup": 0.0, "window": 0.0, "probes": 0.0}
    feeder = SimpleNamespace(copies=False, note="")
    r = res.assemble(cfg, ctx, None, feeder, [], everyone, None, window, marks, 1.0, None)
    assert r.steady_state.of == "block wall clock per step"
    assert r.steady is True and r.steady_state.drift == pytest.approx(0.0, abs=1e-9)


def test_the_window_lines_of_an_old_record():
    # a record from before blocks were counted: one timed block; no measure block: no window line
    tp = {k: v for k, v in _result()["throughput"].items() if k != "n_blocks"}
    out = res.summarize(_record(throughput=tp, measure=None)).split("\n")
    assert out[4].startswith("            (95% CI; wall clock of 1 timed blocks, slowest rank")
    assert out[6].startswith("steady      yes")
