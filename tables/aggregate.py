"""From runs to compared configurations: the repeats of one configuration become one row with
intervals, every row gets a speed-up against the baseline with its CI and a verdict, and a noise
sentinel says when the machine, not the knobs, moved the numbers. The sweep table, the report, the
plots and W&B all read these figures; the statistics are in stats/ (docs/methods.md).

The run is the unit: a row of R >= 2 runs shows the geometric mean over runs with a t(R-1) interval
(stats.runs.run_level); one run shows its own batch-means interval (stats.within) and no verdict.
Speed-ups are paired by round where both rows ran once per round, else Welch, with Holm's step-down
over the table (stats.family). How each column is computed: docs/output.md "The sweep table".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from base.record import scaled, setting
from tables.entries import (
    EXPOSED,
    config_labels,
    exposed_samples,
    finite,
    not_a_setting,
    override_items,
    varying_keys,
)
from stats import (
    NO_VERDICT,
    batch_median,
    batch_rate,
    plan_repeats,
    run_level,
    sentinel as random_effects,
    steady_state,
    unsteady_runs,
)
from stats.family import Row, pair_verdicts
from stats.verdict import NOISE, NS as NO_DIFFERENCE

# the baseline's bucket: the config's default (base/schema.py: null, DDP's own), read once, never
# restated in code; records made before it was null ran bucket=25, which caps the first bucket at 25
# MiB too (not stock DDP)
EXPLICIT_25_MB = 25.0
REL_CI = 0.02  # measure.rel_ci's default: the precision the repeats plan aims at
NO_INTERVAL = "no interval"
SENTINEL_PHASES = ("forward", "data")
SENTINEL_MIN_SHARE = (
    0.05  # a phase under 5% of the step is too small to tell anything about the machine
)
# config keys (prefixes) that cannot change forward compute or data wait: only comm knobs, seeds and
# bookkeeping
UNTOUCHING = (
    "bucket",
    "optim",
    "ddp.static_graph",
    "ddp.gradient_as_bucket_view",
    "nccl.",
    "gloo.",
    "seed",
    "compare.",
    "measure.",
    "fault.sleep_s",
    "timeout_s",
    "probe_steps",
    "tags",
    "logger",
    "repeat",
)


@dataclass
class Config:
    """One configuration: every job of the sweep with these overrides, whatever its `repeat`."""

    label: str
    entries: list  # tables.table.Entry, failed ones included
    throughput: dict | None = None  # rate, ci_lo, ci_hi (steps/s), samples_per_s..., n_runs, method
    step: dict | None = None  # median, ci_lo, ci_hi of the step time (s), n_runs, method
    speedup: dict | None = None  # ratio, ci_lo, ci_hi, verdict, basis, method
    baseline: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> list:
        return [e for e in self.entries if e.ok]

    @property
    def first(self):
        return (self.ok or self.entries)[0]

    @property
    def task(self) -> str | None:
        """task=script's records hold task=train's figures (tasks/script/result.py): compared as
        task=train's."""
        task = self.first.task
        return "train" if task == "script" else task

    @property
    def nums(self) -> list:
        return [e.num for e in self.entries]

    def median(self, value) -> float | None:
        """Median over finished runs of value(entry), or None when no run has it."""
        vals = [v for v in (value(e) for e in self.ok) if finite(v)]
        return float(np.median(vals)) if vals else None


def group_repeats(entries: list) -> list[tuple[str, list]]:
    """[(label, entries)] in first-seen order: entries whose overrides differ only in `repeat` are
    one configuration."""
    groups: dict[tuple, list] = {}
    for e in entries:
        items = override_items(e.overrides)
        key = tuple(sorted((k, v) for k, v in items.items() if not not_a_setting(k)))
        if (
            not e.overrides
        ):  # no overrides known (e.g. an unreadable record): never merged with another
            key = ("#", id(e))
        groups.setdefault(key, []).append(e)
    firsts = [g[0] for g in groups.values()]
    return list(zip(config_labels(firsts), groups.values()))


# -------------------------------------------------------------------------------------- run samples


def step_median(e) -> float | None:
    r = e.train
    return r.step_time_s.median if r is not None and r.step_time_s is not None else None


def _step_series(e) -> list[float] | None:
    r = e.train
    return r.series.step_time_s if r is not None and r.series is not None else None


def phase_median(e, phase: str) -> float | None:
    """The median of one step phase of a train run (None when the run has no such phase). A phase
    this version does not declare (a newer version's record) is read from the block's undeclared
    keys, so the phase table's column for it holds its numbers."""
    r = e.train
    if r is None or r.phases is None:
        return None
    summary = getattr(r.phases, phase, None)
    if summary is None:
        raw = r.phases.extra.get(phase)
        return raw.get("median") if isinstance(raw, dict) else None
    return summary.median


def exposed_s(e) -> float | None:
    """A train run's exposed communication per step (None without one)."""
    r = e.train
    return r.comm.exposed_s if r is not None and r.comm is not None else None


def samples_per_step(e) -> float | None:
    tp = e.train.throughput if e.train is not None else None
    if (
        tp is not None
        and finite(tp.samples_per_s)
        and finite(tp.steps_per_s)
        and tp.steps_per_s > 0
    ):
        return tp.samples_per_s / tp.steps_per_s
    return None


def run_blocks(e, per_sample: bool) -> tuple[list[float], list[float]] | None:
    """(block walls, work per block) of one run's timed blocks (result.throughput.blocks), or None
    without them. Work is steps, or samples when per_sample."""
    r = e.train
    tp = r.throughput if r is not None else None
    if tp is None or tp.blocks is None or not tp.blocks.walls_s:
        return None
    k = samples_per_step(e) if per_sample else 1.0
    if k is None:
        return None
    return list(tp.blocks.walls_s), [s * k for s in tp.blocks.steps]


def _rate(e, per_sample: bool) -> float | None:
    tp = e.train.throughput if e.train is not None else None
    if tp is None:
        return None
    return tp.samples_per_s if per_sample else tp.steps_per_s


def run_round(e) -> tuple | None:
    """The round a run ran in: its sweep and `repeat` (set by the sweeper), or None outside a
    repeated sweep. Runs of different sweeps never share a round, even with the same repeat
    index."""
    value = override_items(e.overrides).get("repeat")
    try:
        repeat = int(value)
    except (TypeError, ValueError):
        return None
    sweep = (e.record.job.sweep_dir if e.record is not None else None) or (
        str(Path(e.output_dir).parent) if e.output_dir else None
    )
    return (str(sweep), repeat)


def run_log(e, per_sample: bool) -> float | None:
    """A run's log throughput: its timed blocks' sum(work) / sum(wall), or the record's rate when it
    has no blocks."""
    blocks = run_blocks(e, per_sample)
    if blocks is not None and all(w > 0 for w in blocks[0]) and all(u > 0 for u in blocks[1]):
        return math.log(sum(blocks[1]) / sum(blocks[0]))
    rate = _rate(e, per_sample)
    return math.log(rate) if finite(rate) and rate > 0 else None


def run_drift(e) -> dict | None:
    """The drift test (stats.steady_state) on a run's step series, or its blocks' time per step,
    recomputed by this version whatever the record holds."""
    series = _step_series(e)
    if not series:
        blocks = run_blocks(e, False)
        series = [w / n for w, n in zip(*blocks)] if blocks else None
    return steady_state(series) if series else None


def _rows_runs(c: Config) -> list:
    return [e for e in c.ok if finite(_rate(e, False))]


def _throughput(c: Config) -> dict | None:
    """The row's throughput. R >= 2 runs: geometric mean with the run-level t interval. One run: its
    rate with the batch-means interval of its timed blocks (None below 10 blocks or without blocks),
    computed by this version whatever interval the record stored."""
    runs = _rows_runs(c)
    if not runs:
        return None
    out: dict[str, Any] = {"n_runs": len(runs), "rounds": [run_round(e) for e in runs]}
    for per_sample, key in ((False, "steps_per_s"), (True, "samples_per_s")):
        logs = [run_log(e, per_sample) for e in runs]
        if any(v is None for v in logs):
            continue
        if len(runs) > 1:
            r = run_level(logs)
            out[key], out[key + "_lo"], out[key + "_hi"], method = (
                r["value"],
                r["ci_lo"],
                r["ci_hi"],
                r["method"],
            )
        else:
            blocks = run_blocks(runs[0], per_sample)
            b = batch_rate(*blocks) if blocks else None
            out[key] = _rate(runs[0], per_sample)
            out[key + "_lo"], out[key + "_hi"] = (b["ci_lo"], b["ci_hi"]) if b else (None, None)
            method = (
                b["method"] if b else "no interval: a record without timed blocks"
            ) + " (one run: the noise inside it, not the spread between runs)"
            out["serial"] = {"lag1": b["lag1"], "n_eff": b["n_eff"]} if b else None
        out["method"] = method
        out[key + "_logs"] = logs
    if len(runs) > 1 and "steps_per_s_logs" in out:
        within = []
        for e in runs:
            blocks = run_blocks(e, False)
            within.append(batch_rate(*blocks)["log_se"] if blocks else None)
        out["plan"] = plan_repeats(out["steps_per_s_logs"], within, rel_ci=_rel_ci(runs))
    return out


def _rel_ci(runs: list) -> float:
    found = [setting(e.config, "measure.rel_ci") for e in runs]
    return next((float(v) for v in found if finite(v) and v > 0), REL_CI)


def _step(c: Config) -> dict | None:
    """The row's median step time: R >= 2 runs: the geometric mean of the runs' medians with a
    t(R-1) interval; one run: batch medians of its step series, recomputed by this version whatever
    interval the record stored."""
    runs = [e for e in c.ok if finite(step_median(e))]
    if not runs:
        return None
    medians = [step_median(e) for e in runs]
    if len(runs) > 1 and all(m > 0 for m in medians):
        r = run_level([math.log(m) for m in medians])
        return {
            "median": r["value"],
            "ci_lo": r["ci_lo"],
            "ci_hi": r["ci_hi"],
            "n_runs": len(runs),
            "method": r["method"],
        }
    series = _step_series(runs[0])
    if len(runs) == 1 and series:
        b = batch_median(series)
        if b["ci_lo"] is not None and b["ci_lo"] <= 0 < min(series):
            # a t interval from 2 batch medians (10 steps: t(1) = 12.7) can reach below zero, a step
            # time cannot: the same batch medians on the log scale, mapped back (positive, and wider
            # upward)
            lg = batch_median(np.log(series))
            b = {
                **b,
                "ci_lo": math.exp(lg["ci_lo"]),
                "ci_hi": math.exp(lg["ci_hi"]),
                "method": lg["method"] + " of log step times (the linear interval reached below 0)",
            }
        return {
            "median": medians[0],
            "ci_lo": b["ci_lo"],
            "ci_hi": b["ci_hi"],
            "n_runs": 1,
            "method": b["method"],
        }
    return {"median": c.median(step_median), "ci_lo": None, "ci_hi": None, "n_runs": len(runs)}


# --------------------------------------------------------------------------------------- comparison


def _bucket_of(c: Config) -> str | float | None:
    """ "default" for DDP's own bucket setting (bucket=null; the record says "default"), else the MB
    asked."""
    bucket = c.first.knob("bucket")
    if bucket in (None, "default") and str(c.first.knob("sync") or "ddp") == "ddp":
        return "default"  # bucket=null (the tool's default) leaves DDP's own bucket setting
    try:
        return float(bucket)
    except (TypeError, ValueError):
        return None


def choose_baseline(configs: list[Config]) -> tuple[int | None, str]:
    """The configuration speed-ups are measured against, and why (the why names the bucket rule):
    optim=none with DDP's default bucket (bucket=null: stock DDP) if there is one; else optim=none
    with bucket=25, the tool's default before it left DDP's own (the committed reproductions'
    records), which caps the first bucket at 25 MiB; else the first. Only task=train configurations
    with a finished run count."""
    candidates = [i for i, c in enumerate(configs) if c.task == "train" and c.throughput]
    if len(candidates) < 2:
        return None, ""
    plain = [i for i in candidates if str(configs[i].first.knob("optim")) == "none"]
    for i in plain:
        if _bucket_of(configs[i]) == "default":
            return i, (
                "optim=none with DDP's default bucket (bucket=null: 25 MiB buckets, the first "
                "capped at 1 MiB: "
                "stock DDP)"
            )
    for i in plain:
        if _bucket_of(configs[i]) == EXPLICIT_25_MB:
            return i, (
                "optim=none with bucket=25 (every bucket capped at 25 MiB, the first too: the "
                "tool's default "
                "before it left DDP's own; stock DDP caps the first bucket at 1 MiB), as no "
                "finished job ran "
                "DDP's default bucket"
            )
    return candidates[
        0
    ], "first finished job: no finished job with optim=none and DDP's default bucket (or bucket=25)"


def _per_sample(configs: list[Config]) -> bool:
    """samples/s when every row has it (fair when batch or world size differ), else steps/s."""
    return all(samples_per_step(e) is not None for c in configs for e in _rows_runs(c))


def _row(c: Config, per_sample: bool, unsteady: set) -> Row:
    runs = _rows_runs(c)
    rounds = [run_round(e) for e in runs]
    return Row(
        c.label,
        c.throughput["samples_per_s_logs" if per_sample else "steps_per_s_logs"],
        rounds if None not in rounds else None,
        [id(e) in unsteady for e in runs],
    )


def _speedups(
    pairs: list[tuple[Config, Config]],
    noise: float,
    per_sample: bool,
    unsteady: set,
    floor: float | None = None,
) -> list[dict]:
    """The verdicts of one family of comparisons (stats.family.pair_verdicts, Holm), as rows show
    them."""
    key = "samples_per_s" if per_sample else "steps_per_s"
    found = pair_verdicts(
        [(_row(b, per_sample, unsteady), _row(c, per_sample, unsteady)) for b, c in pairs],
        noise,
        floor=floor,
    )
    for d, (b, c) in zip(found, pairs):
        d["basis"] = key.replace("_per_s", "/s")
        d["ratio"] = (
            c.throughput[key] / b.throughput[key]
        )  # the rows' printed figures' ratio (= exp of the mean logs)
    return found


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}."))
    return out if out else {prefix: d}


def compared_keys(configs: list[Config]) -> list[str]:
    """Config keys whose resolved value differs between the configurations (what the table
    compares)."""
    flats = [_flat(c.first.config) for c in configs if c.ok]
    keys = sorted({k for f in flats for k in f})
    return [k.rstrip(".") for k in keys if len({repr(f.get(k)) for f in flats}) > 1]


def _phase_log_median(e, phase: str) -> float | None:
    r = e.train
    values = (
        getattr(r.series.phases, phase, None)
        if r is not None and r.series and r.series.phases
        else None
    )
    med = float(np.median(values)) if values else phase_median(e, phase)
    return math.log(med) if finite(med) and med > 0 else None


def sentinel(configs: list[Config]) -> tuple[dict | None, str]:
    """(a phase the compared knobs cannot change that differs between rows beyond their runs'
    spread, or None; why / why not). stats.sentinel's random-effects ANOVA on the runs' log medians,
    rows with >= 2 runs."""
    rows = [c for c in configs if c.task == "train" and c.ok]
    if len(rows) < 2:
        return None, ""
    keys = compared_keys(rows)
    touching = [k for k in keys if not k.startswith(UNTOUCHING)]
    if touching:
        return (
            None,
            f"not applicable: the compared keys ({', '.join(touching[:3])}) can change forward "
            "time",
        )
    worst, judged = None, []
    for phase in SENTINEL_PHASES:
        by_row: dict[str, list] = {}
        for c in rows:
            logs = [v for v in (_phase_log_median(e, phase) for e in c.ok) if v is not None]
            step = c.step["median"] if c.step else None
            if not logs or not step or math.exp(float(np.median(logs))) < SENTINEL_MIN_SHARE * step:
                break
            by_row[c.label] = logs
        else:
            s = random_effects(by_row)
            if s is None:
                continue
            judged.append((phase, s))
            if s["significant"] and (worst is None or s["floor"] > worst["floor"]):
                worst = {**s, "phase": phase}
    if worst is None:
        if not judged:
            return None, (
                f"could not judge: {' and '.join(SENTINEL_PHASES)} time are under "
                f"{SENTINEL_MIN_SHARE:.0%} of the step, or fewer than 2 rows have 2 runs (repeats)"
            )
        return None, "; ".join(
            f"{p} time agrees across rows (random-effects F test p={s['p_value']:.2g}, between-row "
            f"spread {s['spread']:.1%} [{math.expm1(s['tau_lo']):.1%}, "
            f"{math.expm1(s['tau_hi']):.1%}])"
            for p, s in judged
        )
    return worst, ""


def sentinel_warning(s: dict) -> str:
    return (
        f"{s['phase']} time, which the compared knobs do not change, differs between rows by more "
        "than their runs "
        f"do (random-effects F test p={s['p_value']:.2g}; between-row spread {s['spread']:.1%} "
        f"[{math.expm1(s['tau_lo']):.1%}, {math.expm1(s['tau_hi']):.1%}], `{s['low_row']}` "
        "fastest, "
        f"`{s['high_row']}` slowest): the machine changed between rows. Verdicts are judged "
        "against "
        f"±{s['floor']:.0%} (what two rows can differ by from the machine alone) instead of "
        "compare.noise."
    )


@dataclass
class Comparison:
    configs: list[Config]
    base: int | None
    why: str
    noise: float
    sentinel: dict | None
    sentinel_note: str
    unsteady: dict = field(
        default_factory=dict
    )  # stats.unsteady_runs over the sweep's runs: {runs, tested, method}
    per_sample: bool = True


def _unsteady(configs: list[Config]) -> tuple[dict, set]:
    tests = {id(e): run_drift(e) for c in configs if c.task == "train" for e in _rows_runs(c)}
    found = unsteady_runs(tests)
    found["tested_runs"] = [k for k, v in tests.items() if v and v.get("p_value") is not None]
    return found, set(found["runs"])


def compare(entries: list, noise: float | None = None) -> Comparison:
    """Group repeats into configurations, aggregate each, compare every train configuration with the
    baseline: one family of comparisons (Holm), judged against compare.noise or the noise sentinel's
    machine spread if larger."""
    configs = [Config(label, group) for label, group in group_repeats(entries)]
    for c in configs:
        if c.task == "train":
            c.throughput = _throughput(c)
            c.step = _step(c)
    base, why = choose_baseline(configs)
    if noise is None:
        found = [setting(e.config, "compare.noise") for c in configs for e in c.ok]
        noise = next((n for n in found if finite(n)), NOISE)
    unsteady, flagged = _unsteady(configs)
    s, note = sentinel(configs)
    train = [c for c in configs if c.task == "train" and c.throughput]
    per_sample = _per_sample(train)
    if base is not None:
        configs[base].baseline = True
        others = [
            c for i, c in enumerate(configs) if c.task == "train" and c.throughput and i != base
        ]
        for c, sp in zip(
            others,
            _speedups(
                [(configs[base], c) for c in others],
                noise,
                per_sample,
                flagged,
                s["floor"] if s else None,
            ),
        ):
            c.speedup = sp
    return Comparison(configs, base, why, noise, s, note, unsteady, per_sample)


# ------------------------------------------------------------------------------------------ scaling


def _world_size(c: Config) -> float | None:
    try:
        return float(c.first.knob("world_size"))
    except (TypeError, ValueError):
        return None


def scaling_lines(configs: list[Config]) -> list[tuple[str, list[tuple[float, Config, str]]]]:
    """[(label, [(world size, configuration, its label), ...])]: the lines a scaling table and plot
    draw, smallest size first.

    When the smallest world size holds one configuration (experiment=scaling's one rank without DDP,
    or a study's single-rank baseline) it starts every line: each configuration at a larger size is
    measured against it, and lines group configurations whose overrides differ only in world size
    (and in sync, which experiment=scaling ties to the world size). Otherwise each line is its own
    configuration across sizes, from its own smallest size. Repeats are already merged (a Config is
    every repeat of one configuration)."""
    pts = [
        (n, c)
        for c in configs
        if c.task == "train" and c.throughput and (n := _world_size(c)) is not None
    ]
    sizes = sorted({n for n, _ in pts})
    if len(sizes) < 2:
        return []
    keys = [k for k in varying_keys([c.first for _, c in pts]) if k not in ("world_size", "scale")]

    def key(c: Config, drop: tuple = ()) -> str:
        items = override_items(c.first.overrides)
        return (
            " ".join(f"{k}={items[k]}" for k in keys if k in items and k not in drop) or "default"
        )

    def grouped(points, drop: tuple = ()) -> dict[str, list]:
        out: dict[str, list] = {}
        for n, c in points:
            label = key(c, drop)
            out.setdefault(label, []).append((n, c, label))
        return out

    smallest = [(n, c) for n, c in pts if n == sizes[0]]
    if len(smallest) == 1:
        n0, base = smallest[0]
        rest = [(n, c) for n, c in pts if n != sizes[0]]
        lines = grouped(rest, ("sync",))
        if any(
            len({p[0] for p in g}) < len(g) for g in lines.values()
        ):  # sync is what tells them apart
            lines = grouped(rest)
        first = (n0, base, key(base))
        return [(label, [first] + sorted(g, key=lambda p: p[0])) for label, g in lines.items()]
    return [
        (label, sorted(g, key=lambda p: p[0]))
        for label, g in grouped(pts).items()
        if len({p[0] for p in g}) > 1
    ]


def exposed_fields(c: Config) -> dict:
    """The exposed-comm cell's companions: how many samples the least-sampled run had, and one run's
    interval."""
    runs = [e for e in c.ok if e.train is not None and e.train.comm is not None]
    ns = [n for e in runs if (n := exposed_samples(e.train, e.config)) is not None]
    comm = runs[0].train.comm if len(runs) == 1 else None
    return {
        f"{EXPOSED} n": min(ns) if ns else None,
        f"{EXPOSED} lo": scaled(comm.exposed_ci_lo, 1e3) if comm else None,
        f"{EXPOSED} hi": scaled(comm.exposed_ci_hi, 1e3) if comm else None,
    }


def scaling_rows(entries: list, noise: float | None = None) -> list[dict]:
    """One row per configuration and world size against its line's first point: samples/s with its
    CI, speed-up with its CI and verdict (as the sweep table computes them, Holm over the table's
    comparisons), scaling efficiency = speed-up x n0 / n with the same CI."""
    cmp = compare(entries, noise)
    _, flagged = _unsteady(cmp.configs)
    points, seen = [], set()
    for label, line in scaling_lines(cmp.configs):
        n0, base, _ = line[0]
        for n, c, own in line:
            if id(c) not in seen:
                seen.add(id(c))  # a common baseline is one row, at the top
                points.append((label, n0, base, n, c, own))
    pairs = [(base, c) for _, _, base, _, c, _ in points if c is not base]
    found = iter(
        _speedups(pairs, cmp.noise, _per_sample([c for _, _, _, _, c, _ in points]), flagged)
    )
    rows = []
    for label, n0, base, n, c, own in points:
        tp = c.throughput
        per = "samples_per_s" if finite(tp.get("samples_per_s")) else "steps_per_s"
        row = {
            "configuration": own,
            "line": label,
            "world size": int(n),
            "sync": getattr(c.first.result, "sync", None),
            "runs": len(c.ok),
            "samples/s": tp.get(per),
            "samples/s lo": tp.get(per + "_lo"),
            "samples/s hi": tp.get(per + "_hi"),
            "exposed comm ms": scaled(c.median(exposed_s), 1e3),
            **exposed_fields(c),
            "baseline": c is base,
        }
        if c is base:
            row.update({"speed-up": 1.0, "verdict": "baseline", "scaling efficiency": 1.0})
        else:
            sp = next(found)
            f = n0 / n
            row.update(
                {
                    "speed-up": sp["ratio"],
                    "speed-up lo": sp["ci_lo"],
                    "speed-up hi": sp["ci_hi"],
                    "verdict": sp["verdict"],
                    "scaling efficiency": sp["ratio"] * f,
                    "scaling efficiency lo": sp["ci_lo"] * f if sp["ci_lo"] is not None else None,
                    "scaling efficiency hi": sp["ci_hi"] * f if sp["ci_hi"] is not None else None,
                    "method": sp["method"],
                    "speedup": sp,
                }
            )
        rows.append(row)
    return rows


__all__ = [
    "Comparison",
    "Config",
    "NO_DIFFERENCE",
    "NO_INTERVAL",
    "NO_VERDICT",
    "compare",
    "group_repeats",
    "run_blocks",
    "scaling_lines",
    "scaling_rows",
    "sentinel_warning",
    "varying_keys",
]
