"""task=train's checks between keys, before any rank starts. Types, choices and bounds are the schema's
(core/schema.py); the data set and the model are checked by data.check and models.check."""
from __future__ import annotations

import warnings

from omegaconf import DictConfig

from core.config import RANK_MEMORY_BYTES, Host, check_fits, on_gpus, ranks_per_node
from core.errors import ConfigError

DDP_ALWAYS_TIMED = 10  # DDP samples its runtime stats on iterations 1..10 whatever the sample rate (reducer.cpp)
# fp32 copies of the parameters each rank holds at least: parameters, gradients, SGD momentum, DDP's buckets
PARAMETER_COPIES = 4


def check(cfg: DictConfig, submitting: bool = False, host: Host | None = None) -> None:
    host = host or Host.probe()
    if cfg.diagnose.microbench not in ("auto", True, False):
        raise ConfigError(f"diagnose.microbench={cfg.diagnose.microbench!r}: choose auto, true or false.")
    if cfg.optim.name != "none" and cfg.sync != "ddp":
        raise ConfigError(f"optim={cfg.optim.name} is a DDP comm hook; it needs sync=ddp (got sync={cfg.sync}).")
    if cfg.optim.name == "powersgd":
        _check_powersgd(cfg)
    if host.gpus > 0 and cfg.sync == "ddp" and cfg.warmup_steps * cfg.accumulate < DDP_ALWAYS_TIMED:
        warnings.warn(
            f"warmup_steps={cfg.warmup_steps} x accumulate={cfg.accumulate} < {DDP_ALWAYS_TIMED}: on GPU DDP times its "
            f"first {DDP_ALWAYS_TIMED} iterations itself and synchronises the host at the next forward, so the first "
            f"measured steps include those waits. Use warmup_steps>={DDP_ALWAYS_TIMED} for clean numbers.")
    if cfg.cuda_graphs:
        _check_cuda_graphs(cfg, submitting, host)
    if not on_gpus(cfg, host):
        check_fits(cfg, host, ranks=ranks_per_node(cfg), per_rank_bytes=rank_bytes(cfg),
                   what=f"world_size={cfg.world_size}", fix="Use a smaller world_size or model, or more nodes "
                   "(launcher=slurm)", submitting=submitting)


def _check_powersgd(cfg: DictConfig) -> None:
    o = cfg.optim
    if (o.use_error_feedback or o.warm_start) and o.start_iter <= 1:
        raise ConfigError("optim.start_iter must be > 1 when optim.use_error_feedback or optim.warm_start is on "
                          "(PowerSGD needs one plain all-reduce step first). Use optim.start_iter=2.")
    if o.start_iter > cfg.warmup_steps:
        raise ConfigError(
            f"optim.start_iter={o.start_iter} > warmup_steps={cfg.warmup_steps}: PowerSGD all-reduces uncompressed "
            f"until step {o.start_iter}, so {o.start_iter - cfg.warmup_steps} measured step(s) would not be "
            f"PowerSGD at all. Use warmup_steps={o.start_iter} or more, or a smaller optim.start_iter.")


def _check_cuda_graphs(cfg: DictConfig, submitting: bool, host: Host) -> None:
    if host.gpus == 0 and not submitting:
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
        raise ConfigError("cuda_graphs=true cannot capture this run: " + "; ".join(problems) + ".")


def rank_bytes(cfg: DictConfig) -> int:
    """A lower bound on one CPU rank's memory: the process, the fp32 parameter copies and the fake data pool.
    Activations come on top, so a refusal is certain and a pass is not a promise."""
    from models import parameter_count

    params = parameter_count(cfg.model, cfg.data.image_size)
    pool = cfg.data.pool * 3 * cfg.data.image_size ** 2 * 4 if cfg.data.kind == "fake" else 0
    return RANK_MEMORY_BYTES + PARAMETER_COPIES * 4 * params + pool
