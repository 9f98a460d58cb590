"""PNG plots of run records (matplotlib, Agg: no display needed).

Each function takes table entries, draws only finished runs, and returns the file it wrote, or None
when the entries hold nothing to draw (e.g. no bucket variation for the bucket plot).
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from results.aggregate import NO_INTERVAL, Config, compare
from results.entries import PHASES, Entry, _finite, _get, config_labels, override_items, varying_keys
from stats import fmt_ratio

_PHASE_COLORS = {"data": "#8c8c8c", "h2d": "#d62728", "forward": "#2ca02c", "backward": "#9467bd",
                 "exposed comm": "#e377c2", "sync": "#1f77b4", "optimizer": "#ffbf00"}


def _train(entries: list[Entry]) -> list[Config]:
    """task=train configurations (repeats merged) with a throughput, with their CIs and speed-ups."""
    return [c for c in compare(entries).configs if c.task == "train" and c.throughput]


def _metric(configs: list[Config]) -> tuple[str, str]:
    """samples/s when every configuration has it (fair across batch sizes and world sizes), else steps/s."""
    key = "samples_per_s" if all(_finite(c.throughput.get("samples_per_s")) for c in configs) else "steps_per_s"
    return key, key.replace("_per_s", "/s")


def _err(c: Config, key: str) -> tuple[float, float]:
    """Error bar lengths (below, above) of the throughput's 95% CI; 0 where there is no interval."""
    v, lo, hi = c.throughput[key], c.throughput.get(key + "_lo"), c.throughput.get(key + "_hi")
    return (v - lo, hi - v) if lo is not None and hi is not None else (0.0, 0.0)


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def throughput(entries: list[Entry], path: Path, title: str = "") -> Path | None:
    """Throughput per configuration with its 95% CI, the baseline highlighted, speed-up and verdict on each bar."""
    configs = _train(entries)
    if not configs:
        return None
    key, metric = _metric(configs)
    values = [c.throughput[key] for c in configs]
    errs = [_err(c, key) for c in configs]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * len(configs)))
    colors = ["#ff7f0e" if c.baseline else "#1f77b4" for c in configs]
    y = list(range(len(configs)))[::-1]
    ax.barh(y, values, color=colors, xerr=[[e[0] for e in errs], [e[1] for e in errs]], capsize=3,
            error_kw={"elinewidth": 1})
    ax.set_yticks(y, [c.label for c in configs])
    for yi, v, e, c in zip(y, values, errs, configs):
        note = f"{v:.3g}"
        if c.speedup:
            sp = c.speedup
            note += "  (no CI)" if sp["verdict"] == NO_INTERVAL else \
                f"  ({fmt_ratio(sp['ratio'], sp['ci_lo'], sp['ci_hi'], sp['verdict'])})"
        ax.text(v + e[1], yi, " " + note, va="center", fontsize=8)
    ax.set_xlabel(metric + " with 95% CI" + ("   (orange: baseline; speed-up [CI] in brackets, ~1: no "
                                               "significant difference)" if any(c.baseline for c in configs) else ""))
    ax.set_xlim(0, max(v + e[1] for v, e in zip(values, errs)) * 1.45)
    ax.set_title(title or f"Throughput per configuration ({metric})")
    return _save(fig, path)


def _phase_ms(c: Config, phase: str) -> float:
    """Median over runs of a phase's median (ms); DDP's exposed communication is its own segment, taken out of
    backward (where the window measured it: backward waits for the all-reduces it did not hide)."""
    exposed = c.median(lambda e: _get(e.result, "comm", "exposed_s")) if c.first.result.get("sync") == "ddp" else None
    backward = c.median(lambda e: _get(e.result, "phases", "backward", "median")) or 0.0
    shown = min(exposed or 0.0, backward)
    if phase == "exposed comm":
        return shown * 1e3
    value = c.median(lambda e: _get(e.result, "phases", phase, "median")) or 0.0
    return (value - shown if phase == "backward" else value) * 1e3


def phase_breakdown(entries: list[Entry], path: Path, title: str = "") -> Path | None:
    """Stacked per-phase medians per configuration (ms), exposed communication as its own segment, with the
    measured step median as a marker."""
    configs = [c for c in _train(entries) if any(e.result.get("phases") for e in c.ok)]
    phases = [p for p in PHASES
              if any(_get(e.result, "phases", p, "median") is not None for c in configs for e in c.ok)]
    if not configs or not phases:
        return None
    if "backward" in phases and any(_phase_ms(c, "exposed comm") > 0 for c in configs):
        phases.insert(phases.index("backward") + 1, "exposed comm")
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.45 * len(configs)))
    y = list(range(len(configs)))[::-1]
    left = [0.0] * len(configs)
    for p in phases:
        widths = [_phase_ms(c, p) for c in configs]
        label = "backward (compute + hidden comm)" if p == "backward" and "exposed comm" in phases else p
        ax.barh(y, widths, left=left, label=label, color=_PHASE_COLORS.get(p))
        left = [a + b for a, b in zip(left, widths)]
    pts = [(c.step["median"] * 1e3, yi) for c, yi in zip(configs, y) if c.step and c.step.get("median")]
    if pts:
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker="|", s=300, color="black", zorder=3,
                   label="step median")
    ax.set_yticks(y, [c.label for c in configs])
    ax.set_xlabel("median time per step (ms), rank 0" + ("; exposed comm: DDP's runtime stats" if "exposed comm" in
                                                          phases else ""))
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False, markerscale=0.4)
    ax.set_title(title or "Step-time breakdown per configuration")
    return _save(fig, path)


def _series(configs: list[Config], x_key: str) -> dict[str, list[Config]]:
    """Configurations grouped into lines: same overrides apart from the x axis (and world-size-bound keys)."""
    skip = {x_key, "world_size", "scale"} if x_key == "world_size" else {x_key}
    keys = [k for k in varying_keys([c.first for c in configs]) if k not in skip]
    lines: dict[str, list[Config]] = defaultdict(list)
    for c in configs:
        items = override_items(c.first.overrides)
        lines[" ".join(f"{k}={items.get(k)}" for k in keys if k in items) or "all"].append(c)
    return lines


def _numeric_knob(c: Config, name: str) -> float | None:
    try:
        v = float(c.first.knob(name))
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _points(ax, line: list[Config], x_key: str, key: str, label: str):
    """One series with its 95% CIs as error bars; joined by a line only when it has two points or more."""
    pts = sorted(((_numeric_knob(c, x_key), c.throughput[key], _err(c, key)) for c in line), key=lambda p: p[0])
    return ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[[p[2][0] for p in pts], [p[2][1] for p in pts]],
                       marker="o", capsize=3, linestyle="-" if len(pts) > 1 else "none", label=label), pts


def _finish_line_plot(fig, ax, path: Path, title: str) -> Path:
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    return _save(fig, path)


def bucket_throughput(entries: list[Entry], path: Path, title: str = "") -> Path | None:
    """Throughput (95% CI bars) against DDP bucket size (log x), one series per other configuration."""
    configs = [c for c in _train(entries) if _numeric_knob(c, "bucket") is not None]
    if len({_numeric_knob(c, "bucket") for c in configs}) < 2:
        return None
    key, metric = _metric(configs)
    lines = {k: v for k, v in _series(configs, "bucket").items() if len({_numeric_knob(c, "bucket") for c in v}) > 1}
    if not lines:
        return None  # no configuration ran at two bucket sizes: no line to draw
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, line in lines.items():
        _points(ax, line, "bucket", key, name)
    ax.set_xscale("log")
    buckets = sorted({_numeric_knob(c, "bucket") for c in configs})
    ax.set_xticks(buckets, [f"{b:g}" for b in buckets])
    ax.minorticks_off()
    ax.set_xlabel("DDP bucket_cap_mb (MB)")
    ax.set_ylabel(metric + " (95% CI)")
    return _finish_line_plot(fig, ax, path, title or "Bucket size vs throughput")


def scaling(entries: list[Entry], path: Path, title: str = "") -> Path | None:
    """Left: samples/s (95% CI bars) against world size, one line per results.aggregate.scaling_lines line (from the
    one-rank baseline where there is one), with its ideal line and the scaling efficiency written at each point.
    Right: exposed communication per step at each world size (median over repeats)."""
    from results.aggregate import scaling_lines

    lines = scaling_lines(_train(entries))
    if not lines:
        return None
    key, metric = _metric([c for _, line in lines for _, c, _ in line])
    sizes = sorted({n for _, line in lines for n, _, _ in line})
    fig, (ax, ax_comm) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    common = len({id(line[0][1]) for _, line in lines}) == 1     # every line starts at one baseline: one ideal line
    for i, (name, line) in enumerate(lines):
        name = name if len(lines) > 1 else "measured"
        drawn, pts = _points(ax, [c for _, c, _ in line], "world_size", key, name)
        n0, v0 = pts[0][0], pts[0][1]
        color = drawn[0].get_color()
        if not common or i == 0:
            ax.plot(sizes, [v0 * n / n0 for n in sizes], linestyle="--", color="grey" if common else color, alpha=0.6,
                    label="ideal (linear from the smallest size)" if common or len(lines) == 1 else f"ideal ({name})")
        for n, v, _ in pts[1:]:
            ax.annotate(f"{v / (v0 * n / n0):.0%}", (n, v), textcoords="offset points", xytext=(4, -12), fontsize=8)
        comm = [(n, (c.median(lambda e: (e.result.get("comm") or {}).get("exposed_s")) or 0.0) * 1e3)
                for n, c, _ in line]
        ax_comm.plot([p[0] for p in comm], [p[1] for p in comm], marker="s", color=color, label=name)
    for a in (ax, ax_comm):
        a.set_xticks(sizes, [f"{s:g}" for s in sizes])
        a.set_xlabel("world size (ranks)")
    ax.set_ylabel(f"{metric} (95% CI; % of ideal at each point)")
    ax_comm.set_ylabel("exposed communication per step (ms)")
    ax_comm.set_ylim(bottom=0)
    ax_comm.grid(alpha=0.3)
    ax_comm.set_title("Exposed communication")
    return _finish_line_plot(fig, ax, path, title or "Scaling against world size (dashed: ideal)")


def pair_groups(entries: list[Entry], path: Path, title: str = "") -> Path | None:
    """task=pair_groups across pairs: one curve of the time per all_reduce (rank 0 and the slowest rank), and the
    CPU's busy share on a second axis, so the growth and the contention read together."""
    runs = sorted((e for e in entries if e.ok and e.task == "pair_groups" and _finite(e.result.get("per_op_us_rank0"))),
                  key=lambda e: e.result["pairs"])
    if len({e.result["pairs"] for e in runs}) < 2:
        return None
    pairs = [e.result["pairs"] for e in runs]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    meds = [(e.result.get("per_op_us") or {}) for e in runs]
    if all(m.get("ci_lo") is not None for m in meds):   # median of rank 0's timed blocks, 95% CI bars
        ax.errorbar(pairs, [m["median"] for m in meds], yerr=[[m["median"] - m["ci_lo"] for m in meds],
                                                               [m["ci_hi"] - m["median"] for m in meds]],
                    marker="o", capsize=3, label="rank 0 (median of 8 timed blocks, 95% CI)")
    else:
        ax.plot(pairs, [e.result["per_op_us_rank0"] for e in runs], marker="o", label="rank 0")
    ax.plot(pairs, [e.result["slowest_s"] / e.result["iters"] * 1e6 for e in runs], marker="o", linestyle=":",
            label="slowest rank")
    busy = [(p, e.result.get("cpu_busy_fraction")) for p, e in zip(pairs, runs)
            if _finite(e.result.get("cpu_busy_fraction"))]
    if len(busy) > 1:
        ax2 = ax.twinx()
        ax2.plot([b[0] for b in busy], [100 * b[1] for b in busy], marker="^", color="#7f7f7f", alpha=0.7,
                 label="CPU busy % (right)")
        ax2.set_ylim(0, 105)
        ax2.set_ylabel("ranks' CPU time / (cores x window), %")
        ax2.legend(loc="lower right", fontsize=8)
    ax.set_xticks(pairs, [str(p) for p in pairs])
    ax.set_xlabel("pairs (world size = 2 x pairs)")
    ax.set_ylabel("time per all_reduce (us)")
    return _finish_line_plot(fig, ax, path, title or "Pair groups: time per all_reduce against pairs")


def busbw(entries: list[Entry], path: Path, title: str = "") -> Path | None:
    """busbw against message size for task=collectives rows, one line per op (and run)."""
    runs = [e for e in entries if e.ok and isinstance(e.result.get("rows"), list)
            and any(_finite(r.get("busbw_GBps")) and _finite(r.get("bytes")) for r in e.result["rows"])]
    if not runs:
        return None
    by_id = {id(e): label for e, label in zip(entries, config_labels(entries))}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for e, label in ((e, by_id[id(e)]) for e in runs):
        by_op: dict[str, list] = defaultdict(list)
        modes = {r.get("mode") for r in e.result["rows"]}  # e.g. in-place / out-of-place, as nccl-tests reports both
        for r in e.result["rows"]:
            if _finite(r.get("busbw_GBps")) and _finite(r.get("bytes")) and r["bytes"] > 0:
                key = str(r.get("op", "?")) + (f" {r.get('mode')}" if len(modes) > 1 else "")
                by_op[key].append((r["bytes"], r["busbw_GBps"]))
        for op, pts in by_op.items():
            pts.sort()
            name = op if len(runs) == 1 else f"{op} ({label})"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=name,
                    linestyle="-" if len(pts) > 1 else "none")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: _bytes_label(v)))
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s, 1 GB = 1e9 B)")
    return _finish_line_plot(fig, ax, path, title or "Bus bandwidth against message size")


def _bytes_label(v: float) -> str:
    for unit, size in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if v >= size:
            return f"{v / size:g}{unit}"
    return f"{v:g}"


def standard_plots(entries: list[Entry], out_dir: Path, prefix: str = "", title: str = "") -> dict[str, Path]:
    """Every plot the entries hold data for: {name: file}."""
    out_dir = Path(out_dir)
    made = {}
    suffix = f" — {title}" if title else ""
    for name, draw, heading in (
        ("throughput", throughput, "Throughput per configuration"),
        ("phases", phase_breakdown, "Step-time breakdown per configuration"),
        ("bucket", bucket_throughput, "Bucket size vs throughput"),
        ("scaling", scaling, "Scaling against world size (dashed: ideal)"),
        ("pair_groups", pair_groups, "Pair groups: time per all_reduce against pairs"),
        ("busbw", busbw, "Bus bandwidth against message size"),
    ):
        path = draw(entries, out_dir / f"{prefix}{name}.png", title=heading + suffix)
        if path is not None:
            made[name] = path
    return made
