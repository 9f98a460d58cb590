"""Who starts the ranks. One code path inside a rank (launchers.rank.run_rank) whoever started it:
  - already a rank (torchrun, or a Slurm task started by submitit/srun): run it here;
  - else: start world_size local ranks with torch.distributed's elastic launcher (torchrun's machinery)."""
from __future__ import annotations

import os


def already_a_rank() -> bool:
    if all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return True
    from launchers.slurm import export_rank_env

    return export_rank_env()
