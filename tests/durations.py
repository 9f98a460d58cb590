"""Where the suite's time goes: `python -m tests.durations` runs the fast tier and then the slow
tier, each as its own pytest process timed from start to exit (collection and session fixtures
included, as a developer waits for them), and writes into docs/testing.md, between its durations
markers, the two tiers' wall times, their sum (the README's
`pytest`), and the 20 slowest tests (setup + call + teardown, from pytest's junit XML). Run it on a
quiet machine: the numbers are only as good as the machine was idle, so the table says the date, the
machine, its load average and whether the Slurm cluster was up.

    python -m tests.durations              # both tiers as the README runs them (pytest -n 2)
    python -m tests.durations --tier fast  # the fast tier only (the slow tier's row says "not run")
    python -m tests.durations --print      # the table on stdout; docs/testing.md is left as it is
    python -m tests.durations -n 0         # each tier in one pytest process (no xdist)
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "testing.md"
BEGIN, END = "<!-- durations: begin (python -m tests.durations) -->", "<!-- durations: end -->"
TIERS = {"fast": "not slow", "slow": "slow"}  # -m expressions: together, the README's `pytest`
GOALS = {
    "fast": 120,
    "slow": None,
}  # issue 36: the fast tier <= 120 s; the full suite <= 10 / 15 min
SLOWEST = 20
# The README's test command (tests/test_readme.py keeps README, .ci/run and this equal): each tier
# is timed on as many workers as it names
README_TEST = "pytest -n 2"
WORKERS = int(README_TEST.split("-n", 1)[1]) if "-n" in README_TEST else 0


def run_tier(expr: str, xml: Path, workers: int) -> tuple[float, int]:
    """(wall s, pytest's exit code) of `pytest -m expr` (with -n workers if > 0), pytest.ini's
    addopts as they are."""
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            expr,
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={xml}",
            *(["-n", str(workers)] if workers else []),
        ],
        cwd=ROOT,
    )
    return time.monotonic() - start, proc.returncode


def cases(xml: Path, tier: str) -> list[tuple[float, str, str]]:
    """(seconds, test id, tier) per test case that ran (skipped ones are left out)."""
    found = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        module = case.get("classname", "").replace(".", "/")
        name = case.get("name", "")
        head, _, tail = name.rpartition("]")
        name = head + "]" + tail.split("@")[0] if head else name.split("@")[0]  # xdist's @group
        found.append((float(case.get("time", 0)), f"{module}.py::{name}", tier))
    return found


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def table(
    walls: dict[str, tuple[float, int] | None],
    slowest: list[tuple[float, str, str]],
    load: str,
    workers: int,
) -> str:
    commit = (
        subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        or "?"
    )
    slurm = (
        "up"
        if shutil.which("sinfo") and subprocess.run(["sinfo"], capture_output=True).returncode == 0
        else "not running (the slurm tests skipped)"
    )
    lines = [
        f"Measured {dt.date.today().isoformat()} at commit {commit} by `python -m "
        "tests.durations`, on "
        f"{os.cpu_count()} cores ({cpu_model()}), load average before {load}; Slurm cluster "
        f"{slurm}.",
        "",
        "| tier | command | wall time | exit code | goal |",
        "|---|---|---:|---:|---|",
    ]
    for tier, expr in TIERS.items():
        got = walls.get(tier)
        goal = f"<= {GOALS[tier]} s" if GOALS[tier] else ""
        lines.append(
            f'| {tier} | `pytest -m "{expr}"{f" -n {workers}" if workers else ""}` | '
            + (f"{got[0]:.0f} s | {got[1]} | {goal} |" if got else f"not run | | {goal} |")
        )
    if all(walls.get(t) for t in TIERS):
        total = sum(walls[t][0] for t in TIERS)
        lines.append(
            f"| all | `pytest{f' -n {workers}' if workers else ''}` (the two above) | "
            f"{total:.0f} s ({total / 60:.1f} min) | | <= 10 "
            "min, "
            "<= 15 min with Slurm |"
        )
    lines += [
        "",
        f"The {SLOWEST} slowest tests (setup + call + teardown):",
        "",
        "| s | tier | test |",
        "|---:|---|---|",
    ]
    lines += [f"| {s:.1f} | {tier} | `{name}` |" for s, name, tier in slowest]
    return "\n".join(lines)


def write(doc: Path, text: str) -> None:
    old = doc.read_text()
    if BEGIN not in old or END not in old:
        raise SystemExit(
            f"error: {doc} has no durations markers ({BEGIN} ... {END}); put them where the table "
            "goes"
        )
    head, rest = old.split(BEGIN, 1)
    doc.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.durations", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--tier", choices=[*TIERS, "all"], default="all")
    ap.add_argument(
        "--print", action="store_true", help="print the table instead of writing docs/testing.md"
    )
    ap.add_argument(
        "-n",
        "--workers",
        type=int,
        default=WORKERS,
        help=f"pytest-xdist workers per tier (pytest -n N; default {WORKERS}, as the README's "
        f"`{README_TEST}`; 0: one process)",
    )
    args = ap.parse_args(argv)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    walls: dict[str, tuple[float, int] | None] = {}
    found: list[tuple[float, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for tier, expr in TIERS.items():
            if args.tier in (tier, "all"):
                xml = Path(tmp) / f"{tier}.xml"
                walls[tier] = run_tier(expr, xml, args.workers)
                found += cases(xml, tier) if xml.exists() else []
    text = table(walls, sorted(found, reverse=True)[:SLOWEST], load, args.workers)
    if args.print:
        print(text)
    else:
        write(DOC, text)
        print(f"wrote {DOC.relative_to(ROOT)}")
    return 0 if all(code in (0, 5) for _, code in filter(None, walls.values())) else 1


if __name__ == "__main__":
    sys.exit(main())
