"""The one way a run ends: write its record, print what happened, log it to W&B once.

Called by the process that outlives the ranks, whatever happened: the process the user started, rank
0 itself when there is no such process (torchrun, a Slurm task), or the Slurm submitter for a job
that died without a record. Nothing else writes a record or talks to W&B about a run, so a run has
exactly one record and at most one W&B run. A record is never lost to its directory: when the
output dir cannot be written at the end, it goes to the first of fallback_dirs() that takes it
(directories of this user's own, mode 0700, never a planted symbolic link), named on the console.
W&B is bounded by its own timeouts (results/wandb_log.py) and comes after the record is on disk and
after a failure's error line, so the record and the error never wait for it.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
import time
from pathlib import Path

import diagnosis
from job import brief
from comm.link import describe as describe_link, is_emulated
from base.build import build
from base.interrupt import Interrupted
from base.log import CONSOLE_ONLY, FILE_ONLY, get
from base.record import Record, setting

log = get(__name__)


def fallback_dirs() -> list[Path]:
    return [
        Path(tempfile.gettempdir()) / "ddp-comm-records",
        Path.home() / ".cache" / "ddp-comm-records",
        Path.cwd() / "ddp-comm-records",
    ]


def finalise(
    record: Record, out_dir: str | Path, *, wandb: bool = True, quiet: bool = False
) -> Path | None:
    """wandb=False: the run was logged already (a record amended with a root cause found later).
    Returns where the record is (None only when no place at all would take it; it is then printed
    whole)."""
    diagnosis.attach(
        record
    )  # into record.result, so the record, the printout and W&B hold the same diagnosis
    try:
        path, problem = record.write(out_dir), None
    except OSError as e:
        path, problem = None, e
    if not quiet:
        _print_summary(record, out_dir)
    if problem is not None:
        path = _write_elsewhere(record, out_dir, problem)
    if (
        wandb and record.status == "ok"
    ):  # a run that worked: its record path is the last line it prints
        _log_wandb(record)
    if not quiet:
        _print_end(record, path)
    if wandb and record.status != "ok":  # a failure's error line never waits for W&B
        _log_wandb(record)
    return path


def private_dir(base: Path) -> Path:
    """base as a directory only this user can use: made with mode 0700, or an existing one checked
    through a descriptor opened without following a symbolic link (O_NOFOLLOW), owned by this user,
    and tightened to 0700. Raises OSError saying why it cannot be used."""
    base.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        if os.path.islink(base):
            raise OSError(
                e.errno, "a symbolic link (someone else may have planted it)", str(base)
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            raise PermissionError(
                errno.EPERM, f"owned by another user (uid {st.st_uid})", str(base)
            )
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return base


def _write_elsewhere(record: Record, out_dir: str | Path, problem: OSError) -> Path | None:
    name = f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{os.getpid()}"
    for base in fallback_dirs():
        try:
            path = record.write(private_dir(base) / name)
        except OSError as e:
            if os.path.lexists(base) and e.filename == str(base):
                log.warning(f"warning: not saving the run record in {base}: {e.strerror}")
            continue
        log.warning(
            f"warning: cannot write the run record to {out_dir} ({problem.strerror or problem}); "
            f"saved it to {path} instead"
        )
        return path
    log.error(
        f"error: cannot write the run record to {out_dir} ({problem.strerror or problem}) nor to "
        "any of "
        f"{', '.join(map(str, fallback_dirs()))}; here it is:\n"
        + json.dumps(record.to_dict(), indent=2, default=str)
    )
    return None


def _print_summary(record: Record, out_dir: str | Path) -> None:
    """verbose=true: the task's full summary and the whole diagnosis on the console. By default the
    console gets the brief form (job/brief.py: at most MAX_LINES with the record path) and the job
    log the full text."""
    result = record.result
    warnings = (result.warnings if result is not None else None) or []
    diag = (
        result.diagnosis.to_dict() if result is not None and result.diagnosis is not None else None
    )
    if result is not None and result.headline is not None and record.task:
        import tasks

        task = tasks.get(record.task)
        try:
            full = [task.summarize(record)]
            short = getattr(task, "brief", None)
            short = short(record) if short is not None else None
        except Exception as e:  # noqa: BLE001 - a summary never costs the record
            full, short = [f"(summary unavailable: {type(e).__name__}: {e})"], None
        link = record.env.link
        if is_emulated(link):
            full.append(describe_link(link))
            short = None if short is None else [*short, describe_link(link)]
        if diag:
            full.append("\n" + diagnosis.format_text(diag, record=record))
        if _verbose(record) or (short is None and not _in_sweep(record)):
            log.info("\n".join(full))
        elif _in_sweep(
            record
        ):  # the sweep prints one line per job (results/callbacks.py); the log has it all
            log.info("\n".join(full), extra=FILE_ONLY)
        else:
            log.info("\n".join(full), extra=FILE_ONLY)
            if diag and getattr(task, "DIAGNOSED", True):
                budget = brief.MAX_LINES - len(short) - 2 - len(warnings)  # blank + record path
                short = [
                    *short,
                    "",
                    *brief.diagnosis_lines(result.diagnosis, budget, str(out_dir), record),
                ]
            log.info("\n".join(short), extra=CONSOLE_ONLY)
    for warning in warnings:
        log.warning(f"warning: {warning}")


def _verbose(record: Record) -> bool:
    return bool(record.setting("verbose"))


def _in_sweep(record: Record) -> bool:
    return bool(record.job.sweep_dir)


def _print_end(record: Record, path: Path | None) -> None:
    if record.status == "ok":
        log.info(
            ("\n" if _verbose(record) else "") + f"run record: {path}",
            extra=FILE_ONLY if _in_sweep(record) and not _verbose(record) else None,
        )
    elif (
        record.status == "interrupted"
    ):  # one line: the user knows why, a traceback would only hide the path
        log.warning(f"{record.error}; interrupted run record: {path}")
    else:
        log.error(f"\nerror: {record.error}")
        if record.traceback:
            log.error(f"(traceback of the failing rank)\n{record.traceback}")
        log.error(f"{record.status} run record: {path}")


def _log_wandb(record: Record) -> None:
    """W&B never decides the fate of a run: any failure here is reported and ignored; the record is
    already on disk. The logger settings are the run's own (its config's `logger`), resolved: the
    record keeps keys that came from the environment as typed (base/provenance.py), and W&B decides
    what of them it may see (results/wandb_log.py)."""
    logger_cfg = dict(setting(_resolved(record.config), "logger", {}))
    if not logger_cfg.get("_target_") or logger_cfg.get("mode") == "disabled":
        return
    try:
        build(
            logger_cfg, record=record.to_dict(), cfg=logger_cfg
        )  # logger._target_: results.wandb_log.log_run
    except (Exception, Interrupted) as e:  # noqa: BLE001 - the logger never decides the fate of a run
        log.warning(
            f"warning: W&B logging failed ({type(e).__name__}: {e}); the run record is kept."
        )


def _resolved(config: dict | None) -> dict:
    """The recorded config with its typed `${oc.env:...}` keys resolved again (this process has the
    environment)."""
    if not config:
        return {}
    try:
        from omegaconf import OmegaConf

        return OmegaConf.to_container(OmegaConf.create(config), resolve=True)
    except Exception:  # noqa: BLE001 - e.g. a variable gone since: the text as recorded
        return config
