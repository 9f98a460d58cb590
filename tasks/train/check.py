"""task=train's config checks: every knob of the step loop, before any rank starts."""
from __future__ import annotations

import warnings
from pathlib import Path

from omegaconf import DictConfig

from core.config import _choice, _positive, gpu_count
from core.errors import ConfigError

SYNCS = ("ddp", "per_param", "flat", "local")
PRECISIONS = ("fp32", "tf32", "bf16")
H2D_MODES = ("blocking", "non_blocking", "side_stream")
OPTIMS = ("none", "fp16", "bf16", "powersgd")
DDP_ALWAYS_TIMED = 10  # DDP samples its runtime stats on iterations 1..10 whatever the sample rate (reducer.cpp)


def check(cfg: DictConfig, submitting: bool = False) -> None:
    gpus = gpu_count()
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
        from data import check_shard
        from data.raw_folder import class_count, scan

        samples = scan(Path(cfg.data.root), cfg.data.image_size)  # missing, empty, wrong-size files
        check_shard(len(samples), cfg.batch_size, cfg.world_size, cfg.data.root)
        classes = class_count(cfg.data.root)
        if classes > cfg.model.num_classes:
            raise ConfigError(f"data.root={cfg.data.root} has {classes} classes but the model has "
                              f"{cfg.model.num_classes} outputs; set model.num_classes>={classes}.")
    if cfg.data.kind == "fake":
        _positive(cfg, "data.pool")
