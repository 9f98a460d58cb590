"""task=train's config checks: every knob of the step loop, before any rank starts."""
from __future__ import annotations

import warnings
from pathlib import Path

from omegaconf import DictConfig

from core.config import _choice, _positive
from core.errors import ConfigError
from device.memory import local_ranks, preflight as memory_preflight
from device.placement import preflight as placement_preflight
from tasks.train.cuda_graphs import problems as graph_problems
from tasks.train.ddp import warmup_warning

SYNCS = ("ddp", "per_param", "flat", "local")
PRECISIONS = ("fp32", "tf32", "bf16")
H2D_MODES = ("blocking", "non_blocking", "side_stream")
OPTIMS = ("none", "fp16", "bf16", "powersgd")


def check(cfg: DictConfig, submitting: bool = False) -> None:
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
    where = placement_preflight(cfg, submitting)  # where the ranks will run (None: only the compute nodes know)
    on_gpu = where.kind == "cuda" if where is not None else bool(cfg.launcher.get("gpus_per_node"))
    if on_gpu and cfg.sync == "ddp" and not cfg.cuda_graphs and (message := warmup_warning(cfg)):
        warnings.warn(message)
    if cfg.cuda_graphs:
        if found := graph_problems(cfg, where):
            raise ConfigError("cuda_graphs=true cannot capture this run:\n  - " + "\n  - ".join(found))
    if cfg.data.kind == "raw_folder":
        from data.raw_folder import class_count, scan

        scan(Path(cfg.data.root), cfg.data.image_size)  # missing, empty, wrong-size files
        classes = class_count(cfg.data.root)
        if classes > cfg.model.num_classes:
            raise ConfigError(f"data.root={cfg.data.root} has {classes} classes but the model has "
                              f"{cfg.model.num_classes} outputs; set model.num_classes>={classes}.")
    if cfg.data.kind == "fake":
        _positive(cfg, "data.pool")
    if where is not None:
        memory_preflight(cfg, where, local_ranks(cfg))
