"""What a task=script run prints: task=train's lines (the figures are the same), headed by the
script's name, how it ended and what was applied to its DDP."""

from __future__ import annotations

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


def summarize(record: Record) -> str:
    lines = train_summarize(record).splitlines()
    return "\n".join([head(record), *lines[2:]])
