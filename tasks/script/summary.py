"""What a task=script run prints: task=train's lines (the figures are the same), headed by the
script's name, how it ended and what was applied to its DDP."""

from __future__ import annotations

import statistics
from pathlib import Path

from base.record import Record
from tasks.train.brief import brief as train_brief
from tasks.train.result import summarize as train_summarize


def head(record: Record) -> str:
    r = record.result
    s = r.script or {}
    ddps = s.get("ddps") or [{}]
    applied = ddps[0].get("applied") or {}
    knobs = " ".join(f"{k}={v}" for k, v in applied.items())
    hook = ddps[0].get("script_hook")
    replaced = ddps[0].get("script_hook_replaced_by")
    hook_text = (
        f", its comm hook {hook}" + (f" replaced by optim={replaced}" if replaced else "")
        if hook
        else ""
    )
    return (
        f"script {Path(s.get('path', '?')).name} {' '.join(s.get('args') or [])}".rstrip()
        + f": {r.world_size} {r.backend} rank(s) on {r.device_name}, optim={r.optim}"
        + (f" {knobs}" if knobs else "")
        + hook_text
        + f"; {s.get('steps_taken')} steps, {s.get('ended')}; steps "
        f"{r.warmup_steps + 1}-{r.warmup_steps + r.steps}"
        " measured"
    )


def brief(record: Record) -> list[str]:
    lines = train_brief(record)
    return [head(record), *lines[1:]]


def own_cost(record: Record) -> str | None:
    """Rank 0's host time in the tool's own hooks per measured step against its step, and in the
    all-reduce it put in place of DDP's built-in (an upper bound of that part; its allreduce
    call's CPU, the built-in's own, said apart): the attach cost's micro route (the whole cost,
    launcher included: python -m tasks.script.cost)."""
    rank0 = next((r for r in record.result.per_rank or [] if r.rank == 0), None)
    series = rank0.series if rank0 is not None else None
    own = [x for x in (series.tool_s or []) if x is not None] if series is not None else []
    if not own or not series.step_time_s:
        return None
    # medians over the steps: a hook's wall time holds any wait for a core inside it
    per_step, step = statistics.median(own), statistics.mean(series.step_time_s)
    sub = statistics.median(series.substituted_hook_s or [0.0])
    # of which the process group's allreduce call's CPU (the built-in's own call), per step
    calls = series.substituted_collective_s or []
    call = statistics.median(calls) if calls else None
    return (
        f"attach: the tool's hooks took {per_step * 1e6:.0f} us of rank 0's host time per step "
        f"(median), {per_step / step:.2%} of its {step * 1e3:.3g} ms mean step"
        + (
            f" (+ at most {sub * 1e6:.0f} us, {sub / step:.2%}, in the all-reduce put in "
            "place of DDP's built-in"
            + (f", {call * 1e6:.0f} us of it the built-in's own allreduce call" if calls else "")
            + ")"
            if sub
            else ""
        )
        + "; the whole cost: python -m tasks.script.cost"
    )


def summarize(record: Record) -> str:
    lines = train_summarize(record).splitlines()
    own = own_cost(record)
    return "\n".join([head(record), *lines[2:], *([own] if own else [])])
