"""Inside one rank, whoever started it: set the comm environment, start the process group, run the task. Rank 0
hands its outcome (the task's result, the environment, or the error) back to core.job, which turns it into the run
record: no rank writes a record itself.

While it runs, a rank turns SIGINT/SIGTERM into core.interrupt.Interrupted (so rank 0 can still hand in how far it
got) and, under the local launcher, beats (core.heartbeat) so that a rank that stops answering is named."""
from __future__ import annotations

import os
import socket
import sys
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

import tasks
from core import comm_env
from core.context import RankContext
from core.heartbeat import beating
from core.interrupt import Interrupted, signals_raise
from core.log import for_rank, get
from results.record import now

log = get(__name__)


@dataclass
class Outcome:
    """What rank 0 hands in. error is set when the rank failed; result then holds whatever was measured.
    progress: how far the task got (RankContext.progress); signal: the signal's name when one interrupted it."""
    started: str
    env: dict = field(default_factory=dict)
    result: dict | None = None
    error: str | None = None
    traceback: str | None = None
    progress: dict = field(default_factory=dict)
    signal: str | None = None


class RankError(RuntimeError):
    """Raised by rank 0 after its outcome was captured, so the job still fails with this rank named."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome.error)
        self.outcome = outcome


def own_gpu(local_rank: int, local_world: int) -> int | None:
    """The GPU index this rank owns, or None when ranks cannot have one GPU each. Either every local rank sees all
    the node's GPUs (torchrun, our launcher: cuda:LOCAL_RANK), or Slurm bound one GPU to each task
    (--gpus-per-task=1: each task sees a single device, cuda:0)."""
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n >= local_world:
        return local_rank
    if n == 1 and os.environ.get("SLURM_GPUS_PER_TASK") == "1":
        return 0
    return None


def pick_backend(requested: str, gpu: int | None) -> str:
    if requested != "auto":
        return requested
    return "nccl" if gpu is not None and dist.is_nccl_available() else "gloo"


def run_rank(plain: dict, job: dict) -> Outcome | None:
    """Entry point of every rank. RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT come from the environment
    (elastic launcher, torchrun, or submitit's TorchDistributedEnvironment on Slurm). Returns rank 0's Outcome
    (None on the other ranks); a failing or interrupted rank 0 raises RankError carrying it."""
    own_log = for_rank(job)
    rank = int(os.environ["RANK"])
    if own_log:
        log.info(f"rank {rank} of {os.environ['WORLD_SIZE']} started: pid {os.getpid()} on {socket.gethostname()}")
    outcome = Outcome(started=now())
    with signals_raise(), beating(job.get("launch_dir"), rank, outcome.progress):
        try:
            mine = _run_rank(plain, job, outcome)
        except BaseException as e:
            if own_log:
                log.info(f"rank {rank} ended: {outcome.error or f'{type(e).__name__}: {e}'} {outcome.progress}")
            raise
    if own_log:
        log.info(f"rank {rank} finished {outcome.progress}")
    return mine


def _run_rank(plain: dict, job: dict, outcome: Outcome) -> Outcome | None:
    cfg = OmegaConf.create(plain)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    output_dir = Path(job["output_dir"])
    try:
        comm_env.apply(cfg, output_dir)
        gpu = own_gpu(local_rank, local_world)
        backend = pick_backend(cfg.backend, gpu)
        device = torch.device("cpu")
        if gpu is not None:
            device = torch.device("cuda", gpu)
            torch.cuda.set_device(device)
        elif backend == "nccl":
            raise RuntimeError(f"backend=nccl but rank {rank} has no GPU of its own ({torch.cuda.device_count()} "
                               f"visible to {local_world} local ranks): use backend=gloo or one GPU per rank.")
        dist.init_process_group(backend, timeout=timedelta(seconds=float(cfg.timeout_s)),
                                **({"device_id": device} if backend == "nccl" else {}))
        ctx = RankContext(cfg=cfg, rank=rank, world_size=world_size, local_rank=local_rank, device=device,
                          backend=backend, output_dir=output_dir, hostname=socket.gethostname(),
                          progress=outcome.progress)
        outcome.env = environment(ctx)
        result = tasks.get(cfg.task).run(ctx)
        if rank != 0:
            return None
        transports = comm_env.transports_from_logs(output_dir)
        if transports is not None:
            result["nccl_transports"] = transports
        outcome.result = result
        return outcome
    except BaseException as e:
        if rank == 0 and isinstance(e, Interrupted):
            outcome.signal, outcome.error = e.name, f"rank 0 interrupted by {e.name}"
        elif rank == 0:
            outcome.error = f"rank {rank} failed: {type(e).__name__}: {e}"
            outcome.traceback = traceback.format_exc()
        if rank == 0:
            outcome.result = getattr(e, "result", None)  # e.g. a failed correctness check keeps its figures
            raise RankError(outcome) from e
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def environment(ctx: RankContext) -> dict:
    """What a reader needs to compare numbers across machines; gathered from every rank (before any timing)."""
    mine = {
        "host": ctx.hostname,
        "device": torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else "cpu",
        "cpu_count": os.cpu_count(),
    }
    everyone = [None] * ctx.world_size
    dist.all_gather_object(everyone, mine)
    nccl = None
    if torch.cuda.is_available() and dist.is_nccl_available():
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    return {
        "hostnames": sorted({r["host"] for r in everyone}),
        "cpu_count": everyone[0]["cpu_count"],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "python": sys.version.split()[0],
        "devices": [r["device"] for r in everyone],
        "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "backend": ctx.backend,
        "world_size": ctx.world_size,
        "vars": comm_env.recorded_vars(),
    }
