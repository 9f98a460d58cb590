"""The in-job check on real ranks against a known truth: A/A checks (diagnose.verify_fix set to the
run's own setting, so the true saving is 0), how often the printed interval holds 0.

    python -m results.verify_aa results/verify_calibration/aa [--out FILE]

The simulated counterpart is python -m stats.calibrate_verify; an A/A run shows what the
simulation cannot: the real machine's block-to-block noise, the rebuilt wrapper, the barriers. The
coverage is only as general as the machine's state while the runs ran, so the table gives the host's
load beside it (per_rank[0].work.host_busy and the other processes' share of it)."""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

from scipy import stats as st

from base.record import Record
from stats.runs import CROSSOVER_MIN_ROUNDS


def _others(rec: Record) -> float | None:
    """The share of the host's cores other processes used over the window (host busy minus the
    ranks' own CPU time)."""
    works = [p.work for p in rec.result.per_rank if p.work is not None]
    if not works or works[0].host_busy is None or not works[0].wall_s:
        return None
    own = sum(w.cpu_s or 0.0 for w in works) / (rec.env.cpu_count * works[0].wall_s)
    return max(0.0, works[0].host_busy - own)


def rows(folder: Path) -> list[dict]:
    checks = defaultdict(list)
    for path in sorted(folder.glob("*/run_record.json")):
        rec = Record.read(path)
        v = rec.result.verify if rec.status == "ok" else None
        if v is None or v.skipped is not None or v.ci_lo is None:
            checks["not checked"].append((rec, v))
            continue
        how = "paired t" if v.rounds < CROSSOVER_MIN_ROUNDS else "AB/BA crossover"
        checks[f"steps={rec.result.steps}, {how}"].append((rec, v))
    out = []
    for label, got in sorted(checks.items()):
        row = {"label": label, "checks": len(got)}
        if label != "not checked":
            held = sum(v.ci_lo <= 0.0 <= v.ci_hi for _, v in got)
            ci = st.binomtest(held, len(got)).proportion_ci(0.95, method="exact")
            widths = sorted(100 * (v.ci_hi - v.ci_lo) for _, v in got)
            others = [o for o in (_others(r) for r, _ in got) if o is not None]
            row.update(
                held=held,
                ci=(ci.low, ci.high),
                rounds=sorted(v.rounds for _, v in got),
                saving=statistics.median(100 * v.saving for _, v in got),
                width=statistics.median(widths),
                width_max=widths[-1],
                cost=statistics.median(v.cost_s for _, v in got),
                others=statistics.median(others) if others else None,
            )
        out.append(row)
    return out


def table(folder: Path) -> str:
    lines = [
        f"A/A in-job checks under {folder} (diagnose.verify_fix = the run's own setting: true "
        "saving 0). Held: the printed 95% interval holds 0 [95% Clopper-Pearson interval].",
        "",
        "| checks | n | rounds | interval holds 0 | saving median | width median (max) | "
        "cost per run | others' share of the host |",
        "|---|---:|---|---|---:|---|---:|---:|",
    ]
    for r in rows(folder):
        if "held" not in r:
            lines.append(f"| {r['label']} | {r['checks']} | | | | | | |")
            continue
        rounds = r["rounds"]
        lines.append(
            f"| {r['label']} | {r['checks']} | {rounds[0]}-{rounds[-1]} (median "
            f"{statistics.median(rounds):g}) | {r['held']}/{r['checks']} = "
            f"{r['held'] / r['checks']:.0%} [{r['ci'][0]:.0%}, {r['ci'][1]:.0%}] | "
            f"{r['saving']:+.1f}% | {r['width']:.1f} ({r['width_max']:.1f}) points | "
            f"{r['cost']:.2f} s | "
            + (f"{r['others']:.0%}" if r["others"] is not None else "–")
            + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m results.verify_aa", description=__doc__)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--out", type=Path, help="write the table here as well")
    args = ap.parse_args(argv)
    text = table(args.folder)
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
