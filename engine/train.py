"""task=train: a measured data-parallel training step, phase by phase.

    data -> h2d -> forward -> backward (DDP's all-reduce overlaps it) -> sync (explicit strategies) -> optimizer

Warm-up steps run first; the measured window is bracketed by one device sync and a barrier at each end, and nothing
inside it waits on the GPU. Untimed probe steps after the window read DDP's runtime statistics (communication time and
its overlap with backward) and, for lossy schemes, the gradient error against an exact fp32 all-reduce."""
from __future__ import annotations

import time
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn
from tqdm import tqdm

from data import batches, build_loader
from engine.comm_counter import CollectiveCounter
from engine.h2d import make_feeder
from engine.probes import ddp_comm_probe, grad_error_probe
from engine.sync import make_sync
from engine.timing import PhaseTimer, device_sync, stats
from models import build_model


def run(ctx) -> dict | None:
    cfg = ctx.cfg
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank (the explicit strategies rely on it)
    set_precision(cfg.precision)
    model = build_model(cfg.model, cfg.data.image_size).to(ctx.device)
    sync = make_sync(cfg, model, ctx.device)
    model = sync.model
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.solver.lr, momentum=cfg.solver.momentum)
    criterion = nn.CrossEntropyLoss()
    pin = ctx.device.type == "cuda" and (cfg.data.pin_memory or cfg.h2d != "blocking")
    host_batches = batches(build_loader(cfg, ctx.rank, ctx.world_size, pin_memory=pin))
    feeder = make_feeder(cfg.h2d, ctx.device)
    timer = PhaseTimer(ctx.device, enabled=cfg.timing, nvtx=cfg.profile.enabled)
    autocast = autocast_for(cfg.precision, ctx.device)
    counter = CollectiveCounter().install()
    K = cfg.accumulate

    def train_step():
        """One optimizer step: K micro-batches, gradients synchronised on the last one only."""
        timer.start_step()
        for micro in range(K):
            with timer.phase("data"):
                batch = next(host_batches)
            with timer.phase("h2d"):
                x, y = feeder.to_device(batch)
            with nullcontext() if micro == K - 1 else sync.no_sync():
                with timer.phase("forward"), autocast():
                    loss = criterion(model(x), y) / K
                with timer.phase("backward"):
                    loss.backward()
        with timer.phase("sync"):
            sync.after_backward()
        with timer.phase("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return loss.detach()  # of the last micro-batch, divided by K (undone once, after the window)

    if cfg.cuda_graphs:
        from engine.cuda_graphs import GraphedStep

        train_step = GraphedStep(model, optimizer, criterion, autocast, host_batches, feeder, timer, ctx.device)

    bar = tqdm(total=cfg.warmup_steps + cfg.steps, desc="warm-up", disable=not ctx.is_main, mininterval=1.0)
    for i in range(cfg.warmup_steps):
        maybe_fail(cfg, ctx.rank, i)
        train_step()
        bar.update()

    # ---- measured window: one device sync and a barrier at each end, none inside ----
    device_sync(ctx.device)
    dist.barrier()
    timer.reset()
    counter.start()
    losses = []
    bar.set_description("measured")
    with profiler(cfg, ctx) as prof:
        t0 = time.perf_counter()
        for i in range(cfg.warmup_steps, cfg.warmup_steps + cfg.steps):
            maybe_fail(cfg, ctx.rank, i)
            losses.append(train_step())
            prof.step()
            bar.update()
        device_sync(ctx.device)
        wall = time.perf_counter() - t0
    calls, py_bytes = counter.stop()
    bar.close()
    steps = timer.durations()
    timer.enabled = False

    # ---- untimed probes ----
    probe_batches = (feeder.to_device(batch) for batch in host_batches)
    comm_stats = ddp_comm_probe(sync, train_step, cfg.probe_steps) if not cfg.cuda_graphs else None
    grad_error = grad_error_probe(sync, criterion, autocast, probe_batches, cfg.probe_steps) \
        if cfg.sync == "ddp" and cfg.optim.name != "none" and not cfg.cuda_graphs else None
    counter.uninstall()
    with torch.no_grad(), autocast():  # what precision= really did to the forward pass
        forward_dtype = str(model(next(probe_batches)[0]).dtype).removeprefix("torch.")

    final_loss = torch.stack(losses).float().mean() * K
    dist.all_reduce(final_loss)
    mine = rank_figures(ctx, steps, wall)
    everyone = [None] * ctx.world_size
    dist.all_gather_object(everyone, mine)
    if not ctx.is_main:
        return None

    builtin_calls, builtin_bytes = sync.builtin_comm_per_sync()
    comm = None
    if sync.communicates:
        comm = comm_figures(
            sync, ctx.world_size, steps, comm_stats,
            collectives=calls / cfg.steps + builtin_calls, nbytes=py_bytes / cfg.steps + builtin_bytes,
        )
    result = assemble(cfg, ctx, sync, feeder, steps, everyone, comm,
                      final_loss=final_loss.item() / ctx.world_size, grad_error=grad_error)
    result["forward_dtype"] = forward_dtype
    return result


def maybe_fail(cfg, rank: int, step: int) -> None:
    if cfg.fault.rank is not None and rank == cfg.fault.rank and step == cfg.fault.step:
        raise RuntimeError(f"fault injected on rank {rank} at step {step} (fault.rank={cfg.fault.rank})")


def set_precision(precision: str) -> None:
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def autocast_for(precision: str, device: torch.device):
    if precision != "bf16":
        return nullcontext
    # cache off: a cached cast would be baked into a CUDA graph capture
    return lambda: torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False)


class _NoProfiler:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def step(self):
        pass


def profiler(cfg, ctx):
    """torch.profiler over a wait/warm-up/active schedule, one Chrome trace per rank; on GPU also the CUDA profiler
    API range, so `nsys profile --capture-range=cudaProfilerApi` captures the measured window."""
    if not cfg.profile.enabled:
        return _NoProfiler()
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device.type == "cuda" else [])
    trace = ctx.rank_file("trace", ".json")

    class _Profiled(profile):
        def __enter__(self):
            if ctx.device.type == "cuda":
                torch.cuda.profiler.start()
            return super().__enter__()

        def __exit__(self, *exc):
            if ctx.device.type == "cuda":
                torch.cuda.profiler.stop()
            return super().__exit__(*exc)

    p = cfg.profile
    return _Profiled(
        activities=activities,
        schedule=schedule(wait=p.wait, warmup=p.warmup, active=p.active, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(trace)),
        record_shapes=False,
    )


def rank_figures(ctx, steps: list[dict], wall: float) -> dict:
    step_times = [s["step"] for s in steps]
    st = stats(step_times) or {}
    names = [p for p in (steps[0] if steps else {}) if p != "step"]
    return {
        "rank": ctx.rank,
        "host": ctx.hostname,
        "wall_s": wall,
        "steps_per_s": len(steps) / wall if steps else None,
        "step_median_s": st.get("median"),
        "step_p90_s": st.get("p90"),
        "phases_median": {n: stats([s[n] for s in steps])["median"] for n in names},
    }


def comm_figures(sync, world_size: int, steps: list[dict], probe: dict | None, collectives: float, nbytes: float) -> dict:
    if probe is not None:  # DDP: its runtime stats from the probe steps
        time_s, overlap_s = probe["comm_s"], probe["overlap_s"]
        exposed_s = max(0.0, time_s - overlap_s)
        backward_compute_s = probe["backward_compute_s"]
        method = ("DDP runtime stats (reducer timers) over the untimed probe steps: time = first bucket all-reduce "
                  "start to last finish; exposed = time - overlap with backward compute")
    else:  # explicit strategies: the sync phase is all communication and none of it is hidden
        sync_times = [s["sync"] for s in steps]
        time_s = stats(sync_times)["median"] if sync_times else None
        overlap_s, exposed_s, backward_compute_s = 0.0, time_s, None
        method = "median sync phase of the measured steps (no overlap: all-reduce runs after backward)"
    algbw = nbytes / time_s / 1e9 if time_s else None
    sizes = sync.buckets() if hasattr(sync, "buckets") else None  # DDP only
    return {
        "bytes_per_step": nbytes,
        "collectives_per_step": collectives,
        "time_s": time_s,
        "overlap_s": overlap_s,
        "exposed_s": exposed_s,
        "backward_compute_s": backward_compute_s,
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * 2 * (world_size - 1) / world_size if algbw is not None else None,
        "method": method,
        "buckets": {"count": len(sizes), "sizes_bytes": sizes} if sizes else None,
    }


def assemble(cfg, ctx, sync, feeder, steps, everyone, comm, final_loss, grad_error) -> dict:
    walls = [r["wall_s"] for r in everyone]
    wall = max(walls)  # the job is as fast as its slowest rank
    global_batch = cfg.batch_size * ctx.world_size
    steps_per_s = cfg.steps / wall
    step_time = stats([s["step"] for s in steps]) if steps else None
    phases = None
    if steps:
        names = [p for p in steps[0] if p != "step"]
        phases = {n: stats([s[n] for s in steps]) for n in names}
    slowest = max(everyone, key=lambda r: r["step_median_s"] or r["wall_s"])["rank"]
    device_name = torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else f"{ctx.hostname} CPU"
    result = {
        "device": ctx.device.type,
        "device_name": device_name,
        "world_size": ctx.world_size,
        "backend": ctx.backend,
        "sync": cfg.sync,
        "optim": cfg.optim.name,
        "bucket_mb": float(cfg.bucket) if cfg.sync == "ddp" else None,
        "precision": cfg.precision,
        "cuda_graphs": bool(cfg.cuda_graphs),
        "batch_per_rank": cfg.batch_size,
        "global_batch": global_batch,
        "accumulate": cfg.accumulate,
        "effective_batch": global_batch * cfg.accumulate,
        "warmup_steps": cfg.warmup_steps,
        "steps": cfg.steps,
        "timing": bool(cfg.timing),
        "profiled": bool(cfg.profile.enabled),
        "throughput": {"wall_s": wall, "steps_per_s": steps_per_s,
                       "samples_per_s": steps_per_s * global_batch * cfg.accumulate},
        "step_time_s": step_time,
        "phases": phases,
        "per_rank": everyone,
        "slowest_rank": slowest,
        "comm": comm,
        "ddp": sync.describe() or None,
        "accuracy": {"final_loss": final_loss, "grad_rel_error": grad_error,
                     "grad_error_steps": cfg.probe_steps if grad_error is not None else 0},
        "h2d": {"mode": cfg.h2d, "copies": feeder.copies, "note": feeder.note},
        "series": {"step_time_s": [s["step"] for s in steps],
                   "phases": {n: [s[n] for s in steps] for n in (steps[0] if steps else {}) if n != "step"}},
    }
    result["headline"] = headline(result)
    return result


def headline(r: dict) -> dict:
    ms = lambda s: None if s is None else round(s * 1e3, 3)  # noqa: E731
    comm = r["comm"] or {}
    return {
        "steps/s": round(r["throughput"]["steps_per_s"], 4),
        "samples/s": round(r["throughput"]["samples_per_s"], 2),
        "step median ms": ms((r["step_time_s"] or {}).get("median")),
        "exposed comm ms": ms(comm.get("exposed_s")),
        "MB/step": None if not comm else round(comm["bytes_per_step"] / 1e6, 3),
        "grad rel err": r["accuracy"]["grad_rel_error"],
        "loss": round(r["accuracy"]["final_loss"], 4),
    }


def summarize(record: dict) -> str:
    r = record["result"]
    lines = [
        f"task=train  model={record['config']['model']['name']}  sync={r['sync']}  optim={r['optim']}  "
        f"bucket={r['bucket_mb']}  world_size={r['world_size']}  backend={r['backend']}  device={r['device_name']}",
        f"batch/rank={r['batch_per_rank']}  global={r['global_batch']}  accumulate={r['accumulate']}  "
        f"effective={r['effective_batch']}  warm-up={r['warmup_steps']}  measured={r['steps']}",
        "",
        f"throughput  {r['throughput']['steps_per_s']:.3f} steps/s   {r['throughput']['samples_per_s']:.1f} samples/s"
        f"   (wall clock of the measured window, slowest rank)",
    ]
    if r["phases"]:
        step = r["step_time_s"]
        lines += ["", f"{'phase':<12}{'median ms':>12}{'p90 ms':>12}{'share':>8}   (rank 0)"]
        for name, s in r["phases"].items():
            share = s["median"] / step["median"] if step["median"] else 0.0
            lines.append(f"{name:<12}{s['median'] * 1e3:>12.2f}{s['p90'] * 1e3:>12.2f}{share:>8.1%}")
        lines.append(f"{'step':<12}{step['median'] * 1e3:>12.2f}{step['p90'] * 1e3:>12.2f}")
    c = r["comm"]
    if c:
        f = lambda v, scale=1e3: "n/a" if v is None else f"{v * scale:.2f}"  # noqa: E731
        lines += [
            "",
            f"gradient sync: {c['collectives_per_step']:.0f} collectives/step, {c['bytes_per_step'] / 1e6:.2f} MB/step"
            + (f", {c['buckets']['count']} buckets" if c.get("buckets") else ""),
            f"  comm {f(c['time_s'])} ms, overlapped with backward {f(c['overlap_s'])} ms, exposed {f(c['exposed_s'])} ms"
            + (f", backward compute {f(c['backward_compute_s'])} ms" if c["backward_compute_s"] is not None else ""),
            f"  algbw {f(c['algbw_GBps'], 1)} GB/s  busbw {f(c['busbw_GBps'], 1)} GB/s  ({c['method']})",
        ]
    acc = r["accuracy"]
    lines.append("")
    lines.append(f"loss {acc['final_loss']:.4f}" + (f"   gradient rel. error vs exact fp32 all-reduce "
                                                   f"{acc['grad_rel_error']:.3e}" if acc["grad_rel_error"] is not None else ""))
    per = r["per_rank"]
    if len(per) > 1:
        lines.append("per rank: " + "  ".join(
            f"r{p['rank']}@{p['host']} {p['step_median_s'] * 1e3:.1f} ms" for p in per if p["step_median_s"] is not None)
            + f"   slowest: rank {r['slowest_rank']}")
    lines.append(f"h2d: {r['h2d']['mode']} - {r['h2d']['note']}")
    return "\n".join(lines)
