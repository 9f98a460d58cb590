"""Measure where a data-parallel training step's time goes.

    python train.py                                   # VGG11, 2 ranks (CPU) or every GPU, per-phase table
    python train.py -m optim=bf16,powersgd bucket=25,100,2000
    python train.py task=collectives                  # nccl-tests style microbenchmark
    python train.py --help

Config: conf/ on base/schema.py (see README). Each job's body is job.run.run_job. What Hydra itself refuses while
composing (an unknown option, a misspelt key, a wrong type: said from the error's own facts, job/config.py), and a disk
that will not take Hydra's own files of the job (full, read-only), are printed here as one line naming the fix, exit
code 2; set HYDRA_FULL_ERROR=1 for Hydra's own report.
"""
import os
import sys

import hydra
from omegaconf import DictConfig

from job.config import CONF_DIR, check_added_keys, check_command_line, disk_error, hydra_error, register_resolvers
from base.errors import ConfigError
from job.run import run_job

register_resolvers()


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")   # absolute: tests import this
def app(cfg: DictConfig):
    return run_job(cfg)


def main() -> None:
    overrides = [a for a in sys.argv[1:] if not a.startswith("-")]
    asked = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"    # Hydra raises what it refuses, instead of printing several lines
    try:
        check_added_keys(overrides)
        check_command_line(sys.argv[1:])
        app()
    except Exception as e:
        error = e if isinstance(e, ConfigError) else None if asked else hydra_error(e, overrides) or disk_error(e)
        if error is None:
            raise
        print(f"error: {error}", file=sys.stderr)
        sys.exit(ConfigError.exit_code)
    finally:
        if asked is None:
            del os.environ["HYDRA_FULL_ERROR"]


if __name__ == "__main__":
    try:
        main()
    except SystemExit as e:   # again through sys.exit: a rank that finished keeps this code at exit (launchers.rank)
        sys.exit(e.code)
