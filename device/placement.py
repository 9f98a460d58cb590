"""Where every rank computes and which backend its process group uses, decided once, the same way
for every rank.

`place()` is this rank's answer from what it can see (its GPU count, LOCAL_RANK/LOCAL_WORLD_SIZE,
the Slurm variables); `agree()` checks every rank's answer before any process group starts, so
nodes that see different GPU counts fail with one line instead of mixing nccl and gloo and hanging
at init. `settle()` runs both inside a rank, `preflight()` before the local launcher starts any.
Both are pure (GPU count and environment are arguments), so every Slurm GPU binding
(docs/slurm.md) is a unit test; a GPU job whose ranks would run on CPU fails loudly.
"""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Mapping

from base.errors import ConfigError
from device.host import gpu_count

if TYPE_CHECKING:  # torch is imported where it is used: job.config imports this module
    import torch

DEVICES = ("auto", "cpu", "cuda", "fake")
BACKENDS = ("auto", "nccl", "gloo")


class PlacementError(ConfigError):
    """A rank cannot be placed as asked; the message names the cause and the fix."""


@dataclass(frozen=True)
class Placement:
    kind: str  # "cuda" | "cpu" | "fake" (fake: CPU tensors through the CUDA code paths, tests only)
    gpu: int | None  # the rank's GPU among those it sees (cuda only)
    backend: str  # "nccl" | "gloo"
    how: str  # how the GPU was found, for the record
    shared: bool = (
        False  # device=cuda with more ranks than GPUs: ranks share GPUs on purpose (gloo only)
    )

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device("cuda", self.gpu) if self.kind == "cuda" else torch.device("cpu")


# ------------------------------------------------------------------------------ the Slurm variables
def _count(value: str | None) -> int | None:
    """'4', 'a100:4', 'a100:2,v100:1' -> 4, 4, 3 (Slurm's [type:]count lists)."""
    if not value:
        return None
    total = 0
    for item in str(value).split(","):
        tail = item.strip().rsplit(":", 1)[-1]
        if not tail.isdigit():
            return None
        total += int(tail)
    return total


def _ids(value: str | None) -> int | None:
    """'0,1,2,3' -> 4 (SLURM_STEP_GPUS / SLURM_JOB_GPUS list GPU indices)."""
    return len([v for v in str(value).split(",") if v.strip()]) if value else None


def gpus_per_task(env: Mapping[str, str]) -> int | None:
    if env.get("SLURM_GPUS_PER_TASK"):
        return _count(env["SLURM_GPUS_PER_TASK"])
    m = re.search(r"gres/gpu(?::[\w.-]+)?[=:](\d+)", env.get("SLURM_TRES_PER_TASK", ""))
    return int(m.group(1)) if m else None


def node_gpus(env: Mapping[str, str]) -> int | None:
    """GPUs Slurm gave this job step on this node, all its tasks together, where a variable says
    so."""
    for key, parse in (
        ("SLURM_GPUS_ON_NODE", _count),
        ("SLURM_STEP_GPUS", _ids),
        ("SLURM_JOB_GPUS", _ids),
        ("SLURM_GPUS_PER_NODE", _count),
    ):
        n = parse(env.get(key))
        if n:
            return n
    return None


def gpus_requested(env: Mapping[str, str]) -> str | None:
    """'NAME=value' of the first Slurm variable saying this job was given GPUs, else None."""
    for key in (
        "SLURM_GPUS_ON_NODE",
        "SLURM_STEP_GPUS",
        "SLURM_JOB_GPUS",
        "SLURM_GPUS_PER_TASK",
        "SLURM_GPUS_PER_NODE",
        "SLURM_GPUS",
    ):
        value = env.get(key)
        if value and value != "0":
            return f"{key}={value}"
    if gpus_per_task(env):
        return f"SLURM_TRES_PER_TASK={env['SLURM_TRES_PER_TASK']}"
    return None


def own_gpu(
    visible: int, local_rank: int, local_world: int, env: Mapping[str, str]
) -> tuple[int, str] | None:
    """(index, how) of the GPU this rank owns among the `visible` ones, or None when it cannot own
    one."""
    if visible >= local_world:
        return local_rank, f"cuda:{local_rank} of the {visible} GPUs every local rank sees"
    if visible == 0:
        return None
    per_task = gpus_per_task(env)
    if per_task == visible:
        return 0, f"Slurm bound {visible} GPU(s) to this task (--gpus-per-task={per_task})"
    node = node_gpus(env)
    if node is not None and node >= local_world * visible:
        return 0, (
            f"Slurm bound {visible} of the node's {node} GPUs to each of its {local_world} tasks "
            f"(--gpu-bind or the site's default)"
        )
    return None


def _where(visible: int, local_world: int, env: Mapping[str, str]) -> str:
    slurm = [
        f"{k}={env[k]}"
        for k in ("SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS", "SLURM_GPUS_PER_TASK")
        if env.get(k)
    ]
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    return (
        f"{local_world} rank(s) on this node, {visible} GPU(s) visible to each"
        + (f", CUDA_VISIBLE_DEVICES={cvd!r}" if cvd is not None else "")
        + (f", {', '.join(slurm)}" if slurm else "")
    )


def place(
    device: str,
    backend: str,
    visible: int,
    local_rank: int,
    local_world: int,
    env: Mapping[str, str],
    nccl_available: bool = True,
) -> Placement:
    """This rank's device and backend for `device=` and `backend=`. Raises PlacementError (one line:
    cause and fix)."""
    if device not in DEVICES:
        raise PlacementError(
            f"device={device!r} is not known; choose one of: {', '.join(DEVICES)}."
        )
    if backend not in BACKENDS:
        raise PlacementError(
            f"backend={backend!r} is not known; choose one of: {', '.join(BACKENDS)}."
        )
    if device in ("cpu", "fake"):
        if backend == "nccl":
            raise PlacementError(
                f"device={device} with backend=nccl: NCCL only moves CUDA tensors. "
                "Use backend=gloo (or auto), or device=cuda."
            )
        how = (
            "device=fake: CPU tensors through the CUDA code paths (test only)"
            if device == "fake"
            else "device=cpu"
        )
        return Placement(device, None, "gloo", how)
    if visible == 0:
        asked = gpus_requested(env)
        if asked:
            raise PlacementError(
                f"Slurm gave this job GPUs ({asked}) but rank {local_rank} sees none "
                f"(CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r}): its ranks would run "
                "on "
                "CPU. Check the job's GPU binding, or use device=cpu to run on CPU on purpose."
            )
        if device == "cuda" or backend == "nccl":
            raise PlacementError(
                f"{'device=cuda' if device == 'cuda' else 'backend=nccl'} needs CUDA GPUs and this "
                "rank sees none. Use device=cpu (or auto) with backend=gloo (or auto)."
            )
        return Placement("cpu", None, "gloo", "no GPU visible")
    owned = own_gpu(visible, local_rank, local_world, env)
    if owned is None:
        if device == "cuda" and backend == "gloo":
            gpu = local_rank % visible
            return Placement(
                "cuda",
                gpu,
                "gloo",
                f"cuda:{gpu}, shared: {_where(visible, local_world, env)}",
                shared=True,
            )
        raise PlacementError(
            f"rank {local_rank} cannot have a GPU of its own "
            f"({_where(visible, local_world, env)}). "
            "Run one rank per GPU (world_size / --ntasks-per-node / --gpus-per-task=1), or use "
            "device=cpu to run the ranks on CPU (device=cuda backend=gloo shares the GPUs)."
        )
    gpu, how = owned
    if backend == "auto":
        backend = "nccl" if nccl_available else "gloo"
    elif backend == "nccl" and not nccl_available:
        raise PlacementError(
            "backend=nccl but this torch build has no NCCL. Use backend=gloo (or auto)."
        )
    return Placement("cuda", gpu, backend, how)


# ------------------------------------------------------------------------------------ all the ranks
def agree(everyone: list[dict]) -> None:
    """Raise the same PlacementError on every rank unless all ranks placed themselves alike. Each
    entry: rank, host, and either error, or kind, backend, gpu (an identity: the GPU's UUID inside a
    rank) and shared."""
    failed = [r for r in everyone if r.get("error")]
    if failed:
        first = failed[0]
        others = f" (and {len(failed) - 1} other rank(s))" if len(failed) > 1 else ""
        raise PlacementError(f"rank {first['rank']} on {first['host']}{others}: {first['error']}")
    choices: dict[tuple, list[int]] = {}
    for r in everyone:
        choices.setdefault((r["kind"], r["backend"]), []).append(r["rank"])
    if len(choices) > 1:
        parts = "; ".join(
            f"ranks {_ranges(ranks)}: {kind}/{backend}"
            for (kind, backend), ranks in choices.items()
        )
        raise PlacementError(
            f"the ranks did not place themselves alike ({parts}): nodes see different GPUs. Give "
            "every node the same GPUs per rank, or set device= and backend= explicitly."
        )
    seen: dict[tuple, int] = {}
    for r in everyone:
        if r["kind"] != "cuda" or r.get("shared"):
            continue
        key = (r["host"], r["gpu"])
        if key in seen:
            raise PlacementError(
                f"ranks {seen[key]} and {r['rank']} on {r['host']} were given the same GPU "
                f"({r['gpu']}): the GPU binding shares GPUs between tasks. Bind one GPU per task "
                "(--gpus-per-task=1), or run one rank per GPU."
            )
        seen[key] = r["rank"]


def _ranges(ranks: list[int]) -> str:
    return (
        f"{ranks[0]}-{ranks[-1]}"
        if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1))
        else ",".join(map(str, ranks))
    )


def _facts(rank: int, host: str, placement: Placement, gpu_identity) -> dict:
    return {"rank": rank, "host": host, **asdict(placement), "gpu": gpu_identity}


def requested_device(cfg, cpu_by_default: bool = False) -> str:
    """device= as the task means it. cpu_by_default: the task's own CPU_BY_DEFAULT
    (tasks/__init__.py; task=pair_groups, the gloo thread's CPU experiment), so under device=auto it
    runs on CPU unless NCCL was asked for: a 1-GPU box must not refuse the default pairs=1."""
    device = str(cfg.get("device", "auto"))
    if device == "auto" and cpu_by_default and str(cfg.get("backend", "auto")) != "nccl":
        return "cpu"
    return device


def preflight(
    cfg,
    submitting: bool = False,
    gpus: int | None = None,
    ranks_started: bool | None = None,
    cpu_by_default: bool = False,
) -> Placement | None:
    """In the process the user started, before any rank: the placement every local rank will take
    (that of rank 0), agreed as the ranks will agree it. In a rank started already (torchrun, a
    Slurm task): this rank's own. None on a Slurm login node (submitting), which cannot tell. gpus,
    ranks_started: the host's (device.host.Host), injected by tests; default: this machine's.
    cpu_by_default: the task's (requested_device). Raises PlacementError."""
    device, backend = requested_device(cfg, cpu_by_default), str(cfg.get("backend", "auto"))
    if device not in DEVICES:
        raise PlacementError(
            f"device={device!r} is not known; choose one of: {', '.join(DEVICES)}."
        )
    if submitting:
        return None
    visible = gpu_count() if gpus is None else gpus
    import torch.distributed

    nccl = torch.distributed.is_nccl_available()
    if ranks_started if ranks_started is not None else "RANK" in os.environ:
        world = int(os.environ.get("WORLD_SIZE", cfg.world_size))
        return place(
            device,
            backend,
            visible,
            int(os.environ.get("LOCAL_RANK", 0)),
            int(os.environ.get("LOCAL_WORLD_SIZE", world)),
            os.environ,
            nccl,
        )
    if cfg.launcher.name != "local":
        return None
    world = int(cfg.world_size)
    placements = [place(device, backend, visible, r, world, os.environ, nccl) for r in range(world)]
    agree([_facts(r, "this host", p, p.gpu) for r, p in enumerate(placements)])
    return placements[0]


def settle(
    cfg,
    rank: int,
    world_size: int,
    local_rank: int,
    local_world: int,
    timeout: timedelta,
    cpu_by_default: bool = False,
):
    """Inside a rank, before its process group: this rank's placement, agreed with every other rank
    through the rendezvous store (the store `env://` would give init_process_group, but one that
    ranks make themselves listens on MASTER_ADDR's address only: base/store.py). Returns (placement,
    store to pass to init_process_group)."""
    import torch
    import torch.distributed as dist

    from base.store import rank_store

    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(
        True
    ):  # the agent's store (local launcher, torchrun)
        store, _, _ = next(
            dist.rendezvous("env://", rank=rank, world_size=world_size, timeout=timeout)
        )
    # ranks that make their own (Slurm tasks): on MASTER_ADDR's address only, not every interface
    else:
        store = rank_store(rank, world_size, spans_hosts=world_size > local_world, timeout=timeout)
    store.set_timeout(timeout)
    host = socket.gethostname()
    try:
        mine = place(
            requested_device(cfg, cpu_by_default),
            str(cfg.backend),
            gpu_count(),
            local_rank,
            local_world,
            os.environ,
            dist.is_nccl_available(),
        )
        identity = (
            str(torch.cuda.get_device_properties(mine.gpu).uuid) if mine.kind == "cuda" else None
        )
        facts = _facts(rank, host, mine, identity)
    except PlacementError as e:
        mine, facts = None, {"rank": rank, "host": host, "error": str(e)}
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    board = dist.PrefixStore(f"ddp_comm/placement/{attempt}", store)
    board.set(str(rank), json.dumps(facts))
    keys = [str(r) for r in range(world_size)]
    board.wait(keys)
    agree([json.loads(board.get(k)) for k in keys])
    return mine, dist.PrefixStore("default_pg", store)
