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
MEASURE_POLICIES = ("fixed", "adaptive")
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
    check_measure(cfg)
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


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_measure(cfg: DictConfig) -> None:
    """measure.*, repeats and compare.noise: the statistics' knobs."""
    m = cfg.measure
    _choice(cfg, "measure.policy", MEASURE_POLICIES)
    if not _number(m.rel_ci) or not 0 < m.rel_ci < 1:
        raise ConfigError(f"measure.rel_ci={m.rel_ci!r}: the target CI half-width is relative to the median step and must "
                          f"lie in (0, 1), e.g. measure.rel_ci=0.02 for +-2%.")
    if not isinstance(m.block_steps, int) or isinstance(m.block_steps, bool) or m.block_steps < 1:
        raise ConfigError(f"measure.block_steps={m.block_steps!r}: must be a whole number of steps >= 1.")
    if m.max_steps is not None and (not isinstance(m.max_steps, int) or isinstance(m.max_steps, bool)):
        raise ConfigError(f"measure.max_steps={m.max_steps!r}: must be a whole number of steps, or null for no cap.")
    if m.max_s is not None and (not _number(m.max_s) or m.max_s <= 0):
        raise ConfigError(f"measure.max_s={m.max_s!r}: must be a positive number of seconds, or null for no cap.")
    if m.policy == "adaptive":
        if m.max_steps is not None and m.max_steps < cfg.steps:
            raise ConfigError(f"measure.max_steps={m.max_steps} < steps={cfg.steps}: with measure.policy=adaptive `steps` "
                              f"is the minimum, so the cap must be at least that. Use measure.max_steps>={cfg.steps}.")
        if m.max_steps is None and m.max_s is None:
            raise ConfigError("measure.policy=adaptive with measure.max_steps=null and measure.max_s=null could measure "
                              "forever on a noisy machine. Set one of them, e.g. measure.max_s=120.")
    if not isinstance(cfg.repeats, int) or isinstance(cfg.repeats, bool) or cfg.repeats < 1:
        raise ConfigError(f"repeats={cfg.repeats!r}: must be a whole number of runs per configuration >= 1, "
                          f"e.g. repeats=3 (with -m).")
    if not _number(cfg.compare.noise) or not 0 <= cfg.compare.noise < 1:
        raise ConfigError(f"compare.noise={cfg.compare.noise!r}: the relative change below which no difference is "
                          f"claimed must lie in [0, 1), e.g. compare.noise=0.02.")
    if not _number(cfg.fault.sleep_s) or cfg.fault.sleep_s < 0:
        raise ConfigError(f"fault.sleep_s={cfg.fault.sleep_s!r}: must be >= 0 seconds.")

