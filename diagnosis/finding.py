"""What a rule hands back: a finding with its evidence (numbers from the record, each with its interval or the
words "no interval"), the seed case it matches, the estimated saving and the exact command to try next; and how
findings are ranked: by the saving of their fix, a near-tie broken by the strength of the evidence."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from stats import fmt_ci
from stats.fmt import ms


@dataclass
class Evidence:
    name: str
    value: float | None
    unit: str = ""                  # printed after the number: "ms", "%", "GB/s", "x", ""
    ci_lo: float | None = None      # same unit as value
    ci_hi: float | None = None
    source: str = ""                # where in the record: "result.comm.exposed_s"
    note: str = ""                  # how the interval came about, or why there is none

    def text(self) -> str:
        note = self.note
        if self.value is None:
            return f"{self.name}: not measured" + (f" ({note})" if note else "")
        has_ci = self.ci_lo is not None and self.ci_hi is not None and self.ci_hi > self.ci_lo
        num = fmt_ci(self.value, self.ci_lo, self.ci_hi, self.unit) if has_ci else \
            fmt_ci(self.value, None, None, self.unit)
        if not has_ci and not note:
            note = "no interval"
        return f"{self.name} {num}" + (f" ({note})" if note else "")


@dataclass
class Saving:
    """fraction: of `of` (the step the throughput implies, or the time per sample); lo/hi: a 95% interval
    (basis "interval": measured, or the what-if model's) or the range the arithmetic allows (basis "range"). None
    fraction: the record cannot say; `how` then says what would measure it. source: "model" (whatif), "rule" (a rule
    of thumb) or "measured"; rule: the rule of thumb's own estimate where the model replaced it (the checked-estimates
    table sets both beside what a sweep measured). capped: why it is smaller than its own arithmetic (part of its time
    is counted in a higher-ranked finding)."""
    fraction: float | None
    seconds: float | None = None
    lo: float | None = None
    hi: float | None = None
    of: str = "the step"
    how: str = ""
    basis: str = "range"
    source: str = "rule"
    rule: dict | None = None
    capped: str = ""

    @property
    def strength(self) -> int:
        """2: an interval (measured or modelled); 1: a point or an arithmetic range; 0: not estimated."""
        if self.fraction is None:
            return 0
        return 2 if self.basis == "interval" and self.lo is not None and self.hi is not None else 1

    def text(self) -> str:
        if self.fraction is None:
            return f"not estimated: {self.how}"
        word = "95% interval" if self.basis == "interval" else "range"
        rng = (f" ({word} {100 * self.lo:.0f}-{100 * self.hi:.0f}%)"
               if self.lo is not None and self.hi is not None and self.hi > self.lo else "")
        secs = f", {ms(self.seconds)} ms" if self.seconds is not None else ""
        out = f"{100 * self.fraction:.1f}% of {self.of}{secs}{rng}: {self.how}"
        if self.rule and self.rule.get("fraction") is not None:
            out += f" (the rule of thumb said {100 * self.rule['fraction']:.1f}%)"
        if self.capped:
            out += f"; {self.capped}"
        return out


@dataclass
class Finding:
    rule: str                       # e.g. "exposed_comm.sync_path"
    title: str                      # one line
    detail: str                     # why, in words, from the numbers
    evidence: list[Evidence]
    seed: str                       # diagnosis.seeds.cite(...)
    saving: Saving | None
    command: str                    # the exact command to try next
    recommends: dict = field(default_factory=dict)   # the overrides `command` changes (checked against sweeps)
    impact: float = 0.0             # share of the step the condition concerns (ranks findings without a saving)
    first: bool = False             # a noise finding: printed before everything else, not numbered as a cause
    qualitative: bool = False       # a configuration fact (e.g. the transport), not a timing: noise does not hide it
    pool: str = ""                  # the part of the step its saving comes from (diagnosis.run: Pools)
    fixes: list[dict] = field(default_factory=list)          # the fixes of its cause the model may price (overrides)
    predictions: list[dict] = field(default_factory=list)    # the what-if model's saving of each fix it priced
    folded: list[dict] = field(default_factory=list)          # findings this one explains (theirs is its time)
    cause: float | None = None      # what the cause itself costs (share of the step), where it can be smaller than
                                    # what its fix saves (accumulate=K also spreads the optimizer over K micro-batches)

    @property
    def effect(self) -> float:
        """The size findings are ranked by: the saving of the fix, else the share of the step it concerns."""
        return self.saving.fraction if self.saving and self.saving.fraction is not None else self.impact

    @property
    def material(self) -> float:
        """The size the noise floor is compared with: the effect, and no more than the cause itself costs."""
        return self.effect if self.cause is None else min(self.effect, self.cause)

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self, number: int | None = None) -> str:
        head = f"{number}. " if number is not None else "- "
        pad = " " * len(head)
        lines = [f"{head}{self.title}"]
        if self.detail:
            lines.append(f"{pad}{self.detail}")
        for e in self.evidence:
            lines.append(f"{pad}evidence: {e.text()}")
        lines.append(f"{pad}matches {self.seed}")
        if self.saving is not None:
            lines.append(f"{pad}estimated saving: {self.saving.text()}")
        others = [p for p in self.predictions if p["change"] != self.recommends]
        if others:
            lines.append(f"{pad}other fixes the model priced: " + "; ".join(
                " ".join(f"{k}={v}" for k, v in p["change"].items()) + f" {100 * p['fraction']:.1f}%"
                + (f" [{100 * p['lo']:.0f}, {100 * p['hi']:.0f}]" if p.get("lo") is not None else "")
                for p in others))
        lines.append(f"{pad}next: {self.command}")
        for f in self.folded:
            lines.append(f"{pad}also explains: {f['title']} ({f['why']})")
        return "\n".join(lines)

    @property
    def strength(self) -> int:
        return self.saving.strength if self.saving is not None else 0


def rank_findings(findings: list[Finding], tie: float = 0.0) -> list[Finding]:
    """Noise first; then findings with an estimated saving, largest first; then the others by the share of the step
    they concern (a finding whose saving one record cannot estimate is not ranked above one that can). Two savings
    within `tie` of each other (the noise floor) are a near-tie: the one with the stronger evidence (an interval
    against a point or a range) goes first."""
    ranked = sorted(findings, key=lambda f: (not f.first, f.saving is None or f.saving.fraction is None, -f.effect))
    for i in range(len(ranked) - 1):
        a, b = ranked[i], ranked[i + 1]
        if near_tie(a, b, tie) and b.strength > a.strength:
            ranked[i], ranked[i + 1] = b, a
    return ranked


def near_tie(a: Finding, b: Finding, tie: float) -> bool:
    """Both savings estimated and within `tie` of each other."""
    return (not a.first and not b.first and a.strength > 0 and b.strength > 0
            and abs(a.saving.fraction - b.saving.fraction) <= tie)


def finding_from_dict(d: dict) -> Finding:
    d = {k: v for k, v in d.items() if k in Finding.__dataclass_fields__}
    d["evidence"] = [Evidence(**e) for e in d.get("evidence") or []]
    d["saving"] = Saving(**{k: v for k, v in d["saving"].items() if k in Saving.__dataclass_fields__}) \
        if d.get("saving") else None
    return Finding(**d)
