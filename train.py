"""Measure where a data-parallel training step's time goes.

    python train.py                                   # VGG11, 2 ranks (CPU) or every GPU, per-phase table
    python train.py -m optim=bf16,powersgd bucket=25,100,2000
    python train.py task=collectives                  # nccl-tests style microbenchmark

Config: conf/ (see README). The work happens in launchers/job.py:run_job, which tests call directly.
"""
import hydra
from omegaconf import DictConfig

from core.config import register_resolvers
from core.job import run_job

register_resolvers()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig):
    return run_job(cfg)


if __name__ == "__main__":
    main()
