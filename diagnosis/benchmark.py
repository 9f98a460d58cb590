"""Does the diagnosis name the right cause first? A known-answer benchmark (issue 29).

    python -m diagnosis.benchmark [--out DIR] [--repeats 3] [--cases NAME,...] [--script]
    python -m diagnosis.benchmark --table DIR      # the table again, from a finished benchmark
    python -m diagnosis.benchmark --score DIR      # the same, each record diagnosed again

Each case injects one cause of known size into a tiny 2-rank run and says what a correct diagnosis
ranks first and which change removes the cause; the table scores top-1, false findings, and the
top finding's estimated saving against the saving measured by running that change. The cases, the
injection and the columns: docs/diagnosis.md "The known-answer benchmark"; the script cases:
docs/script.md "Known answers and cost". It runs `python train.py` in subprocesses and reads their
records: like the rest of diagnosis/ it never imports the run code, and the diagnosis never reads
the fault knobs. The cases that need an emulated link run only as root (skipped otherwise).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
from collections import Counter
import subprocess
import sys
import time
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from base.record import Record, RecordError, typed_block
from stats import time_saved
from base.record_types import DiagnosisBlock, Finding, Saving, TaskResult
from diagnosis.view import as_record, named_findings

ROOT = Path(__file__).resolve().parent.parent
COMMON = [
    "model=vgg11_tiny",
    "scale=smoke",
    "logger=none",
    "probe_steps=6",
    "diagnose.microbench=true",
    # a window whose 30% (diagnose.verify_budget) holds the in-job check's rounds (issue 38)
    "steps=60",
]
DELAY_S = 0.1
# The script cases: the same causes inside a user-style loop run unchanged under task=script
# (diagnosis/cases/ user_loop.py, a file this module runs, never imports), and a rank-0 hiccup every
# N steps.
SCRIPT = "diagnosis/cases/user_loop.py"
SCRIPT_COMMON = [
    "task=script",
    f"script.path={SCRIPT}",
    "logger=none",
    "warmup_steps=3",
    "steps=20",
]
HICCUP = (5, 0.3)  # rank 0 sleeps 300 ms after every 5th step (the script's 20 measured steps: 4)
# Two rates at which the link binds vgg11_tiny's 71 KB gradient. Not 80 Mbit/s: there the shaper's
# bucket (then 64 KiB + a frame; comm.link.default_burst is now 1 ms at the rate) refilled during
# the ~6.5 ms of compute to nearly the whole gradient, so the all-reduce passed at the line's speed
# and the committed 80 Mbit/s runs were no slower than the healthy runs on loopback (7.2-8.9 ms a
# step against 8.3-10.7): no cause of measurable size to name.
LINK_RATES = ("20mbit", "40mbit")
SMALL_BUCKETS = ["model=vit_tiny", "model.num_layers=8", "bucket=0.001", "link.rate=200mbit"]


@dataclass
class Case:
    name: str
    group: str  # the sweep it runs in
    overrides: list[str]  # what makes this case (beside COMMON and the group's own)
    expect: tuple[str, ...]  # rules (prefixes) a correct top finding has; () = no finding at all
    rank: int | None = None  # a straggler case: the rank the top finding must name
    fix: str = (
        "next"  # "next": the top finding's next command; else the case whose runs remove the cause
    )
    root: bool = False
    note: str = ""
    fixes: tuple[
        dict, ...
    ] = ()  # the changes that fix it: a top finding recommending one of these is right too
    also: tuple[
        str, ...
    ] = ()  # rules with an injected cause behind them too (named, but not necessarily first)
    # Its fix run in its own sweep: these overrides, in place of the case's own, select the runs
    # that measure its saving, round by round beside its own (busy_host: fault.busy_cores=0). A
    # sweep of records from before (none of its runs sets them) is read as it was: its runs are
    # the case's, measured against `fix`, and its row says `legacy_note` (in_sweep_fix, below).
    fix_in_sweep: tuple[str, ...] = ()
    legacy_note: str = ""


def cases(delay: float = DELAY_S) -> list[Case]:
    out = [
        Case("healthy", "base", ["sync=ddp"], (), fix="", note="nothing injected"),
        Case(
            "per_param",
            "base",
            ["sync=per_param"],
            ("per_param",),
            fix="healthy",
            note="its fix, sync=ddp, is the healthy case's configuration",
            fixes=({"sync": "ddp"},),
        ),
    ]
    for where in ("backward", "data", "after_optimizer"):
        for rank in (0, 1):
            out.append(
                Case(
                    f"straggler_{where}_r{rank}",
                    "stragglers",
                    [
                        f"fault.delay_s={delay}",
                        f"fault.delay_at={where}",
                        f"fault.delay_rank={rank}",
                    ],
                    ("straggler",),
                    rank=rank,
                    fix="healthy",
                    note=f"rank {rank} sleeps {delay * 1e3:.0f} ms per step ({where})",
                )
            )
    every, pause = HICCUP
    # a sweep of its own: the stragglers' is the product of their keys' values. After the
    # optimizer the others wait in their next step; in the data wait, in the same step's backward
    # (DDP's all-reduces), so every rank's step jumps there and only the work apart from backward
    # says whose
    for where, name, what in (
        ("after_optimizer", "hiccup_r0", "after every {every}th optimizer step"),
        ("data", "hiccup_data_r0", "in its data wait every {every}th step"),
    ):
        out.append(
            Case(
                name,
                "hiccup",
                [
                    f"fault.delay_s={pause}",
                    f"fault.delay_at={where}",
                    "fault.delay_rank=0",
                    f"fault.delay_every={every}",
                ],
                ("hiccup", "straggler"),
                rank=0,
                fix="healthy",
                note=f"rank 0 sleeps {pause * 1e3:.0f} ms " + what.format(every=every),
            )
        )
    out.append(
        Case(
            "busy_host",
            "busy",
            ["sync=ddp", "fault.busy_cores=1"],
            ("busy_host",),
            fix="healthy",
            note="one other process spins on a core (fault.busy_cores=1); its fix, no spinner, "
            "runs in the same sweep",
            fix_in_sweep=("fault.busy_cores=0",),
            legacy_note="one other process spins on a core for the whole sweep",
        )
    )
    out.append(
        Case(
            "h2d_blocking",
            "h2d",
            ["device=fake", "h2d=blocking", f"fault.delay_s={delay}", "fault.delay_at=h2d"],
            ("input_pipeline",),
            note=f"every blocking copy waits {delay * 1e3:.0f} ms for the device",
            fixes=({"h2d": "side_stream"},),
        )
    )
    for rate in LINK_RATES:
        out.append(
            Case(
                f"slow_link_{rate}",
                "link",
                [f"link.rate={rate}"],
                ("exposed_comm.slow_link",),
                root=True,
                note=f"the ranks behind an emulated {rate}/s link",
            )
        )
    out.append(
        Case(
            "small_buckets",
            "buckets",
            SMALL_BUCKETS,
            ("bucket_layout",),
            root=True,
            note="ViT (8 layers) in 1 KB buckets (36) behind a 200 Mbit/s link",
            fixes=({"bucket": "null"}, {"bucket": 25}, {"bucket": 100}),
            also=("exposed_comm",),
        )
    )
    return out


def script_cases(delay: float) -> list[Case]:
    """The user-style script's cases (script_*): one sweep over its arguments, and the busy host
    beside it."""

    def args(*a) -> str:
        return f"script.args=[{','.join(map(str, a))}]"

    out = [
        Case("script_healthy", "script", [args()], (), fix="", note="the script, nothing injected")
    ]
    for where, rank in (("data", 1), ("backward", 0), ("after_optimizer", 1)):
        out.append(
            Case(
                f"script_straggler_{where}_r{rank}",
                "script",
                [args("--delay-rank", rank, "--delay-s", delay, "--delay-at", where)],
                ("straggler",),
                rank=rank,
                fix="script_healthy",
                note=f"the script's rank {rank} sleeps {delay * 1e3:.0f} ms per step ({where})",
            )
        )
    every, pause = HICCUP
    out += [
        Case(
            "script_hiccup_r0",
            "script",
            [args("--hiccup-every", every, "--hiccup-s", pause)],
            ("hiccup", "straggler"),
            rank=0,
            fix="script_healthy",
            note=f"the script's rank 0 sleeps {pause * 1e3:.0f} ms after every {every}th step",
        ),
        Case(
            "script_busy_host",
            "script_busy",
            [args(), "fault.busy_cores=1"],
            ("busy_host",),
            fix="script_healthy",
            note="the script, one other process spinning on a core",
            fix_in_sweep=("fault.busy_cores=0",),
        ),
    ]
    return out


# Groups whose window at COMMON's 60 steps is too short to measure the truth: a run of 0.5-0.8 s
# (busy_host and its fix, 8-11 ms a step) moved with any blip of the machine (the 2026-12-07
# quiet run's fix runs: 373-468 samples/s, the saving 21-38% by round), and the link groups' 1-4 s
# (and their fix runs' 1-2 s) drifted by up to 30% inside the window. Each gets a window of 3 s or
# more at its step, and its fix sweeps the same; the in-job check's budget (a share of the window)
# grows with it.
GROUP_STEPS = {"busy": 300, "link": 150, "buckets": 150}


def common_of(group: str) -> list[str]:
    if group.startswith("script"):
        return SCRIPT_COMMON
    steps = GROUP_STEPS.get(group)
    return [f"steps={steps}" if o.startswith("steps=") and steps else o for o in COMMON]


# ------------------------------------------------------------------------------------------ running
@dataclass
class Runner:
    out: Path
    repeats: int
    log: list[str] = field(default_factory=list)

    def sweep(self, name: str, group: str, overrides: list[str], timeout: float = 1800) -> Path:
        """One `python train.py -m` over the given overrides (beside the group's common ones),
        `repeats` rounds; its sweep dir."""
        sweep_dir = self.out / name
        if sweep_dir.is_dir():  # a run of the benchmark before: its records must not mix with these
            shutil.rmtree(sweep_dir)
        cmd = [
            sys.executable,
            "train.py",
            "-m",
            *common_of(group),
            *overrides,
            f"repeats={self.repeats}",
            f"hydra.sweep.dir={sweep_dir}",
        ]
        self.log.append(" ".join(cmd[1:]))
        print(f"[benchmark] {name}: {' '.join(cmd[1:])}", flush=True)
        env = {
            **os.environ,
            "WANDB_MODE": "disabled",
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        }
        t0 = time.time()
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        (self.out / f"{name}.log").write_text(proc.stdout + proc.stderr)
        print(
            f"[benchmark] {name}: exit {proc.returncode} after {time.time() - t0:.0f} s", flush=True
        )
        return sweep_dir


def group_overrides(group: list[Case]) -> list[str]:
    """One sweep for the group's cases: each key they set, swept over their values (a cartesian
    product that is the cases themselves when they differ in one or two keys, as the groups here
    do)."""
    keys: dict[str, list[str]] = {}
    for c in group:
        for o in (*c.overrides, *c.fix_in_sweep):
            k, v = o.split("=", 1)
            if v not in keys.setdefault(k, []):
                keys[k].append(v)
    return [f"{k}={','.join(vs)}" for k, vs in keys.items()]


def every_case(delay: float = DELAY_S) -> list[Case]:
    return cases(delay) + script_cases(delay)


def select(names: list[str] | None, delay: float, script: bool = False) -> list[Case]:
    """The cases asked for (None: the built-in loop's, or with script the script's), and those their
    savings are measured against."""
    pool = every_case(delay)
    default = script_cases(delay) if script else cases(delay)
    chosen = [c for c in (default if names is None else pool) if names is None or c.name in names]
    needed = {c.fix for c in chosen if c.fix not in ("", "next") and not c.fix_in_sweep}
    return chosen + [c for c in pool if c.name in needed and c not in chosen]


def _value(v) -> str:
    """A recommended value as an override Hydra reads back the same (booleans lower case, as the
    commands write)."""
    return str(v).lower() if isinstance(v, bool) else str(v)


def clear_fixes(out: Path, chosen: list[Case]) -> None:
    """An earlier run's fix sweeps (and logs) of the chosen cases: this run makes its own, maybe
    fewer (fix_<case>_<i>, one per distinct fix its runs recommend), and one left behind was read as
    this run's (table's docstring)."""
    for c in chosen:
        for stale in out.glob(f"fix_{c.name}_*"):
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink()


def run(
    out: Path, repeats: int, names: list[str] | None, delay: float, script: bool = False
) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    chosen = select(names, delay, script)
    root = os.geteuid() == 0
    skipped = [c.name for c in chosen if c.root and not root]
    runner = Runner(out, repeats)
    t0 = time.time()
    groups: dict[str, list[Case]] = {}
    for c in chosen:
        if c.name not in skipped:
            groups.setdefault(c.group, []).append(c)
    clear_fixes(out, chosen)
    for name, group in groups.items():
        runner.sweep(name, name, group_overrides(group))
    records = load(out)
    # the fix of every case whose fix is its top finding's next command: run those commands, the
    # same rounds
    for c in chosen:
        if c.fix != "next" or c.name in skipped:
            continue
        changes = {_key(d.recommends): d.recommends for d in tops(records, c) if d and d.recommends}
        for i, change in enumerate(changes.values()):
            items = {
                **dict(o.split("=", 1) for o in c.overrides),
                **{k: _value(v) for k, v in change.items()},
            }
            runner.sweep(f"fix_{c.name}_{i}", c.group, [f"{k}={v}" for k, v in items.items()])
    result = table(out, chosen, delay, sweeps=swept(runner.log))
    result.update(
        skipped=skipped,
        wall_s=time.time() - t0,
        commands=runner.log,
        repeats=repeats,
        machine=machine(),
        script=script,
    )
    write(out, result)
    return result


def machine() -> dict:
    """Where the benchmark ran, for its table (the records hold the rest: env.*)."""
    import platform

    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_at_end": list(load) if load else None,
    }


# ------------------------------------------------------------------------------------------ reading
@dataclass
class Run:
    """One run of the benchmark: its record, and the sweep (the case group, or a fix's) that ran
    it."""

    sweep: str
    record: Record


def load(out: Path, rescore: bool = False) -> list[Run]:
    """The benchmark's records. rescore: each ok record's result.diagnosis made again by this
    version of the diagnosis (in memory; the files stay as written), so a change to the rules is
    scored on the committed runs without running them again."""
    recs = []
    for path in sorted(out.glob("*/*/run_record.json")):
        try:
            rec = Record.read(path)
        except (OSError, RecordError):
            continue
        if (
            rescore
            and rec.status == "ok"
            and isinstance(rec.result, TaskResult)
            and rec.result.to_dict()
        ):
            from diagnosis import VERSION, diagnose

            try:
                fresh = diagnose(rec)
            except Exception as e:  # noqa: BLE001 - one record the rules cannot read is scored as such, not fatal
                fresh = {"version": VERSION, "error": f"{type(e).__name__}: {e}"}
            rec.result.diagnosis = typed_block(DiagnosisBlock, fresh, "result.diagnosis")
        recs.append(Run(path.parent.parent.name, rec))
    return recs


def _record(run: Run | Record | dict) -> Record:
    return run.record if isinstance(run, Run) else as_record(run)


def _items(run: Run | Record | dict) -> dict[str, str]:
    return {o.split("=", 1)[0]: o.split("=", 1)[1] for o in _record(run).overrides if "=" in o}


def _key(change: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(change.items()))


def in_sweep_fix(records: list[Run], c: Case) -> bool:
    """Whether the case's fix ran in its own sweep (c.fix_in_sweep): False for a case without one,
    and for a sweep none of whose runs sets its keys, which ran before the knob did: the committed
    busy sweeps until 2026-12-07 ran every job beside a spinner the benchmark started for the whole
    sweep, and busy_host's fix was then the healthy case's runs of another sweep."""
    keys = {o.split("=", 1)[0] for o in c.fix_in_sweep}
    return bool(keys) and any(r.sweep == c.group and keys & set(_items(r)) for r in records)


def runs_of(records: list[Run], c: Case, sweep: str | None = None) -> list[Run]:
    """The case's runs: its group's sweep, the overrides it sets; by round. In a sweep from before
    its fix_in_sweep knob (in_sweep_fix) the knob's overrides are not asked for."""
    want = dict(o.split("=", 1) for o in c.overrides)
    if c.fix_in_sweep and not in_sweep_fix(records, c):
        for o in c.fix_in_sweep:
            want.pop(o.split("=", 1)[0], None)
    out = [
        r
        for r in records
        if r.sweep == (sweep or c.group)
        and r.record.status == "ok"
        and all(_items(r).get(k) == v for k, v in want.items())
    ]
    return sorted(out, key=lambda r: int(_items(r).get("repeat", 0)))


def tops(records: list[Run], c: Case) -> list[Finding | None]:
    return [_named(r)[0] if _named(r) else None for r in runs_of(records, c)]


def _named(run: Run | Record | dict) -> list[Finding]:
    result = _record(run).result
    return named_findings(result.diagnosis if result is not None else None)


def fix_runs(records: list[Run], c: Case, top: Finding | None) -> list[Run]:
    """The runs that measure the top finding's saving: the case that removes the cause, or the sweep
    that ran its next command, or the case's own sweep's runs of its fix (in_sweep_fix)."""
    if in_sweep_fix(records, c):
        fixed = dict(o.split("=", 1) for o in (*c.overrides, *c.fix_in_sweep))
        return runs_of(
            records, dataclasses.replace(c, overrides=[f"{k}={v}" for k, v in fixed.items()])
        )
    if c.fix not in ("", "next"):
        base = next(x for x in every_case() if x.name == c.fix)
        return runs_of(records, base)
    if c.fix == "next" and top and top.recommends:
        want = {
            **dict(o.split("=", 1) for o in c.overrides),
            **{k: _value(v) for k, v in top.recommends.items()},
        }
        out = [
            r
            for r in records
            if r.sweep.startswith(f"fix_{c.name}_")
            and r.record.status == "ok"
            and all(_items(r).get(k) == v for k, v in want.items())
        ]
        return sorted(out, key=lambda r: int(_items(r).get("repeat", 0)))
    return []


def judge(c: Case, rec: Run | Record | dict) -> dict:
    """One run of a case: top-1, false findings, the savings' sum."""
    named = _named(rec)
    top = named[0] if named else None
    if not c.expect:
        right = top is None
    else:
        right = top is not None and (
            top.rule.startswith(c.expect)
            or any(all(str(top.recommends.get(k)) == str(v) for k, v in f.items()) for f in c.fixes)
        )
        if right and c.rank is not None:
            right = f"Rank {c.rank}" in top.title
    false = [f.rule for f in named if not f.rule.startswith(c.expect + c.also) or not c.expect]
    total = sum(max(0.0, f.saving.fraction or 0.0) for f in named if f.saving is not None)
    return {
        "top": top.rule if top else None,
        "top_title": top.title if top else None,
        "top1": right,
        "false": false,
        "sum": total,
        "saving": top.saving if top else None,
        "recommends": top.recommends if top else None,
        "command": top.command if top else None,
    }


def measured(case_runs: list[Run | Record | dict], fix: list[Run | Record | dict]) -> dict | None:
    """1 - samples/s of the case / the fix's, with its 95% interval (stats.compare_runs): paired
    by round where the fix ran in the case's own sweep (_round), Welch's otherwise."""
    from stats.runs import compare_runs

    def logs(runs):
        return [math.log(_record(r).result.throughput.samples_per_s) for r in runs], [
            _round(r) for r in runs
        ]

    if not case_runs or not fix:
        return None
    a, ra = logs(case_runs)
    b, rb = logs(fix)
    if (
        len(a) == 1 or len(b) == 1
    ):  # one run each: the ratio, and the two runs' own throughput intervals
        t = [_record(r).result.throughput for r in (case_runs[0], fix[0])]
        ratio = t[1].samples_per_s / t[0].samples_per_s
        if all(x.samples_ci_lo for x in t):
            half = math.sqrt(sum((math.log(x.samples_ci_hi / x.samples_ci_lo) / 2) ** 2 for x in t))
            lo, hi = ratio * math.exp(-half), ratio * math.exp(half)
        else:
            lo = hi = None
        method = (
            "one run each: the ratio, interval from the two runs' throughput intervals (log "
            "scale, combined)"
        )
    else:
        s = compare_runs(a, b, ra, rb)
        ratio, lo, hi, method = s.ratio, s.ci_lo, s.ci_hi, s.method
    return {
        "saving": time_saved(ratio),
        "lo": time_saved(lo),
        "hi": time_saved(hi),
        "method": method,
        "runs": [len(a), len(b)],
    }


def swept(commands: list[str] | None) -> set[str] | None:
    """The sweeps a benchmark ran (the last part of each command's hydra.sweep.dir), None where it
    does not say (a copy of the records without its benchmark.json)."""
    if not commands:
        return None
    return {
        Path(o.split("=", 1)[1]).name
        for cmd in commands
        for o in cmd.split()
        if o.startswith("hydra.sweep.dir=")
    }


def table(
    out: Path,
    chosen: list[Case],
    delay: float,
    rescore: bool = False,
    sweeps: set[str] | None = None,
) -> dict:
    """The scores of the records under out; sweeps: only those sweeps' (the ones this benchmark
    ran, benchmark.json's commands). A sweep dir an earlier run left in the same out is not this
    run's: the committed 2026-12-07 quiet run (12:27-12:41 UTC) scored slow_link_40mbit against
    fix_slow_link_40mbit_1 (04:51 UTC, an earlier run's second fix sweep of the same command,
    whose forward and optimizer ran 1.6x slower), not its own fix_slow_link_40mbit_0."""
    records = [r for r in load(out, rescore) if sweeps is None or r.sweep in sweeps]
    rows = []
    for c in chosen:
        runs = runs_of(records, c)
        if not runs:
            rows.append({"case": c.name, "runs": 0, "note": c.note})
            continue
        own_sweep = in_sweep_fix(records, c)
        note = c.note if own_sweep or not c.legacy_note else c.legacy_note
        judged = [judge(c, r) for r in runs]
        top = _named(runs[0])[0] if _named(runs[0]) else None
        fix = fix_runs(records, c, top) if c.fix else []
        m = measured(runs, fix) if c.fix else None
        est: list[Saving] = [
            j["saving"] for j in judged if j["saving"] and j["saving"].fraction is not None
        ]
        row = {
            "case": c.name,
            "note": note,
            "runs": len(runs),
            "expect": " or ".join(c.expect) or "nothing",
            "top1": sum(j["top1"] for j in judged),
            "tops": [j["top"] for j in judged],
            "false": sum(len(j["false"]) for j in judged),
            "false_rules": sorted({x for j in judged for x in j["false"]}),
            "max_sum": max(j["sum"] for j in judged),
            "command": judged[0]["command"],
            "fix": (
                f"{' '.join(c.fix_in_sweep)}, its own sweep"
                if own_sweep
                else c.fix
                if c.fix != "next"
                else "its next command"
            ),
        }
        if est:
            los, his = (
                [e.lo for e in est if e.lo is not None],
                [e.hi for e in est if e.hi is not None],
            )
            row.update(
                estimated=statistics.median(e.fraction for e in est),
                estimated_lo=statistics.median(los) if los else None,
                estimated_hi=statistics.median(his) if his else None,
                estimate_source=sources_label([e.source for e in est]),
            )
        checks = [_check(r) for r in runs]
        costs = [c.cost_s for c in checks if c is not None and c.cost_s is not None]
        if costs:
            ran = [c for c in checks if c is not None and c.skipped is None]
            row.update(
                check_cost_s=statistics.median(costs),
                check_ran=len(ran),
                check_rounds=statistics.median(c.rounds for c in ran) if ran else 0,
            )
        if m:
            # each run against its own top finding's fix: small_buckets' runs recommended
            # bucket=100 and bucket=null, and both later runs were scored against the first's
            per_run = _each_against_its_fix(records, c, runs, judged)
            if per_run["errors"]:
                row.update(per_run)
            row.update(
                measured=m["saving"],
                measured_lo=m["lo"],
                measured_hi=m["hi"],
                measured_method=m["method"],
            )
            inside = _overlaps_each_against_its_fix(records, c, runs, judged)
            if inside:
                row["inside"] = sum(x == 0 for x in inside)
                row["missed_by"] = max(inside)
        rows.append(row)
    return {
        "rows": rows,
        "delay_s": delay,
        "common": [  # the built-in loop's, then "|" and the script's where both kinds ran
            word
            for i, kind in enumerate(dict.fromkeys(c.group.startswith("script") for c in chosen))
            for word in ["|"] * bool(i) + common_of("script" if kind else "")
        ],
        # the groups run with their own window (GROUP_STEPS) in place of COMMON's steps
        "group_steps": {
            g: GROUP_STEPS[g] for g in dict.fromkeys(c.group for c in chosen) if g in GROUP_STEPS
        },
        "done": all(
            r.get("top1") == r.get("runs")
            and (not r["case"].endswith("healthy") or r.get("false") == 0)
            and (r.get("max_sum") or 0) <= 1.0 + 1e-9
            for r in rows
            if r.get("runs")
        ),
    }


def _check(run: Run) -> object | None:
    """The run's in-job check (result.verify, diagnose.verify), or None."""
    return getattr(_record(run).result, "verify", None)


def _round(run: Run | Record | dict) -> tuple:
    """A run's round for pairing: its sweep and its repeat index. Two runs pair only within one
    sweep, where the rounds interleave the case and its fix (busy_host's fault.busy_cores=1,0,
    per_param beside healthy); a fix sweep runs minutes after the case's, so the same repeat index
    there shares no machine state, and pairing it cancels nothing while it puts one run's
    disturbance into that run's truth (slow_link_40mbit's +20 on 2026-12-07 was its round-2 fix
    run's, slow in phases that never touch the link). A bare record (no sweep) pairs by index."""
    return (run.sweep if isinstance(run, Run) else None, int(_items(run).get("repeat", 0)))


def _per_run_measured(runs: list[Run], fix: list[Run]) -> list[float | None]:
    """Per run: the saving measured against its fix (1 - samples/s of this run / the fix's): the
    fix's run of the same round where the fix ran in the same sweep (_round), else the fix's runs'
    geometric mean (compare_runs' ratio, unpaired); None where its round has no fix run."""
    rate = {_round(r): _record(r).result.throughput.samples_per_s for r in fix}
    rates = [x for x in rate.values() if x]
    pooled = math.exp(sum(math.log(x) for x in rates) / len(rates)) if rates else None
    out = []
    for r in runs:
        key = _round(r)
        same = any(k[0] == key[0] for k in rate)
        f = rate.get(key) if same else pooled
        mine = _record(r).result.throughput.samples_per_s
        out.append(time_saved(f / mine) if f and mine else None)
    return out


def sources_label(sources: list[str | None]) -> str | None:
    """Where the runs' printed savings came from: the one source where all agree, else each with
    its count ("measured 2, model 1"): the first run's alone labelled small_buckets' median
    "(model)" where two of its three runs printed the in-job measurement."""
    counts = Counter(s for s in sources if s)
    if len(counts) <= 1:
        return next(iter(counts), None)
    return ", ".join(f"{s} {n}" for s, n in counts.most_common())


def _each_against_its_fix(records: list[Run], c: Case, runs: list[Run], judged: list[dict]) -> dict:
    """errors, holds and widths (_per_run_error, _per_run_interval) with each run paired with the
    fix runs of its own top finding (fix_runs): where a case's runs recommend different fixes, each
    run's estimate is of its own fix's saving. One run's entry is dropped where its round has no run
    of that fix (an error of None, as _per_run_error's)."""
    out: dict = {"errors": [], "holds": [], "widths": []}
    for run, j in zip(runs, judged):
        named = _named(run)
        fix = fix_runs(records, c, named[0] if named else None)
        out["errors"] += _per_run_error([run], fix, [j])
        for k, v in _per_run_interval([run], fix, [j]).items():
            out[k] += v
    return out


def _overlaps_each_against_its_fix(
    records: list[Run], c: Case, runs: list[Run], judged: list[dict]
) -> list[float]:
    """_overlap of each run's stated range with the measured interval of its own top finding's
    fix (the case's runs against that fix's, paired by round, as the measured column's): a run
    whose top finding recommends another fix than the first run's is not judged against the
    first's. Runs without an estimate, or whose fix has no measurement, are left out."""
    by_fix: dict[tuple, dict | None] = {}
    out = []
    for run, j in zip(runs, judged):
        s = j["saving"]
        if s is None or s.fraction is None:
            continue
        named = _named(run)
        fix = fix_runs(records, c, named[0] if named else None)
        key = tuple(id(f) for f in fix)
        if key not in by_fix:
            by_fix[key] = measured(runs, fix)
        if by_fix[key] is not None:
            out.append(_overlap(s, by_fix[key]))
    return out


def _per_run_error(runs: list[Run], fix: list[Run], judged: list[dict]) -> list[float | None]:
    """Per run: the top finding's estimated saving - the saving measured in its round; None where
    either is missing."""
    return [
        None
        if m is None or j["saving"] is None or j["saving"].fraction is None
        else j["saving"].fraction - m
        for m, j in zip(_per_run_measured(runs, fix), judged)
    ]


def _per_run_interval(runs: list[Run], fix: list[Run], judged: list[dict]) -> dict:
    """Per run with a measured saving and an estimate: whether the top finding's stated interval
    holds the saving measured in its round (holds), and that interval's width (widths; None: no
    interval stated, which holds nothing)."""
    holds, widths = [], []
    for m, j in zip(_per_run_measured(runs, fix), judged):
        s = j["saving"]
        if m is None or s is None or s.fraction is None:
            continue
        stated = s.lo is not None and s.hi is not None
        holds.append(bool(stated and s.lo <= m <= s.hi))
        widths.append(s.hi - s.lo if stated else None)
    return {"holds": holds, "widths": widths}


def _overlap(est: Saving, m: dict) -> float:
    """0 when the stated range and the measured interval overlap, else the gap between them (a share
    of the step)."""
    lo = est.lo if est.lo is not None else est.fraction
    hi = est.hi if est.hi is not None else est.fraction
    mlo = m["lo"] if m.get("lo") is not None else m["saving"]
    mhi = m["hi"] if m.get("hi") is not None else m["saving"]
    return max(0.0, mlo - hi, lo - mhi)


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def markdown(result: dict) -> str:
    m = result.get("machine") or {}
    where = (
        f" Machine: {m.get('host')}, {m.get('cpus')} CPUs, {m.get('platform')}, load average at "
        "the end "
        f"{', '.join(f'{x:.2f}' for x in m['loadavg_at_end'])}."
        if m.get("loadavg_at_end")
        else ""
    )
    lines = [
        f"Diagnosis benchmark: {result.get('repeats', '?')} run(s) per case; cases of one kind in "
        "one sweep, "
        "interleaved by round. Common overrides: `"
        + " ".join(result["common"])
        + "`"
        + "".join(
            f"; `steps={n}` in the {g} sweep and its fixes' sweeps"
            for g, n in (result.get("group_steps") or {}).items()
        )
        + f".{where}",
        "",
        "| case | injected | expected first | top-1 | false findings | max sum of savings | top "
        "finding's "
        "estimated saving [range] | measured saving [95% CI] | inside | estimate − measured, per "
        "run "
        "(points) | in-job check: s added per run | fix measured |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        if not r.get("runs"):
            lines.append(f"| {r['case']} | {r['note']} | – | not run | | | | | | | | |")
            continue
        est = (
            (
                _pct(r.get("estimated"))
                + (
                    f" [{_pct(r.get('estimated_lo'))}, {_pct(r.get('estimated_hi'))}]"
                    if r.get("estimated_lo") is not None
                    else ""
                )
                + (f" ({r['estimate_source']})" if r.get("estimate_source") else "")
            )
            if "estimated" in r
            else "–"
        )
        meas = (
            (
                _pct(r["measured"])
                + (
                    f" [{_pct(r['measured_lo'])}, {_pct(r['measured_hi'])}]"
                    if r.get("measured_lo") is not None
                    else ""
                )
            )
            if "measured" in r
            else "–"
        )
        inside = (
            (
                f"{r['inside']}/{r['runs']}"
                + (f" (missed by {100 * r['missed_by']:.0f} points)" if r.get("missed_by") else "")
            )
            if "inside" in r
            else "–"
        )
        false = f"{r['false']}" + (f" ({', '.join(r['false_rules'])})" if r["false_rules"] else "")
        errors = (
            ", ".join("–" if e is None else f"{100 * e:+.0f}" for e in r["errors"])
            if r.get("errors")
            else "–"
        )
        check = (
            f"{r['check_cost_s']:.2g} s ("
            + (
                f"ran in {r['check_ran']}/{r['runs']}, {r['check_rounds']:g} rounds)"
                if r.get("check_ran")
                else "not run: nothing switchable, or over its budget)"
            )
            if r.get("check_cost_s") is not None
            else "–"
        )
        lines.append(
            f"| {r['case']} | {r['note']} | {r['expect']} | {r['top1']}/{r['runs']} | {false} "
            f"| {_pct(r['max_sum'])} | {est} | {meas} | {inside} | {errors} | {check} | {r['fix']} "
            "|"
        )
    if result.get("skipped"):
        lines += [
            "",
            f"Not run (they need root for the emulated link): {', '.join(result['skipped'])}.",
        ]
    lines += [
        "",
        "top-1: runs whose first finding is the injected cause (for a straggler, naming its rank). "
        "false "
        "findings: named findings with no injected cause behind them. max sum: the largest total "
        "of all "
        "findings' savings in one run, as a share of the step. inside: runs whose stated range "
        "overlaps the "
        "measured 95% interval (else the gap, in points of the step). measured: 1 - samples/s of "
        "the case / "
        "the fix's (stats.compare_runs), paired by round where the fix ran in the case's own "
        "sweep, interleaved with it (per_param, busy_host), Welch's otherwise (a fix sweep runs "
        "minutes later: the same repeat index shares no machine state). estimate − measured: per "
        "run, the top finding's saving less the saving measured against that finding's own fix: "
        "its run of the same round within one sweep, else its runs' geometric mean (inside, too; "
        "the measured column: against the first run's fix). in-job check: "
        "the "
        "median seconds diagnose.verify added to a run (the decision included), in how many runs "
        "it "
        "measured the fix and with how many interleaved rounds.",
    ]
    errs = [e for r in result["rows"] for e in (r.get("errors") or []) if e is not None]
    if errs:
        lines.append(
            f"Estimate − measured over {len(errs)} runs: within 5 points in "
            f"{sum(abs(e) <= 0.05 for e in errs)}, within 10 in "
            f"{sum(abs(e) <= 0.10 for e in errs)}, "
            f"largest {100 * max(abs(e) for e in errs):.0f} points."
        )
    holds = [h for r in result["rows"] for h in (r.get("holds") or [])]
    widths = [w for r in result["rows"] for w in (r.get("widths") or [])]
    if holds:
        stated = [w for w in widths if w is not None]
        lines.append(
            f"Stated interval against the measured saving over {len(holds)} runs: it holds it in "
            f"{sum(holds)}"
            + (
                f"; widest {100 * max(stated):.0f} points, {sum(w <= 0.20 for w in stated)} "
                "within 20 points wide"
                if stated
                else ""
            )
            + (f"; {len(widths) - len(stated)} stated no interval" if None in widths else "")
            + " (issue 38: holds in >= 90%, <= 20 points wide)."
        )
    if result.get("wall_s") is not None:
        lines.append(f"Wall time: {result['wall_s'] / 60:.1f} min.")
    if result.get("scored_by"):
        lines.append(f"Scored by {result['scored_by']}.")
    return "\n".join(lines) + "\n"


def write(out: Path, result: dict) -> None:
    (out / "benchmark.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "benchmark.md").write_text(markdown(result))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m diagnosis.benchmark", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--out", default="diagnosis_benchmark", help="where the sweeps and the table go")
    p.add_argument("--repeats", type=int, default=3, help="runs per case (rounds; default 3)")
    p.add_argument(
        "--cases",
        help="a comma-separated subset of the cases (the cases they are measured against are "
        "added)",
    )
    p.add_argument(
        "--delay", type=float, default=DELAY_S, help=f"injected delay, seconds (default {DELAY_S})"
    )
    p.add_argument(
        "--table", metavar="DIR", help="only the table, from a finished benchmark's records"
    )
    p.add_argument(
        "--score",
        metavar="DIR",
        help="the table from a finished benchmark's records, each diagnosed again "
        "by this version of the diagnosis (seconds; the records stay as "
        "written)",
    )
    p.add_argument(
        "--script",
        action="store_true",
        help="the script cases (task=script on diagnosis/cases/user_loop.py) instead of the "
        "built-in loop's",
    )
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    args = p.parse_args(argv)
    if args.list:
        for c in every_case(args.delay):
            print(f"{c.name:<28} {c.note}" + (" (root)" if c.root else ""))
        return 0
    names = args.cases.split(",") if args.cases else None
    known = {c.name for c in every_case(args.delay)}
    if names and (bad := [n for n in names if n not in known]):
        print(
            f"error: unknown case(s) {', '.join(bad)}; python -m diagnosis.benchmark --list shows "
            "them",
            file=sys.stderr,
        )
        return 2
    if args.table or args.score:
        out = Path(args.table or args.score)
        old = (
            json.loads((out / "benchmark.json").read_text())
            if (out / "benchmark.json").is_file()
            else {}
        )
        chosen = select(names, old.get("delay_s", args.delay), old.get("script", args.script))
        result = {
            **old,
            **table(
                out,
                chosen,
                old.get("delay_s", args.delay),
                rescore=bool(args.score),
                sweeps=swept(old.get("commands")),
            ),
        }
        result["common"] = old.get("common", COMMON)  # what those runs ran with, not today's
        result["group_steps"] = old.get("group_steps", {})
        result.pop("scored_by", None)
        if args.score:
            from diagnosis import VERSION

            result["scored_by"] = (
                f"diagnosis version {VERSION}, over the records as they were run "
                f"(python -m diagnosis.benchmark --score)"
            )
    else:
        result = run(Path(args.out), args.repeats, names, args.delay, args.script)
    write(Path(args.table or args.score or args.out), result)
    print(markdown(result))
    return 0 if result["done"] else 1


if __name__ == "__main__":
    sys.exit(main())
