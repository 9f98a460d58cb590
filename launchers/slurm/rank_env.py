"""Inside a Slurm job: is this process one rank of it, and what does a rank need from the job.

A rank is a task of a job step (srun): a task of a job that our launcher submitted (submitit's sbatch script runs
the tasks with srun, whatever their number), or a task of the user's own `srun -n N python train.py` with N > 1.
The batch script of sbatch and the shell of salloc have SLURM_* set too but are not a step: there
`python train.py` is the user's command and starts its own ranks, as on any machine.

The step's layout is read through submitit's JobEnvironment (the Slurm one, pointed at the step's variables rather
than the job's: a step may use part of the allocation).
"""
from __future__ import annotations

import os
import subprocess
import zlib
from typing import Any

from submitit.slurm.slurm import SlurmJobEnvironment


class StepEnvironment(SlurmJobEnvironment):
    """submitit's Slurm job environment for the current job step (SLURM_STEP_*: its tasks, nodes and node list)."""

    _env = {**SlurmJobEnvironment._env, "num_tasks": "SLURM_STEP_NUM_TASKS", "num_nodes": "SLURM_STEP_NUM_NODES",
            "nodes": "SLURM_STEP_NODELIST"}

    @property
    def step_id(self) -> str:
        return os.environ.get("SLURM_STEP_ID", "0")

    def master_port(self) -> int:
        """MASTER_PORT if the user set one, else a port derived from the job and step (20000-59999): every task
        of a step derives the same one, and two steps of one job get different ones."""
        if os.environ.get("MASTER_PORT"):
            return int(os.environ["MASTER_PORT"])
        return 20000 + zlib.crc32(f"{self.job_id}.{self.step_id}".encode()) % 40000


def _submitit_task() -> bool:
    """A task started by the sbatch script submitit wrote (it exports SUBMITIT_EXECUTOR before its srun)."""
    return os.environ.get("SUBMITIT_EXECUTOR") == "slurm" and "SLURM_STEP_ID" in os.environ


def _srun_task() -> bool:
    return "SLURM_STEP_ID" in os.environ and "SLURM_PROCID" in os.environ


def is_slurm_rank() -> bool:
    """True in a task of a job our launcher submitted (any number of tasks), or in an srun step of more than one
    task."""
    return _submitit_task() or (_srun_task() and StepEnvironment().num_tasks > 1)


def export_rank_env() -> bool:
    """Export RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the Slurm step and return
    True if this process is one of its ranks; else change nothing and return False. CUDA_VISIBLE_DEVICES stays as
    Slurm set it: which GPU a rank uses under each binding is device/placement.py's to decide."""
    if not is_slurm_rank():
        return False
    step = StepEnvironment()
    os.environ.update({
        "MASTER_ADDR": step.hostnames[0],
        "MASTER_PORT": str(step.master_port()),
        "RANK": str(step.global_rank),
        "WORLD_SIZE": str(step.num_tasks),
        "LOCAL_RANK": str(step.local_rank),
        "LOCAL_WORLD_SIZE": str(step.num_tasks // max(1, step.num_nodes)),
    })
    return True


def step_tasks() -> int:
    return StepEnvironment().num_tasks


def bound_gpus() -> str | None:
    """The GPUs Slurm gave this job on this node ("0,1"; from --gpus-per-node, --gres=gpu:N, --gpus...), or None when
    it gave none. Slurm sets these whether or not the node's CUDA works, which is the point of asking."""
    for var in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        if os.environ.get(var):
            return os.environ[var]
    return None


def job_info() -> dict[str, Any]:
    """{"slurm_job_id", "log"} of the Slurm job this process runs in ({} outside Slurm). In a job our launcher
    submitted the log is this task's output file (rank 0's, for the record rank 0 writes); for the user's own
    sbatch/srun it is the job's output file as Slurm reports it."""
    if _submitit_task():
        env = StepEnvironment()
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
        out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for word in out.split():
        if word.startswith(f"{name}="):
            return word.split("=", 1)[1]
    return None
