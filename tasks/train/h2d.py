"""How a host batch reaches the GPU (`h2d=`). The VGG11 thread traced its slowdown to the copy on
the default stream; the modes let a user see that difference on their machine. Streams, copies and
record_stream come from the device layer, so device=fake runs these feeders on CPU with the stream
rules checked."""

from __future__ import annotations


class CpuFeeder:
    """CPU ranks compute on host memory: no copy is made, so the h2d phase is only the (empty)
    hand-over."""

    note = (
        "CPU run: batches are already in host memory, no host-to-device copy is made (h2d time ~0)."
    )
    copies = False

    def to_device(self, batch):
        return batch


class BlockingFeeder:
    """`.to(device)` on the compute stream: the host waits for the copy (and for the work queued
    before it)."""

    note = "copy on the compute stream, non_blocking=False"
    copies = True
    non_blocking = False

    def __init__(self, dev, host_batches=None):
        self.dev = dev

    def to_device(self, batch):
        return tuple(self.dev.to_device(t, non_blocking=self.non_blocking) for t in batch)


class NonBlockingFeeder(BlockingFeeder):
    """Pinned host memory + non_blocking copy: queued on the compute stream, the host goes on."""

    note = "pinned memory, non_blocking copy on the compute stream"
    non_blocking = True


class SideStreamFeeder:
    """The next batch is copied on its own stream while the current one computes. The compute stream
    waits for the copy before using it, and record_stream tells the allocator the tensors are used
    there.

    One batch is always in flight: the first call copies the batch it is given and prefetches the
    next one from the loader itself, so every batch is copied once and used once, in order."""

    note = (
        "next batch copied on a side stream (pinned, non_blocking) while the current one computes"
    )
    copies = True

    def __init__(self, dev, host_batches):
        self.dev, self.host_batches = dev, host_batches
        self.stream = dev.new_stream()
        self.pending = None

    def _copy(self, batch):
        with self.dev.use_stream(self.stream):
            return tuple(self.dev.to_device(t, non_blocking=True) for t in batch)

    def to_device(self, batch):
        """Returns the batch copied during the previous call and starts copying `batch` for the next
        one."""
        if self.pending is None:  # first call: this batch now, the loader's next one in flight
            self.pending = self._copy(batch)
            batch = next(self.host_batches)
        current = self.pending
        compute = self.dev.current_stream()
        compute.wait_stream(self.stream)
        for t in current:
            self.dev.record_stream(t, compute)
        self.pending = self._copy(batch)
        return current


def make_feeder(mode: str, dev, host_batches):
    if not dev.copies:
        return CpuFeeder()
    return {
        "blocking": BlockingFeeder,
        "non_blocking": NonBlockingFeeder,
        "side_stream": SideStreamFeeder,
    }[mode](dev, host_batches)


POWERSGD_SYNC = (
    "optim=powersgd: torch's PowerSGD hook calls torch.cuda.synchronize(device) in its "
    "decompression "
    "(torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py), for every bucket of every "
    "step: a "
    "device-wide sync (cudaDeviceSynchronize) that torch.cuda.set_sync_debug_mode does not catch, "
    "so the "
    "measured steps include it, as they do in any training that uses the hook"
)


def window_sync_check(cfg, backend: str, kind: str) -> tuple[bool, str | None]:
    """(strict, why not): whether the measured window runs with host syncs made errors (CUDA:
    torch.cuda.set_sync_debug_mode("error"); the fake device: its own check), and, when not, every
    sync the config itself puts there. kind: the device's (device/placement.py)."""
    why = []
    if cfg.h2d == "blocking":
        why.append("h2d=blocking: the copy on the compute stream waits for the host by design")
    if cfg.optim.name == "powersgd":
        why.append(POWERSGD_SYNC)
        if not cfg.optim.warm_start:
            why.append(
                "optim.warm_start=false: PowerSGD copies CPU torch.randn into its Q matrices every "
                "step (a "
                "blocking host-to-device copy per bucket)"
            )
        elif cfg.optim.start_iter >= cfg.warmup_steps:
            why.append(
                f"optim.start_iter={cfg.optim.start_iter} with warmup_steps={cfg.warmup_steps}: "
                "PowerSGD "
                "compresses first in the first measured step and fills its matrices there from CPU "
                "torch.randn "
                f"(a blocking copy); warmup_steps={cfg.optim.start_iter + 1} keeps that out of the "
                "window"
            )
    if kind == "cuda" and backend == "gloo" and cfg.sync != "local":
        why.append(
            "backend=gloo: on CUDA tensors gloo synchronises its own streams on its worker threads"
        )
    return not why, "; ".join(why) or None
