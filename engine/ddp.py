"""DistributedDataParallel with the knobs of the ViT study: bucket size, static graph, gradient as bucket view,
unused-parameter search, buffer broadcast, and the compression comm hooks (`optim=`)."""
from __future__ import annotations

import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from engine.errors import ConfigError

SCHEMES = ("none", "fp16", "bf16", "powersgd")
COMPRESSED_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16}


def check_backend_supports(optim: str, device: torch.device) -> None:
    """Run one tiny all-reduce of the hook's wire dtype now, so an unsupported scheme fails at start-up with a clear
    message instead of in the middle of backward."""
    dtype = COMPRESSED_DTYPE.get(optim)
    if dtype is None:
        return
    try:
        t = torch.ones(2, dtype=dtype, device=device)
        dist.all_reduce(t)
    except Exception as e:  # noqa: BLE001 - the backend's own words go into the message
        raise ConfigError(
            f"optim={optim} needs an all-reduce of {dtype} tensors, which this {dist.get_backend()} build refuses "
            f"({e}). Use optim=none or optim=powersgd, or another backend."
        ) from None


class CountingHook:
    """Wraps a comm hook to count its calls (one per bucket per synchronised step): proof the hook really ran."""

    def __init__(self, hook):
        self.hook = hook
        self.calls = 0
        self.__name__ = getattr(hook, "__name__", "hook")

    def __call__(self, state, bucket):
        self.calls += 1
        return self.hook(state, bucket)


class DDPSync:
    communicates = True

    def __init__(self, cfg, model: nn.Module, device: torch.device):
        self.cfg = cfg
        self.optim = cfg.optim.name
        check_backend_supports(self.optim, device)
        static_graph = bool(cfg.ddp.static_graph or cfg.cuda_graphs)   # whole-network capture needs a static graph
        knobs = {}
        if not cfg.ddp.broadcast_buffers:  # default True; torch 2.15 warns whenever the (deprecated) name is passed
            knobs["broadcast_buffers"] = False
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*broadcast_buffers.*", category=FutureWarning)
            self.model = DDP(
                model,
                device_ids=[device.index] if device.type == "cuda" else None,
                bucket_cap_mb=float(cfg.bucket),
                static_graph=static_graph,
                gradient_as_bucket_view=bool(cfg.ddp.gradient_as_bucket_view),
                find_unused_parameters=bool(cfg.ddp.find_unused_parameters),
                **knobs,
            )
        self.static_graph = static_graph
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.hook = None
        self.hook_state = None
        if self.optim != "none":
            self.hook_state, hook = self._hook()
            self.hook = CountingHook(hook)
            self.model.register_comm_hook(self.hook_state, self.hook)
        # Runtime stats are only sampled in the untimed probe steps (on GPU sampling synchronises the host).
        self.model._set_ddp_runtime_logging_sample_rate(1 << 30)

    def _hook(self):
        if self.optim == "fp16":
            return None, default_hooks.fp16_compress_hook
        if self.optim == "bf16":
            return None, default_hooks.bf16_compress_hook
        o = self.cfg.optim
        state = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=int(o.rank),
            start_powerSGD_iter=int(o.start_iter),
            min_compression_rate=float(o.min_compression_rate),
            use_error_feedback=bool(o.use_error_feedback),
            warm_start=bool(o.warm_start),
            orthogonalization_epsilon=float(o.orthogonalization_epsilon),
            random_seed=int(o.random_seed),
            batch_tensors_with_same_shape=bool(o.batch_tensors_with_same_shape),
        )
        hook = powerSGD_hook.batched_powerSGD_hook if o.batched else powerSGD_hook.powerSGD_hook
        return state, hook

    def no_sync(self):
        return self.model.no_sync()

    def after_backward(self) -> None:
        pass  # DDP all-reduces inside backward

    def buckets(self) -> list[int]:
        """Bucket sizes in bytes as DDP built them (after its rebuild on the first step); the first bucket is small
        (DDP caps it at 1 MiB) whatever bucket_cap_mb says."""
        data = self.model._get_ddp_logging_data()
        sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or ""
        return [int(s) for s in str(sizes).split(",") if s.strip()]

    def builtin_comm_per_sync(self) -> tuple[int, int]:
        if self.hook is not None:
            return 0, 0  # hooks call torch.distributed.all_reduce: the CollectiveCounter sees them
        sizes = self.buckets()
        return len(sizes), sum(sizes)

    def runtime_stats(self) -> dict[str, float]:
        """DDP's own timing of the last sampled backward (seconds): compute, communication, and their overlap."""
        d = self.model._get_ddp_logging_data()
        return {
            "backward_compute_s": d.get("backward_compute_time", 0) / 1e9,
            "comm_s": d.get("backward_comm_time", 0) / 1e9,
            "overlap_s": d.get("backward_compute_comm_overlap_time", 0) / 1e9,
        }

    def enable_runtime_stats(self) -> None:
        self.model._set_ddp_runtime_logging_sample_rate(1)

    def describe(self) -> dict:
        """What DDP reports it is doing (its own logging data), not what the config asked for."""
        data = self.model._get_ddp_logging_data()
        sizes = self.buckets()
        out = {
            "bucket_cap_mb": float(self.cfg.bucket),
            "buckets": {"count": len(sizes), "sizes_bytes": sizes},
            "static_graph": bool(self.model.static_graph),
            "gradient_as_bucket_view": bool(data.get("gradient_as_bucket_view")),
            "find_unused_parameters": bool(data.get("find_unused_parameters")),
            "broadcast_buffers": bool(data.get("broadcast_buffers")),
            "comm_hook": self.hook.__name__ if self.hook else None,
            "comm_hook_calls": self.hook.calls if self.hook else 0,
        }
        if isinstance(self.hook_state, powerSGD_hook.PowerSGDState):
            out["powersgd_iter"] = self.hook_state.iter
        return out
