"""What the harness costs, as a throughput ratio with its 95% CI, from interleaved pairs of real
runs:

    python -m tasks.train.harness_cost [--pairs N] [overrides...]              timing=true against
    timing=false python -m tasks.train.harness_cost --reference [--pairs N] [overrides...]
    task=train against task=train_reference,
                                                                               a hand-written DDP
                                                                               loop (target >= 0.99)

Every run is a normal `python train.py` job (its own ranks and record), started the same way; pairs
alternate (A B A B ...) so drift on a shared machine hits both sides alike. Each run measures
exactly `steps` steps (measure.policy=fixed) in timed blocks; the ratio's CI is a paired t over the
interleaved pairs (stats.compare_throughput: a paired t on the pairs' log ratios, the run as the
unit), so run-to-run spread is inside it."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from base.record import Record
from base.record_types import TrainReferenceResult
from stats import compare_throughput, fmt_ci, fmt_ratio, verdict

ROOT = Path(__file__).resolve().parents[2]


def run_variant(overrides: list[str], out: Path) -> Record:
    cmd = [
        sys.executable,
        "train.py",
        *overrides,
        "measure.policy=fixed",
        "logger=none",
        f"hydra.run.dir={out}",
    ]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return Record.read(out)


def blocks(record: Record) -> tuple[list[float], list[int]]:
    b = record.result.throughput.blocks
    return b.walls_s, b.steps


def measure(a: list[str], b: list[str], pairs: int, tmp: Path) -> dict:
    """Interleaved pairs of runs of the two variants; the ratio a/b of throughputs with its CI."""
    runs_a, runs_b = [], []
    for i in range(pairs):
        runs_a.append(run_variant(a, tmp / f"a{i}"))
        runs_b.append(run_variant(b, tmp / f"b{i}"))
    # pair i ran together
    cmp = compare_throughput([blocks(r) for r in runs_b], [blocks(r) for r in runs_a], paired=True)
    return {
        "ratio": cmp["ratio"],
        "ci_lo": cmp["ci_lo"],
        "ci_hi": cmp["ci_hi"],
        "method": cmp["method"],
        "a": [r.result.throughput.steps_per_s for r in runs_a],
        "b": [r.result.throughput.steps_per_s for r in runs_b],
        "cpu_a": [cpu_per_step(r) for r in runs_a],
        "cpu_b": [cpu_per_step(r) for r in runs_b],
        "record": runs_a[0],
    }


def cpu_per_step(record: Record) -> float | None:
    """Rank 0's process CPU time per measured step (all its threads): what the loop costs whatever
    the machine's load did to the wall clock."""
    r = record.result
    if isinstance(r, TrainReferenceResult):
        values = r.cpu_s_per_step
    else:
        values = [p.cpu_s_per_step for p in r.per_rank or []]
    return values[0] if values else None


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m tasks.train.harness_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--reference", action="store_true", help="compare with a hand-written DDP loop"
    )
    parser.add_argument(
        "--pairs", type=int, default=3, help="interleaved pairs of runs (default 3)"
    )
    args, overrides = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.pairs < 1:
        raise SystemExit("harness_cost: --pairs must be >= 1")
    if args.reference:
        a, b, names = (
            overrides,
            [*overrides, "task=train_reference"],
            ("harness (task=train)", "hand-written loop"),
        )
    else:
        a, b, names = (
            [*overrides, "timing=true"],
            [*overrides, "timing=false"],
            ("timing on", "timing off"),
        )
    with tempfile.TemporaryDirectory(prefix="harness_cost_") as tmp:
        m = measure(a, b, args.pairs, Path(tmp))
    r = m["record"].result
    threads = (
        r.per_rank[0].threads.to_dict()
        if r.per_rank and r.per_rank[0].threads is not None
        else None
    )
    print(
        f"config: {' '.join(overrides) or '(defaults)'}  device: {r.device_name}  world_size: "
        f"{r.world_size}  "
        f"steps per run: {r.steps}  pairs: {args.pairs} (interleaved)  threads per rank: {threads}"
    )
    width = max(map(len, names))
    for name, rates in ((names[0], m["a"]), (names[1], m["b"])):
        print(f"{name:<{width}}: " + "  ".join(f"{v:.4g}" for v in rates) + " steps/s")
    for name, cpu in ((names[0], m["cpu_a"]), (names[1], m["cpu_b"])):
        if all(c is not None for c in cpu):
            print(
                f"{name:<{width}}: "
                + "  ".join(f"{c:.4g}" for c in cpu)
                + " CPU s per step (rank 0, all threads)"
            )
    v = verdict(m["ratio"], m["ci_lo"], m["ci_hi"], noise=0.0)
    label = "harness/reference" if args.reference else "ratio on/off"
    print(
        f"{label}: {fmt_ci(m['ratio'], m['ci_lo'], m['ci_hi'])}  "
        f"({fmt_ratio(m['ratio'], m['ci_lo'], m['ci_hi'], v)}; 95% CI, {m['method']})"
        + ("  target >= 0.99" if args.reference else "")
    )
    return m


if __name__ == "__main__":
    main()
