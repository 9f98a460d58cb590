"""What a default run prints (verbose=false): the task's few lines, then the diagnosis's top
findings, within MAX_LINES. The full text (summarize() and diagnosis.format_text) still goes to the
job log and the record keeps everything; verbose=true prints the full text on the console too."""

from __future__ import annotations

import diagnosis
from base.record import Record
from base.record_types import DiagnosisBlock, Finding
from diagnosis.finding import evidence_text, saving_text
from stats.fmt import ms

MAX_LINES = 25  # on the console, besides the progress bar (the record path included)
MAX_FINDINGS = 3
MAX_EVIDENCE = 3


def _why(detail: str) -> str:
    """The first sentence of a finding's explanation: its why in one line."""
    head, dot, _ = detail.partition(". ")
    return head + (dot.strip() if dot else "")


def _finding(f: Finding, number: int, record: Record | None = None) -> list[str]:
    pad = " " * (len(str(number)) + 2)
    lines = [f"{number}. {f.title}"]
    if f.detail:
        lines.append(f"{pad}why: {_why(f.detail)}")
    lines += [f"{pad}evidence: {evidence_text(e)}" for e in f.evidence[:MAX_EVIDENCE]]
    if f.saving is not None:
        lines.append(f"{pad}saving: {saving_text(f.saving)}")
    lines.append(f"{pad}next: {f.command}{eta(record, f.command or '')}")
    return lines


def _duration(seconds: float) -> str:
    return (
        f"{seconds:.0f} s"
        if seconds < 100
        else f"{seconds / 60:.0f} min"
        if seconds < 6000
        else f"{seconds / 3600:.1f} h"
    )


def eta(record: Record | None, command: str) -> str:
    """ " (~T here)": how long `command` would take on this machine, from this run's own timings:
    its fixed cost (start, set-up, warm-up, probes) plus steps x its time per measured step (scaled
    by accumulate). Empty where the command is not one train run or the record lacks its time
    budget."""
    r = record.result if record is not None else None
    b = getattr(r, "time_budget", None)
    if (
        b is None
        or not b.job_s
        or not b.window_s
        or not getattr(r, "steps", None)
        or not command.startswith("python train.py ")
        or " -m " in command
    ):
        return ""
    words = dict(
        w.split("=", 1) for w in command.split() if "=" in w and not w.startswith("hydra.")
    )
    try:
        steps = int(words.get("steps", r.steps))
        scale = int(words.get("accumulate", r.accumulate or 1)) / (r.accumulate or 1)
    except ValueError:
        return ""
    seconds = b.job_s - b.window_s + steps * scale * b.window_s / r.steps
    return f"  (~{_duration(seconds)} here, from this run's timings)"


def _quiet_next(record: Record | None, floor: float | None) -> str:
    """Where nothing was found and nothing hides: the command that could find a smaller effect
    (diagnosis.view.quiet_next), with how long it takes here."""
    from diagnosis.view import quiet_next

    if record is None:
        return (
            "next: python train.py -m optim=none,bf16,powersgd repeats=3 (compare the "
            "candidates; README step 4)"
        )
    cmd, what, runs = quiet_next(record, floor)
    if runs == 1:
        return f"next: {cmd}{eta(record, cmd)} {what}"
    b = record.result.time_budget
    when = (
        f"  (~{_duration(runs * b.job_s)} here: {runs} runs like this one)"
        if b is not None and b.job_s
        else ""
    )
    return f"next: {cmd}{when} {what}"


# a sync slower than half its microbenchmark's speed (or faster than twice it) explains a run
FAR_FROM_1 = 0.5


def _efficiency(diag: DiagnosisBlock) -> str | None:
    """The figure that explains a run, when it is far from 1: the sync's speed against the same
    calls in the on-rank microbenchmark (diagnosis.comparisons; its full line is in train.log)."""
    from comm.efficiency import not_measurable

    vs = diag.comparisons.microbench if diag.comparisons is not None else None
    if vs is None or not vs.to_dict() or not_measurable(vs.to_dict()) or vs.efficiency is None:
        return None
    e = vs.efficiency
    if FAR_FROM_1 <= e <= 1 / FAR_FROM_1:
        return None
    ci = (
        f" [{100 * vs.efficiency_ci_lo:.0f}, {100 * vs.efficiency_ci_hi:.0f}]"
        if vs.efficiency_ci_lo is not None and vs.efficiency_ci_hi is not None
        else ""
    )
    bound = ", a lower bound: DDP's span holds waits for gradients" if vs.overlap_s else ""
    return (
        f"comm efficiency {100 * e:.0f}%{ci}: the all-reduces ran at that share of the on-rank "
        "microbenchmark's "
        f"speed for the same {vs.calls} call(s) ({ms(vs.sync_s)} vs {ms(vs.achievable_s)} ms per "
        f"step{bound})"
    )


def diagnosis_lines(
    diag: DiagnosisBlock | None, budget: int, where: str = "<run dir>", record: Record | None = None
) -> list[str]:
    """The diagnosis in at most `budget` lines: one header with the noise floor, then the top
    findings that fit (at most MAX_FINDINGS), each as a why, <= MAX_EVIDENCE evidence lines, the
    saving and the next command with how long it takes here (from `record`'s timings); where nothing
    is found, the command that would find it."""
    if diag is None or not diag.to_dict() or diag.error:
        return [diagnosis.format_text(diag)]
    findings = diag.findings or []
    noise_findings = [f for f in findings if f.first]
    real = [f for f in findings if not f.first]
    noise = diag.noise
    floor = noise.floor if noise is not None else None
    head = (f"diagnosis: {len(real)} finding(s)" if real else "diagnosis: no findings") + (
        f" above the noise floor of {floor:.1%} of the step" if floor else ""
    )
    hidden = len(diag.inside_noise or [])
    if hidden:
        head += f" ({hidden} more too small to name)"
    lines = [head]
    if noise is not None and noise.noisy and noise_findings:
        reasons = "; ".join(noise.reasons or []) or noise_findings[0].title
        cmd = noise_findings[0].command
        lines.append(f"   noisy: {reasons}; next: {cmd}{eta(record, cmd)} narrows it")
    elif not real:
        lines.append(_quiet_next(record, floor))
    clue = _efficiency(diag)
    if clue:
        lines.append(clue)
    shown = 0
    for i, f in enumerate(real[:MAX_FINDINGS], start=1):
        block = _finding(f, i, record)
        if len(lines) + len(block) + (1 if i < len(real) else 0) > budget:
            break
        lines += block
        shown += 1
    if shown < len(real):
        lines.append(
            f"({len(real) - shown} more finding(s): python -m diagnosis {where}, or verbose=true)"
        )
    return lines
