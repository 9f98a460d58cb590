"""One Hydra job: check the config, start (or become) the ranks, and end through job.finalise
whatever happens. run_job returns a JobResult and never ends the process: train.py exits with its
exit_code. In a multirun a failed job returns with a failed status and exit code 0, so the sweep
goes on and the end-of-sweep table shows it as a failed row; a single run's code is 2 for bad input
(before any rank started, leaving nothing but the error line) and 1 when a rank failed.

SIGINT/SIGTERM (Ctrl-C, `timeout`, `kill`, Slurm's time limit) end the job as `interrupted`: a
record with the signal and how far the ranks got, one line on the console, exit code 128 + the
signal (130, 143). A sweep stops there: its table callback writes the rows it has, and no later job
of the sweep starts (without that callback, run_job raises Interrupted through Hydra's loop, and
train.py exits with its code)."""

from __future__ import annotations

import logging
import math
import os
import resource
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from base import interrupt
from job.config import prepare
from base.errors import ConfigError
from job.finalise import finalise
from base.interrupt import Interrupted, signals_raise
from base.log import get
from base.provenance import as_typed, as_typed_vars, command, from_environment, typed_overrides
from launchers import already_a_rank, become_rank
from base.context import JOB_START_ENV
from base.record import SWEEP_ID_ENV, Record, setting
from base.record_types import TaskResult

log = get(__name__)


def job_info() -> dict:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from launchers.slurm import job_info as slurm_job_info

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    overrides = typed_overrides(
        hc.overrides.task
    )  # as typed: `${oc.env:...}` stays text, never its value
    return {
        "name": hc.job.name,
        "num": hc.job.num if multirun else None,
        "output_dir": hc.runtime.output_dir,
        "sweep_dir": str(Path(hc.sweep.dir).resolve()) if multirun else None,
        "sweep_id": os.environ.get(SWEEP_ID_ENV) if multirun else None,
        "overrides": overrides,
        "command": command(overrides),
        "multirun": multirun,
        "sweep_table": any(
            str(c.get("_target_", "")).endswith("SweepTable") for c in (hc.callbacks or {}).values()
        ),
        **slurm_job_info(),
    }


@dataclass(frozen=True)
class JobResult:
    """What a job returns, to Hydra and to train.py. As a number it is the objective, samples/s (NaN
    for a failed job or a task without samples/s), which optimising sweepers maximise:
    hydra-optuna-sweeper takes
    `float(return_value)`, hydra-nevergrad-sweeper `direction * return_value`. The sweep table reads
    status and error (the records for the rest). exit_code: what train.py ends a single run with; 0
    in a sweep, whose table callback gives the sweep's."""

    status: str = "ok"
    exit_code: int = 0
    samples_per_s: float = math.nan
    error: str | None = None
    record: str | None = None

    def __float__(self) -> float:
        return self.samples_per_s

    def __mul__(self, factor: float) -> float:
        return self.samples_per_s * factor

    __rmul__ = __mul__


def run_job(cfg: DictConfig, job: dict | None = None) -> JobResult:
    """The body of every job. `job` (output_dir, overrides, ...) comes from Hydra unless given
    (tests). Raises Interrupted only where the process must end at once: a sweep without its table,
    or a rank other than 0."""
    if (
        interrupt.received() is not None
    ):  # an earlier job of this sweep was interrupted: start no other
        raise Interrupted(interrupt.received())
    a_rank = (
        become_rank()
    )  # torchrun or a Slurm task: this process is a rank (its variables exported once, here)
    job = job or job_info()
    job["typed"] = _typed(
        cfg
    )  # keys whose value came from the environment: the record keeps their text
    mark_job_start()
    logging.captureWarnings(True)  # config warnings reach the job log too, printed as before
    with signals_raise():
        try:
            plain = prepare(cfg)
            repeats = plain.get("repeats") or 1
            if (repeats == "auto" or repeats > 1) and not job.get("multirun"):
                raise ConfigError(
                    f"repeats={plain['repeats']} runs each configuration as separate jobs of a "
                    "sweep: "
                    f"add -m (python train.py -m ... repeats={plain['repeats']})."
                )
        except ConfigError as e:
            return _refused(cfg, job, e)
        except Interrupted as e:
            return _end(
                record_of(OmegaConf.to_container(cfg, resolve=False), job, signal=e.name),
                job,
                e.exit_code,
            )
        try:
            record, exit_code = _as_a_rank(plain, job) if a_rank else _launch(plain, job)
        except Interrupted as e:
            if (
                a_rank and os.environ["RANK"] != "0"
            ):  # it ends quietly (train.py), rank 0 writes the record
                raise
            record, exit_code = record_of(plain, job, e.outcome, signal=e.name), e.exit_code
        if record is None:
            return JobResult()  # ranks other than 0: rank 0 returns the job's result
        return _end(record, job, exit_code)


def _refused(cfg: DictConfig, job: dict, e: ConfigError) -> JobResult:
    """Bad input, before any rank started. A single run leaves the one error line and nothing else:
    no record, no W&B run, and the directory Hydra made for it is removed (job.output_dir.discard:
    when it holds only Hydra's own files). In a sweep the refused job keeps its record in the
    sweep's own directory, so that it is a row of the sweep table whichever launcher ran it, but
    opens no W&B run."""
    from job.output_dir import discard

    quiet = (
        already_a_rank() and os.environ["RANK"] != "0"
    )  # every rank refuses; rank 0 alone says so, exit 2
    if quiet and job.get("multirun"):
        return JobResult(status="failed", error=f"ConfigError: {e}")
    if job.get("multirun"):
        return _end(
            record_of(OmegaConf.to_container(cfg, resolve=False), job, error=f"ConfigError: {e}"),
            job,
            2,
            wandb=False,
        )
    discard(
        job.get("output_dir"), keep_if_other_than=(".hydra", f"{job.get('name') or 'train'}.log")
    )
    if quiet:
        return JobResult(status="failed", error=f"ConfigError: {e}")
    log.error(f"error: {e}")
    return JobResult(status="failed", exit_code=ConfigError.exit_code, error=f"ConfigError: {e}")


def _launch(plain: dict, job: dict) -> tuple[Record, int]:
    from launchers.local import RankFailed, launch_local

    cpu0, wall0 = _own_cpu_s(), time.perf_counter()
    try:
        outcome = launch_local(plain, job)
        _note_launcher_cost(outcome.result, _own_cpu_s() - cpu0, time.perf_counter() - wall0)
    except (
        ConfigError
    ) as e:  # the emulated link could not be built (launchers/link.py): no rank started
        return record_of(plain, job, error=f"ConfigError: {e}"), 2
    except RankFailed as e:
        record = record_of(plain, job, e.outcome, error=str(e), traceback=e.traceback)
        record.status = getattr(e, "status", record.status)  # "hung": launchers/hang.py declared it
        return record, 1
    return record_of(plain, job, outcome), 0


def _own_cpu_s() -> float:
    """CPU seconds of this process, every thread (the elastic agent's monitor loop, the heartbeat
    watch), not its children (the ranks)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _note_launcher_cost(result: TaskResult | None, cpu_s: float, wall_s: float) -> None:
    """The launcher's own CPU over the whole launch (spawn, set-up, warm-up, window, probes; not the
    window alone): on 2 cores shared with 2 ranks, a busy parent would be a harness cost in every
    step, so the record keeps its average share of one core (time_budget.launcher_*)."""
    budget = getattr(result, "time_budget", None)
    if budget is not None and wall_s > 0:
        budget.launcher_cpu_s, budget.launcher_wall_s, budget.launcher_cpu_share = (
            cpu_s,
            wall_s,
            cpu_s / wall_s,
        )


_first_job = True


def mark_job_start() -> None:
    """When this job began, for the record's time budget; the ranks inherit it through the
    environment. The first job of a process began with the process (imports count: /proc gives it to
    about a second), later ones now."""
    global _first_job
    start = time.time()
    if _first_job:
        try:
            ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
            boot = next(
                int(line.split()[1])
                for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime")
            )
            start = min(start, boot + ticks / os.sysconf("SC_CLK_TCK"))
        except (OSError, ValueError, IndexError, StopIteration):
            pass
    _first_job = False
    os.environ[JOB_START_ENV] = repr(start)


def _as_a_rank(plain: dict, job: dict) -> tuple[Record | None, int]:
    """torchrun or a Slurm task: this process is a rank and there is no parent of ours that outlives
    the ranks, so rank 0 finalises. The other ranks re-raise (an Interrupted too, which run_job
    passes on to train.py): their non-zero exit ends the job (srun --kill-on-bad-exit). A rank that
    finished leaves at exit without the interpreter's teardown
    (launchers.rank.leave_without_teardown): a gloo thread freeing its last Work there aborts the
    process, and srun or torchrun would report a failed rank after the record said ok."""
    from launchers.rank import RankError, leave_without_teardown, run_rank

    def hung(
        found, outcome
    ) -> None:  # from rank 0's hang watch thread (launchers.hang.store_watch)
        record = record_of(plain, job, outcome, error=found.message)
        record.status = "hung"
        _end(record, job, 1)

    try:
        outcome = run_rank(plain, job, on_hung=hung)
        leave_without_teardown()
    except RankError as e:
        o = e.outcome
        if o.signal:  # the launcher may have stopped this rank for another rank's failure: say so
            record = record_of(plain, job, o, signal=o.signal)
            record.error += (
                " (sent by the launcher: Ctrl-C, a time limit, or another rank's failure)"
            )
            return record, 128 + signal.Signals[o.signal]
        return record_of(plain, job, o), 1
    if outcome is None:
        return None, 0
    return record_of(plain, job, outcome), 0


def record_of(
    config: dict | None,
    job: dict,
    outcome=None,
    *,
    error: str | None = None,
    traceback: str | None = None,
    signal: str | None = None,
    env: dict | None = None,
) -> Record:
    """The run's one record from whatever ended it, on every path (a run, bad input, a failed or
    interrupted rank, a Slurm job that died): `outcome` is rank 0's (launchers.rank.Outcome: what it
    measured and its own error), when the ranks got that far; `error` the first line when something
    else ended the run; `signal` the name of the signal that interrupted it (status "interrupted",
    result.signal and result.progress: how far rank 0 got)."""
    o = outcome
    started, env = (o.started, o.env) if o is not None else (None, env)
    if signal is not None:
        progress = dict(o.progress) if o is not None else {}
        return Record.failed(
            config,
            job,
            f"interrupted by {signal}{_where(progress, config)}",
            env=env,
            started=started,
            result={"signal": signal, "progress": progress},
            status="interrupted",
        )
    error = error or (o.error if o is not None else None)
    if error is None:
        return Record.ok(config, job, env=env, started=started, result=o.result)
    return Record.failed(
        config,
        job,
        error,
        traceback=traceback or (o.traceback if o is not None else None),
        env=env,
        started=started,
        result=o.result if o is not None else None,
    )


def interrupted_record(config: dict, job: dict, signal_name: str, outcome=None) -> Record:
    """status "interrupted", the signal, and how far rank 0 got (result.progress: steps done):
    record_of's."""
    return record_of(config, job, outcome, signal=signal_name)


def _where(progress: dict, config: dict) -> str:
    measured, warmup = progress.get("measured_steps_done"), progress.get("warmup_steps_done")
    if measured is not None:
        if (
            setting(config, "measure.policy") == "adaptive"
        ):  # `steps` is the minimum there, not the plan
            return f" after {measured} measured steps (min {config.get('steps')})"
        return f" after {measured} of {config.get('steps')} measured steps"
    if warmup is not None:
        return f" after {warmup} of {config.get('warmup_steps')} warm-up steps"
    import tasks

    measures = (
        getattr(tasks.get(config["task"]), "MEASURES_STEPS", False)
        if config.get("task") in tasks.TASKS
        else False
    )
    return " before the first step" if measures else ""


def _typed(cfg: DictConfig) -> dict[str, str]:
    try:
        return from_environment(cfg)
    except Exception:  # noqa: BLE001 - a config OmegaConf cannot walk is refused by prepare() with its own words
        return {}


def _end(record: Record, job: dict, exit_code: int = 0, wandb: bool = True) -> JobResult:
    typed = job.get("typed") or {}
    record.config = as_typed(record.config, typed)
    if record.env.vars:
        record.env.vars = as_typed_vars(record.env.vars, typed)
    path = finalise(record, job["output_dir"], wandb=wandb)
    if record.status == "ok":
        throughput = getattr(record.result, "throughput", None)
        samples_per_s = throughput.samples_per_s if throughput is not None else None
        return JobResult(
            samples_per_s=math.nan if samples_per_s is None else samples_per_s, record=str(path)
        )
    if not job.get("multirun"):
        return JobResult(record.status, exit_code, error=record.error, record=str(path))
    if record.status == "interrupted" and not job.get(
        "sweep_table"
    ):  # no table callback to stop the sweep
        raise Interrupted(exit_code - 128)
    # the sweep goes on past a failed job; an interrupted one returns so that the table callback
    # (results.callbacks.SweepTable) writes the rows so far and stops the sweep
    return JobResult(record.status, error=record.error, record=str(path))
