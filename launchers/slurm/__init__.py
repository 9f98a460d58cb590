"""Slurm through submitit: one Slurm task is one rank, one multirun is one job array.

Inside a job (every task runs the Hydra job; see conf/launcher/slurm.yaml):
  export_rank_env()  makes this task a rank (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT from the Slurm job)
  job_info()         the Slurm job id and log file, for the run record
On the submitting host:
  SweepSafeSlurmLauncher
                     Hydra's submitit launcher, made to survive failed jobs: it waits for every job, writes a failed
                     run record for a job that died without one (killed, OOM, time limit, node failure), and returns
                     normally, so the end-of-sweep table is always made (Hydra's sweeper raises on the first failed
                     job return, which would skip on_multirun_end). Hydra loads launchers only from the
                     hydra_plugins package: hydra_plugins/slurm_sweep_launcher/ names it there.
  failed_job_rows()  what the submitit folder and Slurm say about the jobs of a sweep that left no run record
  check_config()     launcher=slurm mistakes caught before anything is submitted
"""
from __future__ import annotations

import math
import os
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from core.errors import ConfigError
from results.record import is_peer_failure

SUBMITIT_DIR = ".submitit"
REPO_ROOT = Path(__file__).resolve().parents[2]
# Slurm job states in which a job can still produce results (anything else: it has ended)
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
                 "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING"}
STATE_POLL_S = 10.0       # how often the submitting host asks Slurm about jobs that have not written results
RESULT_GRACE_S = 15.0     # after Slurm says a job ended, how long its result files may take to appear (shared FS)


# ---------------------------------------------------------------------------------------------------- in a job

def _submitit_task() -> bool:
    """A task of a job that submitit submitted (its sbatch script exports SUBMITIT_EXECUTOR) started by srun."""
    return os.environ.get("SUBMITIT_EXECUTOR") == "slurm" and "SLURM_JOB_ID" in os.environ \
        and "SLURM_PROCID" in os.environ


def _srun_task() -> bool:
    """A task of a job step (srun). The batch script of sbatch and the shell of salloc have SLURM_* set too,
    but no SLURM_STEP_ID: there `python train.py` is the user's command and starts its ranks itself."""
    return "SLURM_STEP_ID" in os.environ and "SLURM_PROCID" in os.environ


def _step_tasks() -> int:
    return int(os.environ.get("SLURM_STEP_NUM_TASKS") or os.environ.get("SLURM_NTASKS") or 1)


def is_slurm_rank() -> bool:
    """True in a submitit job's task (any number of tasks), or in an srun step with more than one task."""
    return _submitit_task() or (_srun_task() and _step_tasks() > 1)


def export_rank_env() -> bool:
    """Export RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the Slurm job and return
    True if this process is one of its ranks; else change nothing and return False."""
    if not is_slurm_rank():
        return False
    if _submitit_task():
        from submitit.helpers import TorchDistributedEnvironment

        # CUDA_VISIBLE_DEVICES stays as Slurm set it: a rank uses cuda:<LOCAL_RANK> among the node's GPUs of the job
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        return True
    from submitit.slurm.slurm import _parse_node_list

    nodes = _parse_node_list(os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST")
                             or socket.gethostname())
    world = _step_tasks()
    step_nodes = int(os.environ.get("SLURM_STEP_NUM_NODES") or len(nodes) or 1)
    job_id = os.environ.get("SLURM_JOB_ID", "0")
    step_id = os.environ.get("SLURM_STEP_ID", "0")
    port = os.environ.get("MASTER_PORT") or str(20000 + (int(job_id) * 131 + int(step_id)) % 40000)
    os.environ.update({
        "MASTER_ADDR": nodes[0],
        "MASTER_PORT": port,
        "RANK": os.environ["SLURM_PROCID"],
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": os.environ.get("SLURM_LOCALID", "0"),
        "LOCAL_WORLD_SIZE": str(world // step_nodes),
    })
    return True


def job_info() -> dict[str, Any]:
    """{"slurm_job_id", "log"} of the Slurm job this process runs in ({} outside Slurm). The log is task 0's
    output file (rank 0 prints the summary there); task t writes <job>_<t>_log.out beside it."""
    if _submitit_task():
        from submitit import JobEnvironment

        env = JobEnvironment()
        log = None
        if os.environ.get("SUBMITIT_FOLDER"):
            from submitit.core.utils import JobPaths

            log = str(JobPaths(os.environ["SUBMITIT_FOLDER"], job_id=env.job_id, task_id=0).stdout)
        return {"slurm_job_id": env.job_id, "log": log}
    if "SLURM_JOB_ID" not in os.environ:
        return {}
    job_id = os.environ["SLURM_JOB_ID"]
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        job_id = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID')}"
    return {"slurm_job_id": job_id, "log": _scontrol_stdout(os.environ["SLURM_JOB_ID"])}


def _scontrol_stdout(job_id: str) -> str | None:
    try:
        out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for word in out.split():
        if word.startswith("StdOut="):
            return word.split("=", 1)[1]
    return None


# ---------------------------------------------------------------------------------------------------- config

def register_resolvers() -> None:
    """${mul:a,b,...}: the product (world_size = nodes x tasks_per_node); ${or:a,b,...}: the first set value."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("mul"):
        OmegaConf.register_new_resolver("mul", lambda *xs: math.prod(int(x) for x in xs))
    if not OmegaConf.has_resolver("or"):
        OmegaConf.register_new_resolver("or", lambda *xs: next((x for x in xs if x), xs[-1]))


register_resolvers()


def check_config(cfg, submitting: bool = False) -> None:
    """Raise ConfigError for launcher=slurm settings that cannot work, and for a world_size that disagrees with the
    Slurm job this process is a rank of. Called from the config validation before any rank starts, and by the
    launcher for every job before it submits the array (submitting=True)."""
    launcher = cfg.get("launcher") or {}
    if is_slurm_rank() and not submitting:
        tasks = int(os.environ.get("SLURM_NTASKS") if _submitit_task() else _step_tasks())
        if int(cfg.world_size) != tasks:
            fix = ("set launcher.nodes / launcher.tasks_per_node, not world_size" if launcher.get("name") == "slurm"
                   else f"pass world_size={tasks}, or start {cfg.world_size} tasks (srun -n {cfg.world_size})")
            raise ConfigError(f"world_size={cfg.world_size} but this Slurm job step has {tasks} tasks, one per rank: "
                              f"{fix}.")
        return
    if launcher.get("name") != "slurm":
        return
    for key in ("nodes", "tasks_per_node"):
        value = launcher.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"launcher.{key}={value!r}: must be a whole number >= 1.")
    for key in ("gpus_per_node", "cpus_per_task", "mem_gb", "timeout_min"):
        value = launcher.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise ConfigError(f"launcher.{key}={value!r}: must be a non-negative number "
                              "(or null to leave it to Slurm).")
    expected = launcher["nodes"] * launcher["tasks_per_node"]
    if int(cfg.world_size) != expected:
        raise ConfigError(f"world_size={cfg.world_size} but launcher=slurm runs launcher.nodes x "
                          f"launcher.tasks_per_node = {launcher['nodes']} x {launcher['tasks_per_node']} = {expected} "
                          f"ranks (one task per rank): drop world_size=..., set launcher.nodes / "
                          f"launcher.tasks_per_node instead.")
    gpus = launcher.get("gpus_per_node") or 0
    if cfg.get("backend") == "nccl" and gpus and launcher["tasks_per_node"] > gpus:
        raise ConfigError(f"backend=nccl needs one GPU per rank, but launcher.tasks_per_node="
                          f"{launcher['tasks_per_node']} > launcher.gpus_per_node={gpus}. "
                          f"Set launcher.tasks_per_node={gpus}.")
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        single_run = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.RUN
    except Exception:  # noqa: BLE001 - outside Hydra (tests calling prepare) there is no mode to check
        single_run = False
    if single_run:
        raise ConfigError("launcher=slurm submits jobs through Hydra's multirun: add -m "
                          "(python train.py -m launcher=slurm ...), even for a single job.")


# ---------------------------------------------------------------------------------------------------- Slurm state

def slurm_states(job_ids: list[str]) -> dict[str, dict[str, str]]:
    """{job id ("12" or "12_3"): {"state", "exit_code", "nodes"}} from sacct, or squeue when there is no accounting.
    Jobs Slurm does not know (any more) are missing from the result."""
    arrays = sorted({j.split("_")[0] for j in job_ids})
    if not arrays:
        return {}
    found: dict[str, dict[str, str]] = {}
    if shutil.which("sacct"):
        try:
            out = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode,NodeList",
                                  "-j", ",".join(arrays)], capture_output=True, text=True, timeout=30)
            if out.returncode == 0:
                for line in out.stdout.splitlines():
                    parts = line.split("|")
                    if len(parts) >= 4:
                        found[parts[0]] = {"state": parts[1].split()[0], "exit_code": parts[2], "nodes": parts[3]}
        except (OSError, subprocess.SubprocessError):
            pass
    missing = [j for j in job_ids if j not in found]
    if missing and shutil.which("squeue"):
        try:
            out = subprocess.run(["squeue", "-h", "-t", "all", "-r", "-o", "%i|%T|%N", "-j", ",".join(arrays)],
                                 capture_output=True, text=True, timeout=30)
            for line in out.stdout.splitlines():
                parts = line.split("|")
                if len(parts) >= 3 and parts[0] not in found:
                    found[parts[0]] = {"state": parts[1], "exit_code": "", "nodes": parts[2]}
        except (OSError, subprocess.SubprocessError):
            pass
    return found


def _is_active(state: dict[str, str] | None) -> bool:
    return state is not None and state["state"].rstrip("+") in ACTIVE_STATES


# ---------------------------------------------------------------------------------------------------- the sweep

def _task_logs(folder: Path, job_id: str, tasks: int) -> list[Path]:
    from submitit.core.utils import JobPaths

    return [JobPaths(folder, job_id=job_id, task_id=t).stdout for t in range(tasks)]


def _outcomes(folder: Path, job_id: str) -> dict[int, tuple[str, Any]]:
    """{task: (outcome, value)} read from the result pickles a job's tasks wrote ("success" | "error")."""
    from submitit.core.utils import pickle_load

    found = {}
    for path in sorted(Path(folder).glob(f"{job_id}_*_result.pkl")):
        task = path.name[len(job_id) + 1:].split("_")[0]
        try:
            found[int(task)] = pickle_load(path)
        except Exception as e:  # noqa: BLE001 - a truncated pickle is reported, not fatal
            found[int(task)] = ("error", f"unreadable result {path}: {type(e).__name__}: {e}")
    return found


def _task_error(outcome: tuple[str, Any]) -> str | None:
    """The failure a task's result pickle holds, or None if the task ended well."""
    kind, value = outcome
    if kind != "success":
        lines = [ln for ln in str(value).strip().splitlines() if ln.strip()]
        return lines[-1].strip() if lines else "failed"
    from hydra.core.utils import JobStatus

    status = getattr(value, "status", None)
    if status == JobStatus.FAILED:
        err = getattr(value, "_return_value", None)
        return f"{type(err).__name__}: {err}"
    ret = getattr(value, "_return_value", None)
    if isinstance(ret, dict) and ret.get("status") == "failed":
        return str(ret.get("error") or "failed")
    return None


def _log_tail(path: Path, lines: int = 2) -> str:
    """The last lines of a task's log that say something (progress bars left out), for the error message."""
    try:
        text = path.read_text(errors="replace").replace("\r", "\n").splitlines()
    except OSError:
        return ""
    said = [ln.strip()[:200] for ln in text if ln.strip() and not ("it/s]" in ln or "s/it]" in ln or "%|" in ln)]
    return " | ".join(said[-lines:])


# What a final Slurm state means for the user, and what to change.
STATE_HINTS = {
    "CANCELLED": "cancelled (scancel, an administrator, or preemption)",
    "TIMEOUT": "hit its time limit: raise launcher.timeout_min",
    "OUT_OF_MEMORY": "out of memory: raise launcher.mem_gb",
    "NODE_FAIL": "a node failed",
    "FAILED": "a task exited non-zero or was killed by a signal",
    "BOOT_FAIL": "a node failed to boot",
    "DEADLINE": "missed its deadline",
    "PREEMPTED": "preempted",
}


# Errors a rank raises because another rank died: the root cause is in the other rank's log.
def describe_job(folder: Path, job_id: str, tasks: int, state: dict[str, str] | None) -> tuple[str | None, str]:
    """(error or None, log path) of one finished Slurm job, from its result pickles, Slurm's state and its logs.
    The error names the task (= rank) whose own failure ended the job, and the log is that task's."""
    logs = _task_logs(folder, job_id, tasks)
    outcomes = _outcomes(folder, job_id)
    errors = [(task, err) for task in sorted(outcomes) if (err := _task_error(outcomes[task]))]
    errors.sort(key=lambda te: is_peer_failure(te[1]))  # stable: the lowest rank with a root-cause error first
    if errors:
        task, err = errors[0]
        return f"Slurm job {job_id} rank {task}: {err}", str(logs[task] if task < len(logs) else logs[0])
    missing = [t for t in range(tasks) if t not in outcomes]
    if not missing:
        return None, str(logs[0])
    if state is None:
        how = "Slurm has no state for it (no accounting, or it was purged)"
    else:
        name = state["state"].rstrip("+")
        how = f"Slurm state {name}"
        if state.get("exit_code") and state["exit_code"] not in ("0:0", ""):
            how += f", exit code {state['exit_code']}"
        if name in STATE_HINTS:
            how += f": {STATE_HINTS[name]}"
    which = "any rank" if len(missing) == tasks else f"rank {', '.join(map(str, missing))}"
    tail = _log_tail(logs[missing[0]])
    return (f"Slurm job {job_id} ended without a result from {which} ({how})"
            + (f"; log ends: {tail}" if tail else ""), str(logs[missing[0]]))


def amend_failed_record(path: Path, error: str, log: str) -> bool:
    """A failed record whose error only says a peer rank died (rank 0 saw the connection close) gets the failing
    rank's own error and log (Record.amend_failure). Rank 0 already logged the run to W&B: not again."""
    from core.finalise import finalise
    from results.record import Record, read_record

    try:
        record = Record.from_dict(read_record(path))
    except Exception:  # noqa: BLE001 - an unreadable record is the table's to report
        return False
    if not record.amend_failure(error, log):
        return False
    finalise(record, path.parent, wandb=False, quiet=True)
    return True


def failed_job_rows(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """Jobs of a Slurm sweep that left no run record, as the submitting side knows them:
    [{"job_num", "overrides", "slurm_job_id", "log", "error", "output_dir"}], in job order.
    Reads <sweep_dir>/.submitit/<job id>/ (the pickled job: its number and overrides; the tasks' result pickles and
    logs) and asks Slurm for the state of jobs without results. Works after the fact too (e.g. the sweep's
    submitting process was interrupted)."""
    from submitit.core.utils import pickle_load

    from results.record import RECORD_NAME

    sweep_dir = Path(sweep_dir)
    jobs = []
    for submitted in sorted((sweep_dir / SUBMITIT_DIR).glob("*/*_submitted.pkl")):
        job_id = submitted.name[: -len("_submitted.pkl")]
        try:
            delayed = pickle_load(submitted)
            overrides, _, num = list(delayed.args[0]), delayed.args[1], int(delayed.args[2])
        except Exception as e:  # noqa: BLE001
            overrides, num = [], None
            print(f"[slurm] cannot read {submitted}: {type(e).__name__}: {e}", file=sys.stderr)
        tasks = _task_count(submitted.parent, job_id)
        jobs.append((num, job_id, overrides, submitted.parent, tasks))
    states = slurm_states([j[1] for j in jobs])
    rows = []
    for num, job_id, overrides, folder, tasks in sorted(jobs, key=lambda j: (j[0] is None, j[0] or 0, j[1])):
        output_dir = sweep_dir / str(num) if num is not None else None
        if output_dir is not None and (output_dir / RECORD_NAME).exists():
            continue
        state = states.get(job_id)
        if _is_active(state):
            continue
        error, log = describe_job(folder, job_id, tasks, state)
        rows.append({"job_num": num, "overrides": overrides, "slurm_job_id": job_id, "log": log,
                     "error": error or "the job ended without writing a run record",
                     "output_dir": str(output_dir) if output_dir else None})
    return rows


def _task_count(folder: Path, job_id: str) -> int:
    """Tasks per job, from the sbatch script submitit wrote (nodes x ntasks-per-node)."""
    array = job_id.split("_")[0]   # an array's script is in <submitit>/<array id>/, a single job's in its own folder
    scripts = list(folder.glob("*_submission.sh")) + list((folder.parent / array).glob(f"{array}_submission.sh"))
    nodes = per_node = 1
    for script in scripts:
        try:
            for line in script.read_text().splitlines():
                if line.startswith("#SBATCH --nodes="):
                    nodes = int(line.split("=", 1)[1])
                elif line.startswith("#SBATCH --ntasks-per-node="):
                    per_node = int(line.split("=", 1)[1])
        except (OSError, ValueError):
            continue
        break
    return max(1, nodes * per_node)


def write_failed_record(output_dir: Path, *, error: str, overrides: list[str], num: int | None, sweep_dir: Path,
                        slurm_job_id: str, log: str | None, config: dict | None, hostnames: list[str]) -> Path:
    """The run record of a job that died without writing one: what the submitting side knows."""
    from core.finalise import finalise
    from results.record import Record

    job = {"name": "train", "num": num, "output_dir": str(output_dir), "sweep_dir": str(sweep_dir),
           "slurm_job_id": slurm_job_id, "log": log, "overrides": overrides}
    record = Record.failed(config, job, error, env={"hostnames": hostnames})
    return finalise(record, output_dir, quiet=True)


def make_executor(params: dict[str, Any], srun_args: list[str]):
    """submitit's Slurm executor from hydra.launcher's parameters (as the plugin maps them), plus the srun arguments
    and the project on PYTHONPATH in the job (the pickled launcher and task function import the project)."""
    import submitit

    params = dict(params)
    folder = params.pop("submitit_folder")
    params.pop("_target_", None)
    executor = submitit.AutoExecutor(cluster="slurm", folder=folder,
                                     slurm_max_num_timeout=params.pop("max_num_timeout", 0))
    base = {"timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb", "nodes", "name",
            "stderr_to_stdout"}
    params = {k if k in base else f"slurm_{k}": v for k, v in params.items()}
    params["slurm_setup"] = [f"export PYTHONPATH={REPO_ROOT}${{PYTHONPATH:+:$PYTHONPATH}}",
                             *(params.get("slurm_setup") or [])]
    executor.update_parameters(**params, slurm_srun_args=[str(a) for a in srun_args])
    return executor


try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as _SubmititSlurmLauncher
except ImportError:  # the plugin is a dependency; without it launcher=slurm cannot be chosen anyway
    _SubmititSlurmLauncher = object  # type: ignore[assignment,misc]


class SweepSafeSlurmLauncher(_SubmititSlurmLauncher):  # type: ignore[misc,valid-type]
    """hydra_submitit_launcher's SlurmLauncher with: srun arguments (launcher.srun_args), the project on PYTHONPATH in
    the job, sbatch refusals as a clear error, and a wait that never raises for a failed job (see module doc)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # in each Slurm task: train.py's module code (its resolver registration) does not run here, the pickled
        # task function does; register what the config interpolates before Hydra loads the job's config
        from core.config import register_resolvers as engine_resolvers

        engine_resolvers()
        register_resolvers()
        ret = super().__call__(*args, **kwargs)
        from hydra.core.utils import JobStatus

        if ret.status == JobStatus.FAILED:
            # Hydra caught this task's exception (run_job never raises). Raise it again: the traceback goes to this
            # task's log, submitit pickles it as the task's error, and the non-zero exit ends the job step at once
            # (srun --kill-on-bad-exit=1) instead of leaving the other ranks to find out.
            raise ret._return_value
        return ret

    def launch(self, job_overrides, initial_job_idx):  # noqa: C901 - one linear story: submit, wait, collect
        from hydra.core.singleton import Singleton
        from hydra.core.utils import JobReturn, JobStatus, filter_overrides
        from omegaconf import OmegaConf

        from results.record import RECORD_NAME

        assert self.config is not None
        job_params = []
        for i, overrides in enumerate(job_overrides):
            num = initial_job_idx + i
            try:  # every job's config (Slurm settings included), before anything is queued
                from core.config import prepare

                prepare(self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides)),
                        submitting=True)
            except ConfigError as e:
                # SystemExit, not an exception: Hydra would print its own stack around a plugin's exception
                raise SystemExit(f"error: job #{num} ({' '.join(filter_overrides(overrides))}): {e}") from None
            job_params.append((list(overrides), "hydra.sweep.dir", num, f"job_id_for_{num}", Singleton.get_state()))
        if shutil.which("sbatch") is None:
            raise SystemExit("error: launcher=slurm needs Slurm's sbatch on PATH (run on a Slurm login node; to try "
                             "it on one machine as root: launchers/slurm_cluster/start.sh).")
        launcher_cfg = OmegaConf.select(self.config, "launcher") or {}
        folder = self.params["submitit_folder"]
        executor = make_executor(self.params, srun_args=list(launcher_cfg.get("srun_args") or []))
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        for overrides, _, num, _, _ in job_params:
            print(f"[slurm] #{num}: {' '.join(filter_overrides(overrides)) or '(no overrides)'}", flush=True)
        try:
            jobs = executor.map_array(self, *zip(*job_params))
        except Exception as e:  # sbatch refused the array: say why, with what we asked for
            from submitit.core.utils import JobPaths

            detail = str(getattr(e, "stderr", None) or e).strip()
            scripts = sorted(JobPaths.get_first_id_independent_folder(folder).glob(".submission_file_*.sh"),
                             key=lambda p: p.stat().st_mtime)
            raise SystemExit(f"error: sbatch refused the job array:\n{detail}\nCheck launcher.partition, account, "
                             f"qos, constraint, gpus_per_node, cpus_per_task, mem_gb and additional_parameters"
                             + (f" (the sbatch script: {scripts[-1]})." if scripts else ".")) from None
        array_id = jobs[0].job_id.split("_")[0]
        print(f"[slurm] submitted {len(jobs)} job(s) as Slurm job {array_id} "
              f"({jobs[0].num_tasks} task(s) each); logs: {Path(jobs[0].paths.folder).parent}", flush=True)

        try:
            states = self._wait(jobs)
        except KeyboardInterrupt:
            print(f"\n[slurm] interrupted: the jobs keep running (scancel {array_id} stops them); their records "
                  f"land in {sweep_dir}", file=sys.stderr, flush=True)
            raise

        returns = []
        for (overrides, _, num, _, _), job in zip(job_params, jobs):
            sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            output_dir = self._output_dir(sweep_config, num, job.job_id)
            error, log = describe_job(Path(job.paths.folder), job.job_id, job.num_tasks, states.get(job.job_id))
            outcome = _outcomes(Path(job.paths.folder), job.job_id).get(0)
            ret = outcome[1] if outcome and outcome[0] == "success" and isinstance(outcome[1], JobReturn) else None
            if error is None and ret is not None:
                returns.append(ret)
                continue
            error = error or "the job ended without a result"
            print(f"[slurm] job #{num} (Slurm {job.job_id}) failed: {error}\n        log: {log}",
                  file=sys.stderr, flush=True)
            record_path = output_dir / RECORD_NAME
            if record_path.exists():
                amend_failed_record(record_path, error, log)
            else:
                config = None
                try:
                    config = OmegaConf.to_container(sweep_config, resolve=False)  # unresolved: resolvers are per host
                    config.pop("hydra", None)
                except Exception:  # noqa: BLE001
                    pass
                nodes = (states.get(job.job_id) or {}).get("nodes") or ""
                write_failed_record(output_dir, error=error, overrides=list(overrides), num=num, sweep_dir=sweep_dir,
                                    slurm_job_id=job.job_id, log=log, config=config,
                                    hostnames=[nodes] if nodes and nodes != "None assigned" else [])
            # Hydra's sweeper re-raises a FAILED return (skipping the sweep table): the failure lives in the run
            # record, and the table's callback makes the sweep exit non-zero.
            failed = ret or JobReturn(overrides=list(overrides), working_dir=str(output_dir),
                                      task_name=str(sweep_config.hydra.job.name))
            failed.status = JobStatus.COMPLETED
            failed.return_value = {"status": "failed", "error": error, "slurm_job_id": job.job_id, "log": log,
                                   "record": str(output_dir / RECORD_NAME)}
            returns.append(failed)
        return returns

    @staticmethod
    def _output_dir(sweep_config, num: int, job_id: str) -> Path:
        """The job's directory as Hydra's run_job computes it in the job (sweep dir / resolved subdir)."""
        from omegaconf import OmegaConf, open_dict

        with open_dict(sweep_config.hydra.job) as job:
            job.num = num
            job.id = job_id
        try:
            return Path(str(sweep_config.hydra.sweep.dir)) / str(OmegaConf.select(sweep_config, "hydra.sweep.subdir"))
        except Exception:  # noqa: BLE001 - e.g. a subdir interpolating runtime-only values
            return Path(str(sweep_config.hydra.sweep.dir)) / str(num)

    @staticmethod
    def _wait(jobs) -> dict[str, dict[str, str]]:
        """Until every job has written all its results or Slurm says it ended (killed, OOM, time limit, node
        failure). Result files are looked at every second; Slurm is asked every STATE_POLL_S seconds."""
        pending = {j.job_id: j for j in jobs}
        states: dict[str, dict[str, str]] = {}
        ended_at: dict[str, float] = {}
        started = time.monotonic()
        last_poll = 0.0
        while pending:
            for job_id, job in list(pending.items()):
                if len(_outcomes(Path(job.paths.folder), job_id)) >= job.num_tasks:
                    del pending[job_id]
            if pending and time.monotonic() - last_poll >= STATE_POLL_S:
                last_poll = time.monotonic()
                states.update(slurm_states(list(pending)))
                now = time.monotonic()
                for job_id in list(pending):
                    state = states.get(job_id)
                    if _is_active(state) or (state is None and now - started < 60):
                        ended_at.pop(job_id, None)  # queued or running (again: requeued), or not yet visible
                        continue
                    ended_at.setdefault(job_id, now)
            for job_id in list(pending):
                if job_id in ended_at and time.monotonic() - ended_at[job_id] > RESULT_GRACE_S:
                    del pending[job_id]
            if pending:
                time.sleep(1)
        states.update(slurm_states([j.job_id for j in jobs]))
        return states
