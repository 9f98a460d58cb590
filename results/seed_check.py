"""Do the committed tables' verdicts depend on a random seed? They must not (docs/methods.md: a
verdict holds whatever the seed).

    python -m results.seed_check [sweep dirs ...] [--seeds 50]

For each seed, every random generator numpy and the standard library could hand the statistics is
seeded with it (numpy.random.default_rng(anything) becomes default_rng(seed), numpy's and random's
global states too), and the verdicts of every sweep table row, scaling row and checked estimate are
recomputed from the records. It prints the verdicts that differ from seed 0's and exits 1 if there
is any. Default dirs: every sweep under results/runs. A sweep whose verdicts asked for no generator
and moved neither global state under the first seed is a function of its records alone: the later
seeds skip it. A checked estimate's verdict is the measured runs' (diagnosis.sweep.measured_saving),
so the what-if model's saving beside it, an estimate and not a verdict, is not computed: it was the
only draw of any committed sweep (its Monte Carlo) and 60 of this command's 78 CPU seconds."""

from __future__ import annotations

import argparse
import random
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np

RUNS = Path(__file__).resolve().parent / "runs"


def sweep_dirs(root: Path = RUNS) -> list[Path]:
    return sorted(p.parent for p in root.rglob("multirun.yaml"))


@contextmanager
def seeded(seed: int, drawn: list | None = None):
    """drawn: one entry appended per generator handed out, so a caller can tell whether a
    computation asked for randomness at all."""
    original = np.random.default_rng

    def rng(*args, **kwargs):
        if drawn is not None:
            drawn.append(seed)
        return original(seed)

    np.random.default_rng = rng
    np.random.seed(seed)
    random.seed(seed)
    try:
        yield
    finally:
        np.random.default_rng = original


def _global_states() -> tuple:
    return np.random.get_state()[1].tobytes(), np.random.get_state()[2:], random.getstate()


def verdicts(entries: list, diagnoses: dict | None = None) -> dict[str, str]:
    """Every verdict the report prints for these entries: sweep rows, scaling rows, checked
    estimates. diagnoses: the runs' diagnoses (by output dir), computed once: the findings are not
    verdicts, the checked estimates' are."""
    from diagnosis import diagnose_sweep
    from tables.aggregate import compare, scaling_rows

    out = {f"row {c.label}": c.speedup["verdict"] for c in compare(entries).configs if c.speedup}
    out.update(
        {
            f"scaling {r['configuration']} ws={r['world size']}": r["verdict"]
            for r in scaling_rows(entries)
        }
    )
    for c in diagnose_sweep(entries, diagnoses=diagnoses, model=False).get("checked") or []:
        out[f"checked {c['run']} -> {c['ran_as']} ({c['finding']})"] = c["verdict"]
    return out


def check(dirs: list[Path], seeds: list[int]) -> list[str]:
    from tables.sweep import load_entries

    from diagnosis import diagnose_sweep

    loaded = {d: load_entries([d]) for d in dirs}
    diagnoses = {
        d: {r["output_dir"]: r["diagnosis"] for r in diagnose_sweep(entries, model=False)["runs"]}
        for d, entries in loaded.items()
    }
    changed = []
    first: dict[Path, dict] = {}
    fixed: set[Path] = set()  # sweeps whose verdicts drew no random number under the first seed
    for seed in seeds:
        for d, entries in loaded.items():
            if d in fixed:
                # a function of the records alone, which no seed can reach (issue 36: time)
                continue
            drawn: list = []
            with seeded(seed, drawn):
                before = _global_states()
                got = verdicts(entries, diagnoses[d])
                if d not in first and not drawn and _global_states() == before:
                    fixed.add(d)
                ref = first.setdefault(d, got)
                changed += [
                    f"{d.name}: {k}: seed {seeds[0]} {ref.get(k)!r}, seed {seed} {v!r}"
                    for k, v in got.items()
                    if ref.get(k) != v
                ]
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m results.seed_check", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("dirs", nargs="*", type=Path)
    ap.add_argument("--seeds", type=int, default=50, help="seeds 0..N-1 (default 50)")
    args = ap.parse_args(argv)
    dirs = args.dirs or sweep_dirs()
    changed = check(dirs, list(range(args.seeds)))
    print(
        f"{len(dirs)} sweeps, seeds 0-{args.seeds - 1}: "
        + (
            "no verdict changes with the seed"
            if not changed
            else f"{len(changed)} verdict(s) change:"
        )
    )
    for line in changed:
        print("  " + line)
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
