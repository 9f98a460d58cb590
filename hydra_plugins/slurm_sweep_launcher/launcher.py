"""The Hydra launcher behind launcher=slurm: hydra-submitit-launcher's SlurmLauncher, made to
survive failed jobs.

It submits a multirun as one job array (settings from launcher.*, see settings.py), waits for every
job, gives a job that died without a run record (killed, out of memory, time limit, node failure)
its failed record through job.finalise, and returns normally, so that the end-of-sweep table is
always made: Hydra's sweeper raises on the first failed job return, which would skip
on_multirun_end. conf/launcher/slurm.yaml selects it through hydra/launcher=slurm_sweep
(hydra_plugins/slurm_sweep_launcher/, where Hydra requires the launcher class to be)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import (
    SlurmLauncher as SubmititSlurmLauncher,
)

from base.errors import ConfigError
from base.interrupt import Interrupted
from job.run import JobResult
from launchers.slurm import settings, state


class SlurmSweepLauncher(SubmititSlurmLauncher):
    """In each Slurm task: run the Hydra job (the plugin's __call__) and raise a failed job's error.
    On the submitting host: check every job, submit the array, wait, and turn every job that failed
    into a failed row."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # train.py's module code (its resolver registration) does not run in a task, the pickled
        # task function does: register what the config interpolates before Hydra loads the job's
        # config
        from job.config import register_resolvers

        register_resolvers()
        try:
            ret = super().__call__(*args, **kwargs)
        except Interrupted as e:  # this task's end, as train.py's: 128 + the signal, no traceback
            raise SystemExit(e.exit_code) from None
        from hydra.core.utils import JobStatus

        if ret.status == JobStatus.FAILED:
            # Hydra caught this task's exception (run_job never raises). Raise it again: the
            # traceback goes to this task's log, submitit keeps it as the task's error, and the
            # non-zero exit ends the job step at once (srun --kill-on-bad-exit=1) instead of leaving
            # the other ranks to find out.
            # the job's exception (public .return_value raises it too, after a stderr line)
            raise ret._return_value
        return ret

    def launch(self, job_overrides, initial_job_idx):
        from hydra.core.singleton import Singleton
        from hydra.core.utils import filter_overrides
        from omegaconf import OmegaConf

        from job.config import prepare

        assert self.config is not None and self.hydra_context is not None
        refusal = settings.stock_plugin_refusal(
            self.config, self.params, OmegaConf.to_container(OmegaConf.structured(SlurmQueueConf))
        )
        if refusal:
            _refuse(refusal)
        loader = self.hydra_context.config_loader
        for i, overrides in enumerate(
            job_overrides
        ):  # every job's config, before anything is queued
            try:
                prepare(loader.load_sweep_config(self.config, list(overrides)), submitting=True)
            except ConfigError as e:
                _refuse(
                    f"job #{initial_job_idx + i} ({' '.join(filter_overrides(overrides))}): {e}"
                )
        if shutil.which("sbatch") is None:
            _refuse(
                "launcher=slurm needs Slurm's sbatch on PATH (run on a Slurm login node; to try it "
                "on one "
                "machine as root: launchers/slurm_cluster/start.sh)."
            )
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        folder = sweep_dir / settings.SUBMITIT_DIR / "%j"
        executor = settings.make_executor(
            OmegaConf.to_container(self.config.launcher, resolve=True),
            folder,
            job_name=str(self.config.hydra.job.name),
        )
        nums = [initial_job_idx + i for i in range(len(job_overrides))]
        for num, overrides in zip(nums, job_overrides):
            print(
                f"[slurm] #{num}: {' '.join(filter_overrides(overrides)) or '(no overrides)'}",
                flush=True,
            )
        job_params = [
            (list(o), "hydra.sweep.dir", num, f"job_id_for_{num}", Singleton.get_state())
            for num, o in zip(nums, job_overrides)
        ]
        jobs = self._submit(executor, job_params, folder)
        array_id = jobs[0].job_id.split("_")[0]
        print(
            f"[slurm] submitted {len(jobs)} job(s) as Slurm job {array_id} ({jobs[0].num_tasks} "
            "task(s) each); "
            f"logs: {sweep_dir / settings.SUBMITIT_DIR}",
            flush=True,
        )
        try:
            state.wait(jobs)
        except KeyboardInterrupt:
            print(
                f"\n[slurm] interrupted: the jobs keep running (scancel {array_id} stops them); "
                "their records "
                f"land in {sweep_dir}",
                file=sys.stderr,
                flush=True,
            )
            raise
        return [
            self._job_return(job, list(o), num, sweep_dir)
            for job, o, num in zip(jobs, job_overrides, nums)
        ]

    def _submit(self, executor, job_params, folder: Path) -> list:
        try:
            return executor.map_array(self, *zip(*job_params))
        except Exception as e:  # noqa: BLE001 - sbatch refused the array: say why, with what we asked for
            from submitit.core.utils import JobPaths

            detail = str(getattr(e, "stderr", None) or e).strip()
            scripts = sorted(
                JobPaths.get_first_id_independent_folder(folder).glob(".submission_file_*.sh"),
                key=lambda p: p.stat().st_mtime,
            )
            _refuse(
                f"sbatch refused the job array: {' '.join(detail.split())}. Check "
                "launcher.partition, account, "
                "qos, constraint, gres, gpus_per_node, cpus_per_task, mem_gb and "
                "additional_parameters"
                + (f" (the sbatch script: {scripts[-1]})." if scripts else ".")
            )

    def _job_return(self, job, overrides: list[str], num: int, sweep_dir: Path):
        """Rank 0's JobReturn for a job that succeeded; for one that failed, a COMPLETED return
        saying so, after its run record has the failure (Hydra's sweeper re-raises a FAILED return,
        which would skip the sweep table: the failure lives in the record, and the table's callback
        makes the sweep exit non-zero)."""
        from hydra.core.utils import JobReturn, JobStatus

        end = state.ending(job)
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        output_dir = _output_dir(sweep_config, num, job.job_id)
        if end.error is None and isinstance(end.returned, JobReturn):
            return end.returned
        error = end.error or "the job ended without a result"
        hung = _hung_error(
            output_dir
        )  # rank 0 declared the job hung and wrote its record, then every rank left
        status, error = ("hung", hung) if hung else ("failed", error)
        print(
            f"[slurm] job #{num} (Slurm {job.job_id}) {status}: {error}\n        log: {end.log}",
            file=sys.stderr,
            flush=True,
        )
        record = _record_failure(
            output_dir, error, end, sweep_config, overrides, num, sweep_dir, job.job_id
        )
        failed = (
            end.returned
            if isinstance(end.returned, JobReturn)
            else JobReturn(
                overrides=overrides,
                working_dir=str(output_dir),
                task_name=str(sweep_config.hydra.job.name),
            )
        )
        failed.status = JobStatus.COMPLETED
        failed.return_value = JobResult(status=status, error=error, record=str(record))
        return failed


def _hung_error(output_dir: Path) -> str | None:
    """The error of the job's record when rank 0 wrote it as `hung` (launchers.hang.store_watch):
    the ranks then end themselves, so Slurm has only their exit codes and no task returned a
    result."""
    from base.record import RECORD_NAME, Record

    try:
        record = Record.read(output_dir / RECORD_NAME)
    except Exception:  # noqa: BLE001 - none, or unreadable: the usual failure
        return None
    return record.error if record.status == "hung" else None


def _refuse(message: str) -> None:
    """Bad input, found before anything ran: one line and exit code 2. SystemExit, not an exception:
    Hydra would print its own stack around a plugin's exception."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _record_failure(
    output_dir: Path,
    error: str,
    end: state.Ending,
    sweep_config,
    overrides: list[str],
    num: int,
    sweep_dir: Path,
    job_id: str,
) -> Path:
    """The job's one run record says how it failed. Rank 0 wrote one when it could (its error may
    only say that a peer's connection closed: the root cause found here replaces it, and W&B already
    has the run); a job killed before that gets its record here, the first and only one."""
    from omegaconf import OmegaConf

    from base.record import RECORD_NAME, Record
    from job.finalise import finalise
    from job.run import record_of

    path = output_dir / RECORD_NAME
    if path.exists():
        try:
            record = Record.read(path)
        except Exception:  # noqa: BLE001 - an unreadable record is the table's to report
            return path
        if record.amend_failure(error, end.log):
            finalise(record, output_dir, wandb=False, quiet=True)
        return path
    try:
        config = OmegaConf.to_container(
            sweep_config, resolve=False
        )  # unresolved: resolvers are per host
    except Exception:  # noqa: BLE001 - a config Omegaconf cannot convert: the record without it
        config = None
    job = {
        "name": str(sweep_config.hydra.job.name),
        "num": num,
        "output_dir": str(output_dir),
        "sweep_dir": str(sweep_dir),
        "slurm_job_id": job_id,
        "log": end.log,
        "overrides": overrides,
    }
    return finalise(
        record_of(config, job, error=error, env={"hostnames": end.hostnames}),
        output_dir,
        quiet=True,
    )


def _output_dir(sweep_config, num: int, job_id: str) -> Path:
    """The job's directory as Hydra's run_job computes it in the job (sweep dir / resolved
    subdir)."""
    from omegaconf import OmegaConf, open_dict

    with open_dict(sweep_config.hydra.job) as job:
        job.num = num
        job.id = job_id
    sweep = Path(str(sweep_config.hydra.sweep.dir))
    try:
        return sweep / str(OmegaConf.select(sweep_config, "hydra.sweep.subdir"))
    except Exception:  # noqa: BLE001 - e.g. a subdir interpolating runtime-only values
        return sweep / str(num)
