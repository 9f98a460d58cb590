"""task=script: the user's own training script, unchanged, run as torchrun would run it and measured
like the built-in loop (docs/script.md). runner.py runs it; attach.py times it through PyTorch's
public hooks; result.py maps what it timed onto task=train's record, so that the summary, the
diagnosis and the what-if model read it unchanged."""

from __future__ import annotations

import time
from pathlib import Path

from base.errors import ConfigError
from base.record import Record
from base.record_types import ScriptResult
from base.store import gather_objects

MEASURES_STEPS = True  # an interrupted run says how far its warm-up and window got
OWN_PROCESS_GROUP = (
    True  # the script calls init_process_group itself: the rank side starts no group
)

# knobs that change what the script computes: the script decides them, so they are refused rather
# than ignored
REFUSED = {
    "accumulate": "its own accumulation (no_sync or require_backward_grad_sync)",
    "batch_size": "its own batch size",
    "model": "its own model",
    "data": "its own data",
    "precision": "its own precision (autocast, GradScaler)",
    "sync": "DDP (sync=ddp)",
    "h2d": "its own copies",
    "cuda_graphs": "its own step",
}


def _typed_keys() -> set[str]:
    """The keys typed on the command line (Hydra's overrides), as group or key names; empty outside
    Hydra."""
    try:
        from hydra.core.hydra_config import HydraConfig

        overrides = HydraConfig.get().overrides.task
    except ValueError:  # not inside a Hydra job (tests calling check directly)
        return set()
    return {o.lstrip("+~").split("=", 1)[0].split(".", 1)[0] for o in overrides}


def check(cfg, submitting: bool = False, host=None) -> None:
    path = cfg.script.path
    if not path:
        raise ConfigError(
            "task=script needs the script: python train.py task=script script.path=my_train.py "
            "'script.args=[--epochs,1]'"
        )
    if not Path(path).is_file():
        raise ConfigError(
            f"script.path={path}: no such file (from {Path.cwd()}); give the path of your training "
            "script, relative to where you run train.py or absolute"
        )
    typed = _typed_keys() & set(REFUSED)
    if typed:
        key = sorted(typed)[0]
        raise ConfigError(
            f"{key}= changes what the script computes, and task=script runs {REFUSED[key]} "
            "unchanged: "
            f"drop {key}= (set it in the script or its script.args), or use task=train"
        )
    if cfg.sync != "ddp":
        raise ConfigError(
            f"sync={cfg.sync}: task=script measures the script's own DistributedDataParallel; drop "
            "sync="
        )


def run(ctx) -> ScriptResult | None:
    from tasks.script.result import assemble, rank_figures
    from tasks.script.runner import run_script

    cfg = ctx.cfg
    path = Path(cfg.script.path).resolve()
    start = time.time()
    attach, ended = run_script(ctx, path, list(cfg.script.args))
    end = time.time()
    mine = rank_figures(ctx, attach, ended)
    everyone = gather_objects(
        ctx.store, "script/figures", ctx.rank, ctx.world_size, mine, to_all=False
    )
    if everyone is None:
        return None
    if not mine["_steps"]:
        from tasks.script.runner import ScriptError

        raise ScriptError(
            f"the script {ended} after {attach.steps_done} optimizer steps, none of them measured: "
            f"warmup_steps={cfg.warmup_steps} skipped; lower warmup_steps or let the script run "
            "longer"
        )
    marks = {
        "start": start,
        "setup": start,
        "warmup": attach.wall0 or start,
        "window": attach.wall1 or end,
        "probes": end,
    }
    script = {
        "path": str(path),
        "args": list(cfg.script.args),
        "ended": ended,
        "steps_taken": attach.steps_done,
        "max_steps": cfg.script.max_steps,
        "ddps": mine["_ddps"],
    }
    return assemble(cfg, ctx, everyone, marks, script)


def summarize(record: Record) -> str:
    from tasks.script.summary import summarize as text

    return text(record)


def brief(record: Record) -> list[str]:
    from tasks.script.summary import brief as lines

    return lines(record)
