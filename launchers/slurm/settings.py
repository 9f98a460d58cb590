"""launcher=slurm's settings: their one home is `launcher.*` (conf/launcher/slurm.yaml);
`hydra.launcher` holds only the launcher class. Here: the checks run before anything is submitted
(and again in each task), the submitit executor they configure, and the answer to
hydra-submitit-launcher habits (`hydra/launcher=submitit_slurm`,
`hydra.launcher.partition=...`), which are refused with the equivalent command rather than
half-obeyed."""

from __future__ import annotations

from base.record import setting
import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from base.errors import ConfigError
from launchers.slurm.rank_env import bound_gpus, is_slurm_rank, step_tasks

REPO_ROOT = Path(__file__).resolve().parents[2]
SUBMITIT_DIR = ".submitit"
WHOLE = ("nodes", "tasks_per_node")  # >= 1
WHOLE_OR_NULL = (
    "gpus_per_node",
    "cpus_per_task",
    "timeout_min",
)  # >= 0, or null: the cluster's default
TEXT_OR_NULL = ("partition", "account", "qos", "constraint", "gres")
# launcher.* -> the sbatch option submitit writes (the rest: setup, additional_parameters,
# srun_args, array_parallelism)
GENERIC = ("nodes", "tasks_per_node", "gpus_per_node", "cpus_per_task", "mem_gb", "timeout_min")


# ------------------------------------------------------------------------------------------- checks


def check_config(cfg, submitting: bool = False) -> None:
    """Raise ConfigError for launcher=slurm settings that cannot work, and, inside a Slurm job, for
    a job that cannot run as configured (world_size against the step's tasks; GPUs given by Slurm
    that CUDA cannot see). Called by the config validation before any rank starts, and by the
    launcher for every job before it submits the array (submitting=True: the compute nodes'
    environment is not this one)."""
    launcher = setting(cfg, "launcher", {})
    if not submitting:
        _check_gpus_are_usable()
    if is_slurm_rank() and not submitting:
        tasks = step_tasks()
        if int(cfg.world_size) != tasks:
            fix = (
                "set launcher.nodes / launcher.tasks_per_node, not world_size"
                if launcher.get("name") == "slurm"
                else f"pass world_size={tasks}, or start {cfg.world_size} tasks (srun -n "
                f"{cfg.world_size})"
            )
            raise ConfigError(
                f"world_size={cfg.world_size} but this Slurm job step has {tasks} tasks, one per "
                "rank: "
                f"{fix}."
            )
        return
    if launcher.get("name") != "slurm":
        return
    _check_values(launcher)
    expected = launcher["nodes"] * launcher["tasks_per_node"]
    if int(cfg.world_size) != expected:
        raise ConfigError(
            f"world_size={cfg.world_size} but launcher=slurm runs launcher.nodes x "
            f"launcher.tasks_per_node = {launcher['nodes']} x {launcher['tasks_per_node']} = "
            f"{expected} "
            f"ranks (one task per rank): drop world_size=..., set launcher.nodes / "
            f"launcher.tasks_per_node instead."
        )
    gpus = launcher.get("gpus_per_node") or 0
    if cfg.get("backend") == "nccl" and gpus and launcher["tasks_per_node"] > gpus:
        raise ConfigError(
            f"backend=nccl needs one GPU per rank, but launcher.tasks_per_node="
            f"{launcher['tasks_per_node']} > launcher.gpus_per_node={gpus}. "
            f"Set launcher.tasks_per_node={gpus}."
        )


def check_run_mode(cfg) -> None:
    """launcher=slurm without -m: Hydra uses its launcher only in a multirun, so the job would
    quietly run here, on this machine. Checked apart from check_config, from job.config's
    check_run_mode before the task's module is imported: tasks.train imports torch, ~2 CPU s of a
    one-line refusal."""
    if setting(cfg, "launcher.name", None) == "slurm" and _single_run():
        raise ConfigError(
            "launcher=slurm submits jobs through Hydra's multirun: add -m "
            "(python train.py -m launcher=slurm ...), even for a single job."
        )


def _check_values(launcher) -> None:
    def number(value, whole: bool) -> bool:
        return not isinstance(value, bool) and isinstance(value, int if whole else (int, float))

    for key in WHOLE:
        if not number(launcher.get(key), True) or launcher[key] < 1:
            raise ConfigError(f"launcher.{key}={launcher.get(key)!r}: must be a whole number >= 1.")
    for key in WHOLE_OR_NULL + ("mem_gb",):
        value = launcher.get(key)
        if value is not None and (not number(value, key != "mem_gb") or value < 0):
            kind = "number of GB" if key == "mem_gb" else "whole number"
            raise ConfigError(
                f"launcher.{key}={value!r}: must be a non-negative {kind} (or null to leave it to "
                "Slurm)."
            )
    for key in TEXT_OR_NULL:
        value = launcher.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(
                f"launcher.{key}={value!r}: must be text, e.g. launcher.{key}=name (or null)."
            )


def _check_gpus_are_usable() -> None:
    """Slurm gave this job GPUs on this node but CUDA sees none (no driver, wrong image, a node
    without GPUs in a GPU partition): the ranks would quietly run on CPU and measure the wrong
    machine."""
    gpus = bound_gpus()
    if gpus is None:
        return
    from device.host import gpu_count

    if gpu_count() == 0:
        raise ConfigError(
            f"Slurm gave this job GPU(s) {gpus} on this node, but CUDA sees none here, so the "
            "ranks "
            "would run on CPU. Check the node's CUDA driver and torch build (python -c 'import "
            "torch; "
            "print(torch.cuda.is_available())' in the job), or ask for no GPUs "
            "(launcher.gpus_per_node=null, no --gres/--gpus) to measure CPU ranks."
        )


def _single_run() -> bool:
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.RUN
    except Exception:  # noqa: BLE001 - outside Hydra (tests calling prepare) there is no mode to check
        return False


# ----------------------------------------------------------------------------------------- submitit


def make_executor(launcher: dict[str, Any], folder: str | Path, job_name: str):
    """submitit's Slurm executor for launcher.* (resolved), with the project on PYTHONPATH in the
    job: each task unpickles the launcher and the task function, which import the project."""
    import submitit

    executor = submitit.AutoExecutor(cluster="slurm", folder=folder, slurm_max_num_timeout=0)
    setup = [
        f"export PYTHONPATH={REPO_ROOT}${{PYTHONPATH:+:$PYTHONPATH}}",
        *(launcher.get("setup") or []),
    ]
    executor.update_parameters(
        name=job_name,
        stderr_to_stdout=True,
        **{k: launcher.get(k) for k in GENERIC},
        **{
            f"slurm_{k}": launcher.get(k)
            for k in TEXT_OR_NULL + ("additional_parameters", "array_parallelism")
        },
        slurm_setup=setup,
        slurm_srun_args=[str(a) for a in launcher.get("srun_args") or []],
    )
    return executor


# ------------------------------------------------------------------------------------------- habits


def stock_plugin_refusal(
    config, params: dict[str, Any], stock_defaults: dict[str, Any]
) -> str | None:
    """None when the launcher is used as launcher=slurm sets it up; else the one line that says what
    to type instead. `params` is hydra.launcher as given to the launcher; `stock_defaults`
    hydra-submitit-launcher's SlurmQueueConf, which hydra/launcher=submitit_slurm composes here so
    that its keys can be translated."""
    hydra_overrides = OmegaConf.select(config, "hydra.overrides.hydra") or []
    typed = {
        o.lstrip("+~").split("=", 1)[0].removeprefix("hydra.launcher.")
        for o in hydra_overrides
        if o.lstrip("+~").startswith("hydra.launcher.")
    }
    derived = (
        "submitit_folder",
        "name",
    )  # interpolated from the sweep, unless typed: not the user's
    missing = object()
    changed = {
        k: v
        for k, v in params.items()
        if k != "_target_"
        and (k in typed or k not in derived and stock_defaults.get(k, missing) != v)
    }
    is_slurm = OmegaConf.select(config, "launcher.name") == "slurm"
    if is_slurm and not changed:
        return None
    known = set(GENERIC + TEXT_OR_NULL) | {"setup", "srun_args", "array_parallelism"}
    not_sbatch = derived + ("signal_delay_s", "max_num_timeout", "stderr_to_stdout")
    words = ["python train.py -m launcher=slurm"]
    for key, value in changed.items():
        if key in known:
            words.append(f"launcher.{key}={_override_value(value)}")
        elif key == "additional_parameters":
            words += [
                f"+launcher.additional_parameters.{k}={_override_value(v)}"
                for k, v in (value or {}).items()
            ]
        elif key not in not_sbatch:
            words.append(
                f"+launcher.additional_parameters.{key}={_override_value(value)}"
            )  # any sbatch option
    words += [
        o
        for o in hydra_overrides
        if not o.lstrip("+~").startswith(("hydra/launcher", "hydra.launcher.", "hydra.mode="))
    ]
    words += [
        o
        for o in OmegaConf.select(config, "hydra.overrides.task") or []
        if not o.startswith("launcher=")
    ]
    what = (
        f"hydra.launcher.{', hydra.launcher.'.join(changed)} set"
        if is_slurm and changed
        else "hydra/launcher="
        f"{OmegaConf.select(config, 'hydra.runtime.choices').get('hydra/launcher')} chosen "
        "without launcher=slurm"
    )
    fixed = [k for k in changed if k in not_sbatch]
    return (
        f"{what}: this tool's Slurm settings have one home, launcher.* (docs/slurm.md), and "
        f"launcher=slurm wires the ranks and the failure handling. Run: {' '.join(words)}"
        + (
            f" (hydra.launcher.{', hydra.launcher.'.join(fixed)}: fixed here, no equivalent)"
            if fixed
            else ""
        )
    )


def _override_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
