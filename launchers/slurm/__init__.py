"""Slurm through submitit: one multirun is one job array, one Slurm task is one rank.

  rank_env.py   inside a job: is this process a rank (export_rank_env), and the job id and log
  (job_info) settings.py   launcher.* (the one home of every Slurm setting): checks, resolvers, the
  submitit executor,
                and the refusal of hydra-submitit-launcher habits with the equivalent command
  state.py      on the submitting host: Slurm's state of the jobs and how each one ended
The Hydra launcher behind launcher=slurm (hydra/launcher=slurm_sweep) uses these from where Hydra
finds it: hydra_plugins/slurm_sweep_launcher/launcher.py."""

from launchers.slurm.rank_env import export_rank_env, job_info
from launchers.slurm.settings import check_config, check_run_mode

__all__ = ["check_config", "check_run_mode", "export_rank_env", "job_info"]
