"""How a host batch reaches the GPU (`h2d=`). The VGG11 thread traced its slowdown to the copy on the default stream;
the modes let a user see that difference on their machine."""
from __future__ import annotations

import torch


class CpuFeeder:
    """CPU ranks compute on host memory: no copy is made, so the h2d phase is only the (empty) hand-over."""

    note = "CPU run: batches are already in host memory, no host-to-device copy is made (h2d time ~0)."
    copies = False

    def to_device(self, batch):
        return batch


class BlockingFeeder:
    """`.to(device)` on the default stream: the host waits for the copy (and for the work queued before it)."""

    note = "copy on the compute stream, non_blocking=False"
    copies = True

    def __init__(self, device):
        self.device = device

    def to_device(self, batch):
        return tuple(t.to(self.device) for t in batch)


class NonBlockingFeeder(BlockingFeeder):
    """Pinned host memory + non_blocking copy: queued on the compute stream, the host goes on."""

    note = "pinned memory, non_blocking copy on the compute stream"

    def to_device(self, batch):
        return tuple(t.to(self.device, non_blocking=True) for t in batch)


class SideStreamFeeder:
    """The next batch is copied on its own stream while the current one computes. The compute stream waits for the
    copy before using it, and record_stream tells the allocator the tensors are used there."""

    note = "next batch copied on a side stream (pinned, non_blocking) while the current one computes"
    copies = True

    def __init__(self, device):
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self.pending = None

    def _copy(self, batch):
        with torch.cuda.stream(self.stream):
            return tuple(t.to(self.device, non_blocking=True) for t in batch)

    def to_device(self, batch):
        """Returns the batch copied during the previous step and starts copying `batch` for the next one."""
        if self.pending is None:  # first step: nothing was prefetched yet
            self.pending = self._copy(batch)
        current = self.pending
        compute = torch.cuda.current_stream(self.device)
        compute.wait_stream(self.stream)
        for t in current:
            t.record_stream(compute)
        self.pending = self._copy(batch)
        return current


def make_feeder(mode: str, device: torch.device):
    if device.type != "cuda":
        return CpuFeeder()
    return {"blocking": BlockingFeeder, "non_blocking": NonBlockingFeeder, "side_stream": SideStreamFeeder}[mode](device)
