"""What a default run prints (verbose=false): the task's few lines, then the diagnosis's top findings, within
MAX_LINES. The full text (summarize() and diagnosis.format_text) still goes to the job log and the record keeps
everything; verbose=true prints the full text on the console too."""
from __future__ import annotations

import diagnosis
from base.record_types import DiagnosisBlock, Finding
from diagnosis.finding import evidence_text, saving_text

MAX_LINES = 25      # on the console, besides the progress bar (the record path included)
MAX_FINDINGS = 3
MAX_EVIDENCE = 3


def _why(detail: str) -> str:
    """The first sentence of a finding's explanation: its why in one line."""
    head, dot, _ = detail.partition(". ")
    return head + (dot.strip() if dot else "")


def _finding(f: Finding, number: int) -> list[str]:
    pad = " " * (len(str(number)) + 2)
    lines = [f"{number}. {f.title}"]
    if f.detail:
        lines.append(f"{pad}why: {_why(f.detail)}")
    lines += [f"{pad}evidence: {evidence_text(e)}" for e in f.evidence[:MAX_EVIDENCE]]
    if f.saving is not None:
        lines.append(f"{pad}saving: {saving_text(f.saving)}")
    lines.append(f"{pad}next: {f.command}")
    return lines


def diagnosis_lines(diag: DiagnosisBlock | None, budget: int, where: str = "<run dir>") -> list[str]:
    """The diagnosis in at most `budget` lines: one header with the noise floor, then the top findings that fit
    (at most MAX_FINDINGS), each as a why, <= MAX_EVIDENCE evidence lines, the saving and the next command."""
    if diag is None or not diag.to_dict() or diag.error:
        return [diagnosis.format_text(diag)]
    findings = diag.findings or []
    noise_findings = [f for f in findings if f.first]
    real = [f for f in findings if not f.first]
    noise = diag.noise
    floor = noise.floor if noise is not None else None
    head = (f"diagnosis: {len(real)} finding(s)" if real else "diagnosis: no findings") + (
        f" above the noise floor of {floor:.1%} of the step" if floor else "")
    hidden = len(diag.inside_noise or [])
    if hidden:
        head += f" ({hidden} more too small to name)"
    lines = [head]
    if noise is not None and noise.noisy and noise_findings:
        reasons = "; ".join(noise.reasons or []) or noise_findings[0].title
        lines.append(f"   noisy: {reasons}; to narrow it: {noise_findings[0].command}")
    shown = 0
    for i, f in enumerate(real[:MAX_FINDINGS], start=1):
        block = _finding(f, i)
        if len(lines) + len(block) + (1 if i < len(real) else 0) > budget:
            break
        lines += block
        shown += 1
    if shown < len(real):
        lines.append(f"({len(real) - shown} more finding(s): python -m diagnosis {where}, or verbose=true)")
    return lines
