"""Config checks and resolution, done once in the process the user started, before any rank exists: every bad-input
error is raised here with the problem and the fix, never from deep inside torch in the middle of a run."""
from __future__ import annotations

import importlib
import warnings
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from engine.errors import ConfigError

SYNCS = ("ddp", "per_param", "flat", "local")
BACKENDS = ("auto", "nccl", "gloo")
PRECISIONS = ("fp32", "tf32", "bf16")
H2D_MODES = ("blocking", "non_blocking", "side_stream")
OPTIMS = ("none", "fp16", "bf16", "powersgd")
DDP_ALWAYS_TIMED = 10  # DDP samples its runtime stats on iterations 1..10 whatever the sample rate (reducer.cpp)


def _gpu_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def register_resolvers() -> None:
    """${gpu_or:A,B}: A on a machine with a GPU, else B. ${gpu_count:}: GPUs visible here."""
    if not OmegaConf.has_resolver("gpu_or"):
        OmegaConf.register_new_resolver("gpu_or", lambda on_gpu, on_cpu: on_gpu if _gpu_count() > 0 else on_cpu)
    if not OmegaConf.has_resolver("gpu_count"):
        OmegaConf.register_new_resolver("gpu_count", _gpu_count)


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
    from engine.runner import TASKS
    from launchers.slurm import check_config as check_launcher

    _choice(cfg, "task", TASKS)
    _choice(cfg, "backend", BACKENDS)
    _positive(cfg, "world_size")
    _positive(cfg, "timeout_s")
    check_launcher(cfg, submitting=submitting)
    gpus = _gpu_count()
    if cfg.backend == "nccl" and not submitting:
        if gpus == 0:
            raise ConfigError("backend=nccl needs CUDA GPUs and this machine has none. Use backend=gloo (or auto).")
        if cfg.launcher.name == "local" and cfg.world_size > gpus:
            raise ConfigError(f"backend=nccl with world_size={cfg.world_size} needs one GPU per rank, and this machine "
                              f"has {gpus}. Use world_size<={gpus}, or backend=gloo.")
    if cfg.logger.name == "wandb":
        from results.wandb_log import check_logger_config

        check_logger_config(cfg)
    if cfg.task == "train":
        validate_train(cfg, gpus, submitting)
    module = importlib.import_module(TASKS[cfg.task])
    if hasattr(module, "check_config"):
        module.check_config(cfg)


def validate_train(cfg: DictConfig, gpus: int, submitting: bool = False) -> None:
    _choice(cfg, "sync", SYNCS)
    _choice(cfg, "precision", PRECISIONS)
    _choice(cfg, "h2d", H2D_MODES)
    _choice(cfg, "optim.name", OPTIMS)
    for key in ("batch_size", "steps", "bucket", "accumulate", "data.image_size"):
        _positive(cfg, key)
    for key in ("warmup_steps", "probe_steps", "data.workers"):
        _positive(cfg, key, allow_zero=True)
    if not isinstance(cfg.accumulate, int):
        raise ConfigError(f"accumulate={cfg.accumulate!r}: must be a whole number of micro-steps >= 1.")
    if cfg.optim.name != "none" and cfg.sync != "ddp":
        raise ConfigError(f"optim={cfg.optim.name} is a DDP comm hook; it needs sync=ddp (got sync={cfg.sync}).")
    if cfg.optim.name == "powersgd":
        o = cfg.optim
        if not isinstance(o.rank, int) or o.rank < 1:
            raise ConfigError(f"optim.rank={o.rank!r}: PowerSGD's matrix approximation rank must be an integer >= 1.")
        if not isinstance(o.start_iter, int) or o.start_iter < 1:
            raise ConfigError(f"optim.start_iter={o.start_iter!r}: must be an integer >= 1.")
        if (o.use_error_feedback or o.warm_start) and o.start_iter <= 1:
            raise ConfigError("optim.start_iter must be > 1 when optim.use_error_feedback or optim.warm_start is on "
                              "(PowerSGD needs one plain all-reduce step first). Use optim.start_iter=2.")
        if not isinstance(o.min_compression_rate, (int, float)) or o.min_compression_rate < 0:
            raise ConfigError(f"optim.min_compression_rate={o.min_compression_rate!r}: must be >= 0.")
        if o.start_iter > cfg.warmup_steps:
            raise ConfigError(
                f"optim.start_iter={o.start_iter} > warmup_steps={cfg.warmup_steps}: PowerSGD all-reduces uncompressed "
                f"until step {o.start_iter}, so {o.start_iter - cfg.warmup_steps} measured step(s) would not be "
                f"PowerSGD at all. Use warmup_steps={o.start_iter} or more, or a smaller optim.start_iter.")
        if o.orthogonalization_epsilon < 0:
            raise ConfigError(f"optim.orthogonalization_epsilon={o.orthogonalization_epsilon!r}: must be >= 0.")
    if gpus > 0 and cfg.sync == "ddp" and cfg.warmup_steps * cfg.accumulate < DDP_ALWAYS_TIMED:
        warnings.warn(
            f"warmup_steps={cfg.warmup_steps} x accumulate={cfg.accumulate} < {DDP_ALWAYS_TIMED}: on GPU DDP times its "
            f"first {DDP_ALWAYS_TIMED} iterations itself and synchronises the host at the next forward, so the first "
            f"measured steps include those waits. Use warmup_steps>={DDP_ALWAYS_TIMED} for clean numbers.")
    if cfg.cuda_graphs:
        if gpus == 0 and not submitting:
            raise ConfigError("cuda_graphs=true needs a CUDA GPU; this machine has none. Drop cuda_graphs=true.")
        problems = []
        if cfg.sync not in ("ddp", "local"):
            problems.append(f"sync={cfg.sync} (its Python all-reduce loop runs outside the graph): use sync=ddp or local")
        if cfg.optim.name != "none":
            problems.append(f"optim={cfg.optim.name} (comm hooks run Python callbacks a replay skips): use optim=none")
        if cfg.accumulate != 1:
            problems.append("accumulate>1 (no_sync micro-steps change the captured graph): use accumulate=1")
        if cfg.ddp.find_unused_parameters:
            problems.append("ddp.find_unused_parameters=true (needs a dynamic graph): set it false")
        if problems:
            raise ConfigError("cuda_graphs=true cannot capture this run:\n  - " + "\n  - ".join(problems))
    if cfg.data.kind == "raw_folder":
        from data.raw_folder import class_count, scan

        scan(Path(cfg.data.root), cfg.data.image_size)  # missing, empty, wrong-size files
        classes = class_count(cfg.data.root)
        if classes > cfg.model.num_classes:
            raise ConfigError(f"data.root={cfg.data.root} has {classes} classes but the model has "
                              f"{cfg.model.num_classes} outputs; set model.num_classes>={classes}.")
    if cfg.data.kind == "fake":
        _positive(cfg, "data.pool")


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
