"""Untimed measurements after the window, so they cannot disturb the throughput figures."""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from comm import bandwidth as bw
from comm.efficiency import call_sizes, versus_sync
from base.record import typed_block
from base.record_types import CommStats, Comparison
from stats import describe


# the fewest exposed-time samples whose median has a 95% interval (tables.entries.EXPOSED_MIN_N)
ENOUGH_PROBES = 6
# exposed communication above this share of the step: the rules need its interval to act on it
DOMINANT = 0.15


def ddp_comm_probe(
    sync,
    train_step,
    n: int,
    step_s: float | None = None,
    budget_s: float = 0.0,
    device: torch.device | None = None,
    settle: int = 0,
) -> dict | None:
    """Median of DDP's runtime stats over n probe steps, and each step's exposed communication (comm
    - overlap), so that n >= 6 gives the exposed time a 95% interval (tasks/train/result.py). DDP
    fills them in at the start of the next forward (synchronising the host with the GPU's timing
    events there, which is why this is not done in the window), so sampling is turned off again at
    the end.

    Adaptive (issue 38): where fewer than ENOUGH_PROBES steps were asked for and the exposed
    communication of those is above DOMINANT of the window's step (`step_s`), the probe takes the
    missing steps when they cost at most
    `budget_s` (diagnose.probe_budget of the window), so a default run whose sync dominates the step
    gets the interval the rules need to name the link or the sync path, instead of a request for
    probe_steps=6. The ranks agree through one all_reduce of a flag, after the window.

    `settle`: steps run before sampling starts, behind a shaped link (verify.refill_steps): the
    pause after the window (its bookkeeping) refills the link's token bucket, and the first probe
    step's all-reduce rode it. Behind 40 Mbit/s (burst then 67 KB, now 5 KB:
    comm.link.default_burst) VGG11-tiny's 71.5 KB all-reduce needs 15 ms of link, yet one benchmark
    run's six probe samples reached down to 0.68 ms: the exposed interval's lower end fell under 15%
    of the step and the run named nothing."""
    if sync.runtime_stats_kind is None or n < 1:
        return None
    for _ in range(max(0, int(settle))):
        train_step()
    sync.enable_runtime_stats()
    samples = []
    for i in range(n + 1):
        train_step()
        if i > 0:  # stats now describe the previous step's backward
            samples.append(sync.runtime_stats())
    more = ENOUGH_PROBES - n
    extended = False
    if more > 0 and step_s:
        exposed = statistics.median(max(0.0, s["comm_s"] - s["overlap_s"]) for s in samples)
        want = torch.tensor(
            [int(exposed > DOMINANT * step_s and more * step_s <= budget_s * (1 + 1e-9))],
            device=device,
        )
        dist.all_reduce(want, op=dist.ReduceOp.MIN)  # every rank, or none
        if want.item():
            for _ in range(more):
                train_step()
                samples.append(sync.runtime_stats())
            extended = True
    sync.disable_runtime_stats()
    out = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
    out["exposed_samples_s"] = [max(0.0, s["comm_s"] - s["overlap_s"]) for s in samples]
    if extended:
        out["method"] = (
            f"DDP runtime stats (reducer timers) over {len(samples)} untimed probe steps "
            f"(probe_steps={n}, "
            f"and {more} more taken because the exposed communication was over {DOMINANT:.0%} of "
            "the step): "
            "time = first bucket all-reduce start to last finish; exposed = time - overlap with "
            "backward "
            "compute"
        )
    return out


def grad_error_probe(sync, criterion, autocast, device_batches, n: int) -> float | None:
    """Relative error ||g_scheme - g_exact|| / ||g_exact|| of the gradient a lossy comm hook
    delivers, against an exact fp32 all-reduce of the same local gradients (same batch, same
    weights), median over n batches. No optimizer step is taken, so the weights do not move."""
    if n < 1:
        return None
    model, params = sync.model, sync.params
    errors = []
    for _ in range(n):
        x, y = next(device_batches)
        for p in params:
            p.grad = None
        with sync.no_sync():
            with autocast():
                loss = criterion(model(x), y)
            loss.backward()
        exact = torch.cat([p.grad.detach().reshape(-1).float() for p in params])
        dist.all_reduce(exact)
        exact /= dist.get_world_size()
        for p in params:
            p.grad = None
        with autocast():
            loss = criterion(model(x), y)
        loss.backward()
        synced = torch.cat([p.grad.detach().reshape(-1).float() for p in params])
        errors.append(((synced - exact).norm() / exact.norm().clamp_min(1e-30)).item())
    for p in params:
        p.grad = None
    return statistics.median(errors)


def comm_microbench(
    cfg,
    sync,
    device: torch.device,
    steps: list[dict],
    comm_stats: dict | None,
    wall_s: float,
    measured_steps: int,
) -> dict | None:
    """The sync's own calls, timed alone on the same ranks, process group and device: an all_reduce
    of each size the sync really sends (DDP: the buckets it built; flat: one buffer; per_param:
    every parameter), 1 warm-up + k timed calls per size, interleaved across the sizes, a barrier
    before each (comm.measure.time_window). This is the VGG11 thread's nccl-tests number, measured
    where the training ran; tasks/train/result.py sets the training's sync time beside it.

    diagnose.microbench: true runs it with diagnose.microbench_iters calls per size; auto (default)
    runs it only when it costs at most diagnose.microbench_budget of the training (window + warm-up
    + probe steps, scaled from the window's wall clock), fitting k to that budget after the warm-up
    pass; false never. Rank 0 decides for all."""
    from comm.measure import (
        time_window,
    )  # here: comm.measure imports tasks.train.timing, which imports this package

    d = cfg.diagnose
    mode = d.microbench
    if mode is False or not sync.communicates or dist.get_world_size() < 2:
        return None
    sizes, dtype, skipped = _sync_sizes(cfg, sync)
    iters, budget_fraction = int(d.microbench_iters), float(d.microbench_budget)
    run_s = wall_s * (cfg.warmup_steps + measured_steps + cfg.probe_steps) / max(measured_steps, 1)
    budget = budget_fraction * run_s
    out = {
        "mode": str(mode).lower(),
        "budget_s": budget,
        "run_estimate_s": run_s,
        "skipped": skipped,
        "timing": "CUDA events on the current stream"
        if device.type == "cuda"
        else "time.perf_counter",
        "method": "all_reduce (SUM) of a zeroed buffer of each size the sync sends, alone on the "
        "same process "
        "group and device, after the window; 1 warm-up + k timed calls per size, the sizes "
        "interleaved call by call, barrier before each; "
        "rank 0's clock",
    }
    if skipped:
        return out
    calls = call_sizes(sizes)
    per_pass = _comm_time_estimate(cfg, steps, comm_stats)
    if mode == "auto" and per_pass is not None and per_pass > budget:
        out["skipped"] = _over_budget(per_pass, budget, budget_fraction)
    out = _agreed(out)
    if out["skipped"]:
        return out
    total = sum(b * n for b, n in calls)
    element = torch.empty((), dtype=dtype).element_size()
    # per_param: also one call of the total; always one call of one element, the per-call latency
    # (with a single bucket the sync's own sizes cannot tell latency from bandwidth: the what-if
    # model needs both)
    sized = calls + ([(total, 0)] if cfg.sync == "per_param" else []) + [(element, 0)]
    buf = torch.zeros(max(b for b, _ in sized) // element, dtype=dtype, device=device)
    timers = [lambda v=buf[: b // element]: dist.all_reduce(v) for b, _ in sized]
    t0 = time.perf_counter()
    for timed in timers:  # the warm-up pass: first-call costs stay out
        time_window(timed, 1, device)
    first = time.perf_counter() - t0
    k = iters if mode is True else min(iters, int((budget - first) / first) if first > 0 else iters)
    k = _agreed({"k": k})["k"]
    if k < 1:
        out["skipped"] = _over_budget(first, budget, budget_fraction)
        return out
    # interleaved: call i of every size before call i + 1 of any, so a neighbour's load that comes
    # and goes during the pass lands on every size alike (timed one size after another, a 2-rank
    # gloo run beside a busy neighbour timed its 4-byte call at 3.55 ms and its 71 KB one at
    # 0.71 ms: a bandwidth the fit could not resolve, so no what-if model for the run)
    samples: list[list[float]] = [[] for _ in timers]
    for _ in range(k):
        for timed, got in zip(timers, samples):
            got.append(time_window(timed, 1, device))
    out.update(
        iters=k,
        warmup=1,
        dtype=str(dtype).removeprefix("torch."),
        cost_s=time.perf_counter() - t0,
        sizes=[_size_row(b, n, s, dist.get_world_size()) for (b, n), s in zip(sized, samples) if n],
        total=_size_row(total, 1, samples[-2], dist.get_world_size())
        if cfg.sync == "per_param"
        else None,
        latency=_size_row(element, 1, samples[-1], dist.get_world_size()),
    )
    return out


def _sync_sizes(cfg, sync) -> tuple[list[int], torch.dtype, str | None]:
    """What one synchronisation sends, call by call, and in which dtype (None sizes with a reason:
    not timed)."""
    dtype = sync.params[0].dtype
    if cfg.sync == "flat":
        return [sum(p.numel() * p.element_size() for p in sync.params)], dtype, None
    if cfg.sync == "per_param":
        return [p.numel() * p.element_size() for p in sync.params], dtype, None
    optim = cfg.optim.name
    if optim == "powersgd":
        return (
            [],
            dtype,
            (
                "optim=powersgd: its all-reduces of P and Q depend on each bucket's matrix shapes "
                "and the "
                "rank; DDP's bucket sizes are not what it sends"
            ),
        )
    if optim in (
        "fp16",
        "bf16",
    ):  # the hook all-reduces each bucket cast to half precision: same elements, 2 bytes
        half = torch.float16 if optim == "fp16" else torch.bfloat16
        return [b // 4 * 2 for b in sync.buckets()], half, None
    return sync.buckets(), dtype, None


def _comm_time_estimate(cfg, steps: list[dict], comm_stats: dict | None) -> float | None:
    """One pass of the sync's calls, from the training: DDP's comm time (an over-estimate: it spans
    backward), else the median sync phase."""
    if comm_stats:
        return comm_stats.get("comm_s")
    sync_times = sorted(s["sync"] for s in steps if "sync" in s)
    return sync_times[len(sync_times) // 2] if sync_times else None


def _over_budget(seconds: float, budget: float, fraction: float) -> str:
    return (
        f"one pass of the sync's calls takes ~{seconds:.3g} s; with a warm-up pass and timed calls "
        "it would cost "
        f"more than diagnose.microbench_budget={fraction:g} of this run ({budget:.3g} s). "
        "diagnose.microbench=true runs it anyway"
    )


def _agreed(obj: dict) -> dict:
    """Rank 0's decision, on every rank: the probe is collective, so all ranks must take the same
    branch."""
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _size_row(nbytes: int, calls: int, samples: list[float], world_size: int) -> dict:
    t = describe(samples)
    return {
        "bytes": nbytes,
        "calls": calls,
        "time_s": t,
        "busbw_GBps": bw.busbw("all_reduce", nbytes, t["median"], world_size),
    }


def versus_microbench(comm: CommStats, microbench: dict, world_size: int) -> Comparison | None:
    """The sync set beside the on-rank microbenchmark of its own calls
    (result.comm.vs_microbench)."""
    if not microbench.get("sizes"):
        return None
    calls = [
        {
            "bytes": r["bytes"],
            "calls": r["calls"],
            "time_s": r["time_s"]["median"],
            **_interval(r["time_s"]),
        }
        for r in microbench["sizes"]
    ]
    vs = typed_block(
        Comparison,
        versus_sync(
            "on-rank microbenchmark",
            calls,
            comm.time_s,
            comm.bytes_per_step,
            world_size,
            comm.method,
            comm.overlap_s,
        ),
        "result.comm.vs_microbench",
    )
    if vs is not None and microbench.get(
        "total"
    ):  # the thread's comparison: the whole gradient in one call
        vs.one_call_of_total_s = microbench["total"]["time_s"]["median"]
    return vs


def _interval(t: dict) -> dict:
    """A per-size interval only where it has some coverage (3+ calls: 75% for the median)."""
    ok = t.get("ci_level", 0) >= 0.75
    return {"ci_lo": t["ci_lo"] if ok else None, "ci_hi": t["ci_hi"] if ok else None}
