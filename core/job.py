"""One Hydra job: check the config, start (or become) the ranks, and end through core.finalise whatever happens.
In a multirun a failed job returns normally with a failed status, so the sweep goes on and the end-of-sweep table
shows it as a failed row; a single run exits non-zero (2: bad input, before any rank started; 1: a rank failed)."""
from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from core.config import prepare
from core.errors import ConfigError
from core.finalise import finalise
from launchers import already_a_rank
from results.record import Record

JOB_START_ENV = "DDP_COMM_JOB_START"  # epoch seconds this job began (tasks/train/result.py: time_budget)


def job_info() -> dict:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from launchers.slurm import job_info as slurm_job_info

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    overrides = list(hc.overrides.task)
    return {
        "name": hc.job.name,
        "num": hc.job.num if multirun else None,
        "output_dir": hc.runtime.output_dir,
        "sweep_dir": str(Path(hc.sweep.dir).resolve()) if multirun else None,
        "overrides": overrides,
        "command": " ".join(["python train.py", *overrides]),
        "multirun": multirun,
        **slurm_job_info(),
    }


def run_job(cfg: DictConfig, job: dict | None = None) -> "JobResult":
    """The body of every job. `job` (output_dir, overrides, ...) comes from Hydra unless given (tests)."""
    job = job or job_info()
    mark_job_start()
    try:
        plain = prepare(cfg)
        if (plain.get("repeats") or 1) > 1 and not job.get("multirun"):
            raise ConfigError(f"repeats={plain['repeats']} runs each configuration as separate jobs of a sweep: add -m "
                              f"(python train.py -m ... repeats={plain['repeats']}).")
    except ConfigError as e:
        if already_a_rank() and os.environ["RANK"] != "0":   # every rank refuses; rank 0 alone writes the record
            return JobResult(math.nan, status="failed", error=f"ConfigError: {e}")
        config = OmegaConf.to_container(cfg, resolve=False)
        return _end(Record.failed(config, job, f"ConfigError: {e}"), job, exit_code=2)
    if already_a_rank():
        return _as_a_rank(plain, job)
    from launchers.local import RankFailed, launch_local

    try:
        outcome = launch_local(plain, job)
    except RankFailed as e:
        o = e.outcome
        record = Record.failed(plain, job, str(e), traceback=e.traceback, env=o and o.env,
                               started=o and o.started, result=o and o.result)
        return _end(record, job, exit_code=1)
    return _end(Record.ok(plain, job, env=outcome.env, started=outcome.started, result=outcome.result), job)


_first_job = True


def mark_job_start() -> None:
    """When this job began, for the record's time budget; the ranks inherit it through the environment. The first
    job of a process began with the process (imports count: /proc gives it to about a second), later ones now."""
    global _first_job
    start = time.time()
    if _first_job:
        try:
            ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
            boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                        if line.startswith("btime"))
            start = min(start, boot + ticks / os.sysconf("SC_CLK_TCK"))
        except (OSError, ValueError, IndexError, StopIteration):
            pass
    _first_job = False
    os.environ[JOB_START_ENV] = repr(start)


def _as_a_rank(plain: dict, job: dict) -> dict:
    """torchrun or a Slurm task: this process is a rank and there is no parent of ours that outlives the ranks,
    so rank 0 finalises. The other ranks re-raise: their non-zero exit ends the job (srun --kill-on-bad-exit)."""
    from core.rank import RankError, run_rank

    try:
        outcome = run_rank(plain, job)
    except RankError as e:
        o = e.outcome
        record = Record.failed(plain, job, o.error, traceback=o.traceback, env=o.env, started=o.started,
                               result=o.result)
        return _end(record, job, exit_code=1)
    if outcome is None:
        return JobResult(math.nan)  # ranks other than 0: rank 0 returns the job's result
    return _end(Record.ok(plain, job, env=outcome.env, started=outcome.started, result=outcome.result), job)


class JobResult(float):
    """What a job returns to Hydra: the objective, samples/s (NaN for a failed job or a task without samples/s), as a
    float so optimising sweepers (hydra-optuna-sweeper's `float(return_value)`, Nevergrad, Ax) maximise it; the
    status, error and record path ride along as attributes. The sweep table reads the records, not this."""

    def __new__(cls, value: float, status: str = "ok", error: str | None = None, record: str | None = None):
        self = super().__new__(cls, value)
        self.status, self.error, self.record = status, error, record
        return self

    def __repr__(self) -> str:
        return f"JobResult({float(self)!r}, status={self.status!r})"


def _end(record: Record, job: dict, exit_code: int = 0) -> JobResult:
    path = finalise(record, job["output_dir"])
    if record.status == "ok":
        samples_per_s = ((record.result or {}).get("throughput") or {}).get("samples_per_s")
        return JobResult(math.nan if samples_per_s is None else samples_per_s, record=str(path))
    if job.get("multirun"):
        return JobResult(math.nan, status=record.status, error=record.error, record=str(path))
    sys.exit(exit_code)
