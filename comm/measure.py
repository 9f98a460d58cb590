"""How the comm tasks take time: the same rules in all three.

- A dist.barrier() before every timed window, so no rank starts the clock while a peer is still busy elsewhere.
- GPU: CUDA events on the current stream, read after the window (the host never waits inside it; with NCCL the
  window runs under torch.cuda.set_sync_debug_mode("error")). CPU: the host clock. Gloo's blocking calls return
  when the collective is done, so both read completion. Events, syncs and the window come from the device layer
  (device/), so device=fake checks these windows too.
- Per-rank times are all-gathered once at the end; tables show the ranks' average (nccl-tests' default) and the
  slowest rank.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from base.errors import ConfigError
from device import Clock, layer_for  # noqa: F401 - Clock: the comm tasks' timer
from device.placement import visible_gpus

# torch 2.14 deprecates the *_tensor names in favour of *_single; older torch has only the former
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def synchronize(device) -> None:
    layer_for(device).synchronize()


def resolve_device(choice: str, backend: str, ctx_device: torch.device, local_rank: int) -> torch.device:
    """The task's tensors: auto = where the rank computes (its placement: device=, backend=); cpu; cuda (gloo runs on
    CUDA tensors too, so a CPU-placed gloo rank may still move CUDA tensors)."""
    choice = str(choice)
    if choice not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"device={choice!r}: choose auto, cpu or cuda.")
    if choice == "cpu":
        if backend == "nccl":
            raise ConfigError("device=cpu with backend=nccl: NCCL only moves CUDA tensors. "
                              "Use backend=gloo for CPU tensors, or device=cuda.")
        return torch.device("cpu")
    if choice == "auto" or ctx_device.type == "cuda":
        return ctx_device
    if visible_gpus() == 0:
        raise ConfigError(f"device={choice} with backend={backend} needs a GPU and none is visible here. "
                          "Use backend=gloo with device=cpu (or device=auto).")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


PROC_MEMINFO = "/proc/meminfo"
PROC_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"
UNLIMITED = 1 << 60   # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1


def free_host_bytes(meminfo: str | Path = PROC_MEMINFO, cgroup: str | Path = PROC_CGROUP,
                    cgroup_root: str | Path = CGROUP_ROOT) -> int | None:
    """Host memory this process can still be given (None where the OS does not say): tasks refuse sizes that cannot
    fit instead of letting the OOM killer take a rank mid-collective.

    The kernel's MemAvailable, not MemFree: Linux fills idle memory with the page cache and gives it back on demand,
    so MemFree is small on a healthy machine (2.5 GiB free beside 21 GiB available after a pip install and a few
    runs). Where this process's cgroup has a memory limit (a container, a Slurm job) the room under it counts too,
    when it is smaller. The paths are parameters so tests can pose as any machine."""
    known = [b for b in (_mem_available(meminfo), cgroup_room(cgroup, cgroup_root)) if b is not None]
    if known:
        return min(known)
    try:  # not Linux: the pages nobody uses, the best the OS says
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _mem_available(meminfo: str | Path) -> int | None:
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                value, *unit = line.split(":", 1)[1].split()
                return int(value) * (1024 if unit == ["kB"] else 1)
    except (OSError, ValueError):
        pass
    return None


def cgroup_room(cgroup: str | Path = PROC_CGROUP, cgroup_root: str | Path = CGROUP_ROOT) -> int | None:
    """The least room under a memory limit of this process's cgroup or any of its ancestors (None: no limit, or
    no cgroup to read). Room = limit - usage + inactive file cache: the cgroup's usage counts its page cache too,
    and the inactive part is reclaimed before the limit bites (the kubelet's working-set rule). cgroup v2
    (memory.max, memory.current), else v1 (memory.limit_in_bytes, memory.usage_in_bytes)."""
    try:
        lines = Path(cgroup).read_text().splitlines()
    except OSError:
        return None
    root = Path(cgroup_root)
    for line in lines:
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":      # v2 (the unified hierarchy, mounted alone or beside v1)
            base = root if (root / "cgroup.controllers").exists() else root / "unified"
            files = ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):     # v1's memory controller
            base, files = root / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        else:
            continue
        rooms = [r for r in (_room(d, *files) for d in _up_from(base, path)) if r is not None]
        if rooms:
            return min(rooms)
    return None


def _up_from(base: Path, path: str) -> list[Path]:
    """The cgroup's directory and its ancestors up to the hierarchy's root (in a container, whose cgroup namespace
    may show a path the mount does not have, only the root)."""
    own = base / path.strip("/")
    dirs = [own, *own.parents] if own.is_dir() else [base]
    return [d for d in dirs if d == base or base in d.parents]


def _room(d: Path, limit_file: str, usage_file: str, inactive_key: str) -> int | None:
    try:
        limit = (d / limit_file).read_text().strip()
        if limit == "max" or int(limit) >= UNLIMITED:
            return None
        usage = int((d / usage_file).read_text().strip())
    except (OSError, ValueError):
        return None
    inactive = 0
    try:
        for line in (d / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == inactive_key:
                inactive = int(value)
    except (OSError, ValueError):
        pass
    return max(0, int(limit) - usage + inactive)


TIMED_BLOCKS = 8  # a comm task's timed calls in 8 blocks: 8 samples, so the median has its 95% interval (n >= 6)


def block_sizes(iters: int, blocks: int = TIMED_BLOCKS) -> list[int]:
    """`iters` split into at most `blocks` near-equal contiguous blocks (the first ones one larger)."""
    blocks = min(blocks, iters)
    return [iters // blocks + (1 if i < iters % blocks else 0) for i in range(blocks)]


def time_window(step: Callable[[], None], iters: int, device: torch.device, group=None) -> float:
    """Seconds per call of step() over `iters` back-to-back calls, after a barrier. Nothing in the window waits on
    the device; with NCCL on CUDA that is enforced (gloo's CUDA path synchronises its own streams on its threads,
    which the check would break)."""
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
    """Every rank's obj, in rank order, on every rank (so every rank can act on the total, e.g. fail together)."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def rank_stats(per_rank: list[float]) -> dict:
    return {"avg": sum(per_rank) / len(per_rank), "max": max(per_rank),
            "slowest_rank": max(range(len(per_rank)), key=per_rank.__getitem__)}
