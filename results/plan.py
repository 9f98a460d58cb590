"""`python -m results.plan <pilot sweep dir> [--target 0.05] [--budget-s 3600]`: the runs x steps a
sweep needs.

The pilot is a sweep run with `repeats=3` (interleaved rounds). From its records this reads, per
configuration and round, the run's log throughput and its within-run standard error (batch means of
its timed blocks), and from the time budget of each record what a run costs (startup: the job's time
outside the window; per step: the window over its steps). stats.power.plan then fixes the cheapest
runs x steps that let every row of the sweep's family detect
`--target` with 80% power (Holm over the rows), or what `--budget-s` can detect, and this prints it
with the command that runs it. The verdicts must come from that new sweep alone: the pilot chose the
design (docs/methods.md, "Repeats planned to a precision")."""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys

from tables.aggregate import group_repeats, run_blocks, run_log, run_round
from tables.sweep import commands, load_entries
from stats.power import Pilot, plan
from stats.within import batch_rate

DEFAULT_TARGET = 0.05
DEFAULT_BUDGET_S = 3600.0


def pilot_from(entries: list) -> tuple[Pilot, list[str]]:
    """(Pilot, row labels) from a repeated sweep's entries; ValueError naming what is missing (a
    configuration absent from a round, a run without timed blocks or time budget)."""
    groups = group_repeats([e for e in entries if e.train is not None and e.status == "ok"])
    if len(groups) < 2:
        raise ValueError("the pilot needs two configurations or more, each with finished runs")
    rounds = sorted({run_round(e) for _, g in groups for e in g} - {None})
    # a round where a run failed (a job the load made hang, say) is left out: the rest stay balanced
    rounds = [r for r in rounds if all(r in {run_round(e) for e in g} for _, g in groups)]
    if len(rounds) < 2:
        raise ValueError(
            "the pilot needs 2 rounds or more in which every configuration finished: rerun it "
            "(repeats=3)"
        )
    logs, within, steps, startup, per_step = [], [], [], [], []
    for label, g in groups:
        by_round = {run_round(e): e for e in g}
        row_logs, row_within = [], []
        for r in rounds:
            e = by_round[r]
            blocks = run_blocks(e, False)
            b = e.train.time_budget
            if blocks is None or b is None or not b.window_s or not b.job_s or not e.train.steps:
                raise ValueError(
                    f"{label}: a run without timed blocks or a time budget (a record this version "
                    "did not write)"
                )
            row_logs.append(run_log(e, False))
            row_within.append(batch_rate(*blocks)["log_se"])
            steps.append(e.train.steps)
            per_step.append(b.window_s / e.train.steps)
            startup.append(max(0.0, b.job_s - b.window_s))
        logs.append(row_logs)
        within.append([math.nan if v is None else v for v in row_within])
    pilot = Pilot(
        logs,
        within,
        int(statistics.median(steps)),
        statistics.median(startup),
        statistics.median(per_step),
    )
    return pilot, [label for label, _ in groups]


def describe(p: dict, pilot: Pilot, rows: int) -> list[str]:
    c = p["components"]
    between, within = (math.sqrt(c[k] / c["scale"]) for k in ("between_var", "per_step_var"))
    lines = [
        f"pilot: {rows + 1} configurations x {len(pilot.logs[0])} rounds of {pilot.steps} steps; a "
        "run costs "
        f"{pilot.startup_s:.0f} s + {pilot.step_s:.2f} s/step",
        f"variance of one run's log throughput (rounds removed, df {c['df']}): between runs "
        f"{between:.1%} SD, within a run {within:.1%} SD per step (planned at the 70% upper limit: "
        f"x{c['scale']:.2f} variance)",
    ]
    lines.append(
        f"plan: {p['runs']} runs x {p['steps']} steps per configuration, about "
        f"{p['seconds'] / 60:.0f} min; "
        + (
            f"detects {p['detectable']:.1%} in every row (80% power, Holm over {rows})"
            if p["detectable"] is not None
            else "too few runs for any interval"
        )
    )
    lines.append(("target reached: " if p["reached"] == "target" else "") + p["reason"])
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m results.plan", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("pilot", nargs="+", help="the pilot sweep dir(s) (a sweep run with repeats=3)")
    ap.add_argument(
        "--target",
        type=float,
        default=DEFAULT_TARGET,
        help="the smallest speed-up every row must detect (80%% power), default 0.05",
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help="machine seconds the planned sweep may take (default 3600)",
    )
    args = ap.parse_args(argv)
    if not 0 < args.target < 1 or args.budget_s <= 0:
        print(
            "error: --target must be in (0, 1) and --budget-s positive, e.g. --target 0.05 "
            "--budget-s 3600",
            file=sys.stderr,
        )
        return 2
    entries = load_entries(args.pilot)
    try:
        pilot, labels = pilot_from(entries)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = len(labels) - 1
    p = plan(pilot, rows, args.target, args.budget_s)
    print("\n".join(describe(p, pilot, rows)))
    for cmd in dict.fromkeys(commands(entries)):
        cmd = re.sub(r" (repeats|steps|hydra\.sweep\.dir)=\S+", "", cmd)
        print(
            f"run (a fresh sweep; its verdicts stand alone): {cmd} repeats={p['runs']} "
            f"steps={p['steps']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
