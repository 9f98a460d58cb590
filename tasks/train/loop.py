"""task=train: a measured data-parallel training step, phase by phase.

    data -> h2d -> forward -> backward (DDP's all-reduce overlaps it) -> sync (explicit strategies)
    -> optimizer

Warm-up steps run first; the measured window is a run of timed blocks (tasks/train/window.py), each
bracketed by one device sync (and a barrier) at its ends, with nothing inside a block waiting on the
GPU (where the config itself puts no sync there, a host sync in a block is an error: see
window_sync_check in tasks/train/h2d.py). Untimed probe steps after the window read DDP's runtime
statistics (communication time and its overlap with backward) and, for lossy schemes, the gradient
error against an exact fp32 all-reduce; then the sync's own calls are timed alone on the same ranks
(the on-rank microbenchmark, diagnose.microbench). Streams, events, syncs and graph capture come
from ctx.device (device/), so device=fake runs the GPU paths of this loop on CPU with the stream
rules checked."""

from __future__ import annotations

import functools
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn
from tqdm import tqdm

from base.record_types import DeviceLayer, PrecisionFlags, TrainResult
from data import batches, build_loader
from tasks.train import faults, verify
from tasks.train.comm_counter import CollectiveCounter
from tasks.train.grad_ready import grad_ready_probe
from tasks.train.h2d import make_feeder, window_sync_check
from tasks.train.probes import comm_microbench, ddp_comm_probe, grad_error_probe
from tasks.train.ddp import DDPSync
from tasks.train.sync import FlatSync, PerParamSync, Sync
from tasks.train.result import assemble, comm_figures, rank_figures
from tasks.train.stragglers import cpu_usage, rank_work
from tasks.train.timing import PhaseTimer
from tasks.train.window import Window, settle_collector
from models import build_model


def run(ctx) -> TrainResult | None:
    cfg, dev = ctx.cfg, ctx.device
    marks = {"start": time.time()}  # where the job's time goes (record: time_budget)
    torch.manual_seed(
        cfg.seed
    )  # identical initial weights on every rank (the explicit strategies rely on it)
    precision = set_precision(cfg.precision)
    model = dev.model_to_device(build_model(cfg.model, cfg.data.image_size))
    sync = make_sync(cfg, model, ctx.torch_device)
    model = sync.model
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.solver.lr, momentum=cfg.solver.momentum)
    criterion = nn.CrossEntropyLoss()
    pin = dev.pins_memory and (cfg.data.pin_memory or cfg.h2d != "blocking")
    host_batches = batches(build_loader(cfg, ctx.rank, ctx.world_size, pin_memory=pin))
    feeder = make_feeder(cfg.h2d, dev, host_batches)
    host_batches, feeder = faults.inject(
        cfg, ctx.rank, model, optimizer, host_batches, feeder
    )  # off: unchanged
    timer = PhaseTimer(dev, enabled=cfg.timing, nvtx=cfg.profile.enabled)
    autocast = autocast_for(cfg.precision, ctx.torch_device)
    counter = CollectiveCounter().install()
    K = cfg.accumulate

    def make_step(sync, h2d=None):
        """One optimizer step with this sync (and h2d mode: a new feeder on the same batches); the
        in-job check (tasks/train/verify.py) makes its fix's."""
        fed = feeder if h2d is None else make_feeder(h2d, dev, host_batches)
        return functools.partial(
            one_step, sync, fed, optimizer, criterion, autocast, host_batches, timer, K
        )

    train_step = make_step(sync)

    if cfg.cuda_graphs:
        from tasks.train.cuda_graphs import GraphedStep

        train_step = GraphedStep(
            model,
            optimizer,
            criterion,
            autocast,
            host_batches,
            feeder,
            timer,
            dev,
            sync,
            cfg.probe_steps,
        )

    window = Window(cfg, ctx.torch_device, timer, counter)
    planned = window.planned_steps
    bar = tqdm(
        total=cfg.warmup_steps + planned if planned else None,
        desc="warm-up",
        disable=not ctx.is_main,
        mininterval=1.0,
    )
    marks["setup"] = time.time()
    for i in range(cfg.warmup_steps):
        maybe_fail(cfg, ctx.rank, i)
        train_step()
        ctx.progress["warmup_steps_done"] = (
            i + 1
        )  # what an interrupt records and the heartbeat reports
        bar.update()
    marks["warmup"] = time.time()
    settle_collector()  # set-up's objects out of the collector's full scans (window.py)

    # ---- measured window: timed blocks, a device sync + barrier before each and a device sync
    # after, none inside ----
    timer.reset()
    counter.start()
    cpu0 = cpu_usage()
    losses = []
    step = cfg.warmup_steps
    bar.set_description(window.label())
    strict, unchecked_because = window_sync_check(cfg, ctx.backend, dev.kind)
    with profiler(cfg, ctx) as prof:
        for block in window.blocks(
            between=prof.step
        ):  # the profiler steps between blocks: its schedule counts blocks
            with dev.window(strict):
                for _ in range(block):
                    maybe_fail(cfg, ctx.rank, step)
                    losses.append(train_step())
                    ctx.progress["measured_steps_done"] = len(losses)
                    bar.update()
                    step += 1
    calls, py_bytes = counter.stop()
    window_cpu = cpu_usage(since=cpu0)
    bar.close()
    steps = timer.durations()
    timer.enabled = False
    marks["window"] = time.time()

    # ---- untimed probes ----
    probe_batches = (feeder.to_device(batch) for batch in host_batches)
    comm_stats = (
        ddp_comm_probe(
            sync,
            train_step,
            cfg.probe_steps,
            step_s=window.window_s / max(1, window.steps),
            budget_s=float(cfg.diagnose.get("probe_budget", 0.0)) * window.window_s,
            device=ctx.torch_device,
            settle=verify.refill_steps(
                verify.refill_s(cfg), window.window_s / max(1, window.steps)
            ),
        )
        if not cfg.cuda_graphs
        else train_step.comm_stats
    )
    grad_error = (
        grad_error_probe(sync, criterion, autocast, probe_batches, cfg.probe_steps)
        if sync.lossy and not cfg.cuda_graphs
        else None
    )
    grad_ready = grad_ready_probe(
        cfg,
        sync,
        criterion,
        autocast,
        probe_batches,
        dev,  # for the what-if model
        window_s=window.window_s,
        measured_steps=window.steps,
    )
    counter.uninstall()
    microbench = (
        comm_microbench(
            cfg, sync, ctx.torch_device, steps, comm_stats, window.window_s, window.steps
        )
        if not cfg.cuda_graphs
        else None
    )
    with torch.no_grad(), autocast():  # what precision= really did to the forward pass
        forward_dtype = str(model(next(probe_batches)[0]).dtype).removeprefix("torch.")

    final_loss = torch.stack(losses).float().mean() * K
    dist.all_reduce(final_loss)
    marks["probes"] = time.time()
    mine = rank_figures(ctx, steps, window, window_cpu["cpu_s"])
    mine["work"] = rank_work(steps, comm_stats, window_cpu, window.walls)
    everyone = [None] * ctx.world_size
    dist.all_gather_object(everyone, mine)
    result = None
    if ctx.is_main:
        builtin_calls, builtin_bytes = sync.builtin_comm_per_sync()
        described = sync.describe()  # what DDP reports it built (read once: it asks the reducer)
        comm = None
        if sync.communicates:
            comm = comm_figures(
                described,
                ctx.world_size,
                steps,
                comm_stats,
                collectives=calls / window.steps + builtin_calls,
                nbytes=py_bytes / window.steps + builtin_bytes,
            )
        result = assemble(
            cfg,
            ctx,
            described,
            feeder,
            steps,
            everyone,
            comm,
            window,
            marks,
            final_loss=final_loss.item() / ctx.world_size,
            grad_error=grad_error,
            forward_dtype=forward_dtype,
            precision_flags=precision,
            grad_ready=grad_ready,
            microbench=microbench,
            fault=faults.describe(cfg),
            device_layer=DeviceLayer(
                **dev.report(),
                window_sync_check=dev.window_check(strict),
                window_unchecked_because=unchecked_because,
            ),
        )
    # after everything above, the top finding's fix timed against this setting
    # (tasks/train/verify.py)
    check = verify.in_job(ctx, make_step, sync, window, result)
    if not ctx.is_main:
        return None
    result.verify = check
    return result


def one_step(sync, feeder, optimizer, criterion, autocast, host_batches, timer, K):
    """One optimizer step: K micro-batches, gradients synchronised on the last one only."""
    model = sync.model
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


def make_sync(cfg, model: nn.Module, device: torch.device) -> Sync:
    """The sync= strategy around the model: local, per_param, flat (tasks/train/sync.py) or ddp
    (ddp.py)."""
    if cfg.sync == "ddp":
        return DDPSync(cfg, model, device)
    return {"local": Sync, "per_param": PerParamSync, "flat": FlatSync}[str(cfg.sync)](model)


def maybe_fail(cfg, rank: int, step: int) -> None:
    if cfg.fault.rank is not None and rank == cfg.fault.rank and step == cfg.fault.step:
        raise RuntimeError(
            f"fault injected on rank {rank} at step {step} (fault.rank={cfg.fault.rank})"
        )


def set_precision(precision: str) -> PrecisionFlags:
    """precision=fp32 (the default) and bf16 leave torch's own defaults alone, as the user's
    training and the sources' loops run: in torch 2.14 cuDNN convolutions may use TF32
    (torch.backends.cudnn.allow_tf32 defaults to True) and fp32 matmuls do not
    (torch.get_float32_matmul_precision() defaults to "highest"). fp32_strict turns TF32 off for
    both, tf32 on for both. Returns the flags in effect, for the record: on a CPU they change
    nothing."""
    if precision in ("fp32_strict", "tf32"):
        tf32 = precision == "tf32"
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        torch.backends.cudnn.allow_tf32 = tf32
    return precision_flags()


def precision_flags() -> PrecisionFlags:
    return PrecisionFlags(
        float32_matmul_precision=torch.get_float32_matmul_precision(),
        matmul_allow_tf32=bool(torch.backends.cuda.matmul.allow_tf32),
        cudnn_allow_tf32=bool(torch.backends.cudnn.allow_tf32),
    )


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
    """torch.profiler over a wait/warm-up/active schedule of timed blocks, one Chrome trace per
    rank; on GPU also the CUDA profiler API range, so `nsys profile --capture-range=cudaProfilerApi`
    captures the measured window. It is stepped between blocks, never inside one: where its schedule
    ends, torch/autograd/profiler.py synchronises the device and the trace is written, which inside
    a timed block would be timed."""
    if not cfg.profile.enabled:
        return _NoProfiler()
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + (
        [ProfilerActivity.CUDA] if ctx.torch_device.type == "cuda" else []
    )
    trace = ctx.rank_file("trace", ".json")

    class _Profiled(profile):
        def __enter__(self):
            if ctx.torch_device.type == "cuda":
                torch.cuda.profiler.start()
            return super().__enter__()

        def __exit__(self, *exc):
            if ctx.torch_device.type == "cuda":
                torch.cuda.profiler.stop()
            return super().__exit__(*exc)

    p = cfg.profile
    return _Profiled(
        activities=activities,
        schedule=schedule(wait=p.wait, warmup=p.warmup, active=p.active, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(trace)),
        record_shapes=False,
    )
