"""One Hydra job: check the config, start (or become) the ranks, and make sure a record exists whatever happens.
In a multirun a failed job returns normally with a failed record, so the sweep goes on and the end-of-sweep table
shows it as a failed row; a single run exits non-zero with the failing rank's message."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from engine.config import prepare
from engine.errors import ConfigError
from launchers import already_a_rank
from results.record import RECORD_NAME, read_record, write_record


def job_info() -> dict:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    overrides = list(hc.overrides.task)
    info = {
        "name": hc.job.name,
        "num": hc.job.num if multirun else None,
        "output_dir": hc.runtime.output_dir,
        "sweep_dir": str(Path(hc.sweep.dir).resolve()) if multirun else None,
        "overrides": overrides,
        "command": " ".join(["python train.py", *overrides]),
        "multirun": multirun,
    }
    from launchers.slurm import job_info as slurm_job_info

    info.update(slurm_job_info())
    return info


def run_job(cfg: DictConfig, job: dict | None = None) -> dict:
    job = job or job_info()
    try:
        plain = prepare(cfg)
    except ConfigError as e:
        return _failed(cfg, job, f"ConfigError: {e}", exit_code=2)
    if already_a_rank():
        from engine.runner import run_rank

        try:
            return run_rank(plain, job) or {"status": "ok"}
        except Exception as e:
            if os.environ.get("RANK", "0") != "0":
                raise  # only rank 0 owns the record; this task's non-zero exit ends the job (srun --kill-on-bad-exit)
            return _failed(plain, job, f"{type(e).__name__}: {e}", exit_code=1, keep_record=True)
    from launchers.local import RankFailed, launch_local

    try:
        return launch_local(plain, job) or {"status": "ok"}
    except RankFailed as e:
        tb = e.traceback if e.traceback and "ConfigError" not in e.message else None
        return _failed(plain, job, str(e), exit_code=1, traceback=tb)


def _failed(cfg, job: dict, error: str, exit_code: int, traceback: str | None = None, keep_record: bool = False) -> dict:
    """Record the failure (rank 0 may have written one already: the root cause found here replaces its error),
    then exit non-zero for a single run or return a failed status in a multirun."""
    out = Path(job["output_dir"])
    path = out / RECORD_NAME
    try:
        record = read_record(path) if path.exists() else None
    except Exception:  # noqa: BLE001 - an unreadable record is replaced
        record = None
    if record is None:
        config = cfg if isinstance(cfg, dict) else OmegaConf.to_container(cfg, resolve=False)
        config.pop("hydra", None)
        record = {"status": "failed", "task": config.get("task"), "command": job.get("command"),
                  "overrides": job.get("overrides", []),
                  "job": {k: job.get(k) for k in ("name", "num", "output_dir", "sweep_dir", "slurm_job_id", "log")},
                  "config": config, "env": {}, "result": None}
    record.pop("_path", None)
    record.pop("schema_version", None)
    record["status"] = "failed"
    if not keep_record or not record.get("error"):
        record["error"] = error
    if traceback:
        record["traceback"] = traceback
    write_record(out, record)
    _tell_wandb(record, cfg, out)
    print(f"\nerror: {error}", file=sys.stderr)
    if traceback:
        print(f"(traceback of the failing rank)\n{traceback}", file=sys.stderr)
    print(f"failed run record: {path}", file=sys.stderr)
    if job.get("multirun"):
        return {"status": "failed", "error": error, "record": str(path)}
    sys.exit(exit_code)


def _tell_wandb(record: dict, cfg, out: Path) -> None:
    """A failed run is logged (marked failed) once, by the process that outlives the ranks; never fatal."""
    cfg = OmegaConf.create(cfg) if isinstance(cfg, dict) else cfg
    if OmegaConf.select(cfg, "logger.name") != "wandb" or OmegaConf.select(cfg, "logger.mode") == "disabled":
        return
    try:
        from results import wandb_log

        if not wandb_log.logged(out):
            wandb_log.log_run(record, cfg)
    except Exception as e:  # noqa: BLE001
        print(f"warning: W&B logging failed ({type(e).__name__}: {e}); the run record is kept.", file=sys.stderr)
