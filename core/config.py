"""Config checks and resolution, done once in the process the user started, before any rank exists: every bad-input
error is raised here with the problem and the fix, never from deep inside torch in the middle of a run."""
from __future__ import annotations

import warnings
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from core.errors import ConfigError

BACKENDS = ("auto", "nccl", "gloo")


def gpu_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def register_resolvers() -> None:
    """${gpu_or:A,B}: A on a machine with a GPU, else B. ${gpu_count:}: GPUs visible here."""
    if not OmegaConf.has_resolver("gpu_or"):
        OmegaConf.register_new_resolver("gpu_or", lambda on_gpu, on_cpu: on_gpu if gpu_count() > 0 else on_cpu)
    if not OmegaConf.has_resolver("gpu_count"):
        OmegaConf.register_new_resolver("gpu_count", gpu_count)


def _choice(cfg, key: str, choices) -> None:
    value = OmegaConf.select(cfg, key)
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not known; choose one of: {', '.join(map(str, choices))}.")


def _positive(cfg, key: str, allow_zero: bool = False) -> None:
    value = OmegaConf.select(cfg, key)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise ConfigError(f"{key}={value!r}: must be a {'non-negative' if allow_zero else 'positive'} number, "
                          f"e.g. {key}={1 if not allow_zero else 0}.")


def validate(cfg: DictConfig, submitting: bool = False) -> None:
    """submitting=True: checked on a Slurm login node for the compute nodes, so this machine's GPUs do not count."""
    import tasks
    from launchers.slurm import check_config as check_launcher

    _choice(cfg, "task", tasks.TASKS)
    _choice(cfg, "backend", BACKENDS)
    _positive(cfg, "world_size")
    _positive(cfg, "timeout_s")
    check_launcher(cfg, submitting=submitting)
    gpus = gpu_count()
    if cfg.backend == "nccl" and not submitting:
        if gpus == 0:
            raise ConfigError("backend=nccl needs CUDA GPUs and this machine has none. Use backend=gloo (or auto).")
        if cfg.launcher.name == "local" and cfg.world_size > gpus:
            raise ConfigError(f"backend=nccl with world_size={cfg.world_size} needs one GPU per rank, and this machine "
                              f"has {gpus}. Use world_size<={gpus}, or backend=gloo.")
    if cfg.logger.name == "wandb":
        from results.wandb_log import check_logger_config

        check_logger_config(cfg)
    tasks.get(cfg.task).check(cfg, submitting=submitting)


def prepare(cfg: DictConfig, submitting: bool = False) -> dict:
    """Validate, then resolve every interpolation once: the ranks get a plain dict (Hydra's runtime config does not
    exist in child processes)."""
    cfg = cfg.copy()
    OmegaConf.set_struct(cfg, False)
    if "hydra" in cfg:
        del cfg["hydra"]
    try:
        OmegaConf.resolve(cfg)
    except Exception as e:  # noqa: BLE001 - interpolation errors name the key
        raise ConfigError(f"config does not resolve: {e}") from None
    if cfg.task == "pair_groups":
        cfg.world_size = 2 * int(cfg.pairs) if cfg.launcher.name == "local" else cfg.world_size
    validate(cfg, submitting)
    return OmegaConf.to_container(cfg, resolve=True)
