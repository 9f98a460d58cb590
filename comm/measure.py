"""How the comm tasks take time: the same rules in all three.

- A dist.barrier() before every timed window, so no rank starts the clock while a peer is still busy
  elsewhere.
- GPU: CUDA events on the current stream, read after the window (the host never waits inside it;
  with NCCL the
  window runs under torch.cuda.set_sync_debug_mode("error")). CPU: the host clock. Gloo's blocking
  calls return when the collective is done, so both read completion. Events, syncs and the window
  come from the device layer (device/), so device=fake checks these windows too.
- Per-rank times are all-gathered once at the end; tables show the ranks' average (nccl-tests'
  default) and the
  slowest rank.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

from base.errors import ConfigError
from device import Clock, layer_for  # noqa: F401 - Clock: the comm tasks' timer
from device.host import gpu_count

# torch 2.14 deprecates the *_tensor names in favour of *_single; older torch has only the former
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def resolve_device(
    choice: str, backend: str, ctx_device: torch.device, local_rank: int
) -> torch.device:
    """The task's tensors: auto = where the rank computes (its placement: device=, backend=); cpu;
    cuda (gloo runs on CUDA tensors too, so a CPU-placed gloo rank may still move CUDA tensors)."""
    choice = str(choice)
    if choice not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"device={choice!r}: choose auto, cpu or cuda.")
    if choice == "cpu":
        if backend == "nccl":
            raise ConfigError(
                "device=cpu with backend=nccl: NCCL only moves CUDA tensors. "
                "Use backend=gloo for CPU tensors, or device=cuda."
            )
        return torch.device("cpu")
    if choice == "auto" or ctx_device.type == "cuda":
        return ctx_device
    if gpu_count() == 0:
        raise ConfigError(
            f"device={choice} with backend={backend} needs a GPU and none is visible here. "
            "Use backend=gloo with device=cpu (or device=auto)."
        )
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


# a comm task's timed calls in 8 blocks: 8 samples, so the median has its 95% interval (n >= 6)
TIMED_BLOCKS = 8


def block_sizes(iters: int, blocks: int = TIMED_BLOCKS) -> list[int]:
    """`iters` split into at most `blocks` near-equal contiguous blocks (the first ones one
    larger)."""
    blocks = min(blocks, iters)
    return [iters // blocks + (1 if i < iters % blocks else 0) for i in range(blocks)]


def time_window(step: Callable[[], None], iters: int, device: torch.device, group=None) -> float:
    """Seconds per call of step() over `iters` back-to-back calls, after a barrier. Nothing in the
    window waits on the device; with NCCL on CUDA that is enforced (gloo's CUDA path synchronises
    its own streams on its threads, which the check would break)."""
    dev = layer_for(device)
    dist.barrier(group=group)
    start = dev.mark()
    with dev.window(strict=dist.get_backend(group) == "nccl"):
        for _ in range(iters):
            step()
    end = dev.mark()
    dev.synchronize()
    return dev.seconds(start, end) / iters


def gather_all(obj):
    """Every rank's obj, in rank order, on every rank (so every rank can act on the total, e.g. fail
    together)."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def rank_stats(per_rank: list[float]) -> dict:
    return {
        "avg": sum(per_rank) / len(per_rank),
        "max": max(per_rank),
        "slowest_rank": max(range(len(per_rank)), key=per_rank.__getitem__),
    }
