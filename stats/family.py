"""A family of comparisons against one baseline: the verdicts a sweep table (or autotune's
selection) prints.

Every row is compared with the baseline at the run level (stats.runs.compare_runs); k rows make k
claims, so the chance that at least one is false grows with k. The family is controlled here:
"holm" (Holm's step-down, Holm 1979: the chance of any false verdict in the table <= 1 - level)
for a table a user acts on row by row, "fdr_bh" (Benjamini-Hochberg 1995: the expected share of
false verdicts <= 1 - level) for ranking candidates (autotune). A row's printed interval is its own
95% interval; a claim the family does not support is shown as "no significant difference" with the
adjustment named. A noise floor raised by the noise sentinel replaces compare.noise as the bar for
faster / slower in every row, so the sentinel's warning and the verdicts never disagree;
equivalence is still judged within +-compare.noise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .power import POWER, detectable
from .runs import compare_runs
from .verdict import CLAIMS, FAMILY_METHODS, NO_VERDICT, NOISE, NS, adjust, best_claim


@dataclass
class Row:
    """One configuration's runs: per-run log throughput, the round each ran in (None: no rounds),
    unsteady runs."""

    label: str
    logs: list
    rounds: list | None = None
    unsteady: list = field(default_factory=list)  # one bool per run (a run the drift test flagged)


def family_verdicts(
    rows: list[Row],
    base: int,
    noise: float = NOISE,
    level: float = 0.95,
    method: str = "holm",
    floor: float | None = None,
) -> list[dict | None]:
    """Every row against rows[base]; None in the base's place (see pair_verdicts)."""
    pairs = [(rows[base], r) for i, r in enumerate(rows) if i != base]
    found = iter(pair_verdicts(pairs, noise, level, method, floor))
    return [None if i == base else next(found) for i in range(len(rows))]


def pair_verdicts(
    pairs: list[tuple[Row, Row]],
    noise: float = NOISE,
    level: float = 0.95,
    method: str = "holm",
    floor: float | None = None,
) -> list[dict]:
    """One family of (baseline, candidate) comparisons (a sweep table's rows, a scaling table's
    points). Each: {ratio, ci_lo, ci_hi, verdict (family-adjusted), verdict_unadjusted, claim, p,
    paired, df, log_ratio, log_se, n_baseline, n_candidate, repeats_needed, detectable, method,
    family, noise, notes}. `detectable`: the smallest true difference this row's design would have
    called with 80% power at the family's level (stats.power); an inconclusive row says it in its
    notes, so "no significant difference" reads with what it could have seen."""
    threshold = max(noise, floor or 0.0)
    out: list[dict] = []
    for b, r in pairs:
        s = compare_runs(b.logs, r.logs, b.rounds, r.rounds, level=level, noise=noise, floor=floor)
        d = {
            "detectable": None,
            "ratio": s.ratio,
            "ci_lo": s.ci_lo,
            "ci_hi": s.ci_hi,
            "paired": s.paired,
            "df": s.df,
            "log_ratio": s.log_ratio,
            "log_se": s.log_se,
            "n_baseline": s.n_baseline,
            "n_candidate": s.n_candidate,
            "method": s.method,
            "noise": noise,
            "floor": threshold,
            "repeats_needed": s.repeats_needed,
            "notes": [],
            "family": None,
        }
        if s.verdict == NO_VERDICT:
            d.update(verdict=NO_VERDICT, verdict_unadjusted=NO_VERDICT, claim=None, p=None)
        else:
            claim, p = best_claim(s.pvalues)
            d.update(verdict_unadjusted=s.verdict, claim=claim, p=p)
        if any(b.unsteady) or any(r.unsteady):
            d["notes"].append("rests on an unsteady run")
        out.append(d)
    judged = [d for d in out if d.get("claim") in CLAIMS]
    keep = adjust([d["p"] for d in judged], 1 - level, method)
    family = f"{FAMILY_METHODS.get(method, method)} over {len(judged)} comparison(s)"
    for d, ok in zip(judged, keep):
        d["verdict"] = d["claim"] if ok else NS
        d["family"] = family
        d["detectable"] = detectable(d["log_se"], d["df"], len(judged), noise, level, POWER, floor)
        if d["verdict"] == NS and d["detectable"] is not None:
            d["notes"].append(
                f"would have seen a difference over {_pct(d['detectable'])} ({POWER:.0%} power, "
                f"{len(judged)} row(s))"
            )
        if not ok and d["verdict_unadjusted"] != NS:
            d["notes"].append(
                f"{d['verdict_unadjusted']} alone, not after "
                f"{'Holm' if method == 'holm' else 'Benjamini-Hochberg'} over {len(judged)} rows"
            )
    return out


def _pct(x: float) -> str:
    return f"{x:.1%}" if x < 0.1 else f"{x:.0%}"
