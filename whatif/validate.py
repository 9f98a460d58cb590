"""Predicted against measured: python -m whatif.validate <dirs of run records> [--source RUN]
[--out DIR]

Every finished task=train record under the dirs is a source or a target. Records of one workload
(the same model, batch per rank, image size, precision, device kind and hosts) form a group; its
source is the run given with --source, else the first run of the plainest configuration (sync=ddp,
optim=none, DDP's default or 25 MB buckets, accumulate=1, no gradient_as_bucket_view, no emulated
link, the smallest world size of at least 2), and every other run of the group is predicted from
it. Per row: the measured and the predicted step with their 95% intervals, the error and whether
the interval holds the measurement; then the MAPE, the worst row and the intervals' coverage. The
goal (issues 24 and 38): MAPE <= 5%, no row worse than 15%, coverage of the 95% intervals 90-98%
(100% says the intervals are wider than the model's errors need).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from base.record import Record
from comm import buckets as bk
from whatif.links import emulated
from whatif.profile import ProfileError, from_record
from whatif.quantity import Draws, Quantity
from whatif.step import Config, changed, predict

GOAL_MAPE, GOAL_WORST, GOAL_COVERAGE = 0.05, 0.15, (0.90, 0.98)


@dataclass
class Row:
    group: str
    source: str
    target: str
    change: str
    measured: float
    measured_lo: float | None
    measured_hi: float | None
    predicted: float
    lo: float
    hi: float
    note: str = ""

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured

    @property
    def inside(self) -> bool:
        return self.lo <= self.measured <= self.hi


@dataclass
class Validation:
    rows: list[Row] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    run_to_run: list[tuple[str, float, int]] = field(
        default_factory=list
    )  # (workload, sd used, its df; 0: default)

    @property
    def mape(self) -> float | None:
        return sum(abs(r.error) for r in self.rows) / len(self.rows) if self.rows else None

    @property
    def worst(self) -> Row | None:
        return max(self.rows, key=lambda r: abs(r.error)) if self.rows else None

    @property
    def coverage(self) -> tuple[float, float, float] | None:
        if not self.rows:
            return None
        k, n = sum(r.inside for r in self.rows), len(self.rows)
        return (k / n, *wilson(k, n))


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


# -------------------------------------------------------------------------------------------- knobs
def knobs(record: Record) -> dict:
    """A record's configuration in the model's words."""
    r, ddp = record.result, record.result.ddp
    cap = ddp.bucket_cap_mb if ddp is not None and ddp.has("bucket_cap_mb") else r.bucket_mb
    return {
        "world_size": int(r.world_size or 1),
        "sync": r.sync or "ddp",
        "optim": r.optim or "none",
        "bucket": "default" if bk.is_default(cap) else f"{float(cap):g}",
        "accumulate": int(r.accumulate or 1),
        "ddp.static_graph": str(bool(ddp is not None and ddp.static_graph)).lower(),
        "ddp.gradient_as_bucket_view": str(
            bool(ddp is not None and ddp.gradient_as_bucket_view)
        ).lower(),
        "optim.rank": int(record.setting("optim.rank") or 1),
    }


def link_of(record: Record):
    """The emulated link a run's ranks talked over (env.link, written by the emulated-links
    launcher), or None."""
    link = record.env.link
    return link if link is not None and link.emulated and link.rate_bit_s else None


def workload(record: Record) -> tuple:
    r = record.result
    return (
        record.setting("model.name"),
        r.batch_per_rank,
        record.setting("data.image_size"),
        r.precision,
        r.device,
        tuple(sorted(set(record.env.hostnames or []))),
    )


def plainness(record: Record) -> tuple:
    k = knobs(record)
    return (
        k["sync"] != "ddp",
        k["optim"] != "none",
        k["bucket"] not in ("default", "25"),
        k["accumulate"] != 1,
        k["ddp.gradient_as_bucket_view"] == "true",
        k["ddp.static_graph"] == "true",
        link_of(record) is not None,
        k["world_size"] < 2,
        k["world_size"],
    )


def run_to_run(members: list) -> tuple[float | None, int]:
    """Pooled sd of log step medians over configurations run more than once (repeats), and its
    degrees of freedom; None with fewer than 2 degrees of freedom (then the profile's stated default
    stands)."""
    by: dict[str, list[float]] = {}
    for _, rec in members:
        step = rec.result.step_time_s if rec.result is not None else None
        med = step.median if step is not None else None
        if not (med and med > 0):
            continue
        link = link_of(rec)
        # the link's rate, not its whole env.link block: that holds each run's own check (its
        # measured rate and round trip), which made every run of a shaped link its own configuration
        by.setdefault(
            json.dumps(
                [knobs(rec), link.rate_bit_s if link is not None else None],
                sort_keys=True,
                default=str,
            ),
            [],
        ).append(math.log(med))
    ss = df = 0
    for xs in by.values():
        if len(xs) >= 2:
            m = sum(xs) / len(xs)
            ss += sum((x - m) ** 2 for x in xs)
            df += len(xs) - 1
    return (math.sqrt(ss / df), df) if df >= 2 else (None, df)


def target_config(prof, base: Config, rec: Record) -> Config:
    """The model's configuration of a target run: its knobs, and the emulated link it ran behind
    (over the source's own ranks as the host floor)."""
    cfg = changed(base, knobs(rec))
    link = link_of(rec)
    if link is not None:
        from dataclasses import replace

        cfg = replace(
            cfg,
            link=emulated(link.rate_bit_s / 1e9, prof.link, prof.link_share),
            link_name=f"emulated {link.rate_bit_s / 1e9:g} Gbit/s",
        )
    return cfg


def groups_of(paths: list[str | Path]) -> tuple[dict[tuple, list], list[str]]:
    """The finished task=train records under the paths by workload, and what was skipped (why)."""
    from base.record import RecordError, find_records

    skipped, groups = [], {}
    for p in find_records(*paths):
        try:
            rec = Record.read(p)
        except (RecordError, OSError, ValueError) as e:
            skipped.append(f"{p}: unreadable ({e})")
            continue
        if rec.task != "train" or rec.status != "ok":
            skipped.append(f"{p}: task={rec.task} status={rec.status} (not a finished train run)")
            continue
        groups.setdefault(workload(rec), []).append((str(p), rec))
    return groups, skipped


# ----------------------------------------------------------------------------------------- validate
def validate(
    paths: list[str | Path], source: str | Path | None = None, samples: int = 1000, seed: int = 0
) -> Validation:
    from base.record import RecordError, find_records

    out = Validation()
    records = []
    found = find_records(*paths)
    if (
        source is not None
    ):  # a source outside the dirs joins them (e.g. 4-rank runs predicted from a 2-rank one)
        src_file = Path(source) / "run_record.json" if Path(source).is_dir() else Path(source)
        if src_file.resolve() not in {f.resolve() for f in found}:
            found = [src_file, *found]
    for p in found:
        try:
            rec = Record.read(p)
        except (RecordError, OSError, ValueError) as e:
            out.skipped.append(f"{p}: unreadable ({e})")
            continue
        if rec.task != "train" or rec.status != "ok":
            out.skipped.append(
                f"{p}: task={rec.task} status={rec.status} (not a finished train run)"
            )
            continue
        records.append((str(p), rec))
    groups: dict[tuple, list] = {}
    for p, rec in records:
        groups.setdefault(workload(rec), []).append((p, rec))
    src_path = str(Path(source).resolve()) if source else None
    for key, members in groups.items():
        if src_path:
            chosen = [
                m
                for m in members
                if str(Path(m[0]).resolve()) in (src_path, str(Path(src_path) / "run_record.json"))
            ]
            if not chosen:
                out.skipped += [f"{p}: not the workload of --source" for p, _ in members]
                continue
            src = chosen[0]
        else:
            src = min(members, key=lambda m: plainness(m[1]))
        try:
            prof = from_record(src[1], src[0])
        except ProfileError as e:
            out.skipped.append(f"{src[0]}: cannot be a source ({e})")
            continue
        rr, df = run_to_run(members)
        if rr is not None:
            prof.run_to_run_sd = rr
        out.run_to_run.append(
            (f"{key[0]} batch {key[1]} @{key[2]} ({key[4]})", prof.run_to_run_sd, df)
        )
        draws = Draws(samples, seed)
        base = Config.of(prof)
        label = f"{key[0]} batch {key[1]} @{key[2]} ({key[4]})"
        for p, rec in members:
            if p == src[0]:
                continue
            measured = Quantity.from_describe(rec.result.step_time_s)
            if measured is None:
                out.skipped.append(f"{p}: no step time")
                continue
            try:
                cfg = target_config(prof, base, rec)
                pred = predict(prof, cfg, draws)
            except (ValueError, KeyError, ProfileError) as e:
                out.skipped.append(f"{p}: not predicted ({e})")
                continue
            out.rows.append(
                Row(
                    label,
                    src[0],
                    p,
                    cfg.label(base),
                    measured.value,
                    measured.lo,
                    measured.hi,
                    pred.step_s,
                    pred.lo,
                    pred.hi,
                    "; ".join(pred.notes),
                )
            )
    return out


# ------------------------------------------------------------------------------------------- output
def markdown(v: Validation, command: str) -> str:
    from stats import fmt_ci

    lines = [
        "# What-if validation: predicted against measured",
        "",
        f"Regenerate: `{command}`",
        "",
        "Step time (median, rank 0) of each target run against the model's prediction from its "
        "group's source "
        "run; intervals 95% (measured: the median's order-statistic interval; predicted: Monte "
        "Carlo prediction "
        "interval). error = (predicted - measured) / measured.",
        "",
    ]
    if not v.rows:
        lines.append("No pairs: every record was skipped (below).")
    else:
        cov = v.coverage
        worst = v.worst
        lines += [
            f"- rows: {len(v.rows)}",
            f"- MAPE: {100 * v.mape:.1f}% (goal <= {100 * GOAL_MAPE:.0f}%: "
            f"{'met' if v.mape <= GOAL_MAPE else 'MISSED'})",
            f"- worst row: {100 * worst.error:+.1f}% ({worst.change}, {worst.target}) "
            f"(goal <= {100 * GOAL_WORST:.0f}%: "
            f"{'met' if abs(worst.error) <= GOAL_WORST else 'MISSED'})",
            f"- coverage of the 95% prediction intervals: {100 * cov[0]:.0f}% [{100 * cov[1]:.0f}, "
            f"{100 * cov[2]:.0f}] "
            f"(Wilson 95%) of {len(v.rows)} rows (goal 90-98%: "
            f"{'met' if GOAL_COVERAGE[0] <= cov[0] <= GOAL_COVERAGE[1] else 'MISSED'})",
            "",
            "| workload | rows | MAPE | worst | coverage |",
            "|---|---|---|---|---|",
            *[
                f"| {w} | {len(rs)} | {100 * sum(abs(r.error) for r in rs) / len(rs):.1f}% | "
                f"{100 * max((r.error for r in rs), key=abs):+.1f}% | "
                f"{100 * sum(r.inside for r in rs) / len(rs):.0f}% |"
                for w, rs in _by_workload(v.rows).items()
            ],
            "",
            "| workload | change from the source | measured ms | predicted ms | error | inside | "
            "target run |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in v.rows:
            measured = fmt_ci(r.measured * 1e3, _ms(r.measured_lo), _ms(r.measured_hi))
            lines.append(
                f"| {r.group} | {r.change} | {measured} "
                f"| {fmt_ci(r.predicted * 1e3, r.lo * 1e3, r.hi * 1e3)} | {100 * r.error:+.1f}% | "
                f"{'yes' if r.inside else 'no'} | {r.target} |"
            )
        sources = sorted({r.source for r in v.rows})
        lines += [
            "",
            "Sources: " + ", ".join(sources),
            "",
            "Run-to-run scatter in the prediction intervals (log-normal sd of a run's step "
            "median): "
            + "; ".join(
                f"{w}: {100 * sd:.1f}%"
                + (
                    f" (pooled over the repeats here, {df} df)"
                    if df >= 2
                    else " (stated default: too few repeats here)"
                )
                for w, sd, df in v.run_to_run
            ),
        ]
        notes = sorted({n for r in v.rows for n in r.note.split("; ") if n})
        if notes:
            lines += ["", "Model notes on these rows:", ""] + [f"- {n}" for n in notes]
    if v.skipped:
        lines += ["", "Skipped:", ""] + [f"- {s}" for s in v.skipped]
    return "\n".join(lines) + "\n"


def _by_workload(rows: list[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    for r in rows:
        out.setdefault(r.group, []).append(r)
    return out


def _ms(x):
    return None if x is None else x * 1e3


def as_json(v: Validation) -> dict:
    cov = v.coverage
    return {
        "rows": [{**r.__dict__, "error": r.error, "inside": r.inside} for r in v.rows],
        "mape": v.mape,
        "worst": (v.worst.__dict__ | {"error": v.worst.error}) if v.worst else None,
        "coverage": cov,
        "skipped": v.skipped,
        "goals": {"mape": GOAL_MAPE, "worst": GOAL_WORST, "coverage": GOAL_COVERAGE},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m whatif.validate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("dirs", nargs="+", help="run or sweep directories holding run records")
    parser.add_argument(
        "--source", help="the run every other run of its workload is predicted from"
    )
    parser.add_argument("--out", help="write validation.md and validation.json here")
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for d in args.dirs:
        if not Path(d).exists():
            print(f"python -m whatif.validate: {d} does not exist", file=sys.stderr)
            return 2
    v = validate(args.dirs, args.source, args.samples, args.seed)
    command = (
        "python -m whatif.validate "
        + " ".join(args.dirs)
        + (f" --source {args.source}" if args.source else "")
        + (f" --out {args.out}" if args.out else "")
        + f" --samples {args.samples}"
        + (f" --seed {args.seed}" if args.seed else "")
    )
    text = markdown(v, command)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "validation.md").write_text(text)
        (out / "validation.json").write_text(json.dumps(as_json(v), indent=2, default=str))
    return 0 if v.rows else 1


if __name__ == "__main__":
    sys.exit(main())
