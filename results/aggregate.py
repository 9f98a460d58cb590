"""From runs to compared configurations: the repeats of one configuration become one row with intervals, every row
gets a speed-up against the baseline with its CI and a verdict, and a noise sentinel says when the machine, not the
knobs, moved the numbers. The sweep table, the report, the plots and W&B all read these figures (statistics: stats/).

How a row is computed (README "Reading the sweep table"):
  - throughput: each run's steps / wall clock of its timed blocks (the record's figure); a row of R repeats shows the
    median over runs, with a two-level percentile bootstrap CI (runs, then blocks within each run), so run-to-run
    spread is inside the interval. One run: the record's own block-bootstrap CI.
  - speed-up: row throughput / baseline throughput, CI from independent bootstraps of both sides; samples/s when
    both rows have it (fair across batch or world sizes). Verdict: faster/slower only when the CI excludes 1 and the
    change exceeds compare.noise (default 2%), else "no significant difference".
  - step median: median of run medians of rank 0's step times, two-level bootstrap CI.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from results.entries import _finite, _get, _is_noise, _scaled, config_labels, override_items, varying_keys
from stats.compare import NS as NO_DIFFERENCE
from stats import aggregate_repeats, aggregate_throughput, compare_throughput, median_ci, noise_sentinel, verdict
from stats.summary import CI_METHOD

# the baseline's bucket: the config's default (conf/config.yaml: null, DDP's own), read once, never restated in code;
# records made before it was null ran bucket=25, which caps the first bucket at 25 MiB too (not stock DDP)
DEFAULT_BUCKET = OmegaConf.load(Path(__file__).resolve().parent.parent / "conf" / "config.yaml").bucket
EXPLICIT_25_MB = 25.0
NOISE = 0.02
NO_INTERVAL = "no interval"
SENTINEL_PHASES = ("forward", "data")
SENTINEL_MIN_SHARE = 0.05   # a phase under 5% of the step is too small to tell anything about the machine
SENTINEL_MIN_STEPS = 6      # the fewest steps whose median interval reaches 95% (stats.median_ranks)
# config keys (prefixes) that cannot change forward compute or data wait: only comm knobs, seeds and bookkeeping
UNTOUCHING = ("bucket", "optim", "ddp.static_graph", "ddp.gradient_as_bucket_view", "nccl.", "gloo.", "seed",
              "compare.", "measure.", "fault.sleep_s", "timeout_s", "probe_steps", "tags", "logger", "repeat")


@dataclass
class Config:
    """One configuration: every job of the sweep with these overrides, whatever its `repeat`."""

    label: str
    entries: list  # results.table.Entry, failed ones included
    throughput: dict | None = None   # rate, ci_lo, ci_hi (steps/s), samples_per_s..., n_runs, method
    step: dict | None = None         # median, ci_lo, ci_hi of the step time (s), n_runs, method
    speedup: dict | None = None      # ratio, ci_lo, ci_hi, verdict, basis, method
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
        return self.first.task

    @property
    def nums(self) -> list:
        return [e.num for e in self.entries]

    def median(self, value) -> float | None:
        """Median over finished runs of value(entry), or None when no run has it."""
        vals = [v for v in (value(e) for e in self.ok) if _finite(v)]
        return float(np.median(vals)) if vals else None


def group_repeats(entries: list) -> list[tuple[str, list]]:
    """[(label, entries)] in first-seen order: entries whose overrides differ only in `repeat` are one configuration."""
    groups: dict[tuple, list] = {}
    for e in entries:
        items = override_items(e.overrides)
        key = tuple(sorted((k, v) for k, v in items.items() if not _is_noise(k)))
        if not e.overrides:  # no overrides known (e.g. an unreadable record): never merged with another
            key = ("#", id(e))
        groups.setdefault(key, []).append(e)
    firsts = [g[0] for g in groups.values()]
    return list(zip(config_labels(firsts), groups.values()))


# ------------------------------------------------------------------------------------------- run samples


def samples_per_step(e) -> float | None:
    tp = e.result.get("throughput") or {}
    if _finite(tp.get("samples_per_s")) and _finite(tp.get("steps_per_s")) and tp["steps_per_s"] > 0:
        return tp["samples_per_s"] / tp["steps_per_s"]
    return None


def run_blocks(e, per_sample: bool) -> tuple[list[float], list[float]] | None:
    """(block walls, work per block) of one run: its timed blocks, or the whole window as one block (older records).
    Work is steps, or samples when per_sample."""
    tp = e.result.get("throughput") or {}
    blocks = tp.get("blocks") or {}
    walls, steps = blocks.get("walls_s"), blocks.get("steps")
    if not walls:
        if not (_finite(tp.get("wall_s")) and _finite(e.result.get("steps"))):
            return None
        walls, steps = [tp["wall_s"]], [e.result["steps"]]
    k = samples_per_step(e) if per_sample else 1.0
    if k is None:
        return None
    return list(walls), [s * k for s in steps]


def _rate(e, per_sample: bool) -> float | None:
    tp = e.result.get("throughput") or {}
    return tp.get("samples_per_s" if per_sample else "steps_per_s")


def _throughput(c: Config) -> dict | None:
    """The row's throughput: the median over runs (one run: its own rate) with the CI computed from the runs' timed
    blocks by this version's method (for a run this version wrote, exactly the interval it printed; an older record's
    stored interval is not reused; a record without blocks counts as one block: no interval)."""
    runs = [e for e in c.ok if _finite(_rate(e, False))]
    if not runs:
        return None
    out = {"n_runs": len(runs)}
    for per_sample, key in ((False, "steps_per_s"), (True, "samples_per_s")):
        rates = [_rate(e, per_sample) for e in runs]
        if not all(_finite(r) for r in rates):
            continue
        blocks = [run_blocks(e, per_sample) for e in runs]
        tp = runs[0].result["throughput"]
        lo, hi = (tp.get("samples_ci_lo"), tp.get("samples_ci_hi")) if per_sample else (tp.get("ci_lo"), tp.get("ci_hi"))
        method = tp.get("method")
        if all(b is not None for b in blocks):
            agg = aggregate_throughput(blocks)
            lo, hi, method = agg["ci_lo"], agg["ci_hi"], agg["method"]
        elif len(runs) > 1:
            lo = hi = None
        out[key], out[key + "_lo"], out[key + "_hi"] = float(np.median(rates)), lo, hi
        out["method"] = method
    return out


def _step(c: Config) -> dict | None:
    """The row's median step time: the record's own (with its order-statistic CI) for one run, else the median of
    run medians with a two-level bootstrap CI over rank 0's step times."""
    runs = [e for e in c.ok if _finite(_get(e.result, "step_time_s", "median"))]
    if not runs:
        return None
    series = [_get(e.result, "series", "step_time_s") for e in runs]
    if len(runs) == 1:
        st = runs[0].result["step_time_s"]
        lo, hi, level = st.get("ci_lo"), st.get("ci_hi"), st.get("ci_level")
        if lo is None and series[0]:
            lo, hi, level = median_ci(series[0])
        if level is None or level < 0.95:  # (min, max) of <= 5 steps: not a 95% interval
            lo = hi = None
        return {"median": st["median"], "ci_lo": lo, "ci_hi": hi, "n_runs": 1, "method": CI_METHOD}
    if all(series):
        a = aggregate_repeats(series)
        return {"median": a["median"], "ci_lo": a["ci_lo"], "ci_hi": a["ci_hi"], "n_runs": a["n_runs"],
                "method": a["method"]}
    return {"median": c.median(lambda e: _get(e.result, "step_time_s", "median")), "ci_lo": None, "ci_hi": None,
            "n_runs": len(runs)}


# ------------------------------------------------------------------------------------------- comparison


def _bucket_of(c: Config) -> str | float | None:
    """"default" for DDP's own bucket setting (bucket=null; the record says "default"), else the MB asked."""
    bucket = c.first.knob("bucket")
    if bucket in (None, "default") and str(c.first.knob("sync") or "ddp") == "ddp":
        return "default" if bucket == "default" or DEFAULT_BUCKET is None else None
    try:
        return float(bucket)
    except (TypeError, ValueError):
        return None


def choose_baseline(configs: list[Config]) -> tuple[int | None, str]:
    """The configuration speed-ups are measured against, and why (the why names the bucket rule): optim=none with
    DDP's default bucket (bucket=null: stock DDP) if there is one; else optim=none with bucket=25, the tool's
    default before it left DDP's own (the committed reproductions' records), which caps the first bucket at 25 MiB;
    else the first. Only task=train configurations with a finished run count."""
    candidates = [i for i, c in enumerate(configs) if c.task == "train" and c.throughput]
    if len(candidates) < 2:
        return None, ""
    plain = [i for i in candidates if str(configs[i].first.knob("optim")) == "none"]
    for i in plain:
        if _bucket_of(configs[i]) == "default":
            return i, ("optim=none with DDP's default bucket (bucket=null: 25 MiB buckets, the first capped at 1 MiB: "
                       "stock DDP)")
    for i in plain:
        if _bucket_of(configs[i]) == EXPLICIT_25_MB:
            return i, ("optim=none with bucket=25 (every bucket capped at 25 MiB, the first too: the tool's default "
                       "before it left DDP's own; stock DDP caps the first bucket at 1 MiB), as no finished job ran "
                       "DDP's default bucket")
    return candidates[0], "first finished job: no finished job with optim=none and DDP's default bucket (or bucket=25)"


def _per_sample(base: Config, c: Config) -> bool:
    """samples/s when both rows have it (fair when batch or world size differ), else steps/s."""
    return all(samples_per_step(e) is not None for e in base.ok + c.ok)


def _speedup(base: Config, c: Config, noise: float) -> dict:
    per_sample = _per_sample(base, c)
    key = "samples_per_s" if per_sample else "steps_per_s"
    ratio = c.throughput[key] / base.throughput[key]
    blocks_b = [run_blocks(e, per_sample) for e in base.ok if _finite(_rate(e, per_sample))]
    blocks_c = [run_blocks(e, per_sample) for e in c.ok if _finite(_rate(e, per_sample))]
    lo = hi = None
    method = "no interval: a record without timed blocks"
    if all(b is not None for b in blocks_b + blocks_c):
        cmp = compare_throughput(blocks_b, blocks_c)
        lo, hi, method = cmp["ci_lo"], cmp["ci_hi"], cmp["method"]
    v = verdict(ratio, lo, hi, noise) if lo is not None else NO_INTERVAL
    return {"ratio": ratio, "ci_lo": lo, "ci_hi": hi, "verdict": v, "basis": key.replace("_per_s", "/s"),
            "method": method}


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}."))
    return out if out else {prefix: d}


def compared_keys(configs: list[Config]) -> list[str]:
    """Config keys whose resolved value differs between the configurations (what the table compares)."""
    flats = [_flat(c.first.config) for c in configs if c.ok]
    keys = sorted({k for f in flats for k in f})
    return [k.rstrip(".") for k in keys if len({repr(f.get(k)) for f in flats}) > 1]


def sentinel(configs: list[Config]) -> tuple[dict | None, str]:
    """(largest significant spread of a phase the compared knobs cannot change, or None; why / why not)."""
    rows = [c for c in configs if c.task == "train" and c.ok]
    if len(rows) < 2:
        return None, ""
    keys = compared_keys(rows)
    touching = [k for k in keys if not k.startswith(UNTOUCHING)]
    if touching:
        return None, f"not applicable: the compared keys ({', '.join(touching[:3])}) can change forward time"
    worst, judged = None, []
    for phase in SENTINEL_PHASES:
        samples: dict[str, list] = {}
        for c in rows:
            values = [v for e in c.ok for v in (_get(e.result, "series", "phases", phase) or [])]
            step = c.step["median"] if c.step else None
            if not values or not step or np.median(values) < SENTINEL_MIN_SHARE * step:
                break
            samples[c.label] = values
        else:
            if sum(len(v) >= SENTINEL_MIN_STEPS for v in samples.values()) < 2:
                continue
            judged.append(phase)
            s = noise_sentinel(samples)
            if s is not None and (worst is None or s["spread"] > worst["spread"]):
                worst = {**s, "phase": phase}
    if worst is None:
        if not judged:
            return None, (f"could not judge: {' and '.join(SENTINEL_PHASES)} time are under {SENTINEL_MIN_SHARE:.0%} of "
                          f"the step or have fewer than {SENTINEL_MIN_STEPS} steps per row")
        return None, f"{' and '.join(judged)} time agree{'s' if len(judged) == 1 else ''} across rows"
    return worst, ""


def sentinel_warning(s: dict) -> str:
    spread = f"{s['spread']:.0%}"
    return (f"{s['phase']} time varied by {spread} between rows whose knobs do not touch it (`{s['low_row']}` vs "
            f"`{s['high_row']}`): this machine was noisy during the sweep; differences below {spread} are not "
            f"attributable to the knobs.")


@dataclass
class Comparison:
    configs: list[Config]
    base: int | None
    why: str
    noise: float
    sentinel: dict | None
    sentinel_note: str


def compare(entries: list, noise: float | None = None) -> Comparison:
    """Group repeats into configurations, aggregate each, compare every train configuration with the baseline."""
    configs = [Config(label, group) for label, group in group_repeats(entries)]
    for c in configs:
        if c.task == "train":
            c.throughput = _throughput(c)
            c.step = _step(c)
    base, why = choose_baseline(configs)
    if noise is None:
        found = [_get(e.config, "compare", "noise") for c in configs for e in c.ok]
        noise = next((n for n in found if _finite(n)), NOISE)
    if base is not None:
        configs[base].baseline = True
        for i, c in enumerate(configs):
            if c.task == "train" and c.throughput and i != base:
                c.speedup = _speedup(configs[base], c, noise)
    s, note = sentinel(configs)
    return Comparison(configs, base, why, noise, s, note)


# ------------------------------------------------------------------------------------------- scaling


def _world_size(c: Config) -> float | None:
    try:
        return float(c.first.knob("world_size"))
    except (TypeError, ValueError):
        return None


def scaling_lines(configs: list[Config]) -> list[tuple[str, list[tuple[float, Config, str]]]]:
    """[(label, [(world size, configuration, its label), ...])]: the lines a scaling table and plot draw, smallest
    size first.

    When the smallest world size holds one configuration (experiment=scaling's one rank without DDP, or a study's
    single-rank baseline) it starts every line: each configuration at a larger size is measured against it, and lines
    group configurations whose overrides differ only in world size (and in sync, which experiment=scaling ties to the
    world size). Otherwise each line is its own configuration across sizes, from its own smallest size. Repeats are
    already merged (a Config is every repeat of one configuration)."""
    pts = [(n, c) for c in configs if c.task == "train" and c.throughput and (n := _world_size(c)) is not None]
    sizes = sorted({n for n, _ in pts})
    if len(sizes) < 2:
        return []
    keys = [k for k in varying_keys([c.first for _, c in pts]) if k not in ("world_size", "scale")]

    def key(c: Config, drop: tuple = ()) -> str:
        items = override_items(c.first.overrides)
        return " ".join(f"{k}={items[k]}" for k in keys if k in items and k not in drop) or "default"

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
        if any(len({p[0] for p in g}) < len(g) for g in lines.values()):   # sync is what tells them apart
            lines = grouped(rest)
        first = (n0, base, key(base))
        return [(label, [first] + sorted(g, key=lambda p: p[0])) for label, g in lines.items()]
    return [(label, sorted(g, key=lambda p: p[0])) for label, g in grouped(pts).items() if len({p[0] for p in g}) > 1]


def _exposed_fields(c: Config) -> dict:
    from results.table import _exposed_fields as fields   # the tables' one reading of how sampled exposed comm is

    return fields(c)


def scaling_rows(entries: list, noise: float | None = None) -> list[dict]:
    """One row per configuration and world size against its line's first point: samples/s with its CI, speed-up with
    its CI and verdict (as the sweep table computes them), scaling efficiency = speed-up x n0 / n with the same CI."""
    cmp = compare(entries, noise)
    rows, seen = [], set()
    for label, line in scaling_lines(cmp.configs):
        n0, base, _ = line[0]
        for n, c, own in line:
            if id(c) in seen:
                continue            # a common baseline is one row, at the top
            seen.add(id(c))
            tp = c.throughput
            per = "samples_per_s" if _finite(tp.get("samples_per_s")) else "steps_per_s"
            row = {"configuration": own, "line": label,
                   "world size": int(n), "sync": c.first.result.get("sync"), "runs": len(c.ok),
                   "samples/s": tp.get(per), "samples/s lo": tp.get(per + "_lo"), "samples/s hi": tp.get(per + "_hi"),
                   "exposed comm ms": _scaled(c.median(lambda e: (e.result.get("comm") or {}).get("exposed_s")), 1e3),
                   **_exposed_fields(c),
                   "baseline": c is base}
            if c is base:
                row.update({"speed-up": 1.0, "verdict": "baseline", "scaling efficiency": 1.0})
            else:
                sp = _speedup(base, c, cmp.noise)
                f = n0 / n
                row.update({"speed-up": sp["ratio"], "speed-up lo": sp["ci_lo"], "speed-up hi": sp["ci_hi"],
                            "verdict": sp["verdict"], "scaling efficiency": sp["ratio"] * f,
                            "scaling efficiency lo": sp["ci_lo"] * f if sp["ci_lo"] is not None else None,
                            "scaling efficiency hi": sp["ci_hi"] * f if sp["ci_hi"] is not None else None,
                            "method": sp["method"]})
            rows.append(row)
    return rows


__all__ = ["Comparison", "Config", "NO_DIFFERENCE", "NO_INTERVAL", "compare", "group_repeats", "run_blocks",
           "scaling_lines", "scaling_rows", "sentinel_warning", "varying_keys"]
