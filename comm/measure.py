"""How the comm tasks take time: the same rules in all three.

- A dist.barrier() before every timed window, so no rank starts the clock while a peer is still busy elsewhere.
- GPU: CUDA events on the current stream, read after the window (the host never waits inside it).
  CPU: time.perf_counter. Gloo's blocking calls return when the collective is done, so both read completion.
- Per-rank times are all-gathered once at the end; tables show the ranks' average (nccl-tests' default) and the
  slowest rank.
"""
from __future__ import annotations

import os
from typing import Callable

import torch
import torch.distributed as dist

from core.errors import ConfigError
from tasks.train.timing import Clock, device_sync as synchronize  # noqa: F401 - shared with the step loop


def resolve_device(choice: str, backend: str, ctx_device: torch.device, local_rank: int) -> torch.device:
    """device: auto = cuda when the backend is nccl or a GPU is present, else cpu. Gloo runs on CUDA tensors too."""
    choice = str(choice)
    if choice not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"device={choice!r}: choose auto, cpu or cuda.")
    if choice == "cpu":
        if backend == "nccl":
            raise ConfigError("device=cpu with backend=nccl: NCCL only moves CUDA tensors. "
                              "Use backend=gloo for CPU tensors, or device=cuda.")
        return torch.device("cpu")
    if choice == "auto" and backend != "nccl" and not torch.cuda.is_available():
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(f"device={choice} with backend={backend} needs a GPU and none is visible here. "
                          "Use backend=gloo with device=cpu (or device=auto).")
    if ctx_device.type == "cuda":
        return ctx_device
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def free_host_bytes() -> int | None:
    """Memory this host can still give (None where the OS does not say): tasks refuse sizes that cannot fit instead
    of letting the OOM killer take a rank mid-collective."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def time_window(step: Callable[[], None], iters: int, device: torch.device, group=None) -> float:
    """Seconds per call of step() over `iters` back-to-back calls, after a barrier."""
    clock = Clock(device)
    dist.barrier(group=group)
    start = clock.mark()
    for _ in range(iters):
        step()
    end = clock.mark()
    synchronize(device)
    return clock.seconds(start, end) / iters


def gather_all(obj):
    """Every rank's obj, in rank order, on every rank (so every rank can act on the total, e.g. fail together)."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def rank_stats(per_rank: list[float]) -> dict:
    return {"avg": sum(per_rank) / len(per_rank), "max": max(per_rank),
            "slowest_rank": max(range(len(per_rank)), key=per_rank.__getitem__)}
