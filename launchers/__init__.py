"""Who starts the ranks, and what each one runs. One code path inside a rank (launchers/rank.py:
run_rank) whoever started it:
  - already a rank (torchrun, or a Slurm task started by submitit/srun): the job becomes it
    (`become_rank`) and runs
    it here;
  - else: start world_size local ranks with torch.distributed's elastic launcher (torchrun's
    machinery, local.py).

`already_a_rank` only looks; `become_rank` is the one place that exports a Slurm step's rank
variables, called once at the start of a job (job/run.py), so that no config check changes the
process environment."""

from __future__ import annotations

import os

TORCH_RANK_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def already_a_rank() -> bool:
    """Whether this process is one rank of a job started for it: torchrun's variables, or a Slurm
    step's task."""
    if all(k in os.environ for k in TORCH_RANK_VARS):
        return True
    from launchers.slurm.rank_env import is_slurm_rank

    return is_slurm_rank()


def become_rank() -> bool:
    """Make this process the rank it is (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_* from the Slurm step,
    where torchrun has not set them already); True when it is one. Outside a rank nothing
    changes."""
    if all(k in os.environ for k in TORCH_RANK_VARS):
        return True
    from launchers.slurm.rank_env import export_rank_env

    return export_rank_env()
