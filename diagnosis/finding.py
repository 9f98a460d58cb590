"""What a rule hands back: a finding with its evidence (numbers from the record, each with its interval or the
words "no interval"), the seed case it matches, the estimated saving and the exact command to try next."""
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
    """fraction: of `of` (usually the step time); lo/hi: the range the arithmetic allows. None fraction: the record
    cannot say; `how` then says what would measure it."""
    fraction: float | None
    seconds: float | None = None
    lo: float | None = None
    hi: float | None = None
    of: str = "the step"
    how: str = ""

    def text(self) -> str:
        if self.fraction is None:
            return f"not estimated: {self.how}"
        rng = (f" (range {100 * self.lo:.0f}-{100 * self.hi:.0f}%)"
               if self.lo is not None and self.hi is not None and self.hi > self.lo else "")
        secs = f", {ms(self.seconds)} ms" if self.seconds is not None else ""
        return f"{100 * self.fraction:.1f}% of {self.of}{secs}{rng}: {self.how}"


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
    first: bool = False             # a noise finding: printed before everything else
    qualitative: bool = False       # a configuration fact (e.g. the transport), not a timing: noise does not hide it

    @property
    def effect(self) -> float:
        """The size the noise floor is compared with."""
        return self.saving.fraction if self.saving and self.saving.fraction is not None else self.impact

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
        lines.append(f"{pad}next: {self.command}")
        return "\n".join(lines)


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Noise first; then findings with an estimated saving, largest first; then the others by the share of the step
    they concern (a finding whose saving one record cannot estimate is not ranked above one that can)."""
    return sorted(findings, key=lambda f: (not f.first, f.saving is None or f.saving.fraction is None, -f.effect))


def finding_from_dict(d: dict) -> Finding:
    d = dict(d)
    d["evidence"] = [Evidence(**e) for e in d.get("evidence") or []]
    d["saving"] = Saving(**d["saving"]) if d.get("saving") else None
    return Finding(**d)
