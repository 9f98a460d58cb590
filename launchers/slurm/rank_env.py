"""Inside a Slurm job: is this process one rank of it, and what does a rank need from the job.

A rank is a task of a job step (srun): a task of a job that our launcher submitted (submitit's
sbatch script runs the tasks with srun, whatever their number), or a task of the user's own `srun -n
N python train.py` with N > 1. The batch script of sbatch and the shell of salloc have SLURM_* set
too but are not a step: there
`python train.py` is the user's command and starts its own ranks, as on any machine.

`is_slurm_rank` only reads the environment. `export_rank_env` (launchers.become_rank, once at the
start of a job) exports the rank's variables: in a submitit task through submitit's own
TorchDistributedEnvironment; in the user's own srun step from the step's variables (SLURM_STEP_*: a
step may use part of the allocation, so the job's node list and task count are not the step's)."""

from __future__ import annotations

import os
import re
import subprocess
import zlib
from typing import Any


def _submitit_task() -> bool:
    """A task started by the sbatch script submitit wrote (it exports SUBMITIT_EXECUTOR before its
    srun)."""
    return os.environ.get("SUBMITIT_EXECUTOR") == "slurm" and "SLURM_STEP_ID" in os.environ


def _srun_task() -> bool:
    return "SLURM_STEP_ID" in os.environ and "SLURM_PROCID" in os.environ


def step_tasks() -> int:
    """The tasks of this job step (SLURM_STEP_NUM_TASKS; srun also sets SLURM_NTASKS to the
    step's)."""
    return int(os.environ.get("SLURM_STEP_NUM_TASKS") or os.environ.get("SLURM_NTASKS") or 1)


def is_slurm_rank() -> bool:
    """True in a task of a job our launcher submitted (any number of tasks), or in an srun step of
    more than one task. Reads the environment only."""
    return _submitit_task() or (_srun_task() and step_tasks() > 1)


def first_host(nodelist: str) -> str:
    """The first host of a Slurm host list: 'node[03-05,9],gpu1' -> 'node03' (the prefix, then the
    first number of its first range, zero padding kept)."""
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not m:
        return nodelist
    prefix, ranges = m.groups()
    return prefix + (re.split(r"[-,]", ranges)[0] if ranges else "")


def export_rank_env() -> bool:
    """Export RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the
    Slurm step and return True if this process is one of its ranks; else change nothing and return
    False. CUDA_VISIBLE_DEVICES stays as Slurm set it: which GPU a rank uses under each binding is
    device/placement.py's to decide."""
    if not is_slurm_rank():
        return False
    if _submitit_task():
        from submitit.helpers import TorchDistributedEnvironment

        TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        return True
    tasks, nodes = step_tasks(), int(os.environ.get("SLURM_STEP_NUM_NODES") or 1)
    job, step = os.environ.get("SLURM_JOB_ID", "0"), os.environ.get("SLURM_STEP_ID", "0")
    # every task of a step derives the same port (20000-59999) and two steps of one job get
    # different ones
    port = os.environ.get("MASTER_PORT") or str(
        20000 + zlib.crc32(f"{job}.{step}".encode()) % 40000
    )
    os.environ.update(
        {
            "MASTER_ADDR": first_host(
                os.environ.get("SLURM_STEP_NODELIST")
                or os.environ.get("SLURM_NODELIST")
                or "localhost"
            ),
            "MASTER_PORT": port,
            "RANK": os.environ["SLURM_PROCID"],
            "WORLD_SIZE": str(tasks),
            "LOCAL_RANK": os.environ.get("SLURM_LOCALID", "0"),
            "LOCAL_WORLD_SIZE": str(tasks // max(1, nodes)),
        }
    )
    return True


def bound_gpus() -> str | None:
    """The GPUs Slurm gave this job on this node ("0,1"; from --gpus-per-node, --gres=gpu:N,
    --gpus...), or None when it gave none. Slurm sets these whether or not the node's CUDA works,
    which is the point of asking."""
    for var in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        if os.environ.get(var):
            return os.environ[var]
    return None


def job_info() -> dict[str, Any]:
    """{"slurm_job_id", "log"} of the Slurm job this process runs in ({} outside Slurm). In a job
    our launcher submitted the log is this task's output file (rank 0's, for the record rank 0
    writes); for the user's own sbatch/srun it is the job's output file as Slurm reports it."""
    if _submitit_task():
        import submitit

        env = submitit.JobEnvironment()
        log = str(env.paths.stdout) if os.environ.get("SUBMITIT_FOLDER") else None
        return {"slurm_job_id": env.job_id, "log": log}
    if "SLURM_JOB_ID" not in os.environ:
        return {}
    job_id = os.environ["SLURM_JOB_ID"]
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        job_id = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID')}"
    return {"slurm_job_id": job_id, "log": _scontrol_field(os.environ["SLURM_JOB_ID"], "StdOut")}


def _scontrol_field(job_id: str, name: str) -> str | None:
    try:
        out = subprocess.run(
            ["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for word in out.split():
        if word.startswith(f"{name}="):
            return word.split("=", 1)[1]
    return None
