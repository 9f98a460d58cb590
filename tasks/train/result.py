"""What a task=train run hands in: per-rank figures gathered on rank 0, the communication figures,
the run record's
`result` (a TrainResult, built here whole), and the summary printed from a record. Kept apart from
the loop so that the loop reads top to bottom as the measurement it is."""

from __future__ import annotations

import math
import os
import time

import numpy as np
import torch

from comm.bandwidth import bus_factor
from base.context import JOB_START_ENV
from base.record import Record, train_headline, typed_block
from base.record_types import (
    Accuracy,
    Blocks,
    CommStats,
    DdpInfo,
    DeviceLayer,
    Fault,
    GradReady,
    H2d,
    Microbench,
    PhaseSeries,
    PhaseSummaries,
    PrecisionFlags,
    Series,
    SteadyState,
    Summary,
    Throughput,
    TimeBudget,
    TrainRank,
    TrainResult,
)
from stats import block_throughput, describe, fmt_ci, steady_state
from stats.fmt import ms
from stats.within import RATE_MIN_BLOCKS


def thread_counts() -> dict:
    """This rank's CPU threading: on a 2-core machine the setting alone moved the same loop's speed
    by 35%."""
    return {
        "intra_op": torch.get_num_threads(),
        "inter_op": torch.get_num_interop_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    }


def rank_figures(ctx, steps: list[dict], window, cpu_s: float) -> dict:
    """cpu_s: this rank's CPU time over the window (tasks/train/stragglers.cpu_usage, the one CPU
    reading)."""
    step_times = [s["step"] for s in steps]
    names = [p for p in (steps[0] if steps else {}) if p != "step"]
    wall = sum(window.walls)
    return {
        "rank": ctx.rank,
        "host": ctx.hostname,
        "wall_s": wall,
        "steps_per_s": window.steps / wall,
        "step_median_s": float(np.median(step_times)) if step_times else None,
        "step_p90_s": float(np.percentile(step_times, 90)) if step_times else None,
        "phases_median": {n: float(np.median([s[n] for s in steps])) for n in names},
        "block_walls_s": list(window.walls),
        "cpu_s_per_step": cpu_s
        / window.steps,  # all of this rank's threads: > wall per step = busy helpers
        "threads": thread_counts(),
        # every rank's steps, not only rank 0's: a rank that stalls every N steps (evaluation,
        # a checkpoint) is seen in its own series (diagnosis/rules.py, the hiccup rule)
        "series": {"step_time_s": step_times, "phases": {n: [s[n] for s in steps] for n in names}},
    }


def throughput_of(
    tp: dict, per_step: float | None, wall_s: float, walls: list, sizes: list, basis: str
) -> Throughput:
    """The throughput block of stats.block_throughput's figures, in steps/s and samples/s (x
    per_step, the samples of one step; None where unknown): task=train's and task=script's."""

    def scale(v):
        return None if v is None or per_step is None else v * per_step

    return Throughput(
        wall_s=wall_s,
        steps_per_s=tp["steps_per_s"],
        ci_lo=tp["ci_lo"],
        ci_hi=tp["ci_hi"],
        samples_per_s=scale(tp["steps_per_s"]),
        samples_ci_lo=scale(tp["ci_lo"]),
        samples_ci_hi=scale(tp["ci_hi"]),
        ci_level=0.95,
        n_blocks=tp["n_blocks"],
        method=tp["method"],
        lag1=tp["lag1"],
        n_eff=tp["n_eff"],
        batches=tp["batches"],
        blocks=Blocks(walls_s=walls, steps=sizes),
        basis=basis,
    )


def comm_figures(
    described: DdpInfo | None,
    world_size: int,
    steps: list[dict],
    probe: dict | None,
    collectives: float,
    nbytes: float,
) -> CommStats:
    """exposed_s with its 95% interval where its samples give one (exposed_ci_*; exposed_n samples):
    DDP's comes from probe_steps untimed steps, one by default (a single sample: the tables say so,
    and the diagnosis does not act on it alone); the explicit strategies' from every measured step's
    sync phase. described: DDP's own report (None for the explicit strategies)."""
    sync_times = [s["sync"] for s in steps if "sync" in s]
    buckets = described.buckets if described is not None else None  # DDP only
    exposed = None
    if probe is not None:  # DDP: its runtime stats from the probe steps
        time_s, overlap_s = probe["comm_s"], probe["overlap_s"]
        exposed = probe.get("exposed_samples_s") or [max(0.0, time_s - overlap_s)]
        backward_compute_s = probe["backward_compute_s"]
        method = probe.get("method") or (
            "DDP runtime stats (reducer timers) over the untimed probe steps: time = "
            "first bucket all-reduce start to last finish; exposed = time - overlap "
            "with backward compute"
        )
    elif sync_times and buckets is None:  # explicit strategies: the sync phase is all communication
        time_s, exposed = float(np.median(sync_times)), sync_times
        overlap_s, backward_compute_s = 0.0, None
        method = (
            "median sync phase of the measured steps (no overlap: all-reduce runs after backward)"
        )
    else:  # nothing timed the communication: say so rather than print 0
        time_s = overlap_s = backward_compute_s = None
        method = "not measured: " + (
            "probe_steps=0, and only DDP's runtime stats in the probe steps time its "
            "all-reduce (it runs inside backward)"
            if buckets is not None
            else "timing=false, and the sync phase times the explicit strategies"
        )
    algbw = nbytes / time_s / 1e9 if time_s else None
    ex = describe(exposed) if exposed else None
    ci = ex is not None and ex["ci_level"] >= 0.95
    return CommStats(
        method=method,
        bytes_per_step=nbytes,
        collectives_per_step=collectives,
        time_s=time_s,
        overlap_s=overlap_s,
        exposed_s=ex["median"] if ex else None,
        exposed_ci_lo=ex["ci_lo"] if ci else None,
        exposed_ci_hi=ex["ci_hi"] if ci else None,
        exposed_n=ex["n"] if ex else None,
        backward_compute_s=backward_compute_s,
        algbw_GBps=algbw,
        busbw_GBps=algbw * bus_factor("all_reduce", world_size) if algbw is not None else None,
        buckets=buckets,
    )


def assemble(
    cfg,
    ctx,
    described: DdpInfo | None,
    feeder,
    steps,
    everyone,
    comm: CommStats | None,
    window,
    marks: dict,
    final_loss,
    grad_error,
    *,
    forward_dtype: str | None = None,
    precision_flags: PrecisionFlags | None = None,
    grad_ready: dict | None = None,
    microbench: dict | None = None,
    fault: Fault | None = None,
    device_layer: DeviceLayer | None = None,
) -> TrainResult:
    """Rank 0's TrainResult from what the loop measured and gathered (everyone: each rank's
    rank_figures)."""
    from tasks.train.probes import versus_microbench
    from tasks.train.stragglers import find_straggler

    global_batch = cfg.batch_size * ctx.world_size
    per_step = global_batch * cfg.accumulate
    # the job is as fast as its slowest rank: every block started at a barrier, so take each block's
    # slowest rank
    walls = [max(r["block_walls_s"][i] for r in everyone) for i in range(len(window.sizes))]
    tp = block_throughput(walls, window.sizes)
    step_times = [s["step"] for s in steps]
    names = [p for p in steps[0] if p != "step"] if steps else []
    steady = steady_state(step_times if steps else [w / n for w, n in zip(walls, window.sizes)])
    steady["of"] = "step times (rank 0)" if steps else "block wall clock per step"
    slowest = max(everyone, key=lambda r: r["step_median_s"] or r["wall_s"])["rank"]
    device = ctx.torch_device
    device_name = (
        torch.cuda.get_device_name(device) if device.type == "cuda" else f"{ctx.hostname} CPU"
    )
    micro = typed_block(Microbench, microbench, "result.microbench")
    if comm is not None and microbench is not None:
        comm.vs_microbench = versus_microbench(comm, microbench, ctx.world_size)
    throughput = throughput_of(
        tp,
        per_step,
        sum(walls),
        walls,
        list(window.sizes),
        "wall clock of each timed block on its slowest rank",
    )
    step_time = (
        typed_block(Summary, describe(step_times, serial_series=True), "result.step_time_s")
        if steps
        else None
    )
    # the time per step the throughput implies: what every rank spends
    step_s = (
        throughput.wall_s / window.steps
        if throughput.wall_s and window.steps
        else (step_time.median if step_time is not None else None)
    )
    result = TrainResult(
        device=device.type,
        device_name=device_name,
        world_size=ctx.world_size,
        backend=ctx.backend,
        sync=cfg.sync,
        optim=cfg.optim.name,
        bucket_mb=described.bucket_cap_mb if described is not None else None,
        precision=cfg.precision,
        forward_dtype=forward_dtype,
        precision_flags=precision_flags,
        cuda_graphs=bool(cfg.cuda_graphs),
        batch_per_rank=cfg.batch_size,
        global_batch=global_batch,
        accumulate=cfg.accumulate,
        effective_batch=per_step,
        warmup_steps=cfg.warmup_steps,
        steps=window.steps,
        timing=bool(cfg.timing),
        profiled=bool(cfg.profile.enabled),
        measure=window.describe(),
        throughput=throughput,
        step_time_s=step_time,
        phases=typed_block(
            PhaseSummaries,
            {n: describe([s[n] for s in steps], serial_series=True) for n in names},
            "result.phases",
        )
        if steps
        else None,  # keyed by the phases timed (graph_replay)
        steady=steady["steady"],
        steady_state=typed_block(SteadyState, steady, "result.steady_state"),
        per_rank=[
            typed_block(TrainRank, r, f"result.per_rank[{i}]") for i, r in enumerate(everyone)
        ],
        slowest_rank=slowest,
        comm=comm,
        ddp=described,
        accuracy=Accuracy(
            final_loss=final_loss,
            grad_rel_error=grad_error,
            grad_error_steps=cfg.probe_steps if grad_error is not None else 0,
        ),
        h2d=H2d(mode=cfg.h2d, copies=feeder.copies, note=feeder.note),
        time_budget=time_budget(marks, window.window_s),
        series=Series(
            step_time_s=step_times,
            phases=typed_block(
                PhaseSeries, {n: [s[n] for s in steps] for n in names}, "result.series"
            ),
        ),
        microbench=micro,
        straggler=find_straggler(everyone, step_s),
        fault=fault,
        device_layer=device_layer,
        grad_ready=typed_block(GradReady, grad_ready, "result.grad_ready"),
    )
    result.headline = train_headline(result)
    if not math.isfinite(final_loss):  # printed by job.finalise and kept in the record
        result.warnings = [
            f"the training loss is {final_loss} (not finite): the data or the settings (lr, "
            f"precision) produce NaN/inf. The timings stand; the loss and gradients are not "
            f"meaningful."
        ]
    return result


def time_budget(marks: dict, window_s: float) -> TimeBudget:
    """Where this job's wall time went, rank 0's clock. The job starts at its process's start for
    the first job of a process (imports included; /proc gives it to about a second), else when Hydra
    started the job."""
    now = time.time()
    start = float(os.environ.get(JOB_START_ENV) or marks["start"])
    job = now - start
    return TimeBudget(
        job_s=job,
        before_task_s=marks["start"] - start,
        setup_s=marks["setup"] - marks["start"],
        warmup_s=marks["warmup"] - marks["setup"],
        window_s=window_s,
        probes_s=marks["probes"] - marks["window"],
        window_share=window_s / job if job > 0 else None,
    )


def _ms_ci(d: Summary) -> str:
    """median [CI] in ms, digits as the interval allows; no interval (fewer than 10 steps) is marked
    *; an old record's order-statistic interval that cannot reach 95% (n <= 5) likewise."""
    if d.ci_lo is None:
        return fmt_ci(d.median * 1e3, None, None) + "*"
    text = fmt_ci(d.median * 1e3, d.ci_lo * 1e3, d.ci_hi * 1e3)
    return text + ("*" if (d.ci_level or 1) < 0.95 else "")


def summarize_window(r: TrainResult) -> list[str]:
    """Throughput with its interval, how the window ended, steadiness and the phase table (with
    CIs)."""
    tp, m = r.throughput, r.measure

    def unit(v, lo, hi, u):
        return (
            fmt_ci(v, lo, hi, u)
            if lo is not None
            else f"{v:.4g} {u} (no CI under {RATE_MIN_BLOCKS} blocks)"
        )

    lines = [
        f"throughput  {unit(tp.steps_per_s, tp.ci_lo, tp.ci_hi, 'steps/s')}   "
        f"{unit(tp.samples_per_s, tp.samples_ci_lo, tp.samples_ci_hi, 'samples/s')}",
        f"            (95% CI; wall clock of {tp.n_blocks if tp.has('n_blocks') else 1} timed "
        "blocks, slowest rank per "
        f"block; {tp.method or ''})",
    ]
    if tp.lag1 is not None:
        n_eff = f"{tp.n_eff:.0f}" if tp.n_eff is not None else "n/a"
        lines.append(
            f"            serial correlation of the blocks: lag-1 {tp.lag1:.2f}, worth ~{n_eff} "
            f"independent blocks of {tp.n_blocks}; one run's interval holds its own noise only "
            "(repeats add the spread between runs)"
        )
    if m is not None and m.to_dict():
        each = "1 step" if m.block_steps == 1 else f"<= {m.block_steps} steps"
        how = (
            f"window      {m.steps} steps in {m.blocks} timed blocks of {each}, "
            f"measure.policy={m.policy}"
        )
        if m.policy == "adaptive":
            half = "n/a" if m.rel_ci_halfwidth is None else f"+-{m.rel_ci_halfwidth:.1%}"
            how += (
                f": median step known to {half} on rank 0 (target +-{m.rel_ci_target:.1%} on every "
                "rank); "
                + (
                    "target reached"
                    if m.target_reached
                    else f"stopped by {m.stopped_by}: TARGET NOT REACHED"
                )
            )
        lines.append(how)
    st = r.steady_state
    if st is not None and st.steady is False:
        lines.append(
            f"WARNING     {st.reason} ({st.of}): warm-up was not enough (raise warmup_steps) or "
            "the "
            f"machine changed during the window; steady: false"
        )
    elif st is not None and st.to_dict():
        verdict = "yes" if st.steady else ("unknown" if st.drift is not None else "untested")
        lines.append(f"steady      {verdict}: {st.reason} ({st.of})")
    phases = timed_phases(r)
    if phases:
        step = r.step_time_s
        lines += [
            "",
            f"{'phase':<12}{'median ms [95% CI]':>28}{'IQR ms':>10}{'outliers':>10}{'share':>8}   "
            "(rank 0)",
        ]
        starred = False  # the footnote explains * wherever a row has one, a phase's too
        for name, d in [*phases.items(), ("step", step)]:
            share = f"{d.median / step.median:>8.1%}" if step.median and name != "step" else ""
            outliers = (d.outliers_low or 0) + (d.outliers_high or 0)
            text = _ms_ci(d)
            starred = starred or text.endswith("*")
            lines.append(f"{name:<12}{text:>28}{d.iqr * 1e3:>10.3g}{outliers:>10}{share}")
        lines.append(
            f"(median CI: {step.ci_method}; outliers: beyond Tukey's fences, 1.5 IQR"
            + ("; * no 95% interval: fewer than 10 steps)" if starred else ")")
        )
    return lines


def timed_phases(r: TrainResult) -> dict[str, Summary]:
    """The phases the record timed, in its order (a phase never timed is absent)."""
    if r.phases is None:
        return {}
    return {
        name: getattr(r.phases, name)
        for name in r.phases.to_dict()
        if getattr(r.phases, name, None) is not None
    }


def exposed_text(c: CommStats, short: bool = False) -> str:
    """The exposed time with its 95% interval, or how many samples it rests on when they give none
    (short: without the hint). The same digits on the console, in train.log and in the findings'
    evidence (stats.fmt.ms)."""
    if c.exposed_s is None:
        return "n/a"
    if c.exposed_ci_lo is not None:
        return fmt_ci(c.exposed_s * 1e3, c.exposed_ci_lo * 1e3, c.exposed_ci_hi * 1e3, "ms")
    n = c.exposed_n
    if n is None:
        return f"{ms(c.exposed_s)} ms"
    return f"{ms(c.exposed_s)} ms ({n} probe step{'s' if n > 1 else ''}" + (
        ")" if short else ": no interval; probe_steps=6 gives one)"
    )


MOSTLY = {"outside": "outside the timed phases"}


def summarize(record: Record) -> str:
    r: TrainResult = record.result
    lines = [
        f"task=train  model={record.setting('model.name')}  sync={r.sync}  optim={r.optim}  "
        f"bucket={r.bucket_mb}  world_size={r.world_size}  backend={r.backend}  "
        f"device={r.device_name}",
        f"batch/rank={r.batch_per_rank}  global={r.global_batch}  accumulate={r.accumulate}  "
        f"effective={r.effective_batch}  warm-up={r.warmup_steps}  measured={r.steps}",
        "",
        *summarize_window(r),
    ]
    c = r.comm
    if c is not None and c.to_dict():
        f = lambda v, scale=1e3: (  # noqa: E731 - a local formatter
            "n/a" if v is None else (ms(v) if scale == 1e3 else f"{v * scale:.3g}")
        )
        lines += [
            "",
            f"gradient sync: {c.collectives_per_step:.0f} collectives/step, "
            f"{c.bytes_per_step / 1e6:.3g} MB/step"
            + (
                f", {c.buckets.count} buckets"
                if c.buckets is not None and c.buckets.to_dict()
                else ""
            ),
            f"  comm {f(c.time_s)} ms, overlapped with backward {f(c.overlap_s)} ms, exposed "
            f"{exposed_text(c)}"
            + (
                f", backward compute {f(c.backward_compute_s)} ms"
                if c.backward_compute_s is not None
                else ""
            ),
            f"  algbw {f(c.algbw_GBps, 1)} GB/s  busbw {f(c.busbw_GBps, 1)} GB/s  ({c.method})",
        ]
        caps = r.ddp.bucket_caps if r.ddp is not None else None
        built = r.ddp.buckets if r.ddp is not None else None
        if caps is not None and caps.to_dict():
            sizes = (built.sizes_bytes if built is not None else None) or []
            shown = ", ".join(f"{b / 1e6:.3g}" for b in sizes[:8]) + (
                ", ..." if len(sizes) > 8 else ""
            )
            how = (
                "as built after DDP's rebuild, in all-reduce order"
                if built is not None and built.rebuilt
                else "as first built (DDP had not rebuilt them yet)"
            )
            lines.append(f"  buckets: {caps.rule}; {how}: {shown} MB")
    acc = r.accuracy
    lines.append("")
    if acc is not None and acc.final_loss is not None:  # task=script: the script's loss is its own
        lines.append(
            f"loss {acc.final_loss:.4f}"
            + (
                f"   gradient rel. error vs exact fp32 all-reduce {acc.grad_rel_error:.3e}"
                if acc.grad_rel_error is not None
                else ""
            )
        )
    per = r.per_rank or []
    if len(per) > 1:
        lines.append(
            "per rank: "
            + "  ".join(
                f"r{p.rank}@{p.host} {p.step_median_s * 1e3:.1f} ms"
                for p in per
                if p.step_median_s is not None
            )
            + f"   slowest: rank {r.slowest_rank}"
        )
    s = r.straggler
    if s is not None and s.to_dict():  # the rank the others wait for (tasks/train/stragglers.py)
        lines.append(
            f"straggler: rank {s.rank}, {s.by_s * 1e3:+.1f} ms of work between collectives per "
            "step "
            f"against the others' median (mostly {MOSTLY.get(s.mostly, s.mostly)})"
            + {
                True: "",
                False: ", inside the ranks' intervals: not significant",
                None: ", no interval",
            }[s.significant]
        )
    lines.append(f"h2d: {r.h2d.mode} - {r.h2d.note}")
    threads = {str(p.threads.to_dict() if p.threads is not None else None) for p in per}
    if per and per[0].threads is not None and per[0].threads.to_dict():
        t = per[0].threads
        lines.append(
            f"threads: intra-op {t.intra_op}, inter-op {t.inter_op}, "
            f"OMP_NUM_THREADS={t.OMP_NUM_THREADS}"
            + (
                " (every rank)"
                if len(threads) == 1
                else " (rank 0; they differ: see per_rank in the record)"
            )
        )
    b = r.time_budget
    if b is not None and b.window_share is not None:
        lines.append(
            f"time: measured window {b.window_s:.1f} s of {b.job_s:.1f} s job "
            f"({b.window_share:.0%}); start {b.before_task_s:.1f} s, set-up {b.setup_s:.1f} s, "
            f"warm-up {b.warmup_s:.1f} s, probes {b.probes_s:.1f} s"
        )
    if b is not None and b.launcher_cpu_share is not None:
        lines.append(
            f"launcher: {b.launcher_cpu_s:.2f} CPU s over the {b.launcher_wall_s:.1f} s launch "
            f"({b.launcher_cpu_share:.1%} of one core on average: the parent's elastic agent and "
            "heartbeat "
            "watch)"
        )
    return "\n".join(lines)
