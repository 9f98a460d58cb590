"""Inside one rank, whoever started it: set the comm environment, start the process group, run the task, and on
rank 0 write the run record, print the summary and log to W&B."""
from __future__ import annotations

import importlib
import os
import socket
import sys
import traceback
from datetime import datetime, timedelta, timezone
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from engine import comm_env
from engine.context import RankContext
from results.record import write_record

TASKS = {
    "train": "engine.train",
    "collectives": "comm.collectives",
    "grad_sync": "comm.grad_sync",
    "pair_groups": "comm.pair_groups",
}


def task_module(name: str):
    return importlib.import_module(TASKS[name])


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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


def run_rank(plain: dict, job: dict) -> dict | None:
    """Entry point of every rank. RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT come from the environment
    (elastic launcher, torchrun, or submitit's TorchDistributedEnvironment on Slurm)."""
    cfg = OmegaConf.create(plain)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    output_dir = Path(job["output_dir"])
    started = now()
    comm_env.apply(cfg, output_dir)
    gpu = own_gpu(local_rank, local_world)
    backend = pick_backend(cfg.backend, gpu)
    device = torch.device("cpu")
    if gpu is not None:
        device = torch.device("cuda", gpu)
        torch.cuda.set_device(device)
    elif backend == "nccl":
        raise RuntimeError(f"backend=nccl but rank {rank} has no GPU of its own ({torch.cuda.device_count()} visible "
                           f"to {local_world} local ranks): use backend=gloo or one GPU per rank.")
    dist.init_process_group(backend, timeout=timedelta(seconds=float(cfg.timeout_s)),
                            **({"device_id": device} if backend == "nccl" else {}))
    ctx = RankContext(cfg=cfg, rank=rank, world_size=world_size, local_rank=local_rank, device=device,
                      backend=backend, output_dir=output_dir, hostname=socket.gethostname())
    module = task_module(cfg.task)
    try:
        env = environment(ctx)
        result = module.run(ctx)
        if not ctx.is_main:
            return None
        record = base_record(plain, job, env, started, status="ok")
        transports = comm_env.transports_from_logs(output_dir)
        if transports is not None:
            result["nccl_transports"] = transports
        record["result"] = result
        write_record(output_dir, record)
        print(module.summarize(record), flush=True)
        print(f"\nrun record: {output_dir / 'run_record.json'}", flush=True)
        log_to_wandb(record, cfg)
        return {"status": "ok", "record": str(output_dir / "run_record.json")}
    except BaseException as e:
        if ctx.is_main:
            record = base_record(plain, job, locals().get("env") or {}, started, status="failed")
            record["error"] = f"rank {rank}: {type(e).__name__}: {e}"
            record["traceback"] = traceback.format_exc()
            record["result"] = getattr(e, "result", None)  # e.g. a failed correctness check keeps its figures
            write_record(output_dir, record)  # W&B is told by launchers/job.py, which outlives the ranks
            if record["result"] is not None:
                print(module.summarize(record), flush=True)
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


def base_record(plain: dict, job: dict, env: dict, started: str, status: str) -> dict:
    return {
        "status": status,
        "error": None,
        "task": plain["task"],
        "command": job.get("command"),
        "overrides": job.get("overrides", []),
        "job": {k: job.get(k) for k in ("name", "num", "output_dir", "sweep_dir", "slurm_job_id", "log")},
        "config": plain,
        "env": env,
        "started": started,
        "finished": now(),
    }


def log_to_wandb(record: dict, cfg) -> None:
    """W&B never decides the fate of a run: any failure here is reported and ignored; the record is already on disk."""
    if cfg.logger.name != "wandb" or cfg.logger.get("mode") == "disabled":
        return
    try:
        from results.wandb_log import log_run

        log_run(record, cfg)
    except Exception as e:  # noqa: BLE001
        print(f"warning: W&B logging failed ({type(e).__name__}: {e}); the run record is kept.", file=sys.stderr)
