"""How small a rank's stall every N steps does the hiccup rule see, and how often does it name one
that is not there? A known-truth check on real noise (issue 37).

    python -m diagnosis.hiccup_power [--out results/hiccup_power] [records ...]

Each base record is a real 2-rank script run with no stall on any rank (the healthy and busy-host
script benchmark runs, the script-cost runs of plain_ddp and accumulate_amp with the tool on): its
per-step series hold the noise of this machine as the rule meets it. A stall of S ms is added to
one rank's step on every N-th step (each phase of the lattice in turn, on each rank in turn: what a
rank's evaluation or checkpoint every N steps adds outside the timed phases), S a share of that
rank's median step (runs' steps differ tenfold), and the rule runs on the result. Found: the rule
names that rank; named right: with the period N as well. The bases as they are give the false
findings (no stall added: any finding is false). The rows go by the runs' length: a 20-step window
holds 2 to 7 stalls, a 150-step one 15 to 50.
"""

from __future__ import annotations

import argparse
import copy
import glob
import json
import statistics
import sys
from pathlib import Path

from diagnosis import rules
from diagnosis.view import RunView, as_record

ROOT = Path(__file__).resolve().parent.parent
BASES = (
    # the script benchmark's healthy and busy-host runs of 2026-12-07 20:07, pinned (a rerun of
    # the benchmark rewrites its folders, and the table moved with them)
    "tests/fixtures/hiccup_bases/script_*",
    "results/script_cost/runs/plain_ddp_tool_*",
    "results/script_cost/runs/accumulate_amp_tool_*",
    "tests/fixtures/script_healthy_2026-11-28",
)
SHARES = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0)  # the stall, of the rank's median step
PERIODS = (3, 5, 10)


def bases(patterns=BASES) -> list[Path]:
    """The base records: each a run whose script injected no stall."""
    found = []
    for pattern in patterns:
        found += sorted(Path(p) for p in glob.glob(str(ROOT / pattern)))
    return [p for p in found if (p / "run_record.json").is_file()]


def with_stall(record: dict, rank: int, every: int, phase: int, stall_s: float) -> dict:
    """The record with stall_s added to rank's step on steps phase, phase + every, ... (outside
    its timed phases: the series' step time grows, its phases do not)."""
    out = copy.deepcopy(record)
    for p in out["result"]["per_rank"]:
        if p["rank"] == rank:
            steps = p["series"]["step_time_s"]
            for i in range(phase, len(steps), every):
                steps[i] += stall_s
    return out


def trial(record: dict, rank: int, every: int, phase: int, stall_s: float) -> tuple[bool, bool]:
    """(found, named right) for one injected stall: the finding names the rank; and its period."""
    f = rules.hiccup(RunView(as_record(with_stall(record, rank, every, phase, stall_s))))
    if f is None:
        return False, False
    found = f.title.startswith(f"Rank {rank} ")
    return found, found and f" every {every} steps" in f.title


def steps(record: dict) -> int:
    """The run's window, in steps (its shortest rank's series)."""
    return min(len(p["series"]["step_time_s"]) for p in record["result"]["per_rank"])


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def measure(paths: list[Path]) -> dict:
    records = {_name(p): json.loads((p / "run_record.json").read_text()) for p in paths}
    medians = []
    for rec in records.values():
        for p in rec["result"]["per_rank"]:
            medians.append(statistics.median(p["series"]["step_time_s"]))
    false = sum(rules.hiccup(RunView(as_record(r))) is not None for r in records.values())
    rows = []
    lengths = sorted({steps(r) for r in records.values()})
    for length in lengths:
        for share in SHARES:
            row = {"steps": length, "share": share}
            for every in PERIODS:
                found = right = n = 0
                for rec in records.values():
                    if steps(rec) != length:
                        continue
                    for p in rec["result"]["per_rank"]:
                        stall = share * statistics.median(p["series"]["step_time_s"])
                        for phase in range(every):
                            f, r = trial(rec, p["rank"], every, phase, stall)
                            found, right, n = found + f, right + r, n + 1
                row[str(every)] = {"found": found, "right": right, "n": n}
            rows.append(row)
    return {
        "bases": list(records),
        "steps": lengths,
        "runs": {str(k): sum(steps(r) == k for r in records.values()) for k in lengths},
        "median_step_ms": 1e3 * statistics.median(medians),
        "false": {"named": false, "n": len(records)},
        "rows": rows,
    }


def table(res: dict) -> str:
    periods = [k for k in res["rows"][0] if k.isdigit()]  # the JSON's keys: the periods
    lines = [
        "Hiccup rule against a known stall, on real noise (`python -m diagnosis.hiccup_power`). "
        f"{len(res['bases'])} base runs with no stall (2 ranks; median step "
        f"{res['median_step_ms']:.1f} ms): " + ", ".join(f"`{b}`" for b in res["bases"]) + ".",
        "",
        f"False findings on the bases as they are: {res['false']['named']} of {res['false']['n']}.",
        "",
        "| steps | runs | stall, of the rank's median step | "
        + " | ".join(f"every {p} steps: found / named with its period" for p in periods)
        + " |",
        "|---:|---:|---:|" + "---:|" * len(periods),
    ]
    for row in res["rows"]:
        cells = [
            f"{row[p]['found']}/{row[p]['n']} ({100 * row[p]['found'] / row[p]['n']:.0f}%) / "
            f"{row[p]['right']}"
            for p in periods
        ]
        runs = res["runs"][str(row["steps"])]
        head = f"| {row['steps']} | {runs} | {100 * row['share']:.0f}% | "
        lines.append(head + " | ".join(cells) + " |")
    lines += [
        "",
        "Each cell: of the trials (every base run x each rank x each phase of the lattice), "
        "those in which the rule named the stalled rank, and of them those whose title gave the "
        "period. A stall is added to the rank's step time outside its timed phases; the other "
        "ranks' series "
        "are left as recorded (the rule reads each rank's work less its all-reduce wait, which the "
        "stall does not change on the others). The trials of a row share its 7-8 base runs, so "
        "they are not independent: read a row as how the rule fares on these runs' noise, not as a "
        "rate with a binomial interval. Pure computation on committed records: the same on any "
        "machine.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m diagnosis.hiccup_power", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--out", default="results/hiccup_power", help="where power.json and power.md go"
    )
    ap.add_argument("records", nargs="*", help="base run directories (default: the committed ones)")
    a = ap.parse_args(argv)
    paths = [Path(r).resolve() for r in a.records] if a.records else bases()
    paths = [p for p in paths if (p / "run_record.json").is_file()]
    if not paths:
        print(
            "hiccup_power: no base records found; give run directories holding run_record.json",
            file=sys.stderr,
        )
        return 2
    res = measure(paths)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "power.json").write_text(json.dumps(res, indent=1) + "\n")
    text = table(res)
    (out / "power.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
