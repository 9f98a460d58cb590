"""Measure where a data-parallel training step's time goes.

    python train.py                                   # VGG11, 2 ranks (CPU) or every GPU, per-phase
    table python train.py -m optim=bf16,powersgd bucket=25,100,2000 python train.py task=collectives
    # nccl-tests style microbenchmark python train.py --help

Config: conf/ on base/schema.py (see README). Each job's body is job.run.run_job, which returns a
JobResult. This is the one place the process ends: with a single run's exit code (0 ok, 1 a rank
failed, 2 bad input, 128 + a signal), or what a sweep's table callback says. What Hydra itself
refuses while composing (an unknown option, a misspelt key, a wrong type: said from the error's own
facts, job/config.py), and a disk that will not take Hydra's own files of the job (full, read-only),
are printed here as one line naming the fix, exit code 2; set HYDRA_FULL_ERROR=1 for Hydra's own
report."""

import os
import sys

import hydra
from omegaconf import DictConfig

from base.errors import ConfigError
from base.interrupt import Interrupted
from job.config import (
    CONF_DIR,
    check_added_keys,
    check_command_line,
    disk_error,
    hydra_error,
    plain_help,
    register_resolvers,
)
from job.run import JobResult, run_job

register_resolvers()

_ended: list[
    JobResult
] = []  # the jobs' results: Hydra's run mode does not hand the task's return value back


@hydra.main(
    version_base="1.3", config_path=str(CONF_DIR), config_name="config"
)  # absolute: tests import this
def app(cfg: DictConfig) -> JobResult:
    result = run_job(cfg)
    _ended.append(result)
    return result


def main() -> int:
    """The exit code of `python train.py ...`; never raises SystemExit (Hydra's --help, a callback's
    refusal and the sweep table's verdict come back as their code). Only an exception nobody foresaw
    escapes, with its traceback."""
    overrides = [a for a in sys.argv[1:] if not a.startswith("-")]
    asked = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = (
        "1"  # Hydra raises what it refuses, instead of printing several lines
    )
    _ended.clear()
    try:
        check_added_keys(overrides)
        check_command_line(sys.argv[1:])
        text = plain_help(sys.argv[1:])  # --help alone: without Hydra's unused group listing
        if text is not None:
            print(text)
            return 0
        app()
    except SystemExit as e:
        return _code(e)
    except Interrupted as e:  # a sweep stopped by a signal, without a table to write (job.run)
        return e.exit_code
    except Exception as e:
        error = (
            e
            if isinstance(e, ConfigError)
            else None
            if asked
            else hydra_error(e, overrides) or disk_error(e)
        )
        if error is None:
            raise
        print(f"error: {error}", file=sys.stderr)
        return ConfigError.exit_code
    finally:
        if asked is None:
            del os.environ["HYDRA_FULL_ERROR"]
    return (
        _ended[-1].exit_code if _ended else 0
    )  # in a sweep 0: its table's callback raises its verdict


def _code(e: SystemExit) -> int:
    """The exit code Python would give this SystemExit, its message printed as Python would."""
    if e.code is None or isinstance(e.code, int):
        return e.code or 0
    print(e.code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    code = main()
    # a process that became a rank keeps its code for a finished rank's exit
    # (launchers.rank.exiting); one that did not (--help, --cfg job, a refusal) never imported it,
    # nor torch with it
    rank = sys.modules.get("launchers.rank")
    sys.exit(rank.exiting(code) if rank is not None else code)
