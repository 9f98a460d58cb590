"""task=train's checks between keys, before any rank starts. Types, choices and bounds are the
schema's (base/schema.py); the model is checked by models.check, the data set by data.check, which
job.config.prepare runs before this module (and torch) is imported (tasks.READS_DATA).
Where the ranks will run comes from device/placement.py (decided as the ranks will decide it), and
what one rank needs from tasks/train/memory.py's estimate."""

from __future__ import annotations

from base.record import setting
import warnings

from omegaconf import DictConfig, OmegaConf

from device.host import Host, asked_gpus_per_node, check_fits, ranks_per_node
from base.errors import ConfigError, ConfigWarning
from tasks.train.memory import preflight as memory_preflight, rank_bytes
from device.placement import preflight as placement_preflight
from models import check as check_model
from tasks.train.cuda_graphs import problems as graph_problems
from tasks.train.ddp import warmup_warning
from tasks.train.verify import asked_problem as verify_fix_problem


def check(cfg: DictConfig, submitting: bool = False, host: Host | None = None) -> None:
    host = host or Host.probe()
    check_model(cfg.model)
    check_fault(cfg)
    if cfg.diagnose.microbench not in ("auto", True, False):
        raise ConfigError(
            f"diagnose.microbench={cfg.diagnose.microbench!r}: choose auto, true or false."
        )
    check_measure(cfg)
    if (problem := verify_fix_problem(cfg)) is not None:
        raise ConfigError(problem)
    if cfg.optim.name != "none" and cfg.sync != "ddp":
        raise ConfigError(
            f"optim={cfg.optim.name} is a DDP comm hook; it needs sync=ddp (got sync={cfg.sync})."
        )
    if cfg.optim.name != "none" and not cfg.optim.get("_target_"):
        raise ConfigError(
            f"optim={cfg.optim.name} names no comm hook (optim._target_ is null): drop the "
            f"optim._target_ override, or name a factory returning (state, hook), e.g. "
            f"optim._target_=tasks.train.hooks.{cfg.optim.name}."
        )
    if cfg.optim.name == "powersgd":
        _check_powersgd(cfg)
    # where the ranks will run (None: only the compute nodes, or the ranks already started, know)
    where = placement_preflight(cfg, submitting, gpus=host.gpus, ranks_started=host.ranks_started)
    on_gpu = where.kind == "cuda" if where is not None else bool(asked_gpus_per_node(cfg.launcher))
    if on_gpu and cfg.sync == "ddp" and not cfg.cuda_graphs and (message := warmup_warning(cfg)):
        warnings.warn(message, ConfigWarning, stacklevel=2)
    if cfg.cuda_graphs:
        _check_cuda_graphs(cfg, where)
    _check_fault(cfg, where)
    _check_memory(cfg, where, host, submitting)


def derive(cfg: DictConfig, unresolved: DictConfig) -> None:
    """A measure.max_steps the user set (the scale's default is an interpolation, meant for adaptive
    windows only) must not contradict a fixed window."""
    if "measure" in unresolved and not OmegaConf.is_interpolation(unresolved.measure, "max_steps"):
        check_fixed_cap(cfg)


def largest_collective(cfg) -> tuple[int, str]:
    """One step's fp32 gradients, all-reduced whole at worst (the emulated link's timeout check)."""
    from models import gradient_bytes

    return gradient_bytes(
        cfg.model, int(setting(cfg, "data.image_size", 224))
    ), "one step's fp32 gradients"


def check_fault(cfg: DictConfig) -> None:
    """fault.rank and fault.step must name a rank and a step the run has, or the fault never
    fires."""
    if cfg.fault.rank is None:
        return
    if cfg.fault.rank >= cfg.world_size:
        raise ConfigError(
            f"fault.rank={cfg.fault.rank} but the run has {cfg.world_size} ranks (0..."
            f"{cfg.world_size - 1}), so the fault never fires. Use "
            f"fault.rank<={cfg.world_size - 1}."
        )
    last = cfg.warmup_steps + cfg.steps - 1
    if cfg.fault.step > last:
        raise ConfigError(
            f"fault.step={cfg.fault.step} but the run's steps are 0...{last} (warmup_steps + "
            "steps: "
            f"the steps every run takes; an adaptive window may stop there), so the fault may "
            f"never fire. Use fault.step<={last}."
        )


def check_measure(cfg: DictConfig) -> None:
    """measure.* and compare.noise between keys (types and bounds are the schema's)."""
    m = cfg.measure
    if not 0 < m.rel_ci < 1:
        raise ConfigError(
            f"measure.rel_ci={m.rel_ci!r}: the target CI half-width is relative to the median step "
            "and "
            f"must lie in (0, 1), e.g. measure.rel_ci=0.02 for +-2%."
        )
    if m.policy == "adaptive":
        if m.max_steps is not None and m.max_steps < cfg.steps:
            raise ConfigError(
                f"measure.max_steps={m.max_steps} < steps={cfg.steps}: with "
                "measure.policy=adaptive "
                f"`steps` is the minimum, so the cap must be at least that. Use "
                f"measure.max_steps>={cfg.steps}."
            )
        if m.max_steps is None and m.max_s is None:
            raise ConfigError(
                "measure.policy=adaptive with measure.max_steps=null and measure.max_s=null could "
                "measure forever on a noisy machine. Set one of them, e.g. measure.max_s=120."
            )
    if not 0 <= cfg.compare.noise < 1:
        raise ConfigError(
            f"compare.noise={cfg.compare.noise!r}: the relative change below which no difference "
            "is "
            f"claimed must lie in [0, 1), e.g. compare.noise=0.02."
        )


def check_fixed_cap(cfg: DictConfig) -> None:
    """measure.policy=fixed measures exactly `steps`: a measure.max_steps the user set below it
    contradicts that (the scale's default cap is for adaptive windows and is not checked here:
    derive calls this only for a cap that was set)."""
    m = cfg.measure
    if m.policy == "fixed" and m.max_steps is not None and m.max_steps < cfg.steps:
        raise ConfigError(
            f"measure.max_steps={m.max_steps} < steps={cfg.steps}: measure.policy=fixed measures "
            "exactly "
            f"`steps`, so the cap would never apply. Use steps={m.max_steps}, or "
            "measure.policy=adaptive "
            f"(steps is then the minimum) with measure.max_steps>={cfg.steps}."
        )


def _check_powersgd(cfg: DictConfig) -> None:
    o = cfg.optim
    if (o.use_error_feedback or o.warm_start) and o.start_iter <= 1:
        raise ConfigError(
            "optim.start_iter must be > 1 when optim.use_error_feedback or optim.warm_start is on "
            "(PowerSGD needs one plain all-reduce step first). Use optim.start_iter=2."
        )
    if o.start_iter > cfg.warmup_steps:
        raise ConfigError(
            f"optim.start_iter={o.start_iter} > warmup_steps={cfg.warmup_steps}: PowerSGD "
            "all-reduces uncompressed "
            f"until step {o.start_iter}, so {o.start_iter - cfg.warmup_steps} measured step(s) "
            "would not be "
            f"PowerSGD at all. Use warmup_steps={o.start_iter} or more, or a smaller "
            "optim.start_iter."
        )


def _check_fault(cfg: DictConfig, where) -> None:
    """fault.delay_* (tasks/train/faults.py) where it would never fire."""
    f = cfg.fault
    if not f.delay_s:
        if f.get("delay_every", 1) != 1:
            raise ConfigError(
                f"fault.delay_every={f.delay_every} without fault.delay_s: nothing is delayed. "
                "Give fault.delay_s=SECONDS too, or drop fault.delay_every."
            )
        return
    if f.delay_rank is not None and f.delay_rank >= cfg.world_size:
        raise ConfigError(
            f"fault.delay_rank={f.delay_rank} but the run has {cfg.world_size} ranks (0..."
            f"{cfg.world_size - 1}), so the delay never happens. Use fault.delay_rank<="
            f"{cfg.world_size - 1}, or null for every rank."
        )
    if cfg.cuda_graphs:
        raise ConfigError(
            "fault.delay_s with cuda_graphs=true: a replayed graph runs no Python hooks, so the "
            "delay "
            "would happen once, at capture. Drop one of them."
        )
    if f.delay_at == "h2d" and where is not None and where.kind == "cpu":
        raise ConfigError(
            "fault.delay_at=h2d delays a blocking host-to-device copy, and CPU ranks make no copy. "
            "Use "
            "device=fake (or a GPU) with h2d=blocking, or another fault.delay_at."
        )


def _check_cuda_graphs(cfg: DictConfig, where) -> None:
    if where is not None and where.kind == "cpu":
        raise ConfigError(
            "cuda_graphs=true needs a CUDA GPU per rank and the ranks would run on CPU "
            f"({where.how}). "
            "Drop cuda_graphs=true."
        )
    if found := graph_problems(cfg, where):
        raise ConfigError("cuda_graphs=true cannot capture this run: " + "; ".join(found) + ".")


def _check_memory(cfg: DictConfig, where, host: Host, submitting: bool) -> None:
    """One rank's peak (tasks/train/memory.py) where it will live: on its GPU (refused naming the
    batch size that fits), or in the host memory a node's CPU ranks share (with the host's rank
    limits, device.host.check_fits)."""
    if where is not None and where.kind == "cuda":
        memory_preflight(cfg, where, ranks_per_node(cfg))
    elif where is not None or not asked_gpus_per_node(cfg.launcher):
        check_fits(
            cfg,
            host,
            ranks=ranks_per_node(cfg),
            per_rank_bytes=rank_bytes(cfg),
            what=f"world_size={cfg.world_size}",
            fix="Use a smaller world_size, batch_size or model, or more nodes (launcher=slurm)",
            submitting=submitting,
        )
