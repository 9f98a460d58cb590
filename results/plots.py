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
import matplotlib.pyplot as plt  # noqa: E402

from results.table import (PHASES, Entry, _finite, choose_baseline, config_labels, override_items,  # noqa: E402
                           speed_up_basis, varying_keys)

_PHASE_COLORS = {"data": "#8c8c8c", "h2d": "#d62728", "forward": "#2ca02c", "backward": "#9467bd",
                 "sync": "#1f77b4", "optimizer": "#ffbf00"}


def _train(entries: list[Entry]) -> list[Entry]:
    return [e for e in entries if e.ok and e.task == "train" and _finite(e.value("steps/s"))]


def _labels(entries: list[Entry], runs: list[Entry]) -> list[str]:
    """Labels of `runs` as the tables name them (computed over every entry, failed ones included)."""
    by_id = {id(e): label for e, label in zip(entries, config_labels(entries))}
    return [by_id[id(e)] for e in runs]


def _metric(entries: list[Entry]) -> str:
    """samples/s when every run has it (fair across batch sizes and world sizes), else steps/s."""
    return "samples/s" if all(_finite(e.value("samples/s")) for e in entries) else "steps/s"


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def throughput(entries: list[Entry], path: Path, title: str = "") -> Path | None:
    """Throughput per configuration, the baseline highlighted, speed-up written on each bar."""
    runs = _train(entries)
    if not runs:
        return None
    labels = _labels(entries, runs)
    metric = _metric(runs)
    values = [e.value(metric) for e in runs]
    base_i, _ = choose_baseline(runs)
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * len(runs)))
    colors = ["#ff7f0e" if i == base_i else "#1f77b4" for i in range(len(runs))]
    y = list(range(len(runs)))[::-1]
    ax.barh(y, values, color=colors)
    ax.set_yticks(y, labels)
    for yi, v, e in zip(y, values, runs):
        note = f"{v:.3g}"
        if base_i is not None:
            basis = speed_up_basis(runs[base_i], e)
            base_v = runs[base_i].value(basis)
            if _finite(base_v) and base_v > 0:
                note += f"  ({e.value(basis) / base_v:.2f}x)"
        ax.text(v, yi, " " + note, va="center", fontsize=8)
    ax.set_xlabel(metric + ("   (orange: baseline; speed-up in brackets)" if base_i is not None else ""))
    ax.set_xlim(0, max(values) * 1.3)
    ax.set_title(title or f"Throughput per configuration ({metric})")
    return _save(fig, path)


def phase_breakdown(entries: list[Entry], path: Path, title: str = "") -> Path | None:
    """Stacked per-phase medians per configuration (ms), with the measured step median as a marker."""
    runs = [e for e in _train(entries) if e.result.get("phases")]
    phases = [p for p in PHASES if any((e.result["phases"].get(p) or {}).get("median") is not None for e in runs)]
    if not runs or not phases:
        return None
    labels = _labels(entries, runs)
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.45 * len(runs)))
    y = list(range(len(runs)))[::-1]
    left = [0.0] * len(runs)
    for p in phases:
        widths = [((e.result["phases"].get(p) or {}).get("median") or 0.0) * 1e3 for e in runs]
        ax.barh(y, widths, left=left, label=p, color=_PHASE_COLORS.get(p))
        left = [a + b for a, b in zip(left, widths)]
    medians = [(e.result.get("step_time_s") or {}).get("median") for e in runs]
    pts = [(m * 1e3, yi) for m, yi in zip(medians, y) if m is not None]
    if pts:
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker="|", s=300, color="black", zorder=3,
                   label="step median")
    ax.set_yticks(y, labels)
    ax.set_xlabel("median time per step (ms), rank 0")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False, markerscale=0.4)
    ax.set_title(title or "Step-time breakdown per configuration")
    return _save(fig, path)


def _series(runs: list[Entry], x_key: str) -> dict[str, list[Entry]]:
    """Runs grouped into lines: same overrides apart from the x axis (and world-size-bound keys)."""
    skip = {x_key, "world_size", "scale"} if x_key == "world_size" else {x_key}
    keys = [k for k in varying_keys(runs) if k not in skip]
    lines: dict[str, list[Entry]] = defaultdict(list)
    for e in runs:
        items = override_items(e.overrides)
        lines[" ".join(f"{k}={items.get(k)}" for k in keys if k in items) or "all"].append(e)
    return lines


def _numeric_knob(e: Entry, name: str) -> float | None:
    try:
        v = float(e.knob(name))
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _finish_line_plot(fig, ax, path: Path, title: str) -> Path:
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    return _save(fig, path)


def bucket_throughput(entries: list[Entry], path: Path, title: str = "") -> Path | None:
    """Throughput against DDP bucket size (log x), one line per other configuration."""
    runs = [e for e in _train(entries) if _numeric_knob(e, "bucket") is not None]
    if len({_numeric_knob(e, "bucket") for e in runs}) < 2:
        return None
    metric = _metric(runs)
    lines = {k: v for k, v in _series(runs, "bucket").items() if len({_numeric_knob(e, "bucket") for e in v}) > 1}
    if not lines:
        return None  # no configuration ran at two bucket sizes: no line to draw
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, line in lines.items():
        pts = sorted((_numeric_knob(e, "bucket"), e.value(metric)) for e in line)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log")
    buckets = sorted({_numeric_knob(e, "bucket") for e in runs})
    ax.set_xticks(buckets, [f"{b:g}" for b in buckets])
    ax.minorticks_off()
    ax.set_xlabel("DDP bucket_cap_mb (MB)")
    ax.set_ylabel(metric)
    return _finish_line_plot(fig, ax, path, title or "Bucket size vs throughput")


def scaling(entries: list[Entry], path: Path, title: str = "") -> Path | None:
    """Left: samples/s against world size, with the ideal line (linear from each line's smallest world size) and the
    scaling efficiency written at each point. Right: exposed communication per step at each world size. Lines with a
    single world size are left out (nothing to scale)."""
    runs = [e for e in _train(entries) if _numeric_knob(e, "world_size") is not None]
    sizes = sorted({_numeric_knob(e, "world_size") for e in runs})
    if len(sizes) < 2:
        return None
    metric = _metric(runs)
    lines = {k: v for k, v in _series(runs, "world_size").items()
             if len({_numeric_knob(e, "world_size") for e in v}) > 1}
    if not lines:
        return None
    fig, (ax, ax_comm) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    for name, line in lines.items():
        name = name if len(lines) > 1 else "measured"
        pts = sorted((_numeric_knob(e, "world_size"), e.value(metric), e) for e in line)
        drawn = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        n0, v0 = pts[0][:2]
        ax.plot(sizes, [v0 * n / n0 for n in sizes], linestyle="--", color=drawn[0].get_color(), alpha=0.6,
                label=f"ideal ({name})" if len(lines) > 1 else "ideal (linear from the smallest size)")
        for n, v, _ in pts[1:]:
            ax.annotate(f"{v / (v0 * n / n0):.0%}", (n, v), textcoords="offset points", xytext=(4, -12), fontsize=8)
        comm = [(n, ((e.result.get("comm") or {}).get("exposed_s") or 0.0) * 1e3) for n, _, e in pts]
        ax_comm.plot([c[0] for c in comm], [c[1] for c in comm], marker="s", color=drawn[0].get_color(), label=name)
    for a in (ax, ax_comm):
        a.set_xticks(sizes, [f"{s:g}" for s in sizes])
        a.set_xlabel("world size (ranks)")
    ax.set_ylabel(f"{metric}   (% of ideal at each point)")
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
    ax.plot(pairs, [e.result["per_op_us_rank0"] for e in runs], marker="o", label="rank 0")
    ax.plot(pairs, [e.result["slowest_s"] / e.result["iters"] * 1e6 for e in runs], marker="o", linestyle=":",
            label="slowest rank")
    busy = [(p, e.result.get("cpu_busy_fraction")) for p, e in zip(pairs, runs) if _finite(e.result.get("cpu_busy_fraction"))]
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
    labels = _labels(entries, runs)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for e, label in zip(runs, labels):
        by_op: dict[str, list] = defaultdict(list)
        modes = {r.get("mode") for r in e.result["rows"]}  # e.g. in-place / out-of-place, as nccl-tests reports both
        for r in e.result["rows"]:
            if _finite(r.get("busbw_GBps")) and _finite(r.get("bytes")) and r["bytes"] > 0:
                key = str(r.get("op", "?")) + (f" {r.get('mode')}" if len(modes) > 1 else "")
                by_op[key].append((r["bytes"], r["busbw_GBps"]))
        for op, pts in by_op.items():
            pts.sort()
            name = op if len(runs) == 1 else f"{op} ({label})"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=name)
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
