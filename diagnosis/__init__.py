"""Why this job is slower than it should be, and what to change: ranked findings over run records.

    python -m diagnosis <run or sweep dir> [--nccl-tests all_reduce_perf.log]

diagnose(record) returns a run's `result.diagnosis` (its fields: docs/record.md): the findings
ranked by the saving of their fix (diagnosis.run), each with its evidence, source and next command.
job.finalise computes it once, before the record is written; the sweep callback and the report
read it back; diagnose_sweep (diagnosis.sweep) adds what only a sweep can say.
"""

from __future__ import annotations

from base.record import Record, typed_block
from base.record_types import DiagnosisBlock, TaskResult
from diagnosis.accounting import lines as accounting_lines
from comm.efficiency import not_measurable
from diagnosis.finding import finding_text
from diagnosis.run import VERSION, diagnose
from diagnosis.view import as_block, named_findings
from diagnosis.sweep import diagnose_sweep, format_sweep


def format_text(diag: DiagnosisBlock | dict | None, heading: str = "diagnosis", record=None) -> str:
    """The printed form of a record's diagnosis; with its record, a run where nothing was found ends
    on that run's own next command (diagnosis.view.quiet_next: a script's is its script's)."""
    d = as_block(diag)
    if d is None or not d.to_dict():
        return f"{heading}: none"
    if d.error:
        return f"{heading}: unavailable ({d.error})"
    findings = d.findings or []
    hidden = d.inside_noise or []
    real = [f for f in findings if not f.first]
    threshold, floor = (d.noise.threshold, d.noise.floor) if d.noise is not None else (None, None)
    head = (
        f"{heading}: {len(real)} finding{'s' if len(real) != 1 else ''}, ranked by the saving of "
        "the fix"
        if real
        else f"{heading}: no findings"
    )
    under = [h for h in hidden if h.under != "noise"]
    masked = [h for h in hidden if h.under == "noise"]
    if under:
        head += (
            f"; {len(under)} more under the {100 * (threshold or 0.02):.0f}% threshold (not named)"
        )
    if masked:
        head += (
            f"; {len(masked)} more inside the noise ({100 * (floor or 0):.1f}%): named once, "
            "under the noise below"
        )
    lines = [head, *accounting_lines(d.accounting)]
    for f in findings:
        if f.first:
            lines.append(finding_text(f))
    for i, f in enumerate(real, 1):
        lines.append(finding_text(f, i))
    for t in d.ties or []:
        a, b = t["findings"]
        lines.append(
            f"findings {a} and {b} cannot be told apart on this record: their savings "
            f"({100 * t['savings'][0]:.1f}% and {100 * t['savings'][1]:.1f}%) differ by less than "
            "the noise "
            f"({100 * t['floor']:.1f}%) and rest on evidence of the same strength"
        )
    from comm.nccl_tests import format_comparison

    acc = d.accounting
    wait_s = acc.probe.wait_s if acc is not None and acc.probe is not None else None
    for vs in (d.comparisons.to_dict() if d.comparisons is not None else {}).values():
        lines.append(format_comparison(vs))
        if wait_s and vs.get("sync_s") and wait_s > 0.2 * vs["sync_s"]:
            lines.append(
                f"  (the sync's {1e3 * vs['sync_s']:.3g} ms hold rank 0's {1e3 * wait_s:.3g} ms "
                "wait "
                f"for rank {acc.wait.rank}: the straggler's time, not the link's)"
            )
    if d.hta:
        from diagnosis.hta import format_hta

        lines.append(format_hta(d.hta))
    for n in d.notes or []:
        lines.append(f"note: {n}")
    if (
        not findings and d.accounting is not None
    ):  # a train run with nothing found nor hidden: not a dead end
        if record is not None:
            from diagnosis.view import quiet_next

            cmd, what, _ = quiet_next(record, d.noise.floor if d.noise is not None else None)
            lines.append(f"next: nothing here is above the noise floor: {cmd} {what}")
        else:
            lines.append(
                "next: nothing here is above the noise floor; to look closer, compare the "
                "candidates with repeats (README step 4): python train.py -m "
                "optim=none,bf16,powersgd repeats=3"
            )
    return "\n".join(lines)


def attach(record: Record) -> None:
    """job.finalise's call: a record's diagnosis, computed once, into record.result before the
    record is written. A diagnosis never costs a record: any failure is kept as {"error": ...}."""
    result = record.result
    if record.status != "ok" or not isinstance(result, TaskResult) or not result.to_dict():
        return
    try:
        diag = diagnose(record)
    except Exception as e:  # noqa: BLE001 - a diagnosis never costs the record
        diag = {"version": VERSION, "error": f"{type(e).__name__}: {e}"}
    result.diagnosis = typed_block(DiagnosisBlock, diag, "result.diagnosis")


def wandb_summary(diag: DiagnosisBlock | dict | None) -> dict:
    """Flat keys for a W&B run summary."""
    d = as_block(diag)
    if d is None or not d.to_dict() or d.error:
        return {}
    findings = named_findings(d)
    floor = d.noise.floor if d.noise is not None and d.noise.has("floor") else 0.0
    out = {
        "diagnosis/findings": len(findings),
        "diagnosis/noise_floor_pct": 100 * floor,
        "diagnosis/text": format_text(d),
    }
    if findings:
        top = findings[0]
        out["diagnosis/top"] = top.title
        out["diagnosis/top_rule"] = top.rule
        out["diagnosis/next"] = top.command
        if top.saving is not None and top.saving.fraction is not None:
            out["diagnosis/top_saving_pct"] = 100 * top.saving.fraction
    vs = d.comparisons.microbench if d.comparisons is not None else None
    if vs is not None and vs.to_dict() and not not_measurable(vs):
        out["diagnosis/comm_efficiency"] = vs.efficiency
    return out


__all__ = [
    "diagnose",
    "diagnose_sweep",
    "format_sweep",
    "format_text",
    "attach",
    "wandb_summary",
    "VERSION",
]
