"""How a finding reads and where it ranks. A finding (base.record_types.Finding, the type the record
stores) carries its evidence (numbers from the record, each with its interval or the words "no
interval"), the source case it matches, the estimated saving and the exact command to try next;
findings are ranked by the saving of their fix, a near-tie broken by the strength of the
evidence."""

from __future__ import annotations

from base.record_types import Evidence, Finding, Saving
from stats import fmt_ci
from stats.fmt import ms


def evidence_text(e: Evidence) -> str:
    note = e.note
    if e.value is None:
        return f"{e.name}: not measured" + (f" ({note})" if note else "")
    has_ci = e.ci_lo is not None and e.ci_hi is not None and e.ci_hi > e.ci_lo
    if has_ci:
        num = fmt_ci(e.value, e.ci_lo, e.ci_hi, e.unit)
    elif e.unit == "ms":  # the digits the sync line and the accounting print for the same figure
        num = f"{ms(e.value / 1e3)} ms"
    else:
        num = fmt_ci(e.value, None, None, e.unit)
    if not has_ci and not note:
        note = "no interval"
    return f"{e.name} {num}" + (f" ({note})" if note else "")


def saving_text(s: Saving) -> str:
    if s.fraction is None and s.source == "rule" and s.hi is not None:  # a bound (issue 38)
        return f"at most {100 * s.hi:.0f}% of {s.of} {s.how}" + (
            f"; {s.capped}" if s.capped else ""
        )
    if s.fraction is None:
        return f"not estimated: {s.how}"
    word = "95% interval" if s.basis == "interval" else "range"
    rng = ""
    if s.lo is not None and s.hi is not None and s.hi > s.lo:
        # whole points, or tenths where its ends would round alike ("4-4%" for [3.9, 4.4])
        d = 0 if f"{100 * s.lo:.0f}" != f"{100 * s.hi:.0f}" else 1
        rng = f" ({word} {100 * s.lo:.{d}f}-{100 * s.hi:.{d}f}%)"
    secs = f", {ms(s.seconds)} ms" if s.seconds is not None else ""
    out = f"{100 * s.fraction:.1f}% of {s.of}{secs}{rng}: {s.how}"
    if s.predicted and s.predicted.get("fraction") is not None:
        p = s.predicted
        who = "the model" if p.get("source") == "model" else "the rule of thumb"
        out += f" ({who} predicted {100 * p['fraction']:.1f}%)"
    elif s.rule and s.rule.get("fraction") is not None:
        out += f" (the rule of thumb said {100 * s.rule['fraction']:.1f}%)"
    if s.capped:
        out += f"; {s.capped}"
    return out


def finding_text(f: Finding, number: int | None = None) -> str:
    """The printed form: numbered where it is a cause (`number`), a dash for the noise."""
    head = f"{number}. " if number is not None else "- "
    pad = " " * len(head)
    lines = [f"{head}{f.title}"]
    if f.detail:
        lines.append(f"{pad}{f.detail}")
    for e in f.evidence:
        lines.append(f"{pad}evidence: {evidence_text(e)}")
    lines.append(f"{pad}matches {f.matches}")
    if f.saving is not None:
        lines.append(f"{pad}estimated saving: {saving_text(f.saving)}")
    others = [p for p in f.predictions if p["change"] != f.recommends]
    if others:
        lines.append(
            f"{pad}other fixes the model priced: "
            + "; ".join(
                " ".join(f"{k}={v}" for k, v in p["change"].items())
                + f" {100 * p['fraction']:.1f}%"
                + (
                    f" [{100 * p['lo']:.0f}, {100 * p['hi']:.0f}]"
                    if p.get("lo") is not None
                    else ""
                )
                for p in others
            )
        )
    lines.append(f"{pad}next: {f.command}")
    for g in f.folded:
        lines.append(f"{pad}also explains: {g.title} ({g.why})")
    return "\n".join(lines)


def rank_findings(findings: list[Finding], tie: float = 0.0) -> list[Finding]:
    """Noise first; then findings with an estimated saving, largest first; then the others by the
    share of the step they concern (a finding whose saving one record cannot estimate is not ranked
    above one that can). Two savings within `tie` of each other (the noise floor) are a near-tie:
    the one with the stronger evidence (an interval against a point or a range) goes first."""
    ranked = sorted(
        findings,
        key=lambda f: (not f.first, f.saving is None or f.saving.ranked is None, -f.effect),
    )
    for i in range(len(ranked) - 1):
        a, b = ranked[i], ranked[i + 1]
        if near_tie(a, b, tie) and b.strength > a.strength:
            ranked[i], ranked[i + 1] = b, a
    return ranked


def near_tie(a: Finding, b: Finding, tie: float) -> bool:
    """Both savings estimated and within `tie` of each other."""
    return (
        not a.first
        and not b.first
        and a.strength > 0
        and b.strength > 0
        and abs(a.saving.ranked - b.saving.ranked) <= tie
    )
