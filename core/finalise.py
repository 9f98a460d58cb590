"""The one way a run ends: write its record, print what happened, log it to W&B once.

Called by the process that outlives the ranks, whatever happened: the process the user started (after the local
ranks ended), rank 0 itself when there is no such process (torchrun, a Slurm task), or the Slurm submitter for a job
that died without a record. Nothing else writes a record or talks to W&B about a run, so a run has exactly one
record and at most one W&B run."""
from __future__ import annotations

import sys
from pathlib import Path

import diagnosis
from results.record import Record


def finalise(record: Record, out_dir: str | Path, *, wandb: bool = True, quiet: bool = False) -> Path:
    """wandb=False: the run was logged already (a record amended with a root cause found later)."""
    diagnosis.attach(record)  # into record.result, so the record, the printout and W&B hold the same diagnosis
    path = record.write(out_dir)
    if not quiet:
        _print(record, path)
    if wandb:
        _log_wandb(record)
    return path


def _print(record: Record, path: Path) -> None:
    if record.result is not None and record.task:
        import tasks

        try:
            print(tasks.get(record.task).summarize(record.to_dict()), flush=True)
        except Exception as e:  # noqa: BLE001 - a summary never costs the record
            print(f"(summary unavailable: {type(e).__name__}: {e})", file=sys.stderr)
        if record.result.get("diagnosis"):
            print("\n" + diagnosis.format_text(record.result["diagnosis"]), flush=True)
    if record.status == "ok":
        print(f"\nrun record: {path}", flush=True)
        return
    print(f"\nerror: {record.error}", file=sys.stderr)
    if record.traceback:
        print(f"(traceback of the failing rank)\n{record.traceback}", file=sys.stderr)
    print(f"{record.status} run record: {path}", file=sys.stderr, flush=True)


def _log_wandb(record: Record) -> None:
    """W&B never decides the fate of a run: any failure here is reported and ignored; the record is already on disk.
    The logger settings are the run's own (its config's `logger`)."""
    logger_cfg = (record.config or {}).get("logger") or {}
    if logger_cfg.get("name") in (None, "none") or logger_cfg.get("mode") == "disabled":
        return
    try:
        from results import wandb_log

        wandb_log.log_run(record.to_dict(), logger_cfg)
    except Exception as e:  # noqa: BLE001
        print(f"warning: W&B logging failed ({type(e).__name__}: {e}); the run record is kept.", file=sys.stderr)

