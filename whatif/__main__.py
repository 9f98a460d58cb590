"""python -m whatif <run dir or record> [--world-size N] [--link NAME | --nccl-tests FILE |
--collectives DIR]
                    [--sweep bucket=25,100,2000 optim=none,bf16,powersgd] [--model NAME] [--out DIR]
                    [--json]

Predicts the DDP step of other configurations from one measured run: the step time and samples/s
with 95% prediction intervals, the speed-up against the run's own configuration, what dominates;
writes whatif.md/.csv/.json and a timeline plot of the predicted steps (whatif_timeline.png) into
--out (default: <run dir>/whatif, or outputs/whatif/<its path> for a run under the committed
results/). Reads records only."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from whatif.links import PRESETS

    parser = argparse.ArgumentParser(
        prog="python -m whatif",
        description=__doc__.split("\n\n")[1].strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="link presets: " + "; ".join(f"{p.name} ({p.what})" for p in PRESETS.values()),
    )
    parser.add_argument(
        "run",
        help="a task=train or task=script run directory (holding run_record.json) or its record "
        "file",
    )
    parser.add_argument("--world-size", type=int, help="predict at this many ranks")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--link", help=f"a link preset: {', '.join(PRESETS)}")
    where.add_argument(
        "--nccl-tests", metavar="FILE", help="all_reduce_perf output (printed table or -J JSON)"
    )
    where.add_argument(
        "--collectives",
        metavar="DIR",
        help="a task=collectives run: its all_reduce rows as the link",
    )
    parser.add_argument(
        "--sweep",
        nargs="+",
        default=[],
        metavar="KEY=V1,V2",
        help="bucket (MB or default), optim, accumulate, sync, world_size, ranks_per_host, "
        "ddp.static_graph, ddp.gradient_as_bucket_view, optim.rank, link",
    )
    parser.add_argument(
        "--samples", type=int, default=1000, help="Monte Carlo draws (default 1000)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="where to write the table and plot (default <run dir>/whatif; "
        "outputs/whatif/<path> for a run under the committed results/)",
    )
    parser.add_argument(
        "--model",
        metavar="NAME",
        help="a conf/model name whose parameter sizes and FLOPs stand in for the run's (a "
        "task=script "
        "record holds its own model's sizes as its DDP buckets carried them; this names another)",
    )
    parser.add_argument("--json", action="store_true", help="print the predictions as JSON")
    args = parser.parse_args(argv)

    from base.paths import reader_out
    from comm.nccl_tests import NcclTestsError
    from whatif.api import parse_grid, predict_sweep, profile_of
    from whatif.profile import ProfileError
    from whatif.report import header, plot_timeline, row_notes, table, warnings

    if args.world_size is not None and args.world_size < 1:
        return _fail("--world-size must be 1 or more")
    if args.samples < 100:
        return _fail("--samples must be at least 100 (the 95% interval needs the tails)")
    try:
        grid = parse_grid(args.sweep)
        sweep = predict_sweep(
            profile_of(args.run, args.model),
            grid,
            link=args.link,
            nccl_tests=args.nccl_tests,
            collectives=args.collectives,
            world_size=args.world_size,
            samples=args.samples,
            seed=args.seed,
        )
    except (ProfileError, NcclTestsError, KeyError, ValueError) as e:
        return _fail(str(e).strip("'\""))
    out = Path(args.out) if args.out else reader_out(args.run, "whatif")
    tab = table(sweep)
    data = {
        "source": sweep.profile.path,
        "own": sweep.own.as_dict(),
        "rows": [r.as_dict() for r in sweep.rows],
        "profile_notes": sweep.profile.notes,
        "contention": sweep.profile.contention.how,
        "link": (sweep.link or sweep.profile.link).describe()
        if (sweep.link or sweep.profile.link)
        else None,
        "measured_step_s": sweep.profile.step.value if sweep.profile.step else None,
    }
    if args.json:
        print(json.dumps(data, indent=2, default=str))
    else:
        print("\n".join(header(sweep)))
        print()
        print("".join(f"{w}\n" for w in warnings(sweep)) + tab.markdown())
        notes = row_notes(sweep)
        if notes:
            print("row notes:")
            print("\n".join(f"  - {n}" for n in notes))
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "whatif.md").write_text(
            "\n".join(header(sweep))
            + "\n\n"
            + "".join(f"{w}\n\n" for w in warnings(sweep))
            + tab.markdown()
            + "".join(f"\n- {n}" for n in row_notes(sweep))
            + "\n"
        )
        tab.write_csv(out / "whatif.csv")
        (out / "whatif.json").write_text(json.dumps(data, indent=2, default=str))
        others = sorted(
            (r for r in sweep.rows if r.config != sweep.own.config), key=lambda r: -r.samples_per_s
        )
        png = plot_timeline(
            [sweep.own] + others[:1],
            out / "whatif_timeline.png",
            title=f"what-if from {sweep.profile.path}: the run's own step, and the fastest other",
        )
    except OSError as e:
        return _fail(f"cannot write to {out} ({e.strerror or e}); pass --out DIR")
    if not args.json:
        print(
            f"\nwritten: {out / 'whatif.md'}, whatif.csv, whatif.json"
            + (f", {png.name}" if png else "")
        )
    return 0


def _fail(msg: str) -> int:
    print(f"python -m whatif: {msg}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
