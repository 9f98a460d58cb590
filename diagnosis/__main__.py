"""python -m diagnosis <run or sweep dir...> [--nccl-tests FILE] [--json] python -m diagnosis <dir
of Flight Recorder dumps>   # a hung run (its hang/), or any PyTorch job's dumps

Prints the ranked findings of each run (recomputed from its record, so a newer tool reads older
records) and, for a sweep, the checked estimates, the scaling and the pair-groups summaries.
--nccl-tests sets nccl-tests' all_reduce_perf output (its printed table, or its -J JSON) beside each
run's gradient sync; alone, it prints the parsed table. Reads records only: it never writes one."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m diagnosis", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "dirs", nargs="*", help="run or sweep directories (or run_record.json files)"
    )
    parser.add_argument(
        "--nccl-tests", metavar="FILE", help="all_reduce_perf output: the printed table or -J JSON"
    )
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    args = parser.parse_args(argv)
    from diagnosis import diagnose, diagnose_sweep, format_sweep, format_text
    from comm.nccl_tests import NcclTestsError, format_table, read

    try:
        parsed = read(args.nccl_tests) if args.nccl_tests else None
    except NcclTestsError as e:
        print(f"python -m diagnosis: {e}", file=sys.stderr)
        return 2
    if not args.dirs:
        if parsed is None:
            print(
                "python -m diagnosis: give a run or sweep directory, or --nccl-tests FILE",
                file=sys.stderr,
            )
            return 2
        print(json.dumps(parsed, indent=2) if args.json else format_table(parsed))
        return 0
    from diagnosis.hang import diagnose_dir, is_dump_dir

    dumps = [d for d in args.dirs if is_dump_dir(d) or is_dump_dir(Path(d) / "hang")]
    for d in (
        dumps
    ):  # a hung run's dumps, or any PyTorch job's Flight Recorder dumps (diagnosis/hang.py)
        where = d if is_dump_dir(d) else Path(d) / "hang"
        print(f"{where}\n{diagnose_dir(where).text()}")
    if dumps and len(dumps) == len(args.dirs):
        return 0
    args.dirs = [d for d in args.dirs if d not in dumps]
    from tables.sweep import load_entries

    for d in args.dirs:
        if not Path(d).exists():
            print(
                f"python -m diagnosis: {d} does not exist; pass a run directory (with "
                "run_record.json) or a sweep "
                "directory",
                file=sys.stderr,
            )
            return 2
    try:
        entries = load_entries(args.dirs)
    except SystemExit as e:
        print(str(e), file=sys.stderr)
        return 2
    if not entries:
        print(f"python -m diagnosis: no run records under {', '.join(args.dirs)}", file=sys.stderr)
        return 2
    if len(entries) == 1 and entries[0].record:
        e = entries[0]
        d = diagnose(e.record, nccl_tests=parsed) if e.ok else None
        print(
            json.dumps(d, indent=2, default=str)
            if args.json
            else f"{e.output_dir}\n"
            + (format_text(d, record=e.record) if d else f"run {e.status}: {e.error}")
        )
        return 0
    sweep = diagnose_sweep(entries, nccl_tests=parsed)
    if args.json:
        print(json.dumps(sweep, indent=2, default=str))
        return 0
    print(format_sweep(sweep))
    for r in sweep["runs"]:
        print(f"\n--- job {r['num']} `{r['label']}` ({r['output_dir']})")
        print(format_text(r["diagnosis"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
