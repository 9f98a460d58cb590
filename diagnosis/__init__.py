"""Why this job is slower than it should be, and what to change: ranked findings over run records.

    python -m diagnosis <run or sweep dir> [--nccl-tests all_reduce_perf.log]

diagnose(record) reads one run record (base/record.py) and returns what goes into its `result.diagnosis`:

  findings       ranked (diagnosis.finding.rank_findings): noise first, then by estimated saving; each with its
                 evidence (numbers from the record with their intervals, or "no interval"), the seed case it matches,
                 the estimated saving and the exact command to try next
  inside_noise   rules that fired with an effect inside the noise floor: counted, never named in the text
  noise          the floor (fraction of the step) and why
  comparisons    the sync against the on-rank microbenchmark and/or an nccl-tests file (comm.efficiency)
  hta            HolisticTraceAnalysis' overlap beside the tool's own, for profile.enabled runs (diagnosis.hta)
  notes          what the record lacks for a rule, in one line each

job.finalise computes it once, before the record is written, and prints it after the summary; the end-of-sweep
callback and the report read it back; diagnose_sweep (diagnosis.sweep) adds what only a sweep can say (checked
estimates, scaling, the pair-groups curve).
"""
from __future__ import annotations

from comm.efficiency import not_measurable
from diagnosis.figures import RunView
from diagnosis.finding import Finding, finding_from_dict, rank_findings
from diagnosis.rules import RULES, noise_rule

# 2: CPU contention, per_param on full cores, lower-bound efficiency; 3: no next command repeats the run; 4: bucket=null
# (DDP's default) recommended, exposed comm from one probe step never acted on alone, busy-host stragglers, PowerSGD's
# own sync, efficiencies over 100% not measurable
VERSION = 4


def diagnose(record: dict, nccl_tests: dict | None = None, hta: bool = True) -> dict:
    from comm import nccl_tests as nt

    result = record.get("result") or {}
    comm = result.get("comm") or {}
    comparisons = {}
    if comm.get("vs_microbench"):   # records from before overlap_s was kept beside it: the comm section has it
        comparisons["microbench"] = {"overlap_s": comm.get("overlap_s"), **comm["vs_microbench"]}
    if nccl_tests is not None:
        vs = nt.versus(record, nccl_tests)
        if vs:
            comparisons["nccl_tests"] = vs
    from comm.efficiency import versus_link

    link = versus_link((record.get("env") or {}).get("link"), comm, int(result.get("world_size") or 1))
    if link is not None and result.get("sync") != "local":
        comparisons["link"] = link     # behind an emulated link: the reference when nothing was measured
    v = RunView(record, comparisons.get("microbench") or comparisons.get("nccl_tests") or comparisons.get("link"))
    noise = v.noise()
    found: list[Finding] = []
    notes: list[str] = []
    for rule in RULES:
        try:
            f = rule(v)
        except Exception as e:  # noqa: BLE001 - one rule that cannot read a record never costs the others
            notes.append(f"rule {rule.__name__} could not read this record ({type(e).__name__}: {e})")
            continue
        if f is not None:
            found.append(f)
    floor = noise["floor"]
    named = [f for f in found if f.qualitative or f.effect > floor]
    first = noise_rule(v, noise)
    out = {
        "version": VERSION,
        "task": v.task,
        "findings": [f.to_dict() for f in rank_findings(([first] if first else []) + named)],
        "inside_noise": [{"rule": f.rule, "effect": f.effect} for f in found if f not in named],
        "noise": {k: noise.get(k) for k in ("floor", "noisy", "reasons", "n", "ci_level", "rel_halfwidth")},
        "comparisons": comparisons,
        "notes": notes + _notes(v, comparisons),
    }
    if hta and result.get("profiled") and (record.get("config") or {}).get("diagnose", {}).get("hta", True):
        from diagnosis import hta as hta_check

        out["hta"] = hta_check.cross_check(record)
    return out


def _notes(v: RunView, comparisons: dict) -> list[str]:
    notes = []
    r = v.result
    if v.task == "train" and r.get("comm") and v.world_size > 1 and not comparisons:
        skipped = (r.get("microbench") or {}).get("skipped")
        notes.append("comm efficiency not measured: " + (skipped or "no on-rank microbenchmark in this record "
                                                          "(diagnose.microbench=true runs it)"))
    if r.get("backend") == "nccl" and not r.get("nccl_transports"):
        notes.append("NCCL transports unknown: nccl.DEBUG=INFO records which (P2P, SHM, NET/IB, NET/Socket)")
    if v.task in ("collectives",):
        notes.append("task=collectives measures the link itself; the rules read train, grad_sync and pair_groups runs")
    return notes


def format_text(diag: dict | None, heading: str = "diagnosis") -> str:
    """The printed form of a record's diagnosis."""
    if not diag:
        return f"{heading}: none"
    if diag.get("error"):
        return f"{heading}: unavailable ({diag['error']})"
    findings = [finding_from_dict(f) for f in diag.get("findings") or []]
    hidden = len(diag.get("inside_noise") or [])
    real = [f for f in findings if not f.first]
    head = f"{heading}: {len(real)} finding(s), ranked" if real else f"{heading}: no findings" + (
        " above the noise" if findings else "")
    if hidden:
        head += f"; {hidden} more inside the noise (not named)"
    lines = [head]
    for i, f in enumerate(findings):
        lines.append(f.text(0 if f.first else i + (0 if findings[0].first else 1)))
    from comm.nccl_tests import format_comparison

    for _name, vs in (diag.get("comparisons") or {}).items():
        lines.append(format_comparison(vs))
    if diag.get("hta"):
        from diagnosis.hta import format_hta

        lines.append(format_hta(diag["hta"]))
    for n in diag.get("notes") or []:
        lines.append(f"note: {n}")
    return "\n".join(lines)


def attach(record) -> None:
    """job.finalise's call: a record's diagnosis, computed once, into record.result before the record is written.
    A diagnosis never costs a record: any failure is kept as {"error": ...}."""
    if record.status != "ok" or not record.result:
        return
    try:
        record.result["diagnosis"] = diagnose(record.to_dict())
    except Exception as e:  # noqa: BLE001 - a diagnosis never costs the record
        record.result["diagnosis"] = {"version": VERSION, "error": f"{type(e).__name__}: {e}"}


def wandb_summary(diag: dict | None) -> dict:
    """Flat keys for a W&B run summary."""
    if not diag or diag.get("error"):
        return {}
    findings = [f for f in diag.get("findings") or [] if not f.get("first")]
    out = {"diagnosis/findings": len(findings), "diagnosis/noise_floor_pct": 100 * (diag.get("noise") or {}).get(
        "floor", 0.0), "diagnosis/text": format_text(diag)}
    if findings:
        top = findings[0]
        out["diagnosis/top"] = top["title"]
        out["diagnosis/top_rule"] = top["rule"]
        out["diagnosis/next"] = top["command"]
        if top.get("saving") and top["saving"].get("fraction") is not None:
            out["diagnosis/top_saving_pct"] = 100 * top["saving"]["fraction"]
    vs = (diag.get("comparisons") or {}).get("microbench")
    if vs and not not_measurable(vs):
        out["diagnosis/comm_efficiency"] = vs["efficiency"]
    return out


from diagnosis.sweep import diagnose_sweep, format_sweep  # noqa: E402  (sweep reads this module's diagnose)

__all__ = ["diagnose", "diagnose_sweep", "format_sweep", "format_text", "attach", "wandb_summary", "VERSION"]
