"""Gradient synchronisation strategies (`sync=`). Every one leaves the same averaged gradient in
p.grad.

local      no communication: the single-device baseline (the ViT study's "no DDP") per_param  the
VGG11 thread's loop: one all_reduce per parameter after backward flat       all gradients copied
into one buffer, one all_reduce, copied back ddp        DistributedDataParallel: bucketed all-reduce
overlapping backward, knobs and comm hooks (ddp.py)"""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn

from base.record_types import DdpInfo


class Sync:
    """What the step loop, the probes and the result assembly may ask of a strategy. The base is
    `sync=local`: every answer says "no communication", so no caller needs to know which strategy it
    holds."""

    communicates = False  # sends anything at all (False: no comm figures in the record)
    lossy = False  # delivers an approximate average (compression): the gradient-error probe applies
    runtime_stats_kind = (
        None  # "ddp": comm/overlap times come from DDP's reducer timers (engine probes read them)
    )

    def __init__(self, model: nn.Module):
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]

    def no_sync(self):
        return nullcontext()

    def after_backward(self) -> None:
        pass

    def builtin_comm_per_sync(self) -> tuple[int, int]:
        """(collectives, bytes) issued outside Python per synchronised step; none for Python-side
        strategies."""
        return 0, 0

    def buckets(self) -> list[int] | None:
        """Bucket sizes in bytes, for strategies that bucket (DDP); None otherwise."""
        return None

    def enable_runtime_stats(self) -> None:
        pass

    def runtime_stats(self) -> dict[str, float] | None:
        return None

    def describe(self) -> DdpInfo | None:
        """What the DDP wrapper reports it built; None for the explicit strategies."""
        return None


class PerParamSync(Sync):
    communicates = True

    def after_backward(self) -> None:
        ws = dist.get_world_size()
        for p in self.params:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad.div_(ws)


class FlatSync(Sync):
    communicates = True

    def __init__(self, model: nn.Module):
        super().__init__(model)
        ref = self.params[0]
        self.buffer = torch.empty(
            sum(p.numel() for p in self.params), dtype=ref.dtype, device=ref.device
        )
        self.views = []
        offset = 0
        for p in self.params:
            self.views.append(self.buffer[offset : offset + p.numel()].view_as(p))
            offset += p.numel()

    def after_backward(self) -> None:
        for v, p in zip(self.views, self.params):
            v.copy_(p.grad)
        dist.all_reduce(self.buffer, op=dist.ReduceOp.SUM)
        self.buffer.div_(dist.get_world_size())
        for v, p in zip(self.views, self.params):
            p.grad.copy_(v)
