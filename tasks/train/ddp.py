"""DistributedDataParallel with the knobs of the ViT study: bucket size, static graph, gradient as
bucket view, unused-parameter search, buffer broadcast, and the compression comm hooks
(`optim=`)."""

from __future__ import annotations

import functools
from contextlib import nullcontext
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from base.build import build
from base.errors import ConfigError
from base.record_types import BucketCaps, BucketInfo, DdpInfo
from comm.buckets import bucket_cap_mb, bucket_caps, bucket_rule
from device import layer_for
from tasks.train.sync import Sync

COMPRESSED_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16}
ALWAYS_TIMED = 10  # DDP times its synchronised iterations 1..10 whatever the sample rate
# (Reducer::should_collect_runtime_stats)
QUIET_SAMPLE_RATE = 1 << 30  # runtime stats sampled so rarely that no measured step ever is


def synchronised_iterations(steps: int, accumulate: int, static_graph: bool) -> int:
    """DDP iterations (synchronised forwards) in `steps` optimizer steps from the start: one per
    step (the K-1 no_sync micro-steps do not count: DDP's forward only counts when
    require_backward_grad_sync), plus, with a static graph and K>1, the first step's first
    micro-step (DDPSync.no_sync lets it communicate so DDP can record the graph)."""
    return steps + (1 if static_graph and accumulate > 1 and steps > 0 else 0)


def stats_waits(before: int, during: int) -> int:
    """How many of `during` synchronised forwards, after `before` of them, wait on the host for
    DDP's timing events. At the start of synchronised forward k, DDP reads iteration k-1's CUDA
    timing events (cudaEventSynchronize, Logger::set_runtime_stats_and_log) when 1 <= k-1 <=
    ALWAYS_TIMED: forwards 2..11 wait."""
    first, last = before + 1, before + during
    return max(0, min(last, ALWAYS_TIMED + 1) - max(first, 2) + 1)


def check_backend_supports(optim: str, device: torch.device) -> None:
    """Run one tiny all-reduce of the hook's wire dtype now, so an unsupported scheme fails at
    start-up with a clear message instead of in the middle of backward."""
    dtype = COMPRESSED_DTYPE.get(optim)
    if dtype is None:
        return
    try:
        t = torch.ones(2, dtype=dtype, device=device)
        dist.all_reduce(t)
    except Exception as e:  # noqa: BLE001 - the backend's own words go into the message
        raise ConfigError(
            f"optim={optim} needs an all-reduce of {dtype} tensors, which this "
            f"{dist.get_backend()} build refuses "
            f"({e}). Use optim=none or optim=powersgd, or another backend."
        ) from None


def counting(hook):
    """The comm hook, counting its calls (one per bucket per synchronised step): proof the hook
    really ran. A function, not a callable object: DDP reads the hook's __qualname__ for its
    logs."""

    @functools.wraps(hook)
    def wrapper(state, bucket):
        wrapper.calls += 1
        return hook(state, bucket)

    wrapper.calls = 0
    return wrapper


def serialized(hook):
    """PowerSGD issues its second all-reduce (of Q) from a future callback. Gloo runs callbacks on
    its own threads, so with several buckets in flight two ranks can issue different buckets'
    all-reduces in different orders and gloo aborts on the size mismatch. Waiting for each bucket
    before DDP hands over the next keeps the order identical on every rank, at the price of
    PowerSGD's overlap with backward (the record says `serialized: true`)."""

    @functools.wraps(hook)
    def wrapper(state, bucket):
        fut = hook(state, bucket)
        fut.wait()
        return fut

    return wrapper


class DDPSync(Sync):
    communicates = True
    runtime_stats_kind = "ddp"

    def __init__(self, cfg, model: nn.Module, device: torch.device):
        self.cfg = cfg
        self.optim = cfg.optim.name
        self.lossy = self.optim != "none"
        check_backend_supports(self.optim, device)
        static_graph = bool(
            cfg.ddp.static_graph or cfg.cuda_graphs
        )  # whole-network capture needs a static graph
        knobs = {}
        if (
            not cfg.ddp.broadcast_buffers
        ):  # default True; torch 2.15 warns whenever the (deprecated) name is passed
            knobs["broadcast_buffers"] = False
        # cuda_graphs: PyTorch's rule for capturing DDP is to construct it under a side stream (CUDA
        # graph notes, "Usage with DistributedDataParallel"); its parameter broadcast is queued
        # there, so the compute stream joins that stream afterwards, before the first forward reads
        # the parameters
        dev = layer_for(device)
        side = dev.new_stream() if cfg.cuda_graphs else None
        with warnings.catch_warnings(), dev.use_stream(side) if side is not None else nullcontext():
            warnings.filterwarnings(
                "ignore", message=".*broadcast_buffers.*", category=FutureWarning
            )
            self.model = DDP(
                model,
                device_ids=[device.index] if device.type == "cuda" else None,
                bucket_cap_mb=bucket_cap_mb(cfg.bucket),
                static_graph=static_graph,
                gradient_as_bucket_view=bool(cfg.ddp.gradient_as_bucket_view),
                find_unused_parameters=bool(cfg.ddp.find_unused_parameters),
                **knobs,
            )
        if side is not None:
            dev.current_stream().wait_stream(side)
        self.static_graph = static_graph
        self.graph_recorded = not static_graph
        if (
            static_graph
        ):  # watch for DDP's first synchronised forward, then stop watching (no per-step cost)

            def first_synced_forward(module, args):
                if module.require_backward_grad_sync:
                    self.graph_recorded = True
                    handle.remove()

            handle = self.model.register_forward_pre_hook(first_synced_forward)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.hook = None
        self.hook_state = None
        self.serialized = False
        if self.optim != "none":
            self.hook_state, hook = self._hook(dev)
            self.hook = counting(hook)
            self.model.register_comm_hook(self.hook_state, self.hook)
        # Runtime stats are only sampled in the untimed probe steps (on GPU sampling synchronises
        # the host).
        self.disable_runtime_stats()

    def _hook(self, dev):
        """The comm hook optim._target_ makes (tasks/train/hooks.py), as it runs on this rank's
        device (dev.comm_hook: the fake device watches its syncs)."""
        state, hook = build(self.cfg.optim)
        hook = dev.comm_hook(hook)
        if isinstance(state, powerSGD_hook.PowerSGDState) and dist.get_backend() == "gloo":
            self.serialized = True
            return state, serialized(hook)
        return state, hook

    def no_sync(self):
        """DDP's no_sync; except that with a static graph DDP must see one synchronised backward
        before any no_sync one (its first iteration records the graph), so the first warm-up
        micro-step communicates."""
        if not self.graph_recorded:
            return nullcontext()
        return self.model.no_sync()

    def after_backward(self) -> None:
        pass  # DDP all-reduces inside backward

    def buckets(self) -> list[int]:
        """Bucket sizes in bytes as DDP reports it built them (after its rebuild on the first step,
        in the order they are all-reduced), so a bucket sweep shows what really changed (e.g. a
        tensor larger than the cap gets a bucket of its own, and DDP's default caps the first bucket
        at 1 MiB: bucket_caps)."""
        data = self.model._get_ddp_logging_data()
        sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or ""
        return [int(s) for s in str(sizes).split(",") if s.strip()]

    def builtin_comm_per_sync(self) -> tuple[int, int]:
        if self.hook is not None:
            return 0, 0  # hooks call torch.distributed.all_reduce: the CollectiveCounter sees them
        sizes = self.buckets()
        return len(sizes), sum(sizes)

    def runtime_stats(self) -> dict[str, float]:
        """DDP's own timing of the last sampled backward (seconds): compute, communication, and
        their overlap."""
        d = self.model._get_ddp_logging_data()
        return {
            "backward_compute_s": d.get("backward_compute_time", 0) / 1e9,
            "comm_s": d.get("backward_comm_time", 0) / 1e9,
            "overlap_s": d.get("backward_compute_comm_overlap_time", 0) / 1e9,
        }

    def enable_runtime_stats(self) -> None:
        self.model._set_ddp_runtime_logging_sample_rate(1)

    def disable_runtime_stats(self) -> None:
        self.model._set_ddp_runtime_logging_sample_rate(QUIET_SAMPLE_RATE)

    def describe(self) -> DdpInfo:
        """What DDP reports it is doing (its own logging data), not what the config asked for."""
        data = self.model._get_ddp_logging_data()
        sizes = self.buckets()
        first, cap = bucket_caps(self.cfg.bucket)
        powersgd = isinstance(self.hook_state, powerSGD_hook.PowerSGDState)
        return DdpInfo(
            bucket_cap_mb="default" if self.cfg.bucket is None else float(self.cfg.bucket),
            bucket_caps=BucketCaps(first_bytes=first, bytes=cap, rule=bucket_rule(self.cfg.bucket)),
            buckets=BucketInfo(
                count=len(sizes),
                sizes_bytes=sizes,
                rebuilt=bool(data.get("has_rebuilt_buckets") or data.get("rebuilt_bucket_sizes")),
                order="all-reduce order: the first bucket holds the gradients backward produces "
                "first",
            ),
            static_graph=bool(self.model.static_graph),
            gradient_as_bucket_view=bool(data.get("gradient_as_bucket_view")),
            find_unused_parameters=bool(data.get("find_unused_parameters")),
            broadcast_buffers=bool(data.get("broadcast_buffers")),
            comm_hook=self.hook.__name__ if self.hook else None,
            comm_hook_calls=self.hook.calls if self.hook else 0,
            serialized=self.serialized,
            powersgd_iter=self.hook_state.iter if powersgd else None,
            powersgd_note=(
                "warm_start=false: PowerSGD refills its Q matrices from CPU torch.randn every "
                "step, a "
                "blocking host-to-device copy per bucket on GPU (part of the measured step; "
                "warm_start=true avoids it)"
            )
            if powersgd and not self.hook_state.warm_start
            else None,
        )


def warmup_warning(cfg) -> str | None:
    """The warning for a GPU run whose timed blocks contain DDP's own timing waits (None: they do
    not). DDP waits at the start of synchronised forward k for iteration k-1's timing events
    (stats_waits); in the first step of a timed block those events finished before the block's
    device sync, so the wait costs nothing there: only waits in a block's later steps are timed."""
    from tasks.train.window import block_size  # here: window -> timing -> this package

    static = bool(cfg.ddp.static_graph)
    before = synchronised_iterations(cfg.warmup_steps, cfg.accumulate, static)
    block = block_size(cfg.steps, cfg.measure.block_steps)
    last = (
        cfg.steps if cfg.measure.policy == "fixed" else (cfg.measure.max_steps or ALWAYS_TIMED + 1)
    )
    # measured step i runs synchronised forward before + i + 1 (a step's K-1 no_sync micro-steps do
    # not count)
    timed = [
        i for i in range(min(last, ALWAYS_TIMED + 1)) if i % block and stats_waits(before + i, 1)
    ]
    if not timed:
        return None
    enough = ALWAYS_TIMED + 1 - (1 if static and cfg.accumulate > 1 else 0)
    return (
        f"warmup_steps={cfg.warmup_steps}: {len(timed)} measured step(s) include a host wait "
        "inside a timed "
        f"block. On GPU DDP times its synchronised iterations 1-{ALWAYS_TIMED} itself and waits "
        "for those timings "
        "at the next synchronised forward (a block's first step waits for nothing: the block's "
        "device sync came "
        f"first); accumulate={cfg.accumulate} does not add synchronised iterations (no_sync "
        "micro-steps do not "
        f"count). Use warmup_steps>={enough} for clean numbers."
    )
